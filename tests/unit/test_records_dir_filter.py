"""records_dir filter: hgpu_records_dir when set, else $PWD/records; parts joined below it."""
import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.hybridgpu.fleet.plugins.filter.records import FilterModule

records_dir = FilterModule().filters()["records_dir"]


def test_set_variable_wins(monkeypatch):
    monkeypatch.setenv("PWD", "/somewhere")
    assert records_dir("/srv/records") == "/srv/records"
    assert records_dir("rel/records") == "rel/records"


@pytest.mark.parametrize("unset", [None, Undefined(name="hgpu_records_dir")])
def test_unset_means_records_in_the_start_directory(monkeypatch, unset):
    monkeypatch.setenv("PWD", "/home/op/estate")
    assert records_dir(unset) == "/home/op/estate/records"


def test_parts_are_joined_below_the_folder(monkeypatch):
    monkeypatch.setenv("PWD", "/home/op/estate")
    assert records_dir("/srv/r", "manifests", "a.json") == "/srv/r/manifests/a.json"
    assert records_dir(None, "audit/audit.jsonl") == "/home/op/estate/records/audit/audit.jsonl"


def test_not_a_path_is_an_error():
    with pytest.raises(AnsibleFilterError, match="expects a path"):
        records_dir(["/srv"])
