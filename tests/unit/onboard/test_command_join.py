"""The command join method: input checks, when the installer runs, what the manifest records,
the module on a fake node (fake dpkg-query and systemctl, a real installer script), and what
removal plans and finds left of such a join."""
import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import node_checks
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import command_join as cj

from hgpu_testenv import ROOT

SECRET = "act-7f3c9d2e1b"
SPEC = {"packages": ["acme-node-agent"],
        "installer": ["/usr/bin/acme-node", "activate", "--endpoint", "https://203.0.113.10:6443"],
        "secret": SECRET, "secret_env": "ACME_TOKEN", "env": {"ACME_REGION": "site-1"},
        "units": ["acme-node-agent.service"], "files": ["/etc/acme-node/kubeconfig", "/var/lib/acme-node"],
        "uninstall": ["/usr/bin/acme-node", "deactivate"], "node_name": "gpu-07"}


def spec(**kw):
    out = json.loads(json.dumps(SPEC))
    out.update(kw)
    return out


# ---- inputs ------------------------------------------------------------------------------

def test_good_inputs_pass():
    assert cj.check(SPEC) == []
    assert cj.check(spec(installer=[], packages=["acme-node-agent"])) == []  # package-only join
    assert cj.check(spec(installer=["acme-node", "activate"])) == []          # a program on PATH


@pytest.mark.parametrize("change, field", [
    ({"packages": [], "installer": []}, "packages, installer"),
    ({"packages": ["Acme Agent"]}, "packages[0]"),
    ({"installer": "/usr/bin/acme-node activate"}, "installer: must be a list"),
    ({"installer": ["acme-node; rm -rf /", "x"]}, "installer[0]"),
    ({"installer": ["/usr/bin/acme-node", "a\nb"]}, "installer[1]"),
    ({"installer": ["/usr/bin/../bin/acme-node"]}, "installer[0]"),
    ({"uninstall": []}, "uninstall: a command is required"),
    ({"units": []}, "units: name the unit"),
    ({"units": ["acme agent"]}, "units[0]"),
    ({"files": ["etc/acme"]}, "files[0]"),
    ({"files": ["/etc/acme/*.conf"]}, "files[0]"),
    ({"files": ["/etc/acme/../passwd"]}, "files[0]"),
    ({"files": ["/etc"]}, "files[0]: /etc is a system folder"),
    ({"secret_env": "ACME-TOKEN"}, "secret_env"),
    ({"env": {"ACME_TOKEN": "x"}}, "env.ACME_TOKEN: that variable carries the secret"),
    ({"env": {"1BAD": "x"}}, "env: '1BAD'"),
    ({"installer": ["/usr/bin/acme-node", "--token=" + SECRET]}, "installer: holds the secret on the command line"),
    ({"uninstall": ["/usr/bin/acme-node", SECRET]}, "uninstall: holds the secret on the command line"),
    ({"env": {"ACME_REGION": SECRET}}, "env: holds the secret"),
    ({"node_name": "GPU_07"}, "node_name"),
])
def test_each_bad_input_is_named(change, field):
    problems = cj.check(spec(**change))
    assert any(p.startswith(field) for p in problems), problems


# ---- when the installer runs --------------------------------------------------------------

JOINED = {"packages": {"acme-node-agent": True}, "units": {"acme-node-agent.service": True}, "node_ready": True}


def test_a_joined_node_is_left_alone():
    assert cj.decide(SPEC, JOINED) == (False, [])
    assert cj.decide(SPEC, dict(JOINED, node_ready=None)) == (False, [])  # not confirmed through the API


@pytest.mark.parametrize("state, why", [
    (dict(JOINED, units={"acme-node-agent.service": False}), "units not active: acme-node-agent.service"),
    (dict(JOINED, packages={}), "packages not installed: acme-node-agent"),
    (dict(JOINED, node_ready=False), "Node gpu-07 is not Ready"),
])
def test_the_installer_runs_while_the_join_is_incomplete(state, why):
    run, reasons = cj.decide(SPEC, state)
    assert run is True and reasons == [why]


def test_without_an_installer_nothing_runs():
    assert cj.decide(spec(installer=[]), dict(JOINED, node_ready=False))[0] is False


# ---- the record ---------------------------------------------------------------------------

PRE = {"recorded_at": "2025-01-01T00:00:00Z", "active_units": ["chrony.service", "acme-node-agent.service"],
       "packages": {"acme-node-agent": None, "kubeadm": None}, "users": ["root"],
       "paths": {"/etc/acme-node/kubeconfig": False, "/var/lib/acme-node": True, "/var/lib/hybridgpu": False},
       "nft_ruleset": ""}


def test_artefacts_and_facts_of_the_join():
    arts = cj.artefacts(SPEC, "onprem", "/var/lib/hybridgpu/manifest.json")
    idents = [manifest.identity(a) for a in manifest.check_artefacts("join", arts)]
    assert ("package", "acme-node-agent") in idents and ("unit", "acme-node-agent.service") in idents
    assert ("file", "/etc/acme-node/kubeconfig") in idents and ("file", "/var/lib/acme-node") in idents
    assert ("api_object", "onprem", "v1", "nodes", "", "gpu-07") in idents
    facts = cj.facts(SPEC, "onprem", "https://203.0.113.10:6443")
    assert facts["method"] == "command" and facts["uninstall_command"] == ["/usr/bin/acme-node", "deactivate"]
    assert SECRET not in json.dumps(facts) and SECRET not in json.dumps(arts)
    assert not [a for a in cj.artefacts(spec(node_name=""), "onprem", "") if a["kind"] == "api_object"]


def test_what_the_node_had_before_is_not_recorded():
    pre = dict(PRE, active_units=["chrony.service"])
    made, had = manifest.created(pre, cj.artefacts(SPEC, "onprem", ""))
    assert ("file", "/var/lib/acme-node") in [manifest.identity(a) for a in had]   # present before
    assert ("file", "/etc/acme-node/kubeconfig") in [manifest.identity(a) for a in made]
    made, had = manifest.created(PRE, cj.artefacts(SPEC, "onprem", ""))
    assert ("unit", "acme-node-agent.service") in [manifest.identity(a) for a in had]  # active before


def command_doc(pre=None):
    pre = pre or dict(PRE, active_units=["chrony.service"], paths={"/var/lib/acme-node": False})
    d = manifest.merge(None, "gpu-07", pre_onboarding=pre)
    made, dummy = manifest.created(pre, cj.artefacts(SPEC, "onprem", "/var/lib/hybridgpu/manifest.json"))
    return manifest.merge(d, "gpu-07", "join", made, facts=cj.facts(SPEC, "onprem", "https://203.0.113.10:6443"))


# ---- removal ------------------------------------------------------------------------------

def test_removal_plan_of_a_command_join():
    p = removal.plan(command_doc())
    assert p["join"]["method"] == "command"
    assert p["join"]["uninstall_command"] == ["/usr/bin/acme-node", "deactivate"]
    assert p["join"]["units"] == ["acme-node-agent.service"] and p["join"]["reset_command"] == []
    assert p["units"] == ["acme-node-agent.service"] and p["packages"] == ["acme-node-agent"]
    assert "/etc/acme-node/kubeconfig" in p["files"] and "/var/lib/acme-node" in p["files"]
    assert p["nodes"] == [{"cluster": "onprem", "namespace": "", "name": "gpu-07"}]
    assert p["csrs"] == [] and p["bootstrap_tokens"] == []


def test_removal_keeps_a_package_the_node_had():
    pre = dict(PRE, active_units=[], paths={}, packages={"acme-node-agent": "1.0-1"})
    assert removal.plan(command_doc(pre))["packages"] == []


def test_removal_refuses_a_command_join_without_its_uninstall():
    d = command_doc()
    d["sections"]["join"]["facts"]["uninstall_command"] = []
    with pytest.raises(removal.RemovalError, match="no uninstall_command"):
        removal.plan(d)


def test_leftovers_of_a_command_join_are_named():
    p = removal.plan(command_doc())
    on_node = {"unit": "acme-node-agent.service", "package": "acme-node-agent", "file": "/etc/acme-node/kubeconfig"}

    def run(argv):
        if argv[0] == "systemctl":
            state = "loaded active" if argv[-1] == on_node["unit"] else "not-found inactive"
            return 0, state.replace(" ", "\n") + "\n", ""
        if argv[0] == "dpkg-query":
            return 0, "%s ii 1.0-1\n" % on_node["package"], ""
        if argv[0] == "nft":
            return 0, "", ""
        raise AssertionError(argv)

    left = node_checks.node_leftovers(p, run=run, exists=lambda path: path == on_node["file"],
                                      user_exists=lambda n: False, group_exists=lambda n: False,
                                      key_present=lambda k: False)
    assert sorted(left) == ["file /etc/acme-node/kubeconfig", "package acme-node-agent",
                            "unit acme-node-agent.service"]
    on_node.update(unit="-", package="other", file="-")
    assert node_checks.node_leftovers(p, run=run, exists=lambda path: path == on_node["file"],
                                      user_exists=lambda n: False, group_exists=lambda n: False,
                                      key_present=lambda k: False) == []


# ---- the module on a fake node ---------------------------------------------------------------

FAKE_SYSTEMCTL = """#!/bin/sh
# is-active UNIT: active when $STATE/active-UNIT exists
test -e "$STATE/active-$2" && { echo active; exit 0; }
echo inactive; exit 3
"""
FAKE_DPKG = """#!/bin/sh
# dpkg-query -W -f=FORMAT NAMES...: installed when $STATE/pkg-NAME exists
shift 2
rc=0
for p in "$@"; do
  if test -e "$STATE/pkg-$p"; then echo "$p ii 1.0-1"; else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
"""
INSTALLER = """#!/bin/sh
echo "$@" > "$STATE/argv"
printf '%s' "$ACME_TOKEN" > "$STATE/token"
echo "$ACME_REGION" > "$STATE/region"
echo run >> "$STATE/runs"
touch "$STATE/active-acme-node-agent.service"
"""


@pytest.fixture
def node(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("dpkg-query", FAKE_DPKG), ("acme-node", INSTALLER)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (state / "pkg-acme-node-agent").write_text("")
    env = dict(os.environ, STATE=str(state), PATH=str(bin_dir) + os.pathsep + os.environ["PATH"],
               PYTHONPATH=os.path.join(ROOT, ".collections"))
    return {"env": env, "state": state, "installer": str(bin_dir / "acme-node"), "tmp": tmp_path}


def run_module(node, check_mode=False, **kw):
    args = dict(SPEC, installer=[node["installer"], "activate", "--endpoint", "https://203.0.113.10:6443"],
                files=[], node_name="gpu-07", cluster="onprem", _ansible_check_mode=check_mode)
    args.update(kw)
    path = node["tmp"] / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", "node_join_command.py"), str(path)],
                          env=node["env"], capture_output=True, text=True, timeout=60, check=False)
    return json.loads(proc.stdout), proc.stdout


def test_module_runs_the_installer_once_with_the_secret_only_in_the_environment(node):
    state = node["state"]
    result, raw = run_module(node, check_mode=True, node_ready=False)
    assert result["changed"] and result["ran"] and not (state / "runs").exists()   # check mode: says, does nothing
    assert result["would_run"].endswith("activate --endpoint https://203.0.113.10:6443")
    assert result["why"] == ["units not active: acme-node-agent.service", "Node gpu-07 is not Ready"]

    result, raw = run_module(node, node_ready=False)
    assert result["changed"] and not result.get("failed"), result
    assert (state / "token").read_text() == SECRET and SECRET not in (state / "argv").read_text()
    assert (state / "region").read_text().strip() == "site-1"
    assert SECRET not in raw  # no_log: the value never comes back
    assert result["state_after"]["units"] == {"acme-node-agent.service": True}
    assert result["facts"]["uninstall_command"] == ["/usr/bin/acme-node", "deactivate"]

    again, raw = run_module(node, node_ready=True)
    assert again["changed"] is False and again["why"] == []
    assert (state / "runs").read_text().count("run") == 1   # joined: the installer does not run again


def test_module_stops_before_running_anything_on_bad_input(node):
    result, raw = run_module(node, units=["bad unit"], installer=[node["installer"], "--token=" + SECRET])
    assert result["failed"] and "units[0]" in result["msg"] and "installer: holds the secret" in result["msg"]
    assert "nothing was changed" in result["msg"] and not (node["state"] / "runs").exists()
    assert SECRET not in raw


def test_module_reports_a_failing_installer(node):
    bad = node["tmp"] / "bin" / "broken"
    bad.write_text("#!/bin/sh\necho 'activation refused' >&2\nexit 4\n")
    bad.chmod(0o755)
    result, raw = run_module(node, installer=[str(bad)], node_ready=False)
    assert result["failed"] and "failed (rc=4)" in result["msg"] and "activation refused" in result["msg"]


def test_module_fails_naming_a_unit_the_installer_did_not_start(node):
    lazy = node["tmp"] / "bin" / "lazy"
    lazy.write_text("#!/bin/sh\necho run >> \"$STATE/runs\"\n")
    lazy.chmod(0o755)
    result, raw = run_module(node, installer=[str(lazy)], node_ready=False, settle=1)
    assert result["failed"] and "not active: acme-node-agent.service" in result["msg"], result
    assert (node["state"] / "runs").read_text().count("run") == 1


FAKE_APT = """#!/bin/sh
# apt-get [-y -q -o X ...] update|install NAMES...: install creates $STATE/pkg-NAME
while [ "${1#-}" != "$1" ]; do case "$1" in -o) shift 2 ;; *) shift ;; esac; done
echo "$*" >> "$STATE/apt"
[ "$1" = install ] && { shift; for p in "$@"; do touch "$STATE/pkg-$p"; done; }
exit 0
"""


def test_module_installs_the_missing_packages_in_the_same_run(node):
    apt = node["tmp"] / "bin" / "apt-get"
    apt.write_text(FAKE_APT)
    apt.chmod(0o755)
    (node["state"] / "pkg-acme-node-agent").unlink()
    dry, raw = run_module(node, check_mode=True, install_packages=True, node_ready=False)
    assert dry["packages_installed"] == ["acme-node-agent"] and dry["ran"], dry
    assert not (node["state"] / "apt").exists()
    # decided as after the install: only the inactive unit and the Node are reasons
    assert dry["why"] == ["units not active: acme-node-agent.service", "Node gpu-07 is not Ready"], dry

    result, raw = run_module(node, install_packages=True, node_ready=False)
    assert result["packages_installed"] == ["acme-node-agent"] and result["ran"], result
    installs = [ln for ln in (node["state"] / "apt").read_text().splitlines() if ln != "update"]
    assert installs == ["install acme-node-agent"]
    assert result["state_before"]["packages"] == {"acme-node-agent": True}, result

    again, raw = run_module(node, install_packages=True, node_ready=True)
    assert again["changed"] is False and again["packages_installed"] == [], again
    assert [ln for ln in (node["state"] / "apt").read_text().splitlines() if ln != "update"] == installs


def test_without_install_packages_a_missing_package_is_only_a_reason(node):
    (node["state"] / "pkg-acme-node-agent").unlink()
    dry, raw = run_module(node, check_mode=True, node_ready=True)
    assert dry["packages_installed"] == [] and dry["why"][0] == "packages not installed: acme-node-agent", dry


def test_module_returns_the_manifest_copy_state(node):
    copy = node["tmp"] / "copy" / "manifest.json"
    result, raw = run_module(node, node_ready=True, manifest_copy=str(copy))
    assert result["manifest_copy_state"] is None, result
    copy.parent.mkdir()
    copy.write_text('{"node": "gpu-07"}\n')
    copy.chmod(0o640)
    result, raw = run_module(node, node_ready=True, manifest_copy=str(copy))
    assert result["manifest_copy_state"] == {"sha256": hashlib.sha256(b'{"node": "gpu-07"}\n').hexdigest(),
                                             "mode": "0640"}, result
    copy.chmod(0o644)
    assert run_module(node, node_ready=True, manifest_copy=str(copy))[0]["manifest_copy_state"]["mode"] == "0644"
    assert "manifest_copy_state" not in run_module(node, node_ready=True)[0]
