"""The command join method against the lab: owned-l40s-1 (node group ng_l40s_550) joins onprem
through the lab's vendor connector (tests/lab/packages/vendor-node-connector, a managed
service's node agent stand-in). Onboarding records the connector's package, unit, files, the
Node and its uninstall command, the activation token appears nowhere, a second run leaves the
installer alone; a change-managed removal runs the recorded uninstall and leaves no unit,
package, file or Node, and the control host's manifest is gone from manifests/. The node is
RE-ONBOARDED at the end, so the lab is left as it was found."""
import json
import os

import pytest

from conftest import ROOT, ssh
from lifecycle_lab import approvers, kube, lab_lock, playbook, recap, signed_record  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

NODE = "owned-l40s-1"
UNIT = "vendor-node-connector.service"
PACKAGE = "vendor-node-connector"
FILES = ["/etc/vendor-node-connector", "/var/lib/vendor-node-connector"]
RECORDS = os.path.join(ROOT, "records", "manifests")


def ready(name):
    node = kube().get_node(name)
    conds = [c for c in ((node or {}).get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
    return bool(conds) and conds[0]["status"] == "True"


def load_manifest():
    path = os.path.join(RECORDS, NODE + ".json")
    return json.load(open(path)) if os.path.exists(path) else None


def token():
    with open(os.path.join(ROOT, ".lab", "k8s", "onprem", "connector-token")) as fh:
        return fh.read().strip()


def onboard():
    """onboard.yml limited to the node; the wave's preflight record first when there is none."""
    if not os.path.exists(os.path.join(ROOT, "records", "wave1", "preflight.json")):
        pre = playbook("preflight.yml", "-e", "preflight_wave=wave1", timeout=900)
        assert pre.returncode == 0, pre.out[-5000:]
    return playbook("onboard.yml", "--limit", NODE, timeout=1200)


@pytest.fixture(scope="module")
def joined(lab_lock, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("command-join")
    # Always one onboarding from this records folder first: an earlier test may have onboarded the
    # node from another one (the installed-collection wave), leaving its own manifest copy there.
    first = onboard()
    assert first.returncode == 0, first.out[-6000:]
    yield {"tmp": tmp}
    # leave the lab as found: the node joined again with a fresh manifest
    main = os.path.join(RECORDS, NODE + ".json")
    if os.path.exists(main):
        os.replace(main, str(tmp / (NODE + ".manifest-before-removal.json")))
    res = onboard()
    assert res.returncode == 0, "re-onboarding %s failed:\n%s" % (NODE, res.out[-5000:])


def test_onboarded_with_the_vendor_connector(joined):
    assert ready(NODE), "%s must be Ready on onprem" % NODE
    doc = load_manifest()
    join = doc["sections"]["join"]
    facts = join["facts"]
    assert facts["method"] == "command" and facts["uninstall_command"] == ["/usr/bin/vendor-node-disconnect"]
    assert facts["installer_command"][0] == "/usr/bin/vendor-node-connect"
    idents = set((a["kind"], a.get("name") or a.get("path")) for a in join["artefacts"])
    assert {("package", PACKAGE), ("unit", UNIT), ("file", FILES[0]), ("file", FILES[1]), ("api_object", NODE)} <= idents
    # the collection issued no token and approved no CSR for this node: the service did
    assert not [a for a in join["artefacts"] if a.get("resource") in ("secrets", "certificatesigningrequests")]
    out = ssh(NODE, "systemctl is-active %s; dpkg-query -W -f='${db:Status-Abbrev}\\n' %s; "
                    "stat -c %%a /etc/vendor-node-connector/kubelet.conf; systemctl is-active kubelet || true"
              % (UNIT, PACKAGE)).stdout.split()
    assert out[:3] == ["active", "ii", "600"] and out[3] != "active", out  # no kubeadm kubelet here
    # the activation token is in no record and not on the node's command lines
    secret = token()
    assert secret not in json.dumps(doc)
    audit = os.path.join(ROOT, "records", "audit", "audit.jsonl")
    assert not os.path.exists(audit) or secret not in open(audit).read()
    assert secret not in ssh(NODE, "cat /var/lib/hybridgpu/manifest.json; ps -eo args").stdout


def test_second_onboarding_leaves_the_installer_alone(joined):
    again = playbook("onboard.yml", "--limit", NODE, timeout=1200)
    assert again.returncode == 0, again.out[-5000:]
    changed, task = [], None
    for line in again.out.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            changed.append("%s %s" % (task, line))
    assert recap(again.out)[NODE]["changed"] == 0, "\n".join(changed)
    assert "joined already" in again.out and token() not in again.out


def remove(tmp, appr, rec, record):
    ev = {"remove_targets": NODE, "remove_executor": "ops-lead", "change_record_path": record}
    return playbook("remove.yml", extra=ev, tmp_path=tmp, site={"hgpu_boundary_path": appr["boundary"], "hgpu_records_dir": rec})


def test_removal_reverses_the_command_join(joined):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest as mf
    tmp = joined["tmp"]
    appr = approvers(tmp / "appr")
    rec = tmp / "records"
    (rec / "manifests").mkdir(parents=True)
    mf.write(str(rec / "manifests" / (NODE + ".json")), load_manifest())
    # the approver signs the digest of the manifest the removal undoes
    record = signed_record(appr, tmp, "chg.yml", change_id="CHG-RM-CMD", action="remove", targets=[NODE],
                           requester="ops-lead", manifests={NODE: str(rec / "manifests" / (NODE + ".json"))})
    first = remove(tmp, appr, str(rec), record)
    assert first.returncode == 0, first.out[-6000:]

    # the Node is gone, and nothing of the join is left on the node
    assert kube().get_node(NODE) is None
    left = ssh(NODE, "systemctl show -p LoadState -p ActiveState --value %s; dpkg-query -W -f='${db:Status-Abbrev}\\n' %s 2>&1; "
                     "ls -d %s 2>&1" % (UNIT, PACKAGE, " ".join(FILES)), check=False).stdout
    assert "not-found" in left and "\nactive" not in left, left
    assert "ii" not in left and left.count("No such file") == 2, left
    # the control host's manifest left manifests/ (moved next to the finished removal state)
    assert not os.path.exists(str(rec / "manifests" / (NODE + ".json")))
    state = json.load(open(str(rec / "removals" / NODE / "CHG-RM-CMD.json")))
    assert state["finished_at"]
    # the record says which join was reversed and how
    events = [json.loads(x) for x in open(str(rec / "audit" / "audit.jsonl"))]
    revoke = [e["details"] for e in events if e["action"] == "revoke_credential"]
    assert revoke and revoke[0]["join_method"] == "command" and revoke[0]["uninstall"] == "/usr/bin/vendor-node-disconnect"
    finished = [e["details"]["join_method"] for e in events if e["action"] == "remove" and e["result"] == "ok"]
    assert finished and set(finished) == {"command"}
    # the node still works standalone
    assert ssh(NODE, "systemctl is-active chrony ssh").returncode == 0

    # a second run changes nothing
    second = remove(tmp, appr, str(rec), record)
    assert second.returncode == 0, second.out[-4000:]
    assert recap(second.out)[NODE]["changed"] == 0, second.out[-3000:]
