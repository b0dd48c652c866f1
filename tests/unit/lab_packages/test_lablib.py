"""The lab CLI's own logic, without starting anything."""
import json
import os
import sys

import yaml

LAB = os.path.join(os.path.dirname(__file__), "..", "..", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from lablib import config, host, image, inventory, k8s, nodes, packages  # noqa: E402
from lablib.util import hash_files  # noqa: E402


def test_inventory_groups_hosts_and_absolute_paths(monkeypatch):
    monkeypatch.setattr(config, "light_count", lambda: 0)
    inv = yaml.safe_load(inventory.render())["all"]
    assert inv["vars"]["hgpu_lab_kubeconfig"].startswith("/")
    owned = inv["children"]["owned"]["children"]
    cloud = inv["children"]["cloud"]["children"]
    assert sorted(owned["ng_a100_535"]["hosts"]) == ["owned-a100-1", "owned-a100-2"]
    assert sorted(owned["ng_l40s_550"]["hosts"]) == ["owned-l40s-1"]
    assert sorted(cloud["ng_cloud_h200"]["hosts"]) == ["cloud-h200-1", "cloud-h200-2"]
    assert sorted(inv["children"]["wave1"]["hosts"]) == ["owned-a100-1", "owned-a100-2", "owned-l40s-1"]
    h = cloud["ng_cloud_h200"]["hosts"]["cloud-h200-2"]
    assert h == {"ansible_host": "10.213.77.22", "ansible_user": "root",
                 "ansible_ssh_private_key_file": config.path("ssh", "id_ed25519"),
                 "node_group": "ng_cloud_h200", "matrix_row": "cloud-h200", "hgpu_role": "cloud"}


def test_light_nodes_join_the_a100_group_and_a_wave_of_every_owned_node(monkeypatch):
    monkeypatch.setattr(config, "light_count", lambda: 0)
    plain = yaml.safe_load(inventory.render())["all"]
    assert "wave_scale" not in plain["children"] and "hgpu_site_dir" not in plain["vars"]
    monkeypatch.setattr(config, "light_count", lambda: 2)
    inv = yaml.safe_load(inventory.render())["all"]["children"]
    a100 = inv["owned"]["children"]["ng_a100_535"]["hosts"]
    assert sorted(a100) == ["owned-a100-1", "owned-a100-2", "owned-light-01", "owned-light-02"]
    assert a100["owned-light-02"]["ansible_host"] == "10.213.77.66"
    assert sorted(inv["wave_scale"]["hosts"]) == sorted(
        ["owned-a100-1", "owned-a100-2", "owned-l40s-1", "owned-light-01", "owned-light-02"])
    assert sorted(inv["wave1"]["hosts"]) == ["owned-a100-1", "owned-a100-2", "owned-l40s-1"]
    assert nodes.is_light("owned-light-02") and not nodes.is_light("owned-l40s-1")
    assert yaml.safe_load(inventory.render())["all"]["vars"]["hgpu_site_dir"] == inventory.light_site_dir()
    light = config.light_nodes(1)[0]
    assert "nccl-tests" not in packages.wanted(light) and "nccl-tests" in packages.wanted(config.NODES[0])


def test_the_light_site_lists_the_light_nodes_in_its_path_table(monkeypatch, tmp_path):
    monkeypatch.setattr(inventory, "light_site_dir", lambda: str(tmp_path / "site"))
    assert inventory.write_light_site(config.light_nodes(2))
    table = yaml.safe_load((tmp_path / "site" / "preflight" / "paths.yml").read_text())
    assert table["hosts"]["owned-light-01"] == "10.213.77.65"
    assert table["groups"]["owned"][-2:] == ["owned-light-01", "owned-light-02"]
    paths = {p["id"]: p for p in table["paths"]}
    # a path from the owned nodes keeps its narrowest source for the declared ones and gets a twin
    assert paths["owned-agent-to-api"]["source"] == {"group": "owned_heavy"}
    assert paths["owned-agent-to-api"]["narrowest_source"] == "10.213.77.8/29"
    assert paths["owned-agent-to-api-light"]["narrowest_source"] == config.LIGHT_RANGE
    assert paths["mgmt-ssh"]["destination"] == {"group": "owned"}
    # every other input is the lab's own, the signed boundary with its signature
    assert sorted(os.listdir(tmp_path / "site" / "preflight")) == sorted(
        n for n in os.listdir(inventory.SITE) if os.path.isfile(os.path.join(inventory.SITE, n)))
    assert not inventory.write_light_site([]) and not (tmp_path / "site").exists()


def test_gpu_spec_matches_the_contract_shape():
    spec = config.gpu_spec(config.NODES[0])
    assert set(spec) == {"model", "count", "memory_mib", "pci_base", "uuid_seed", "mig",
                         "compute_cap", "power_limit_w", "nccl", "faults", "stack"}
    assert spec["uuid_seed"] == "owned-a100-1" and spec["count"] == 8
    assert spec["faults"] == {"xid": [], "hide_gpus": 0, "nccl_wrong": 0, "nccl_busbw_factor": 1.0,
                              "dcgm_diag": []}
    json.dumps(spec)


def test_podman_settings_missing_then_satisfied_by_dropin(tmp_path):
    etc, usr = tmp_path / "etc", tmp_path / "usr"
    (etc / "containers.conf.d").mkdir(parents=True)
    usr.mkdir()
    (etc / "containers.conf").write_text('[engine]\nruntime = "crun"\n')
    assert not host.podman_conf_ok(host.effective_podman_conf(str(etc), str(usr)))
    (etc / "containers.conf.d" / "50-hybridgpu-lab.conf").write_text(host.DROPIN_TEXT)
    assert host.podman_conf_ok(host.effective_podman_conf(str(etc), str(usr)))
    # A later drop-in overriding one key breaks it again.
    (etc / "containers.conf.d" / "90-other.conf").write_text('[engine]\ncgroup_manager = "systemd"\n')
    assert not host.podman_conf_ok(host.effective_podman_conf(str(etc), str(usr)))


def test_image_cache_key_follows_its_inputs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("one")
    k1 = hash_files([str(tmp_path / "a")])
    assert hash_files([str(tmp_path / "a")]) == k1
    (tmp_path / "a" / "f").write_text("two")
    assert hash_files([str(tmp_path / "a")]) != k1
    assert image.node_ref().startswith(config.NODE_IMAGE + ":")


def test_an_owned_node_joined_again_elsewhere_is_found_by_its_certificate(monkeypatch, tmp_path):
    """lab up makes afresh an owned node whose kubelet client certificate is not the one its
    manifest in the lab's records names; nodes without a manifest, without a recorded join,
    stopped or without a certificate are left alone."""
    monkeypatch.setattr(config, "light_count", lambda: 0)
    monkeypatch.setattr(config, "ROOT", str(tmp_path))
    manifests = tmp_path / "records" / "manifests"
    manifests.mkdir(parents=True)

    def manifest(name, serial):
        join = {"facts": {"client_certificate": {"serial": serial}}} if serial else {"facts": {}}
        (manifests / (name + ".json")).write_text(json.dumps({"node": name, "sections": {"join": join}}))
    manifest("owned-a100-1", "0A1B")      # the node holds another certificate
    manifest("owned-a100-2", "0c2d")      # the same one (case apart)
    manifest("owned-l40s-1", None)        # no join recorded
    manifest("cloud-h200-1", "ffff")      # not an owned node
    on_node = {"owned-a100-1": "serial=5E6F\n", "owned-a100-2": "serial=0C2D\n", "owned-l40s-1": "serial=0C2D\n"}
    calls = []

    def run(cmd, check=True, timeout=None, **_):
        calls.append(cmd)
        out = on_node.get(cmd[2], "")
        return nodes.subprocess.CompletedProcess(cmd, 0 if out else 1, out, "" if out else "No such file")
    monkeypatch.setattr(nodes, "run", run)
    monkeypatch.setattr(nodes, "inspect", lambda name: {"State": {"Running": True}})
    assert nodes.joined_elsewhere() == [("owned-a100-1", "0a1b", "5e6f")]
    assert sorted(c[2] for c in calls) == ["owned-a100-1", "owned-a100-2"]
    assert calls[0][3:] == ["openssl", "x509", "-noout", "-serial", "-in", nodes.KUBELET_CLIENT_CERT]
    # stopped, or without a certificate: nothing to compare
    monkeypatch.setattr(nodes, "inspect", lambda name: {"State": {"Running": name != "owned-a100-1"}})
    assert nodes.joined_elsewhere() == []
    monkeypatch.setattr(nodes, "inspect", lambda name: {"State": {"Running": True}})
    on_node.pop("owned-a100-1")
    assert nodes.joined_elsewhere() == []


def test_working_namespaces_count_only_what_still_runs(monkeypatch):
    """lab up names a namespace an earlier run left Pods or Jobs running in; finished ones, empty
    working namespaces and the system namespaces are not named."""
    done = {"conditions": [{"type": "Complete", "status": "True"}]}
    lists = {
        ("onprem", "/api/v1/namespaces"): [{"metadata": {"name": n}} for n in
                                           ("default", "kube-system", "kube-public", "kube-node-lease", "hgpu-validate")],
        ("cloud", "/api/v1/namespaces"): [{"metadata": {"name": "overflow"}}],
        ("onprem", "/api/v1/namespaces/hgpu-validate/pods"): [{"status": {"phase": "Succeeded"}}],
        ("onprem", "/apis/batch/v1/namespaces/hgpu-validate/jobs"): [{"status": done}],
        ("cloud", "/api/v1/namespaces/overflow/pods"): [{"status": {"phase": "Running"}}, {"status": {"phase": "Failed"}},
                                                        {"status": {"phase": "Pending"}}],
        ("cloud", "/apis/batch/v1/namespaces/overflow/jobs"): [{"status": done}, {"status": {"active": 1}},
                                                               {"status": {"conditions": [{"type": "Failed", "status": "False"}]}}],
    }
    monkeypatch.setattr(k8s, "api", lambda cluster, method, path: (200, {"items": lists[(cluster, path)]}))
    assert k8s.working_namespaces() == [("onprem", "hgpu-validate", 0, 0), ("cloud", "overflow", 2, 2)]
