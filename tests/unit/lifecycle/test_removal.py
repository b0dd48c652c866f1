"""Removal plan from a manifest and the per-node removal state (resume, report, finish)."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest, nft
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import node_checks
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal

PRE = {"recorded_at": "2025-01-01T00:00:00Z", "active_units": ["chrony.service", "slurmd.service"],
       "nft_ruleset": "table inet site {\n\tchain input {\n\t\ttype filter hook input priority 0;\n\t}\n}\n",
       "packages": {"hybridgpu-node-agent": None, "nccl-tests": "2.13.11-1"},
       "paths": {"/etc/hybridgpu": False}, "users": ["root", "sshd"]}


def doc():
    d = manifest.merge(None, "n1", pre_onboarding=PRE)
    d = manifest.merge(d, "n1", "join", [
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
    d = manifest.merge(d, "n1", "agents", [{"kind": "user", "name": "hgpu-x"}, {"kind": "user", "name": "sshd"}])
    d = manifest.merge(d, "n1", "host_firewall", [{"kind": "nft_table", "family": "inet", "name": "hybridgpu"}])
    d = manifest.merge(d, "n1", "placement", [{"kind": "label", "key": "hybridgpu.io/side", "value": "owned"},
                                              {"kind": "taint", "key": "hybridgpu.io/owned", "effect": "PreferNoSchedule"}])
    return d


def test_plan_removes_only_what_onboarding_added():
    p = removal.plan(doc())
    assert p["nodes"] == [{"cluster": "onprem", "namespace": "", "name": "n1"}]
    assert [s["name"] for s in p["secrets"]] == ["node-n1-token"]
    assert p["packages"] == ["hybridgpu-node-agent"]      # nccl-tests was there before
    assert p["users"] == ["hgpu-x"]                        # sshd was there before
    assert p["directories"] == ["/etc/hybridgpu/node-agent", "/etc/hybridgpu"]  # deepest first, kept one absent
    assert p["restore"]["units"] == ["chrony.service", "slurmd.service"]
    assert [t["name"] for t in p["restore"]["nft_tables"]] == ["site"]
    assert p["server"] == "https://10.213.77.1:6443"
    assert p["labels"] == ["hybridgpu.io/side"]


def kubeadm_doc():
    d = manifest.merge(None, "n1", pre_onboarding=dict(PRE, packages={"kubeadm": None, "kubelet": None}))
    return manifest.merge(d, "n1", "join", [
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "nodes", "namespace": "", "name": "n1"},
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "secrets",
         "namespace": "kube-system", "name": "bootstrap-token-abcdef"},
        {"kind": "api_object", "cluster": "onprem", "api_version": "certificates.k8s.io/v1",
         "resource": "certificatesigningrequests", "namespace": "", "name": "node-csr-1"},
        {"kind": "file", "path": "/etc/kubernetes/kubelet.conf"},
        {"kind": "package", "name": "kubeadm"}, {"kind": "unit", "name": "kubelet.service"}],
        facts={"server": "https://10.213.77.1:6443", "cluster": "onprem", "method": "kubeadm",
               "reset_command": ["kubeadm", "reset", "-f"],
               "client_certificate": {"serial": "3ed7", "not_after": "2027-12-01 07:35:26Z"}})


def test_plan_of_a_kubeadm_join_lists_token_csrs_and_the_reset():
    p = removal.plan(kubeadm_doc())
    assert p["secrets"] == []  # a bootstrap token is not a token Secret kept for a 401 check
    assert [t["name"] for t in p["bootstrap_tokens"]] == ["bootstrap-token-abcdef"]
    assert p["csrs"] == [{"cluster": "onprem", "namespace": "", "name": "node-csr-1"}]
    assert p["join"]["reset_command"] == ["kubeadm", "reset", "-f"]
    assert p["join"]["client_certificate"]["serial"] == "3ed7"
    assert p["packages"] == ["kubeadm"] and p["units"] == ["kubelet.service"]


def test_validate_refuses_paths_and_names_a_node_must_not_be_handed():
    p = removal.plan(kubeadm_doc())
    assert removal.validate(p) is p
    for field, value, says in (("files", "/etc/../etc/shadow", "is not an absolute, normalised path"),
                               ("files", "etc/passwd", "is not an absolute, normalised path"),
                               ("directories", "/", "is not an absolute, normalised path"),
                               ("users", "root;id", "is not a valid name"),
                               ("packages", "-oAPT::Foo", "is not a valid name"),
                               ("units", "kubelet", "is not a valid name")):
        bad = removal.plan(kubeadm_doc())
        bad[field] = list(bad[field]) + [value]
        with pytest.raises(removal.RemovalError, match="removal plan of n1 is refused: .*%r %s" % (value, says)):
            removal.validate(bad)


def test_the_manifest_digest_is_of_the_document_and_any_edit_changes_it():
    d = kubeadm_doc()
    assert removal.manifest_digest(d) == removal.manifest_digest(json.loads(json.dumps(d, indent=1)))
    edited = manifest.merge(kubeadm_doc(), "n1", "join", [{"kind": "file", "path": "/etc/passwd"}])
    assert removal.manifest_digest(edited) != removal.manifest_digest(d)
    approval = {"change_id": "CHG-1", "manifests": {"n1": removal.manifest_digest(d)}}
    removal.check_manifest(approval, "n1", d, "m.json")
    with pytest.raises(removal.RemovalError, match="is not the one change CHG-1 approved for n1"):
        removal.check_manifest(approval, "n1", edited, "m.json")
    with pytest.raises(removal.RemovalError, match="names no manifest digest for n2"):
        removal.check_manifest(approval, "n2", d, "m.json")


def test_plan_refuses_a_manifest_without_standalone_state():
    d = doc()
    d["pre_onboarding"] = None
    with pytest.raises(removal.RemovalError, match="pre_onboarding"):
        removal.plan(d)


def test_state_resumes_reports_and_finishes(tmp_path):
    st = removal.RemovalState(str(tmp_path), "n1", "CHG-1")
    assert st.start(doc()) is True
    assert st.mark("approval") is True and st.mark("approval") is False
    again = removal.RemovalState(str(tmp_path), "n1", "CHG-1")
    assert again.start(None) is False          # resumes from the snapshot, manifest gone
    rep = again.report()
    assert rep["done"] == ["approval"] and rep["pending"][0] == "drain" and not rep["finished"]
    assert "done [approval]" in removal.summary(rep)
    other = removal.RemovalState(str(tmp_path), "n1", "CHG-2")
    assert other.others_unfinished() == [{"change_id": "CHG-1", "done": ["approval"]}]
    for step in removal.STEPS[1:]:
        again.mark(step)
    assert again.report()["finished"]
    assert json.load(open(again.path))["finished_at"]


def test_no_manifest_and_no_state_changes_nothing(tmp_path):
    with pytest.raises(removal.RemovalError, match="nothing is removed"):
        removal.RemovalState(str(tmp_path), "n1", "CHG-1").start(None)


def test_nft_table_blocks_are_parsed():
    text = PRE["nft_ruleset"] + "table ip nat {\n}\n"
    assert sorted(nft.tables_in(text)) == [("inet", "site"), ("ip", "nat")]


def fake_node(units_active, dpkg_lines, tables, smi_rc=0, unit_loaded=(), on_demand=()):
    """A run() answering the node's tools as they print; records each call. ``on_demand``:
    units systemd starts through D-Bus (static, BusName set)."""
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[:2] == ["systemctl", "list-units"]:
            return 0, "".join("%s loaded active running x\n" % u for u in units_active), ""
        if argv[:3] == ["systemctl", "show", "--property=Id,BusName,TriggeredBy,UnitFileState"]:
            return 0, "\n".join("Id=%s\nBusName=%s\nTriggeredBy=\nUnitFileState=%s\n" % (
                u, "org.example.%s" % u if u in on_demand else "", "static" if u in on_demand else "enabled")
                for u in argv[3:]), ""
        if argv[:2] == ["systemctl", "show"]:
            return 0, ("loaded\nactive\n" if argv[-1] in unit_loaded else "not-found\ninactive\n"), ""
        if argv[0] == "dpkg-query":
            return (0 if dpkg_lines else 1), "".join(line + "\n" for line in dpkg_lines), ""
        if argv[:3] == ["nft", "list", "tables"]:
            return 0, "".join("table %s %s\n" % t for t in tables), ""
        if argv[0] == "nvidia-smi":
            return smi_rc, "NVIDIA A100-SXM4-80GB, 550.163.01\n" if smi_rc == 0 else "", ""
        raise AssertionError("unexpected command %r" % argv)
    run.calls = calls
    return run


def test_leftovers_read_every_package_in_one_call():
    p = removal.plan(doc())
    run = fake_node([], ["hybridgpu-node-agent iF  0.1.0-1"], [("inet", "hybridgpu")],
                    unit_loaded=("hybridgpu-node-agent.service",))
    left = node_checks.node_leftovers(p, run=run, exists=lambda path: False, user_exists=lambda n: False,
                                      group_exists=lambda n: False, key_present=lambda k: False)
    # half-configured is still on the node; the table onboarding added is too
    assert left == ["unit hybridgpu-node-agent.service", "package hybridgpu-node-agent",
                    "nft_table inet hybridgpu"]
    assert sum(1 for argv in run.calls if argv[0] == "dpkg-query") == 1


def test_leftovers_none_when_only_configuration_files_remain():
    p = removal.plan(doc())
    run = fake_node([], ["hybridgpu-node-agent rc  0.1.0-1"], [("inet", "site")])
    assert node_checks.node_leftovers(p, run=run, exists=lambda path: False, user_exists=lambda n: False,
                                      group_exists=lambda n: False, key_present=lambda k: False) == []


def test_health_counts_held_packages_and_names_what_is_missing():
    p = removal.plan(doc())
    healthy = fake_node(["chrony.service", "slurmd.service"], ["nccl-tests hi  2.13.11-1"], [("inet", "site")])
    got = node_checks.health(p, run=healthy)
    assert got["ok"] and got["packages_changed_since_onboarding"] == [] and got["missing_units"] == []
    sick = fake_node(["chrony.service"], ["nccl-tests rc  2.13.11-1"], [], smi_rc=9)
    got = node_checks.health(p, run=sick)
    assert not got["ok"] and got["missing_units"] == ["slurmd.service"]
    assert got["packages_changed_since_onboarding"] == ["nccl-tests"]  # reported, not a problem
    assert [x.split(":")[0] for x in got["problems"]] == [
        "units active before onboarding are not active", "nft tables of the standalone node are missing",
        "nvidia-smi failed (rc=9)"]


def test_health_lets_an_on_demand_unit_be_idle():
    """A D-Bus service active when onboarding looked (systemd-timedated after a timedatectl
    call) exits when idle: inactive later is healthy. An enabled unit that stopped is not."""
    p = removal.plan(doc())
    p["restore"]["units"] = ["chrony.service", "systemd-timedated.service", "slurmd.service"]
    run = fake_node(["chrony.service"], ["nccl-tests ii  2.13.11-1"], [("inet", "site")],
                    on_demand=("systemd-timedated.service",))
    got = node_checks.health(p, run=run)
    assert got["idle_on_demand_units"] == ["systemd-timedated.service"]
    assert got["missing_units"] == ["slurmd.service"] and not got["ok"]
    shows = [argv for argv in run.calls if argv[:2] == ["systemctl", "show"]]
    assert len(shows) == 1 and shows[0][3:] == ["systemd-timedated.service", "slurmd.service"]


@pytest.mark.parametrize("broken", ["dpkg-query", "nft"])
def test_leftovers_refuse_to_call_a_node_clean_when_a_tool_fails(broken):
    p = removal.plan(doc())
    base = fake_node([], [], [])

    def run(argv):
        if argv[0] == broken:
            return 127, "", "%s: command not found" % broken
        return base(argv)
    with pytest.raises(node_checks.NodeReadError, match=r"(?s)^%s .*failed \(rc=127\): %s: command not found" % (broken, broken)):
        node_checks.node_leftovers(p, run=run, exists=lambda path: False, user_exists=lambda n: False,
                                   group_exists=lambda n: False, key_present=lambda k: False)


def test_the_signing_cli_prints_the_manifest_digest_a_remove_record_names(tmp_path):
    import os
    import subprocess
    import sys
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(kubeadm_doc(), indent=2))
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "bin", "hgpu-sign-change")
    out = subprocess.run([sys.executable, cli, "manifest-digest", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == removal.manifest_digest(kubeadm_doc()), out.stderr
    # a manifest removal cannot honour is refused before anyone signs its digest
    path.write_text(json.dumps(manifest.merge(None, "n1")))
    out = subprocess.run([sys.executable, cli, "manifest-digest", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "has no pre_onboarding block" in out.stderr, out.stderr
