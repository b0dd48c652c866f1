"""The Kubernetes module base: one connection spec, one action group, one error format.

Modules run as processes (as Ansible runs them) against a scripted HTTP server on loopback.
"""
import glob
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8S_AUTH_ARG_SPEC, describe

from hgpu_testenv import REPO, play_tasks

RUNTIME = yaml.safe_load(open(os.path.join(REPO, "meta", "runtime.yml")))


def _modules_on_the_base():
    found = []
    for path in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")):
        if re.search(r"\bK8sModule\(", open(path).read()):
            found.append(os.path.basename(path)[:-3])
    return sorted(found)


def test_spec_names_the_shared_options():
    assert tuple(K8S_AUTH_ARG_SPEC) == k8s.AUTH_KEYS


def test_action_group_is_every_module_on_the_base():
    assert _modules_on_the_base() == sorted(RUNTIME["action_groups"]["k8s"])


# On the base for the shared connection options, but not only Kubernetes: also reads a sacct export.
NOT_ONLY_KUBERNETES = {"overflow_history"}


def test_modules_that_only_talk_to_kubernetes_carry_the_prefix():
    for name in _modules_on_the_base():
        assert name.startswith("k8s_") or name in NOT_ONLY_KUBERNETES, name


def test_old_names_redirect_to_existing_modules():
    """A redirect names a module that exists; a removed module is a tombstone and exists no more."""
    for old, route in RUNTIME["plugin_routing"]["modules"].items():
        if "tombstone" in route:
            assert not os.path.exists(os.path.join(REPO, "plugins", "modules", old + ".py")), old
            assert route["tombstone"]["removal_version"] and route["tombstone"]["warning_text"], old
            assert old not in RUNTIME["action_groups"]["k8s"], old
            continue
        new = route["redirect"].split(".")[-1]
        assert os.path.exists(os.path.join(REPO, "plugins", "modules", new + ".py")), old
        assert route["deprecation"]["removal_version"], old


def test_describe_names_kind_namespace_and_name():
    assert describe("Secret", "node-a-token", "kube-system") == "Secret kube-system/node-a-token"
    assert describe("Node", "a") == "Node a"
    assert describe("Pods and Jobs", namespace="ml") == "Pods and Jobs in namespace ml"
    assert describe("Nodes") == "Nodes"


class Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.replies = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        status, payload = self.server.replies.pop(0) if self.server.replies else (500, {})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    srv = Scripted()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def run(name, args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def test_api_error_names_action_object_context_and_status(server):
    server.replies = [(403, {"kind": "Status", "status": "Failure", "reason": "Forbidden",
                             "message": "nodes \"a\" is forbidden", "code": 403})]
    out = run("k8s_node_wait", {"name": "a", "host": "http://127.0.0.1:%d" % server.server_address[1],
                                "api_key": "s3cr3t-token", "context": "onprem"})
    assert out["failed"] is True
    assert out["msg"].startswith("Cannot read Node a (context onprem): get node a failed: HTTP 403 ")
    assert 'nodes "a" is forbidden' in out["msg"]
    assert out["http_status"] == 403


def test_missing_kubeconfig_is_named(tmp_path):
    missing = str(tmp_path / "nope.kubeconfig")
    out = run("k8s_node_info", {"kubeconfig": missing})
    assert out["failed"] is True
    assert out["msg"].startswith("Cannot list Nodes (current context): load kubeconfig failed")
    assert missing in out["msg"]
    assert out["http_status"] is None


def test_each_kubernetes_module_runs_in_the_playbook_process():
    """Every k8s_ module has the action plugin that runs its run() in the playbook's process
    (plugin_utils/controller.py), so the client library is imported once per playbook run."""
    for name in [m for m in _modules_on_the_base() if m.startswith("k8s_")]:
        text = open(os.path.join(REPO, "plugins", "action", name + ".py")).read()
        assert "K8sAction" in text and "module = %s" % name in text, name


def test_in_process_module_fails_and_answers_as_the_module_process_does(server, tmp_path):
    host = "http://127.0.0.1:%d" % server.server_address[1]
    node = {"metadata": {"name": "a", "labels": {}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": {"nvidia.com/gpu": "8"},
                       "allocatable": {"nvidia.com/gpu": "8"}, "nodeInfo": {"kubeletVersion": "v1.30.4"}}}
    forbidden = (403, {"kind": "Status", "status": "Failure", "reason": "Forbidden",
                       "message": "nodes \"a\" is forbidden", "code": 403})
    answers = [forbidden, (200, {"kind": "NodeList", "items": [node]}), (200, {"gitVersion": "v1.30.4"})]
    server.replies = list(answers)
    tasks = [{"name": "wait", "hybridgpu.fleet.k8s_node_wait": {"name": "a", "host": host, "api_key": "s3cr3t-token",
                                                                "context": "onprem"}, "ignore_errors": True},
             {"name": "info", "hybridgpu.fleet.k8s_node_info": {"name": "a", "host": host, "api_key": "s3cr3t-token"}},
             {"name": "bad", "hybridgpu.fleet.k8s_node_removal": {"state": "secret_revoked", "name": "a", "host": host},
              "ignore_errors": True}]
    got = play_tasks(tmp_path, tasks)
    server.replies = list(answers)
    for task in tasks[:2]:
        name = next(k for k in task if k.startswith("hybridgpu."))
        module = run(name.split(".")[-1], task[name])
        assert {k: v for k, v in got[task["name"]].items() if k in module} == \
            {k: v for k, v in module.items() if k != "invocation"}, task["name"]
    assert got["wait"]["msg"].startswith("Cannot read Node a (context onprem): get node a failed: HTTP 403 ")
    assert got["wait"]["http_status"] == 403 and "s3cr3t-token" not in json.dumps(got)
    assert got["info"]["nodes"][0]["gpu_capacity"] == 8 and got["info"]["server_version"] == "v1.30.4"
    assert got["bad"]["failed"] and "token_file" in got["bad"]["msg"]
