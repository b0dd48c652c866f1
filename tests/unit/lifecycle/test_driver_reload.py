"""Loading the new driver's module after a package change: the holders of the devices are
found in the real /proc, a held module asks for a reboot naming the holder, a free one is
unloaded and loaded. The module runs through ansible-playbook on localhost with the lab's
nvidia-smi and modprobe stand-ins first on PATH (their state in a temporary folder), under a
signed driver_upgrade change record its action plugin verifies."""
import json
import os
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.cmd import Result
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import driver_reload as dr

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGES = os.path.join(REPO, "tests", "lab", "packages")
BIN = os.path.dirname(sys.executable)
SPEC = {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920, "pci_base": "00000000:10:00.0",
        "uuid_seed": "n1", "faults": {}}
DRIVER_535 = {"branch": "535", "version": "535.230.02", "cuda": "12.2"}
DRIVER_550 = {"branch": "550", "version": "550.163.01", "cuda": "12.4"}


def test_matches_a_version_or_its_branch():
    assert dr.matches("550.163.01", "550") and dr.matches("550.163.01", "550.163.01")
    assert not dr.matches("5500.1", "550") and not dr.matches("535.230.02", "550")
    assert not dr.matches(None, "550")


def test_holders_are_read_from_the_real_proc(tmp_path):
    device = tmp_path / "nvidia0"
    device.write_text("")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(60)",
                               str(device)])
    try:
        for _attempt in range(50):
            found = dr.holders(str(tmp_path / "nvidia*"))
            if found:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert [h["pid"] for h in found] == [holder.pid]
        assert found[0]["files"] == [str(device)] and found[0]["command"].startswith("python")
        # a holder in a unit the reload stops does not block it; any other does
        assert dr.blocking([dict(found[0], unit="nvidia-persistenced.service")], ["nvidia-persistenced.service"]) == []
        assert dr.blocking(found, ["nvidia-persistenced.service"]) == found
    finally:
        holder.kill()
        holder.wait()
    assert dr.holders(str(tmp_path / "nvidia*")) == []


class FakeNode(object):
    """systemctl and modprobe calls recorded; modprobe -r refused when ``refuse`` is set."""

    def __init__(self, loaded, installed, refuse=False, active=()):
        self.loaded, self.installed, self.refuse, self.active, self.calls = loaded, installed, refuse, set(active), []

    def __call__(self, argv, ok=(0,)):
        self.calls.append(list(argv))
        if argv[0] == "nvidia-smi":
            if self.loaded != self.installed:
                return Result(18, "Failed to initialize NVML: Driver/library version mismatch\n", "")
            return Result(0, self.loaded + "\n" + self.loaded + "\n", "")
        if argv[:2] == ["systemctl", "is-active"]:
            return Result(0 if argv[-1] in self.active else 3, "", "")
        if argv[:2] == ["modprobe", "-r"]:
            if self.refuse:
                return Result(1, "", "modprobe: FATAL: Module nvidia_drm is in use.\n")
            self.loaded = None
        elif argv[0] == "modprobe":
            self.loaded = self.installed
        return Result(0, "", "")


def test_reload_stops_the_daemons_unloads_loads_and_starts_them_again():
    node = FakeNode("535.230.02", "550.163.01", active=["nvidia-persistenced.service"])
    stop = dr.active_units(node, ["nvidia-persistenced.service", "dcgm.service"])
    assert stop == ["nvidia-persistenced.service"]
    assert dr.reload_module(node, ["nvidia_drm", "nvidia"], ["nvidia"], stop, "550") == (True, "module 550.163.01 loaded")
    acts = [c for c in node.calls if c[0] == "modprobe" or c[1] in ("stop", "start")]
    assert acts == [["systemctl", "stop", "nvidia-persistenced.service"], ["modprobe", "-r", "nvidia_drm", "nvidia"],
                    ["modprobe", "nvidia"], ["systemctl", "start", "nvidia-persistenced.service"]]


def test_a_refused_unload_starts_the_daemons_again_and_changes_nothing_else():
    node = FakeNode("535.230.02", "550.163.01", refuse=True)
    reloaded, message = dr.reload_module(node, ["nvidia_drm", "nvidia"], ["nvidia"], ["dcgm.service"], "550")
    assert not reloaded and "Module nvidia_drm is in use" in message
    assert node.calls[-1] == ["systemctl", "start", "dcgm.service"]
    assert ["modprobe", "nvidia"] not in node.calls


def test_a_reload_that_leaves_another_version_fails():
    node = FakeNode("535.230.02", "550.163.01")
    with pytest.raises(dr.ReloadError, match="expected 570"):
        dr.reload_module(node, ["nvidia"], ["nvidia"], [], "570")


# The module itself, through ansible-playbook, against the stand-ins.

@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


@pytest.fixture
def node(tmp_path, people):
    """The stand-ins as nvidia-smi and modprobe in a bin folder first on PATH, the driver 535
    installed and loaded, the device files in tmp/dev."""
    bin_dir, dev = tmp_path / "bin", tmp_path / "dev"
    bin_dir.mkdir()
    dev.mkdir()
    for name, src in (("nvidia-smi", "nvidia-smi/nvidia_smi.py"), ("modprobe", "nvidia-kmod/modprobe.py")):
        (bin_dir / name).write_text("#!%s\n" % sys.executable + open(os.path.join(PACKAGES, src)).read())
        os.chmod(str(bin_dir / name), 0o755)
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    (tmp_path / "driver.json").write_text(json.dumps(DRIVER_535))
    (tmp_path / "kmod.json").write_text(json.dumps({"loaded_state": str(tmp_path / "loaded.json")}))
    env = {"PATH": "%s:%s:%s" % (bin_dir, BIN, os.environ["PATH"]), "HGPU_GPU_SPEC": str(tmp_path / "spec.json"),
           "HGPU_DRIVER_JSON": str(tmp_path / "driver.json"), "HGPU_KMOD_JSON": str(tmp_path / "kmod.json"),
           "HGPU_KMOD_STATE": str(tmp_path / "loaded.json"), "HGPU_DEV_DIR": str(dev)}
    subprocess.run(["modprobe", "nvidia"], env=dict(os.environ, **env), check=True)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_boundary_path": people["boundary"],
                 "hgpu_records_dir": str(tmp_path / "records")}}}))
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(change_id="CHG-RELOAD-1", targets=("localhost",)),
                             people["keys"]["sec-owner"])
    return {"tmp": tmp_path, "env": env, "dev": dev, "record": record}


def run_module(node, check=False, **args):
    args = dict({"expected_version": "550", "stop_units": [], "device_glob": str(node["dev"]) + "/nvidia*",
                 "record_path": node["record"], "executor": "ops-oncall"}, **args)
    args = {k: v for k, v in args.items() if v is not None}
    play = [{"hosts": "localhost", "gather_facts": False, "environment": node["env"],
             "tasks": [{"hybridgpu.fleet.driver_reload": args, "register": "out", "ignore_errors": True},
                       {"ansible.builtin.copy": {"content": "{{ out | to_json }}", "dest": str(node["tmp"] / "out.json")},
                        "check_mode": False},
                       {"ansible.builtin.assert": {"that": "out is not failed"}}]}]
    (node["tmp"] / "play.yml").write_text(json.dumps(play))
    res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(node["tmp"] / "inventory.yml")]
                         + (["--check"] if check else []) + [str(node["tmp"] / "play.yml")],
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")),
                         capture_output=True, text=True, cwd=REPO, check=False)
    out = json.loads((node["tmp"] / "out.json").read_text()) if (node["tmp"] / "out.json").exists() else None
    return res, out


def smi_version(node):
    return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                          env=dict(os.environ, **node["env"]), capture_output=True, text=True, check=False)


def test_module_reloads_a_free_module_and_a_second_run_changes_nothing(node):
    (node["tmp"] / "driver.json").write_text(json.dumps(DRIVER_550))
    assert smi_version(node).returncode == 18  # the package changed under the loaded module
    checked, out = run_module(node, check=True)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert out["changed"] and out["reloaded"] and not out["reboot_needed"]
    assert smi_version(node).returncode == 18, "check mode must not reload"
    res, out = run_module(node)
    assert res.returncode == 0, res.stdout[-3000:]
    assert out["changed"] and out["reloaded"] and out["loaded_before"] is None
    assert "version mismatch" in out["nvml_message"] and out["loaded_after"] == "550.163.01"
    assert smi_version(node).stdout.splitlines()[0] == "550.163.01"
    res, out = run_module(node)
    assert res.returncode == 0 and not out["changed"] and not out["reboot_needed"]


def test_module_asks_for_a_reboot_naming_the_holder(node):
    (node["tmp"] / "driver.json").write_text(json.dumps(DRIVER_550))
    holder = subprocess.Popen(["sleep", "60"], stdin=open(str(node["dev"] / "nvidia1")))
    try:
        res, out = run_module(node)
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 0, res.stdout[-3000:]
    assert out["reboot_needed"] and not out["reloaded"] and not out["changed"]
    assert [h["pid"] for h in out["holders"]] == [holder.pid]
    assert "in use by pid %d sleep" % holder.pid in out["reason"]
    assert smi_version(node).returncode == 18, "a held module must stay as it was"


def test_module_with_reload_off_asks_for_a_reboot(node):
    (node["tmp"] / "driver.json").write_text(json.dumps(DRIVER_550))
    res, out = run_module(node, reload=False)
    assert res.returncode == 0 and out["reboot_needed"] and not out["changed"]
    assert "reload is off" in out["reason"]


@pytest.mark.parametrize("field, value, says", [
    ("expected_version", "550; reboot", "expected_version"),
    ("unload", ["nvidia", "x y"], "unload"),
    ("stop_units", ["dcgm"], "stop_units"),
    ("device_glob", "dev/nvidia*", "device_glob"),
])
def test_bad_input_is_refused_naming_the_field(node, field, value, says):
    res, out = run_module(node, **{field: value})
    assert res.returncode != 0 and out["failed"]
    assert ("%s:" % says) in res.stdout, res.stdout[-2000:]


# --- the reload verifies the change record itself ---------------------------------------------
def test_without_a_verified_record_nothing_is_unloaded(node, people):
    """Started past the play's approval (the task alone), with no record, an unsigned one, or one
    for another node: the daemons are not stopped and the old module stays loaded."""
    (node["tmp"] / "driver.json").write_text(json.dumps(DRIVER_550))
    unsigned = ls.write_record(str(node["tmp"]), "unsigned.yml", ls.record_text(
        change_id="CHG-RELOAD-2", targets=("localhost",)))
    other = ls.write_record(str(node["tmp"]), "other.yml", ls.record_text(
        change_id="CHG-RELOAD-3", targets=("owned-a100-2",)), people["keys"]["sec-owner"])
    for record, says in ((None, "record"), (unsigned, "unsigned: no signature file"),
                         (other, "localhost not in the approved targets")):
        res, out = run_module(node, record_path=record)
        assert res.returncode != 0 and out["failed"] and says in out["msg"], out
        assert "reloaded" not in out
        assert smi_version(node).returncode == 18, "the old module must stay loaded"
    assert not (node["tmp"] / "records" / "approvals" / "CHG-RELOAD-2.json").exists()


def test_a_host_that_is_not_a_run_target_is_refused(node):
    (node["tmp"] / "driver.json").write_text(json.dumps(DRIVER_550))
    res, out = run_module(node, targets=["owned-a100-2"])
    assert res.returncode != 0 and "this node localhost is not one of the run's targets" in out["msg"]
    assert smi_version(node).returncode == 18


def run_reboot(node, check, **args):
    args = dict({"record_path": node["record"], "executor": "ops-oncall"}, **args)
    args = {k: v for k, v in args.items() if v is not None}
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"hybridgpu.fleet.driver_reboot": args, "register": "out", "ignore_errors": True},
                       {"ansible.builtin.copy": {"content": "{{ out | to_json }}", "dest": str(node["tmp"] / "out.json")},
                        "check_mode": False}]}]
    (node["tmp"] / "reboot.yml").write_text(json.dumps(play))
    subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(node["tmp"] / "inventory.yml")]
                   + (["--check"] if check else []) + [str(node["tmp"] / "reboot.yml")],
                   env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")),
                   capture_output=True, text=True, cwd=REPO, check=False)
    return json.loads((node["tmp"] / "out.json").read_text())


def test_the_reboot_runs_only_under_a_verified_record(node):
    """The reboot is ansible.builtin.reboot behind the record check: without a record it is
    refused before the reboot action is reached; with the record the reboot action runs (on this
    local connection it refuses for its own reason: it would reboot the control host)."""
    out = run_reboot(node, check=False, record_path=None)
    assert out["failed"] and not out["rebooted"] and "change is not approved" in out["msg"], out
    out = run_reboot(node, check=True, targets=["owned-a100-2"])
    assert out["failed"] and "this node localhost is not one of the run's targets" in out["msg"], out
    out = run_reboot(node, check=False)
    assert out["failed"] and not out["rebooted"] and "would reboot the control node" in out["msg"], out
