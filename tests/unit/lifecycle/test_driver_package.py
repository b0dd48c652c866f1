"""The driver package change verifies the signed change record itself.

The module's apt steps run against a fake command runner; the record check runs through
ansible-playbook on localhost (real ssh-keygen signatures, the action plugin, the ledger), so
a task that reaches the package change without the play's approval task (what
--start-at-task or --skip-tags would do) is refused before anything runs on the node."""
import json
import os
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import ledger  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.cmd import Result  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import driver_package as dp  # noqa: E402

REPO = ls.REPO


class FakeNode(object):
    """dpkg-query, apt-mark and apt-get on a node with the given packages and holds."""

    def __init__(self, installed, held):
        self.installed, self.held, self.calls = dict(installed), list(held), []

    def __call__(self, argv, ok=(0,)):
        self.calls.append(list(argv))
        if argv[0] == "dpkg-query":
            return Result(0, "".join("%s %s %s \n" % (p, v, "hi" if p in self.held else "ii")
                                     for p, v in self.installed.items()), "")
        if argv[:2] == ["apt-mark", "showhold"]:
            return Result(0, "".join(p + "\n" for p in self.held), "")
        if argv[:2] == ["apt-mark", "unhold"]:
            self.held = [p for p in self.held if p not in argv[2:]]
        elif argv[:2] == ["apt-mark", "hold"]:
            self.held += argv[2:]
        elif "install" in argv:
            for item in argv[argv.index("install") + 1:]:
                name, version = item.split("=")
                kind = name.rsplit("-", 1)[0]  # nvidia-driver / nvidia-fabricmanager
                # the conflicting old branch of the same kind goes in the same transaction
                self.installed = {p: v for p, v in self.installed.items() if p.rsplit("-", 1)[0] != kind}
                self.installed[name] = version
        return Result(0, "", "")


def test_replaces_the_held_driver_in_one_transaction_and_holds_the_new_one():
    node = FakeNode({"nvidia-driver-535": "535.230.02-1"}, ["nvidia-driver-535"])
    todo = dp.plan(dp.read_state(node, "nvidia-driver-*"), "nvidia-driver-550", "550.163.01-1", True)
    assert todo == {"install": True, "companion": None, "unhold": ["nvidia-driver-535"], "hold": True}
    dp.apply(node, todo, "nvidia-driver-550", "550.163.01-1")
    installs = [c for c in node.calls if "install" in c]
    assert len(installs) == 1 and installs[0][-1] == "nvidia-driver-550=550.163.01-1"
    assert node.calls.index(["apt-mark", "unhold", "nvidia-driver-535"]) < node.calls.index(installs[0])
    state = dp.read_state(node, "nvidia-driver-*")
    assert state == {"installed": {"nvidia-driver-550": "550.163.01-1"}, "held": ["nvidia-driver-550"]}
    assert dp.plan(state, "nvidia-driver-550", "550.163.01-1", True) == {
        "install": False, "companion": None, "unhold": [], "hold": False}


def test_the_fabric_manager_moves_with_the_driver_in_the_same_transaction():
    node = FakeNode({"nvidia-driver-535": "535.230.02-1", "nvidia-fabricmanager-535": "535.230.02-1"},
                    ["nvidia-driver-535", "nvidia-fabricmanager-535"])
    prefix = "nvidia-fabricmanager-"
    state = dp.read_state(node, "nvidia-driver-*", prefix)
    todo = dp.plan(state, "nvidia-driver-550", "550.163.01-1", True, dp.companion(state, prefix, "550", "550.163.01-1"))
    assert todo["companion"] == "nvidia-fabricmanager-550"
    assert todo["unhold"] == ["nvidia-driver-535", "nvidia-fabricmanager-535"]
    dp.apply(node, todo, "nvidia-driver-550", "550.163.01-1")
    installs = [c for c in node.calls if "install" in c]
    assert len(installs) == 1
    assert installs[0][-2:] == ["nvidia-driver-550=550.163.01-1", "nvidia-fabricmanager-550=550.163.01-1"]
    after = dp.read_state(node, "nvidia-driver-*", prefix)
    assert after["installed"] == {"nvidia-driver-550": "550.163.01-1", "nvidia-fabricmanager-550": "550.163.01-1"}
    # done: a rerun plans nothing
    assert dp.companion(after, prefix, "550", "550.163.01-1") is None
    assert dp.plan(after, "nvidia-driver-550", "550.163.01-1", True, None)["install"] is False
    # a node without a fabric manager gets none
    bare = dp.read_state(FakeNode({"nvidia-driver-535": "535.230.02-1"}, []), "nvidia-driver-*", prefix)
    assert dp.companion(bare, prefix, "550", "") is None


def test_a_fabric_manager_left_on_the_old_branch_is_moved_on_a_rerun():
    node = FakeNode({"nvidia-driver-550": "550.163.01-1", "nvidia-fabricmanager-535": "535.230.02-1"}, [])
    state = dp.read_state(node, "nvidia-driver-*", "nvidia-fabricmanager-")
    todo = dp.plan(state, "nvidia-driver-550", "550.163.01-1", True,
                   dp.companion(state, "nvidia-fabricmanager-", "550", "550.163.01-1"))
    assert todo["install"] is True and todo["companion"] == "nvidia-fabricmanager-550"


@pytest.mark.parametrize("args, field", [
    (("nvidia-driver-550; rm -rf /", "", "nvidia-driver-*"), "package:"),
    (("nvidia-driver-550", "1 --allow-unauthenticated", "nvidia-driver-*"), "version:"),
    (("nvidia-driver-550", "", "../x"), "package_pattern:"),
    (("nvidia-driver-550", "", "nvidia-driver-*", "fm; reboot", "550"), "companion_prefix:"),
    (("nvidia-driver-550", "", "nvidia-driver-*", "nvidia-fabricmanager-", "550 && x"), "branch:"),
])
def test_names_that_are_not_package_names_are_refused(args, field):
    with pytest.raises(dp.DriverError, match=field):
        dp.check_inputs(*args)


# --- the record check, through ansible-playbook --------------------------------------------
@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


def record(people, tmp_path, name="chg.yml", **kw):
    args = dict(change_id="CHG-DRV-1", action="driver_upgrade", targets=("localhost",), requester="ops-oncall")
    args.update(kw)
    return ls.write_record(str(tmp_path), name, ls.record_text(**args), people["keys"]["sec-owner"])


def play(people, tmp_path, task_args, extra_vars=None, tags=None):
    """Run one driver_package task on localhost; the pinned signers and the records folder
    come from the inventory, as a site's group_vars give them. Returns the task result."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": people["boundary"]}}}))
    args = dict({"package": "bash", "package_pattern": "bash", "hold": False,
                 "executor": "ops-oncall", "targets": ["localhost"]}, **task_args)
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Approval", "ansible.builtin.debug": {"msg": "the play's approval task"}, "tags": ["approval"]},
        {"name": "Driver", "hybridgpu.fleet.driver_package": args}]}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(book),
           "--start-at-task", "Driver"]
    for key, value in (extra_vars or {}).items():
        cmd += ["-e", json.dumps({key: value})]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    tasks = json.loads(out.stdout)["plays"][0]["tasks"]
    assert [t["task"]["name"] for t in tasks] == ["Driver"], "the approval task was skipped"
    return tasks[0]["hosts"]["localhost"]


def test_without_a_verified_record_the_package_change_never_runs(people, tmp_path):
    unsigned = ls.write_record(str(tmp_path), "unsigned.yml", ls.record_text(
        change_id="CHG-DRV-0", targets=("localhost",)))
    res = play(people, tmp_path, {"record_path": unsigned})
    assert res["failed"] and "unsigned: no signature file" in res["msg"] and "before" not in res
    forged = play(people, tmp_path, {"record_path": unsigned,
                                     "approval": {"approved": True, "action": "driver_upgrade", "change_id": "X"}})
    assert forged["failed"] and "approval may not be set by a task" in forged["msg"]
    other = record(people, tmp_path, name="other.yml", change_id="CHG-DRV-9", targets=("owned-a100-2",))
    res = play(people, tmp_path, {"record_path": other})
    assert res["failed"] and "localhost not in the approved targets" in res["msg"]
    # the trust root cannot come from the launcher
    res = play(people, tmp_path, {"record_path": other}, extra_vars={"hgpu_boundary_signers": people["signers"]})
    assert res["failed"] and "hgpu_boundary_signers given as an extra var" in res["msg"]


def test_a_change_id_changes_a_node_once(people, tmp_path):
    path = record(people, tmp_path, targets=("localhost", "owned-a100-2"))
    both = ["localhost", "owned-a100-2"]
    first = play(people, tmp_path, {"record_path": path, "targets": both})
    assert not first.get("failed"), first.get("msg")
    assert first["approval"]["change_id"] == "CHG-DRV-1" and first["plan"]["install"] is False
    entry = tmp_path / "records" / "approvals" / "CHG-DRV-1.json"
    assert json.loads(entry.read_text())["executor"] == "ops-oncall"
    # the same interrupted run resumes
    assert not play(people, tmp_path, {"record_path": path, "targets": both}).get("failed")
    # another run under the same id does not
    res = play(people, tmp_path, {"record_path": path, "targets": ["localhost"]})
    assert res["failed"] and "CHG-DRV-1 was already used" in res["msg"] and "differs in targets" in res["msg"]
    # once the change was carried out on the node, the id cannot change its driver again
    ledger.mark_done(str(tmp_path / "records" / "approvals"), "CHG-DRV-1", "localhost", {"package": "bash"})
    res = play(people, tmp_path, {"record_path": path, "targets": both, "version": "0.0-other"})
    assert res["failed"] and "CHG-DRV-1 already replaced the driver on this node" in res["msg"]


def test_the_role_changes_packages_only_through_the_verifying_module():
    with open(os.path.join(REPO, "roles", "driver_upgrade", "tasks", "main.yml")) as fh:
        tasks = yaml.safe_load(fh)
    modules = {k for t in tasks for k in t if "." in k}
    assert not modules & {"ansible.builtin.apt", "ansible.builtin.dpkg_selections", "ansible.builtin.package"}
    change = [t for t in tasks if "hybridgpu.fleet.driver_package" in t]
    # the boundary is the pinned one the action plugin finds, never a task argument
    assert len(change) == 1 and "record_path" in change[0]["hybridgpu.fleet.driver_package"]
    assert "boundary" not in change[0]["hybridgpu.fleet.driver_package"]
    with open(os.path.join(REPO, "playbooks", "upgrade_rehearsal.yml")) as fh:
        text = fh.read()
    assert "driver_upgrade_record_path: \"{{ change_record_path" in text
