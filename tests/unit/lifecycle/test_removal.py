"""Removal plan from a manifest and the per-node removal state (resume, report, finish)."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils import manifest as mf
from ansible_collections.hybridgpu.fleet.plugins.module_utils import removal as rm

PRE = {"recorded_at": "2025-01-01T00:00:00Z", "active_units": ["chrony.service", "slurmd.service"],
       "nft_ruleset": "table inet site {\n\tchain input {\n\t\ttype filter hook input priority 0;\n\t}\n}\n",
       "packages": {"hybridgpu-node-agent": None, "nccl-tests": "2.13.11-1"},
       "paths": {"/etc/hybridgpu": False}, "users": ["root", "sshd"]}


def doc():
    d = mf.merge(None, "n1", pre_onboarding=PRE)
    d = mf.merge(d, "n1", "join", [
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "nodes", "namespace": "", "name": "n1"},
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "secrets",
         "namespace": "kube-system", "name": "node-n1-token"},
        {"kind": "directory", "path": "/etc/hybridgpu"},
        {"kind": "directory", "path": "/etc/hybridgpu/node-agent"},
        {"kind": "directory", "path": "/var/lib/keep", "created": False},
        {"kind": "package", "name": "hybridgpu-node-agent"},
        {"kind": "package", "name": "nccl-tests"},
        {"kind": "unit", "name": "hybridgpu-node-agent.service"}],
        facts={"server": "https://10.213.77.1:6443", "cluster": "onprem"})
    d = mf.merge(d, "n1", "agents", [{"kind": "user", "name": "hgpu-x"}, {"kind": "user", "name": "sshd"}])
    d = mf.merge(d, "n1", "host_firewall", [{"kind": "nft_table", "family": "inet", "name": "hybridgpu"}])
    d = mf.merge(d, "n1", "placement", [{"kind": "label", "key": "hybridgpu.io/side", "value": "owned"},
                                        {"kind": "taint", "key": "hybridgpu.io/owned", "effect": "PreferNoSchedule"}])
    return d


def test_plan_removes_only_what_onboarding_added():
    p = rm.plan(doc())
    assert p["nodes"] == [{"cluster": "onprem", "namespace": "", "name": "n1"}]
    assert [s["name"] for s in p["secrets"]] == ["node-n1-token"]
    assert p["packages"] == ["hybridgpu-node-agent"]      # nccl-tests was there before
    assert p["users"] == ["hgpu-x"]                        # sshd was there before
    assert p["directories"] == ["/etc/hybridgpu/node-agent", "/etc/hybridgpu"]  # deepest first, kept one absent
    assert p["restore"]["units"] == ["chrony.service", "slurmd.service"]
    assert [t["name"] for t in p["restore"]["nft_tables"]] == ["site"]
    assert p["server"] == "https://10.213.77.1:6443"
    assert p["labels"] == ["hybridgpu.io/side"]


def test_plan_refuses_a_manifest_without_standalone_state():
    d = doc()
    d["pre_onboarding"] = None
    with pytest.raises(rm.RemovalError, match="pre_onboarding"):
        rm.plan(d)


def test_state_resumes_reports_and_finishes(tmp_path):
    st = rm.RemovalState(str(tmp_path), "n1", "CHG-1")
    assert st.start(doc()) is True
    assert st.mark("approval") is True and st.mark("approval") is False
    again = rm.RemovalState(str(tmp_path), "n1", "CHG-1")
    assert again.start(None) is False          # resumes from the snapshot, manifest gone
    rep = again.report()
    assert rep["done"] == ["approval"] and rep["pending"][0] == "drain" and not rep["finished"]
    assert "done [approval]" in rm.summary(rep)
    other = rm.RemovalState(str(tmp_path), "n1", "CHG-2")
    assert other.others_unfinished() == [{"change_id": "CHG-1", "done": ["approval"]}]
    for step in rm.STEPS[1:]:
        again.mark(step)
    assert again.report()["finished"]
    assert json.load(open(again.path))["finished_at"]


def test_no_manifest_and_no_state_changes_nothing(tmp_path):
    with pytest.raises(rm.RemovalError, match="nothing is removed"):
        rm.RemovalState(str(tmp_path), "n1", "CHG-1").start(None)


def test_nft_table_blocks_are_parsed():
    text = PRE["nft_ruleset"] + "table ip nat {\n}\n"
    assert sorted(rm.nft_tables_in(text)) == [("inet", "site"), ("ip", "nat")]
