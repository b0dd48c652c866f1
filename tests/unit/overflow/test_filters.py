"""Overflow filters, called directly and through Ansible's templar."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hybridgpu.fleet.plugins.filter.overflow import FilterModule

F = FilterModule().filters()


def test_completion_filter_seed_example():
    r = F["overflow_completion"]({"local_wait": "9h", "local_runtime": "4h", "link_bps": "5Gbps",
                                  "dispatch": "10min", "cloud_queue_wait": "15min", "input_bytes": "2TB",
                                  "output_bytes": "40GB"})
    assert r["decision"] == "move" and round(r["cloud"]["total_s"] / 3600, 1) == 5.3


def test_completion_filter_errors():
    with pytest.raises(AnsibleFilterError, match="unknown parameter"):
        F["overflow_completion"]({"local_wait": 1, "local_runtime": 1, "link_bps": 1, "speed": 3})
    with pytest.raises(AnsibleFilterError, match="link_bps is required"):
        F["overflow_completion"]({"local_wait": 1, "local_runtime": 1})
    with pytest.raises(AnsibleFilterError, match="unknown rate unit"):
        F["overflow_completion"]({"local_wait": 1, "local_runtime": 1, "link_bps": "5 lightyears"})


def test_transfer_and_cost_filters():
    assert F["overflow_transfer_seconds"]("40TB", "5Gbps") == pytest.approx(64000)
    row = F["overflow_cost"]({"jobs_completed_returned": 1, "runs": [{"gpus": 1, "seconds": 30}]},
                             {"gpu_hour": 60.0})
    assert row["total"] == pytest.approx(1.0)
    with pytest.raises(AnsibleFilterError):
        F["overflow_cost"]({}, {"nope": 1})
