"""The node grace period read from a cluster's kube-controller-manager mirror pod, and the
link-cut window sized from it: Go durations, the version default, several controller
managers, a managed control plane (no pod), and the module through ansible against the
in-process emulator on loopback."""
import json
import os
import subprocess
import sys

import pytest

from hgpu_testenv import ROOT

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "overflow"))
from k8s_world import K8sWorld  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import grace  # noqa: E402


@pytest.mark.parametrize("text,seconds", [("40s", 40.0), ("1m0s", 60.0), ("1m30.5s", 90.5), ("2h", 7200.0),
                                          ("500ms", 0.5), ("0", 0.0)])
def test_go_durations(text, seconds):
    assert grace.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "40", "s", "40 s", "1m-3s", "forty"])
def test_not_durations(text):
    with pytest.raises(ValueError):
        grace.parse_duration(text)


def kcm(name, *words, args=None):
    return {"metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"containers": [{"name": "kube-controller-manager", "command": ["kube-controller-manager"] + list(words),
                                     "args": list(args or [])}]}}


def test_flag_in_command_or_args():
    assert grace.grace_period([kcm("kcm-a", "--node-monitor-grace-period=55s")], "v1.30.4")[0] == 55.0
    assert grace.grace_period([kcm("kcm-a", args=["--node-monitor-grace-period", "1m10s"])], "v1.30.4")[0] == 70.0


def test_default_follows_the_version():
    assert grace.grace_period([kcm("kcm-a", "--v=2")], "v1.31.9") == (40.0, "kcm-a: flag not set, the default for v1.31.9")
    assert grace.grace_period([kcm("kcm-a")], "v1.32.0")[0] == 50.0


def test_several_controller_managers_give_the_longest():
    pods = [kcm("kcm-a", "--node-monitor-grace-period=40s"), kcm("kcm-b", "--node-monitor-grace-period=90s")]
    assert grace.grace_period(pods, "v1.30.4") == (90.0, "kcm-b: --node-monitor-grace-period=90s")


def test_managed_control_plane_shows_nothing():
    seconds, why = grace.grace_period([], "v1.30.4")
    assert seconds is None and "managed control plane" in why


def test_bad_flag_names_the_pod():
    with pytest.raises(ValueError, match="kube-system/kcm-a"):
        grace.grace_period([kcm("kcm-a", "--node-monitor-grace-period=soon")], "v1.30.4")


def test_window_outlasts_the_grace_period():
    assert grace.link_window(60, 40.0, 20) == 60
    assert grace.link_window(60, 50.0, 20) == 70
    assert grace.link_window(30, 20.0, 10) == 30
    assert grace.link_window(30, 25.5, 10) == 36
    assert grace.link_window(45, None, 20) == 45


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


def run_module(args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "hybridgpu.fleet.k8s_node_grace_period", "-a", json.dumps(args)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_against_the_api(world):
    kube = world.kube("onprem")
    base = {"kubeconfig": world.kubeconfig, "context": "onprem", "window": 60, "margin": 20}
    res = run_module(base)
    assert not res.get("failed"), res.get("msg")
    assert res["grace_period_s"] is None and res["window"] == 60 and res["changed"] is False
    pod = kcm("kube-controller-manager-cp1", "--node-monitor-grace-period=2m")
    pod["metadata"]["labels"] = {"component": "kube-controller-manager", "tier": "control-plane"}
    pod["spec"]["nodeSelector"] = {"nothing": "matches"}
    pod["spec"]["containers"][0]["image"] = "registry.k8s.io/kube-controller-manager:v1.30.4"
    kube.call("create pod", kube.core.create_namespaced_pod, "kube-system", pod)
    res = run_module(base)
    assert res["grace_period_s"] == 120.0 and res["window"] == 140
    assert res["source"] == "kube-controller-manager-cp1: --node-monitor-grace-period=2m"
    bad = run_module(dict(base, api_key="wrong-token"))
    assert bad.get("failed") and "kube-controller-manager pods" in bad["msg"] and bad["http_status"] == 401
