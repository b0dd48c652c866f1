"""The Kubernetes side of playbooks/revoke_member.yml against the API emulator on 127.0.0.1: the
objects revoked are the ones the verified boundary lists for the member, never ones a task or
the launcher names. Each attack runs through the playbook or the module in a play
(ansible-playbook on localhost, real signatures) and asserts that the other object still exists."""
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import revoke_support as rs  # noqa: E402
import lifecycle_support as ls  # noqa: E402


from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402

NS = "default"
MEMBER_SA = "hgpu-member"
MEMBER_CRB = "hgpu-member-view"
ADMIN_CRB = "hgpu-admin-binding"
KUBE_TASK = "Revoke the member's Kubernetes objects in each context"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """An in-process API emulator on 127.0.0.1 and a kubeconfig whose context onprem reaches it."""
    work = str(tmp_path_factory.mktemp("emu"))
    srv, conn = ls.emulator(work, "revoke")
    kubeconfig = os.path.join(work, "kubeconfig")
    with open(kubeconfig, "w") as fh:
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "onprem",
                        "clusters": [{"name": "onprem", "cluster": {"server": srv.url, "certificate-authority": conn["ca_cert"]}}],
                        "users": [{"name": "admin", "user": {"token": conn["api_key"]}}],
                        "contexts": [{"name": "onprem", "context": {"cluster": "onprem", "user": "admin"}}]}, fh)
    kube = Kube(dict(conn, request_timeout=5), retries=0, sleep=lambda s: None)
    yield {"kube": kube, "kubeconfig": kubeconfig}
    srv.stop()


def binding(kube, name, subject):
    kube.call("create crb", kube.rbac.create_cluster_role_binding, {
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": NS}]})


@pytest.fixture
def objects(api):
    """The member's ServiceAccount and binding, and an administrator's binding the boundary never lists."""
    kube = api["kube"]
    kube.call("create sa", kube.core.create_namespaced_service_account, NS, {"metadata": {"name": MEMBER_SA}})
    binding(kube, MEMBER_CRB, MEMBER_SA)
    binding(kube, ADMIN_CRB, "admin")
    yield kube
    kube.call_or_none("delete sa", kube.core.delete_namespaced_service_account, MEMBER_SA, NS)
    for name in (MEMBER_CRB, ADMIN_CRB):
        kube.call_or_none("delete crb", kube.rbac.delete_cluster_role_binding, name)


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")), members={"test-member": {"kubernetes": [
        {"context": "onprem", "kind": "ServiceAccount", "namespace": NS, "name": MEMBER_SA},
        {"context": "onprem", "kind": "ClusterRoleBinding", "name": MEMBER_CRB}]}})


def left(kube):
    return {"sa": kube.call_or_none("get sa", kube.core.read_namespaced_service_account, MEMBER_SA, NS) is not None,
            "member": kube.call_or_none("get crb", kube.rbac.read_cluster_role_binding, MEMBER_CRB) is not None,
            "admin": kube.call_or_none("get crb", kube.rbac.read_cluster_role_binding, ADMIN_CRB) is not None}


def revoke_vars(api, rec=None, **extra):
    ev = {"revoke_member": "test-member", "revoke_executor": "ops-lead", "revoke_hosts": "localhost",
          "revoke_ssh_users": ["hgpu-no-such-account"], "revoke_kubeconfig": api["kubeconfig"]}
    if rec:
        ev["change_record_path"] = rec
    ev.update(extra)
    return ev


def test_the_objects_revoked_are_the_boundary_s_for_the_member(api, objects, people, tmp_path):
    rec = rs.record(tmp_path, people)
    out, doc = rs.playbook(tmp_path, people, extra=revoke_vars(api, rec))
    assert out.returncode == 0, out.stdout[-3000:]
    assert left(objects) == {"sa": False, "member": False, "admin": True}
    entries = [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]
    assert [(e["change_id"], e["target"], e["details"]["kind"]) for e in entries] == [
        ("CHG-RV-1", "test-member@onprem", "kubernetes")]
    assert sorted(entries[0]["details"]["revoked"]) == ["ClusterRoleBinding %s" % MEMBER_CRB, "ServiceAccount %s/%s" % (NS, MEMBER_SA)]
    assert entries[0]["details"]["manual_steps"]["bmc"]
    # the same run again changes nothing and writes nothing
    out, doc = rs.playbook(tmp_path, people, extra=revoke_vars(api, rec))
    assert out.returncode == 0, out.stdout[-3000:]
    assert doc["stats"]["localhost"]["changed"] == 0
    assert len([e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]) == 1


def test_objects_named_by_the_launcher_are_not_revoked(api, objects, people, tmp_path):
    admin = [{"context": "onprem", "kind": "ClusterRoleBinding", "name": ADMIN_CRB}]
    out, doc = rs.playbook(tmp_path, people, extra=revoke_vars(api, rs.record(tmp_path, people), revoke_objects=admin))
    assert left(objects) == {"sa": True, "member": True, "admin": True}
    assert out.returncode != 0 and "given as an extra var" in out.stdout
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]


def test_items_given_to_the_module_are_refused(api, objects, people, tmp_path):
    book = tmp_path / "k8s.yml"
    book.write_text(yaml.safe_dump([{"name": "direct", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Direct", "hybridgpu.fleet.k8s_member_access": {
            "member": "test-member", "context": "onprem", "kubeconfig": api["kubeconfig"], "executor": "ops-lead",
            "record_path": rs.record(tmp_path, people),
            "items": [{"context": "onprem", "kind": "ClusterRoleBinding", "name": ADMIN_CRB}]}}]}]))
    out, doc = rs.playbook(tmp_path, people, book=book)
    assert left(objects) == {"sa": True, "member": True, "admin": True}
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert out.returncode != 0 and "items may not be set by a task" in res["msg"]


def test_without_a_verified_record_nothing_is_revoked(api, objects, people, tmp_path):
    # started past the approval, with no record: the task verifies and refuses on its own
    out, doc = rs.playbook(tmp_path, people, extra=revoke_vars(api), options=["--start-at-task", KUBE_TASK])
    assert left(objects) == {"sa": True, "member": True, "admin": True}
    assert out.returncode != 0
    book = tmp_path / "k8s.yml"
    book.write_text(yaml.safe_dump([{"name": "direct", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Direct", "hybridgpu.fleet.k8s_member_access": {
            "member": "test-member", "context": "onprem", "kubeconfig": api["kubeconfig"], "executor": "ops-lead"}}]}]))
    out, doc = rs.playbook(tmp_path, people, book=book)
    assert left(objects) == {"sa": True, "member": True, "admin": True}
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert out.returncode != 0 and "Nothing was changed" in res["msg"]
    assert rs.audit_entries(tmp_path) == []
