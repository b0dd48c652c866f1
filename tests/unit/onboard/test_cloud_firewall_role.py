"""The cloud_firewall role with provider aws, run by ansible-playbook against moto on loopback:
credentials from the boto3 chain (environment), rules from the lab's path table, the All Open
group flagged, a second run unchanged, and removal back to what the instance had."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("moto.server")

from hgpu_testenv import ROOT  # noqa: E402

from test_cloud_firewall_aws import REGION, Estate, serve  # noqa: E402

NODE = "cloud-h200-2"


@pytest.fixture(scope="module")
def endpoint():
    yield from serve()


def play(tmp_path, estate, *extra):
    inventory = {"cloud": {"hosts": {NODE: {"ansible_connection": "local"}}, "vars": {
        "ansible_python_interpreter": sys.executable,
        "cloud_firewall_provider": "aws",
        "cloud_firewall_instance_id": estate.instance,
        "cloud_firewall_region": REGION,
        "cloud_firewall_endpoint_url": estate.endpoint,
        "cloud_firewall_path_table": os.path.join(ROOT, "inventories", "lab", "preflight", "paths.yml"),
        "cloud_firewall_site_arrival": ["198.51.100.7/32"],
        "cloud_firewall_extra_rules": [{"name": "scrape-node-exporter", "protocol": "tcp", "ports": ["9100"],
                                        "sources": ["198.51.100.7/32"]}],
        "cloud_firewall_manifest_path": str(tmp_path / "manifest.json")}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(json.dumps([{"name": "Cloud firewall", "hosts": "cloud", "gather_facts": False,
                                                    "roles": ["hybridgpu.fleet.cloud_firewall"]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               AWS_ACCESS_KEY_ID="AKIDTESTING", AWS_SECRET_ACCESS_KEY="moto-secret-not-real")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")] + list(extra),
                          capture_output=True, text=True, env=env, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    recap = [line for line in proc.stdout.splitlines() if line.startswith(NODE) and "changed=" in line][-1]
    return proc.stdout, int(recap.split("changed=")[1].split()[0])


def test_role_attaches_flags_stays_unchanged_and_removes(tmp_path, endpoint):
    estate = Estate(endpoint)
    before = estate.untouched()
    all_open = estate.open_all()
    out, dummy = play(tmp_path, estate)
    assert "FLAG: %s is reachable from the site and still behind an" % NODE in out
    assert "FLAG: %s is still behind an \"all open\" firewall (All Open)" % NODE in out.replace("\n    ", " ")
    assert estate.group()["GroupId"] in estate.eni_groups()
    assert ("tcp", "9100", "198.51.100.7/32") in estate.backend_rules()
    facts = json.loads((tmp_path / "manifest.json").read_text())["sections"]["cloud_firewall"]["facts"]
    assert facts["instance_id"] == estate.instance and facts["firewall_id"] == estate.group()["GroupId"]
    assert play(tmp_path, estate)[1] == 0
    play(tmp_path, estate, "-e", "cloud_firewall_state=absent")
    assert estate.group() is None
    assert estate.untouched() == (before[0], sorted(before[1] + [all_open]))
