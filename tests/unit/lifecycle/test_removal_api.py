"""The removal steps that talk to the API (delete_node, revoke_secret, token_refused,
strip_placement) against an in-process API emulator on 127.0.0.1: real HTTP, the official
client, node-credential Secrets whose tokens authenticate until the Secret is deleted."""
import base64
import json
import os
import secrets
import socket
import stat
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB = os.path.join(REPO, "tests", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal_api  # noqa: E402

NODE_NAME_ANNOTATION = "hybridgpu.io/node-name"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from k8s_emulator import serve
    work = str(tmp_path_factory.mktemp("emu"))
    ca, dummy = labpki.make_ca(work)
    crt, key = labpki.make_server_cert(work, work, ["127.0.0.1", "localhost"])
    admin = secrets.token_hex(16)
    tokens = os.path.join(work, "tokens.csv")
    with open(tokens, "w") as fh:
        fh.write('%s,admin,admin-uid,"system:masters"\n' % admin)
    srv = serve(cluster="removal", binds=["127.0.0.1"], port=0, cert=crt, key=key, token_file=tokens,
                node_grace=3600.0)

    def kube(token=admin, host=None):
        return Kube({"host": host or srv.url, "api_key": token, "ca_cert": ca, "request_timeout": 5}, retries=0,
                    sleep=lambda s: None)
    yield {"kube": kube, "url": srv.url}
    srv.stop()


def make_node(kube, cordoned=True, labels=None, taints=None):
    name = "rm-%s" % secrets.token_hex(3)
    kube.call("create node", kube.core.create_node, {
        "metadata": {"name": name, "labels": dict(labels or {}, **{"kubernetes.io/hostname": name})},
        "spec": {"unschedulable": cordoned, "taints": taints or []}})
    return name


def make_node_secret(kube, node):
    name = "node-%s-token" % node
    # a node-credential Secret (the lab's token stand-in for cloud nodes; old manifests list it)
    kube.create_secret("kube-system", {"metadata": {"name": name, "annotations": {
        "kubernetes.io/service-account.name": "node-%s" % node, NODE_NAME_ANNOTATION: node}}, "type": SA_TOKEN_TYPE})
    token = base64.b64decode(kube.get_secret("kube-system", name)["data"]["token"]).decode()
    return name, token


# -- delete_node -------------------------------------------------------------------------------
def test_delete_node_refuses_a_node_that_is_not_cordoned(api):
    kube = api["kube"]()
    name = make_node(kube, cordoned=False)
    with pytest.raises(removal_api.RemovalError, match="Node %s is not cordoned" % name):
        removal_api.delete_node(kube, name)
    assert kube.get_node(name) is not None


def test_delete_node_check_mode_then_real_then_again(api):
    kube = api["kube"]()
    name = make_node(kube)
    assert removal_api.delete_node(kube, name, check_mode=True) is True
    assert kube.get_node(name) is not None
    assert removal_api.delete_node(kube, name) is True
    assert kube.get_node(name) is None
    assert removal_api.delete_node(kube, name) is False


# -- revoke_secret and token_refused ---------------------------------------------------------------
def test_revoke_secret_keeps_the_token_then_deletes_the_secret(api, tmp_path):
    kube = api["kube"]()
    node = make_node(kube)
    secret, token = make_node_secret(kube, node)
    token_file = str(tmp_path / "revoked.json")
    assert removal_api.revoke_secret(kube, "kube-system", secret, token_file, check_mode=True) is True
    assert not os.path.exists(token_file)
    assert kube.get_secret("kube-system", secret) is not None

    assert removal_api.revoke_secret(kube, "kube-system", secret, token_file) is True
    assert kube.get_secret("kube-system", secret) is None
    with open(token_file) as fh:
        assert json.load(fh) == {"namespace": "kube-system", "name": secret, "token": token}
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    assert removal_api.revoke_secret(kube, "kube-system", secret, token_file) is False


def test_token_refused_only_when_the_api_answers_401(api, tmp_path):
    kube = api["kube"]()
    node = make_node(kube)
    secret, token = make_node_secret(kube, node)
    token_file = str(tmp_path / "revoked.json")
    with open(token_file, "w") as fh:
        json.dump({"namespace": "kube-system", "name": secret, "token": token}, fh)
    factory = api["kube"]

    # the Secret still exists: its token authenticates, so it is not refused
    assert api["kube"](token).get_node(node)["metadata"]["name"] == node
    assert removal_api.token_refused(factory, token_file, node) == (False, "API accepted the revoked token")

    removal_api.revoke_secret(kube, "kube-system", secret, str(tmp_path / "kept.json"))
    assert removal_api.token_refused(factory, token_file, node) == (True, "401 Unauthorized")


def test_token_refused_is_false_without_a_token_or_an_api(api, tmp_path):
    refused, detail = removal_api.token_refused(api["kube"], str(tmp_path / "absent.json"), "n1")
    assert refused is False and "no revoked token to try" in detail

    token_file = str(tmp_path / "revoked.json")
    with open(token_file, "w") as fh:
        json.dump({"token": "whatever"}, fh)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = "https://127.0.0.1:%d" % sock.getsockname()[1]
    refused, detail = removal_api.token_refused(lambda token: api["kube"](token, host=closed), token_file, "n1")
    assert refused is False and detail.startswith("API not reachable")


# -- strip_placement ---------------------------------------------------------------------------
LABELS = {"hybridgpu.io/side": "owned", "hybridgpu.io/pool": "a100", "site.example/rack": "r7"}
TAINTS = [{"key": "hybridgpu.io/owned", "effect": "PreferNoSchedule"},
          {"key": "site.example/maintenance", "effect": "NoSchedule"}]


def test_strip_placement_removes_only_the_managed_labels_and_taints(api):
    kube = api["kube"]()
    name = make_node(kube, labels=LABELS, taints=TAINTS)
    managed_labels = ["hybridgpu.io/side", "hybridgpu.io/pool"]
    managed_taints = [{"key": "hybridgpu.io/owned", "effect": "PreferNoSchedule"}]

    assert removal_api.strip_placement(kube, name, managed_labels, managed_taints, check_mode=True) is True
    node = kube.get_node(name)
    assert node["metadata"]["labels"]["hybridgpu.io/side"] == "owned" and len(node["spec"]["taints"]) == 2

    assert removal_api.strip_placement(kube, name, managed_labels, managed_taints) is True
    node = kube.get_node(name)
    assert node["metadata"]["labels"] == {"site.example/rack": "r7", "kubernetes.io/hostname": name}
    assert node["spec"]["taints"] == [{"key": "site.example/maintenance", "effect": "NoSchedule"}]
    assert removal_api.strip_placement(kube, name, managed_labels, managed_taints) is False


def test_strip_placement_removes_the_last_taint_and_skips_a_deleted_node(api):
    kube = api["kube"]()
    name = make_node(kube, labels={"hybridgpu.io/side": "owned"}, taints=TAINTS[:1])
    assert removal_api.strip_placement(kube, name, [], TAINTS[:1]) is True
    assert not (kube.get_node(name)["spec"].get("taints") or [])
    assert kube.get_node(name)["metadata"]["labels"]["hybridgpu.io/side"] == "owned"
    assert removal_api.strip_placement(kube, "rm-absent", ["hybridgpu.io/side"], TAINTS) is False
