"""gpu_facts logic with real nvidia-smi outputs (fake command runner), the lab stand-in,
and one end-to-end run of the module file."""
import collections
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.modules import gpu_facts

from hgpu_testenv import REAL_OUTPUTS, ROOT

Uname = collections.namedtuple("Uname", "sysname nodename release version machine")
UNAME = Uname("Linux", "owned-a100-1", "6.1.0-28-amd64", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1", "x86_64")
OS_RELEASE = ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
              'VERSION_ID="12"\nVERSION="12 (bookworm)"\nID=debian\n')
STANDIN = os.path.join(ROOT, "tests", "lab", "packages", "nvidia-smi", "nvidia_smi.py")


def real(tool, name):
    path = os.path.join(REAL_OUTPUTS, tool, name)
    assert os.path.isfile(path), "real sample missing: %s (set HGPU_REAL_OUTPUTS)" % path
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


class FakeNode(object):
    """Answers commands from a table {(argv0-basename, first-arg): (rc, out, err)}."""

    def __init__(self, answers, paths=None, files=None):
        self.answers = answers
        self.paths = paths or {}
        self.files = files or {}
        self.calls = []

    def run(self, argv):
        self.calls.append(list(argv))
        key = (os.path.basename(argv[0]), argv[1] if len(argv) > 1 else None)
        if key not in self.answers:
            raise AssertionError("unexpected command %r" % (argv,))
        answer = self.answers[key]
        return answer(argv) if callable(answer) else answer

    def access(self):
        return gpu_facts.NodeAccess(run=self.run, which=self.paths.get,
                                    read_file=self.files.get, uname=lambda: UNAME)


def smi_node(csv, table=None, xml=None, **extra):
    answers = {("nvidia-smi", "--query-gpu=" + ",".join(gpu_facts.QUERY_FIELDS)): csv}
    if table is not None:
        answers[("nvidia-smi", None)] = table
    if xml is not None:
        answers[("nvidia-smi", "-q")] = xml
    answers.update(extra.pop("answers", {}))
    paths = {"nvidia-smi": "/usr/bin/nvidia-smi"}
    paths.update(extra.pop("paths", {}))
    return FakeNode(answers, paths=paths, files=extra.pop("files", {"/etc/os-release": OS_RELEASE}))


@pytest.mark.parametrize("csv_name,table_name,want", [
    ("h100-mig-enabled_drv590_full-query_idle.txt", "h100-mig-enabled_drv590_idle.txt",
     {"count": 1, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "mig_mode": "Enabled",
      "driver_version": "590.48.01", "cuda_version": "13.1"}),
    ("h200-mig-enabled_drv590_full-query_idle.txt", "h200-mig-enabled_drv590_load_with-processes.txt",
     {"count": 1, "model": "NVIDIA H200", "memory_mib": 143771, "mig_mode": "Enabled",
      "driver_version": "590.48.01", "cuda_version": "13.1"}),
    ("l40s_drv595_full-query_idle.txt", "l40s_drv595.txt",
     {"count": 1, "model": "NVIDIA L40S", "memory_mib": 46068, "mig_mode": None,
      "driver_version": "595.80", "cuda_version": "13.2"}),
])
def test_gpu_facts_from_real_captures(csv_name, table_name, want):
    node = smi_node((0, real("nvidia-smi-csv", csv_name), ""),
                    table=(0, real("nvidia-smi-table", table_name), ""))
    facts = gpu_facts.collect(node.access())
    for key, value in want.items():
        assert facts[key] == value, key
    assert facts["cuda_source"] == "table"
    assert facts["gpus"][0]["compute_cap"] in ("9.0", "8.9")
    assert facts["gpus"][0]["pci_bus_id"].startswith("00000000:")
    assert facts["reason"] is None
    # one query + one table: no -q -x needed when the banner has the CUDA version
    assert [c[1] if len(c) > 1 else None for c in node.calls] == [
        "--query-gpu=" + ",".join(gpu_facts.QUERY_FIELDS), None]
    assert facts["commands_run"] == 2
    assert facts["os"] == {"pretty_name": "Debian GNU/Linux 12 (bookworm)", "id": "debian", "version_id": "12"}
    assert facts["kernel"]["release"] == "6.1.0-28-amd64"
    assert facts["image_id"] is None and facts["container_runtime"] is None and facts["agent"] is None


def test_cuda_falls_back_to_xml_when_table_has_none():
    xml = real("nvidia-smi-xml", "a100-sxm4-80gb-x4_drv535_dtd-v12.xml.txt")
    csv = "index, name, uuid, memory.total [MiB], driver_version, mig.mode.current, pci.bus_id, compute_cap\n" \
          "0, NVIDIA A100-SXM4-80GB, GPU-513536b6-7d19-9063-b049-1e69664bb298, 81920, 535.54.03, Enabled, 00000000:01:00.0, 8.0\n"
    node = smi_node((0, csv, ""), table=(1, "", "Unable to determine the device handle"), xml=(0, xml, ""))
    facts = gpu_facts.collect(node.access())
    assert (facts["cuda_version"], facts["cuda_source"]) == ("12.2", "xml")
    assert facts["mig_mode"] == "Enabled"


def test_no_nvidia_smi_gives_zero_gpus_with_reason():
    node = FakeNode({}, paths={}, files={})
    facts = gpu_facts.collect(node.access())
    assert facts["count"] == 0 and facts["reason"] == "nvidia-smi not found on PATH"
    assert facts["os"] == {"pretty_name": None, "id": None, "version_id": None}
    assert node.calls == []


def test_no_devices_gives_zero_gpus():
    node = smi_node((6, "No devices were found\n", ""))
    facts = gpu_facts.collect(node.access())
    assert facts["count"] == 0 and "No devices" in facts["reason"]


def test_driver_failure_raises_with_output():
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    node = smi_node((9, msg + "\n", ""))
    with pytest.raises(gpu_facts.GpuFactsError) as err:
        gpu_facts.collect(node.access())
    assert "rc=9" in str(err.value) and "couldn't communicate" in str(err.value)


def test_unparsable_query_output_raises():
    node = smi_node((0, "garbage without header\n", ""))
    with pytest.raises(gpu_facts.GpuFactsError):
        gpu_facts.collect(node.access())


def test_old_driver_without_compute_cap_is_queried_again():
    fields = [f for f in gpu_facts.QUERY_FIELDS if f != "compute_cap"]
    csv = ", ".join(f if f != "memory.total" else "memory.total [MiB]" for f in fields) + "\n" \
        "0, Tesla T4, GPU-d37e67a5-91dd-3774-a5cb-99096249601a, 15360, 450.80.02, [N/A], 00000000:00:1E.0\n"
    node = smi_node((2, 'Field "compute_cap" is not a valid field to query.\n', ""),
                    table=(0, real("nvidia-smi-table", "titan-v_drv515_old-layout.txt"), ""),
                    answers={("nvidia-smi", "--query-gpu=" + ",".join(fields)): (0, csv, "")})
    facts = gpu_facts.collect(node.access())
    assert facts["count"] == 1 and facts["gpus"][0]["compute_cap"] is None
    assert facts["mig_mode"] is None and facts["memory_mib"] == 15360


def test_runtime_agent_and_image():
    answers = {
        ("containerd", "--version"): (0, "containerd github.com/containerd/containerd v1.7.24 88bf19b2\n", ""),
        ("podman", "--version"): (0, "podman version 4.3.1\n", ""),
        ("dpkg-query", "-W"): (0, "install ok installed|1.30.4-1.1", ""),
    }
    node = FakeNode(answers, paths={"containerd": "/usr/bin/containerd", "podman": "/usr/bin/podman",
                                    "dpkg-query": "/usr/bin/dpkg-query"},
                    files={"/etc/image-id": "hgpu-node-2026.11\n", "/etc/os-release": OS_RELEASE})
    facts = gpu_facts.collect(node.access(), stack=False)
    assert facts["container_runtime"] == {"name": "containerd", "version": "1.7.24"}
    assert [r["name"] for r in facts["container_runtimes"]] == ["containerd", "podman"]
    assert facts["container_runtimes"][1]["version"] == "4.3.1"
    assert facts["agent"] == {"kind": "kubelet", "version": "1.30.4"}
    assert facts["image_id"] == "hgpu-node-2026.11"


def test_kubelet_wins_over_package_and_absent_package_is_null():
    node = FakeNode({("kubelet", "--version"): (0, "Kubernetes v1.29.3\n", "")},
                    paths={"kubelet": "/usr/bin/kubelet"})
    assert gpu_facts.collect(node.access())["agent"] == {"kind": "kubelet", "version": "1.29.3"}
    node = FakeNode({("dpkg-query", "-W"): (1, "", "dpkg-query: no packages found matching kubelet")},
                    paths={"dpkg-query": "/usr/bin/dpkg-query"})
    assert gpu_facts.collect(node.access(), stack=False)["agent"] is None


def test_parse_version_and_os_release():
    assert gpu_facts.parse_version("Docker version 24.0.5, build ced0996") == "24.0.5"
    assert gpu_facts.parse_version("crio version 1.28.1\nVersion:  1.28.1\n") == "1.28.1"
    assert gpu_facts.parse_version("nothing here") is None
    assert gpu_facts.parse_os_release("ID='rhel'\n# c\nVERSION_ID=9.4\n")["id"] == "rhel"


# ---- lab stand-in nvidia-smi (tests/lab/packages) through a real subprocess runner

def _write_spec(tmp_path, mig="Disabled"):
    spec = {"model": "NVIDIA A100-SXM4-80GB", "count": 8, "memory_mib": 81920,
            "pci_base": "00000000:10:00.0", "uuid_seed": "owned-a100-1", "mig": mig,
            "compute_cap": "8.0", "power_limit_w": 400,
            "nccl": {"busbw_gbps": 230.0, "algbw_ratio": 0.5357, "latency_us": 25.0},
            "faults": {"xid": [], "hide_gpus": 0, "nccl_wrong": 0, "nccl_busbw_factor": 1.0}}
    driver = {"branch": "535", "version": "535.230.02", "cuda": "12.2"}
    (tmp_path / "gpu-spec.json").write_text(json.dumps(spec))
    (tmp_path / "driver.json").write_text(json.dumps(driver))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvidia-smi"
    wrapper.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, STANDIN))
    wrapper.chmod(0o755)
    env = dict(os.environ, HGPU_GPU_SPEC=str(tmp_path / "gpu-spec.json"),
               HGPU_DRIVER_JSON=str(tmp_path / "driver.json"), LANG="C")
    return env, str(wrapper)


def test_lab_standin_parses_with_real_parsers(tmp_path):
    assert os.path.isfile(STANDIN), "lab nvidia-smi stand-in missing: %s" % STANDIN
    env, smi = _write_spec(tmp_path, mig="Enabled")

    def run(argv):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    node = gpu_facts.NodeAccess(run=run, which=lambda name: smi if name == "nvidia-smi" else None,
                                read_file=lambda path: None, uname=lambda: UNAME)
    facts = gpu_facts.collect(node)
    assert facts["count"] == 8
    assert facts["model"] == "NVIDIA A100-SXM4-80GB"
    assert facts["memory_mib"] == 81920
    assert facts["mig_mode"] == "Enabled"
    assert facts["driver_version"] == "535.230.02"
    assert (facts["cuda_version"], facts["cuda_source"]) == ("12.2", "table")
    assert len(set(g["uuid"] for g in facts["gpus"])) == 8


def test_module_end_to_end_with_standin(tmp_path):
    env, smi = _write_spec(tmp_path)
    env["PATH"] = os.path.dirname(smi) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.path.join(ROOT, ".collections")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_check_mode": True}}))
    module = os.path.join(ROOT, "plugins", "modules", "gpu_facts.py")
    proc = subprocess.run([sys.executable, module, str(args)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, result
    facts = result["ansible_facts"]["hybridgpu_gpu"]
    assert result["changed"] is False
    assert facts["count"] == 8 and facts["cuda_version"] == "12.2" and facts["nvidia_smi"] == smi
    assert facts["os"]["id"]  # this Debian host has /etc/os-release


def test_module_fails_with_driver_message(tmp_path):
    env, smi = _write_spec(tmp_path)
    env["HGPU_DRIVER_JSON"] = str(tmp_path / "absent.json")
    env["PYTHONPATH"] = os.path.join(ROOT, ".collections")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"nvidia_smi_path": smi}}))
    module = os.path.join(ROOT, "plugins", "modules", "gpu_facts.py")
    proc = subprocess.run([sys.executable, module, str(args)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert result.get("failed") is True
    assert "couldn't communicate with the NVIDIA driver" in result["msg"]


# ---- GPU software stack (stack=True): one dpkg-query, nvidia-ctk, containerd, fabric manager

NVRM_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
             "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n"
             "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
CONTAINERD_NVIDIA = """version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
"""
DPKG = ("nvidia-driver-565-open\t565.57.01-0ubuntu1\tii \n"
        "nvidia-container-toolkit\t1.17.3-1\tii \n"
        "nvidia-fabricmanager-565\t565.57.01-1\tii \n"
        "kubelet\t1.30.4-1.1\tii \n")


def stack_node(dpkg=DPKG, containerd=(0, CONTAINERD_NVIDIA, ""), fm_active="active\n", nvswitches=None, files=None):
    answers = {("dpkg-query", "-W"): (0, dpkg, ""),
               ("nvidia-ctk", "--version"): (0, "NVIDIA Container Toolkit CLI version 1.17.3\ncommit: 6b8a2ff\n", ""),
               ("containerd", "config"): containerd,
               ("containerd", "--version"): (0, "containerd containerd.io 1.7.24 88bf19b2\n", ""),
               ("nv-fabricmanager", "--version"): (0, "Fabric Manager version is : 565.57.01\n", ""),
               ("systemctl", "is-active"): (0 if fm_active == "active\n" else 3, fm_active, "")}
    paths = {name: "/usr/bin/" + name for name in ("dpkg-query", "nvidia-ctk", "containerd", "nv-fabricmanager", "systemctl")}
    node = FakeNode(answers, paths=paths, files=dict({"/proc/driver/nvidia/version": NVRM_OPEN}, **(files or {})))
    access = node.access()
    access.list_dir = lambda path: nvswitches if path == gpu_facts.NVSWITCH_DIR else None
    return node, access


def test_stack_facts_in_one_run():
    node, access = stack_node(nvswitches=["0", "1", "2", "3"])
    stack = gpu_facts.collect(access)["stack"]
    assert stack["module"] == {"loaded": True, "version": "565.57.01", "flavor": "open", "source": "proc"}
    assert stack["driver_package"] == {"name": "nvidia-driver-565-open", "version": "565.57.01-0ubuntu1",
                                       "upstream": "565.57.01"}
    assert stack["toolkit"] == {"installed": True, "version": "1.17.3", "source": "nvidia-ctk"}
    assert stack["containerd"]["nvidia_runtimes"] == ["nvidia"]
    assert stack["containerd"]["default_runtime"] == "nvidia"
    assert stack["containerd"]["source"] == "containerd config dump"
    assert stack["fabricmanager"] == {"installed": True, "version": "565.57.01", "active": True, "nvswitch_count": 4}
    # the stack's packages come from one dpkg-query call
    dpkg_calls = [c for c in node.calls if c[0] == "dpkg-query"]
    assert any("nvidia-container-toolkit" in c for c in dpkg_calls)
    assert sum(1 for c in dpkg_calls if "nvidia-driver*" in c) == 1


def test_stack_sysfs_version_wins_and_containerd_file_fallback():
    node, access = stack_node(containerd=(1, "", "containerd: permission denied"),
                              files={"/sys/module/nvidia/version": "565.57.01\n",
                                     "/etc/containerd/config.toml": "version = 2\n"})
    stack = gpu_facts.collect(access)["stack"]
    assert stack["module"]["source"] == "sysfs"
    assert stack["containerd"]["source"] == "/etc/containerd/config.toml"
    assert stack["containerd"]["nvidia_runtimes"] == []
    assert "permission denied" in stack["containerd"]["error"]


def test_stack_module_version_from_nvidia_smi_when_no_proc_file():
    node = smi_node((0, real("nvidia-smi-csv", "l40s_drv595_full-query_idle.txt"), ""),
                    table=(0, real("nvidia-smi-table", "l40s_drv595.txt"), ""))
    stack = gpu_facts.collect(node.access())["stack"]
    assert stack["module"] == {"loaded": True, "version": "595.80", "flavor": None, "source": "nvidia-smi"}
    assert stack["toolkit"]["installed"] is False and stack["containerd"]["present"] is False
    assert stack["fabricmanager"]["installed"] is False
