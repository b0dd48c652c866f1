#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather GPU, OS, runtime and agent facts on a node in one module run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather GPU, driver, CUDA, OS, container runtime and node agent facts
description:
  - Runs on the managed node and reads, in one module invocation (one SSH round trip
    with pipelining), everything the preflight matrix needs from that node.
  - GPUs come from C(nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,mig.mode.current,pci.bus_id,compute_cap
    --format=csv,nounits); the header is kept so columns are matched by name. The highest CUDA version the driver supports comes from the
    banner of the default C(nvidia-smi) table, the cheapest output that prints it; C(nvidia-smi -q -x)
    is run only when the banner has no CUDA version.
  - Older drivers that do not know the C(compute_cap) field are queried again without it.
  - Also reads the kernel (uname), the OS (C(/etc/os-release)), an image id
    (C(/etc/image-id)), the container runtimes on C(PATH) (containerd, crio, docker, podman)
    and the kubelet (C(kubelet --version), else the C(kubelet) package version from dpkg-query).
  - With I(stack=true) (the default) also the GPU software stack pods need, returned as C(stack) -
    the loaded NVIDIA kernel module's version (C(/sys/module/nvidia/version), else
    C(/proc/driver/nvidia/version)), the driver, toolkit, fabric manager and kubelet packages
    (one C(dpkg-query -W) run), C(nvidia-ctk --version), the containerd configuration
    (C(containerd config dump), else C(/etc/containerd/config.toml)) and its runtimes,
    C(nv-fabricmanager --version), whether the C(nvidia-fabricmanager) unit is active, and the
    NVSwitch devices in C(/proc/driver/nvidia-nvswitch/devices).
  - No C(nvidia-smi) on C(PATH), or C(nvidia-smi) saying C(No devices were found), gives
    C(count=0) with a C(reason); any other C(nvidia-smi) failure fails the task with its output.
  - Commands run with C(LANG=C). The module only reads, so it runs in check mode too.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.attributes.facts
options:
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). When unset, C(nvidia-smi) is looked up on C(PATH).
    type: path
  query_cuda:
    description:
      - Read the CUDA version (one more C(nvidia-smi) run in the same module invocation).
    type: bool
    default: true
  stack:
    description:
      - Read the GPU software stack (kernel module, packages, container toolkit, containerd
        runtimes, fabric manager) in the same module invocation.
    type: bool
    default: true
notes:
  - Facts are returned as C(ansible_facts.hybridgpu_gpu), so later plays can read them from C(hostvars).
  - The parsers live in C(hybridgpu.fleet.plugins.module_utils.nvidia_smi) and are tested against real
    nvidia-smi outputs (including C([N/A]), C([Not Supported]) and MIG).
"""

EXAMPLES = r"""
- name: Read GPU and node facts
  hybridgpu.fleet.gpu_facts:

- name: Show the GPU model and driver
  ansible.builtin.debug:
    msg: "{{ ansible_facts.hybridgpu_gpu.count }}x {{ ansible_facts.hybridgpu_gpu.model }} driver {{ ansible_facts.hybridgpu_gpu.driver_version }}"

- name: Use a non-standard nvidia-smi and skip the CUDA query
  hybridgpu.fleet.gpu_facts:
    nvidia_smi_path: /opt/nvidia/bin/nvidia-smi
    query_cuda: false
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node.
  returned: always
  type: dict
  contains:
    hybridgpu_gpu:
      description: GPU, OS, runtime and agent facts of the node.
      returned: always
      type: dict
      contains:
        count:
          description: Number of GPUs nvidia-smi lists (0 when there is no nvidia-smi or no device).
          type: int
          sample: 8
        model:
          description: GPU product name when all GPUs are the same model, else null.
          type: str
          sample: NVIDIA A100-SXM4-80GB
        models:
          description: Sorted distinct GPU product names.
          type: list
          elements: str
        memory_mib:
          description: Smallest per-GPU memory in MiB (a mixed node is judged by its weakest GPU).
          type: int
          sample: 81920
        mig_mode:
          description: C(Enabled) if any GPU has MIG on, C(Disabled) if GPUs report it off, null when not applicable.
          type: str
        driver_version:
          description: Driver version nvidia-smi reports.
          type: str
          sample: "535.230.02"
        cuda_version:
          description: Highest CUDA version the driver supports, as nvidia-smi reports it.
          type: str
          sample: "12.2"
        cuda_source:
          description: Where cuda_version came from (C(table), C(xml)) or null.
          type: str
        gpus:
          description: One entry per GPU with index, name, uuid, memory_mib, mig_mode, pci_bus_id, compute_cap.
          type: list
          elements: dict
        reason:
          description: Why count is 0 (no nvidia-smi, no device), else null.
          type: str
        nvidia_smi:
          description: Path of the nvidia-smi that was run, or null.
          type: str
        kernel:
          description: Kernel release, version string and machine from uname.
          type: dict
        os:
          description: C(pretty_name), C(id) and C(version_id) from /etc/os-release (null when absent).
          type: dict
        image_id:
          description: Content of /etc/image-id, else null.
          type: str
        container_runtime:
          description: First container runtime found (containerd, crio, docker, podman) as C(name) and C(version), or null.
          type: dict
        container_runtimes:
          description: Every container runtime found on PATH.
          type: list
          elements: dict
        agent:
          description: C(kind) (kubelet) and C(version) from C(kubelet --version) or the kubelet package, or null.
          type: dict
        stack:
          description:
            - The GPU software stack (absent with I(stack=false)). C(module) {loaded, version, flavor, source},
              C(packages) (package name to version) of the installed driver, toolkit, fabric manager, DCGM and kubelet packages,
              C(driver_package) {name, version, upstream} or null, C(toolkit) {installed, version, source},
              C(containerd) {present, source, default_runtime, runtimes, nvidia_runtimes, error},
              C(fabricmanager) {installed, version, active, nvswitch_count}.
          type: dict
        commands_run:
          description: Commands this module ran on the node (all inside one module invocation).
          type: int
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import gpu_stack
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nvidia_smi
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nvidia_smi_table

QUERY_FIELDS = ["index", "name", "uuid", "memory.total", "driver_version", "mig.mode.current",
                "pci.bus_id", "compute_cap"]
IMAGE_ID_FILES = ("/etc/image-id",)
RUNTIMES = (("containerd", ["--version"]), ("crio", ["--version"]), ("docker", ["--version"]),
            ("podman", ["--version"]))
# Packages whose installed versions the stack facts report (dpkg-query patterns).
STACK_PACKAGES = ("nvidia-driver*", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
                  "nvidia-fabricmanager*", "datacenter-gpu-manager*", "kubelet")
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"
_VERSION = re.compile(r"\bv?(\d+\.\d+(?:\.\d+)?(?:[-+~][0-9A-Za-z.+~-]+)?)")


class GpuFactsError(Exception):
    """nvidia-smi failed in a way facts cannot describe."""


class NodeAccess(object):
    """What the facts code needs from the node; the module and the tests each supply one."""

    def __init__(self, run, which, read_file, uname, list_dir=None):
        self.run = run              # argv list -> (rc, stdout, stderr)
        self.which = which          # name -> path or None
        self.read_file = read_file  # path -> text or None
        self.uname = uname          # () -> os.uname_result-like
        self.list_dir = list_dir or (lambda path: None)  # path -> [names] or None
        self.commands = 0

    def exec(self, argv):
        self.commands += 1
        return self.run(argv)


def parse_os_release(text):
    """Return {pretty_name, id, version_id} from /etc/os-release text (None when missing)."""
    values = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return {"pretty_name": values.get("PRETTY_NAME"), "id": values.get("ID"),
            "version_id": values.get("VERSION_ID")}


def parse_version(text):
    """First version-looking token of a --version output (``v1.29.3`` -> ``1.29.3``)."""
    for line in (text or "").splitlines():
        match = _VERSION.search(line)
        if match:
            return match.group(1)
    return None


def _gpu_rows(node, smi):
    """Run the query; retry without compute_cap on drivers that lack that field.

    The header is kept (``csv,nounits``) so columns are matched by name, not position.
    """
    fields = list(QUERY_FIELDS)
    rc, out, err = node.exec([smi, "--query-gpu=" + ",".join(fields), "--format=csv,nounits"])
    if rc != 0 and "compute_cap" in (out + err) and "not a valid field" in (out + err):
        fields.remove("compute_cap")
        rc, out, err = node.exec([smi, "--query-gpu=" + ",".join(fields), "--format=csv,nounits"])
    return rc, out, err, fields


def gpu_section(node, smi, query_cuda=True):
    """GPU part of the facts. Raises GpuFactsError when nvidia-smi fails."""
    facts = {"count": 0, "model": None, "models": [], "memory_mib": None, "mig_mode": None,
             "driver_version": None, "cuda_version": None, "cuda_source": None, "gpus": [],
             "reason": None, "nvidia_smi": smi}
    if smi is None:
        facts["reason"] = "nvidia-smi not found on PATH"
        return facts
    rc, out, err, fields = _gpu_rows(node, smi)
    if rc != 0:
        text = (out + "\n" + err).strip()
        if "No devices were found" in text:
            facts["reason"] = "nvidia-smi: No devices were found"
            return facts
        raise GpuFactsError("%s --query-gpu failed (rc=%s): %s" % (smi, rc, text))
    parsed = nvidia_smi.parse_query_csv(out)
    missing = [f for f in fields if f not in parsed["fields"]]
    if parsed["errors"] or not parsed["header"] or missing:
        raise GpuFactsError("%s --query-gpu printed output that does not parse (header %s, missing %s): %s"
                            % (smi, parsed["header"], missing, "; ".join(parsed["errors"]) or out[:200]))
    gpus = []
    for row in parsed["rows"]:
        gpus.append({"index": row.get("index"), "name": row.get("name"), "uuid": row.get("uuid"),
                     "memory_mib": row.get("memory.total"), "mig_mode": row.get("mig.mode.current"),
                     "pci_bus_id": row.get("pci.bus_id"), "compute_cap": row.get("compute_cap")})
    facts["gpus"] = gpus
    facts.update(nvidia_smi.summarize_gpus(gpus))
    drivers = sorted(set(r.get("driver_version") for r in parsed["rows"] if r.get("driver_version")))
    facts["driver_version"] = drivers[0] if drivers else None
    if query_cuda and gpus:
        _cuda(node, smi, facts)
    return facts


def _cuda(node, smi, facts):
    rc, out, err = node.exec([smi])
    if rc == 0:
        try:
            table = nvidia_smi_table.parse_table(out)
        except nvidia_smi.NvidiaSmiParseError:
            table = {}
        if table.get("cuda_version") and table["cuda_version"] != "N/A":
            facts["cuda_version"], facts["cuda_source"] = table["cuda_version"], "table"
            return
    rc, out, err = node.exec([smi, "-q", "-x"])
    if rc != 0:
        raise GpuFactsError("%s -q -x failed (rc=%s): %s" % (smi, rc, (out + "\n" + err).strip()))
    try:
        xml = nvidia_smi.parse_xml(out)
    except nvidia_smi.NvidiaSmiParseError as exc:
        raise GpuFactsError("%s -q -x: %s" % (smi, exc))
    if xml.get("cuda_version"):
        facts["cuda_version"], facts["cuda_source"] = xml["cuda_version"], "xml"


def node_section(node):
    """Kernel, OS, image, container runtimes and agent."""
    uname = node.uname()
    facts = {"kernel": {"release": uname.release, "version": uname.version, "machine": uname.machine},
             "os": parse_os_release(node.read_file("/etc/os-release")),
             "image_id": None, "container_runtime": None, "container_runtimes": [], "agent": None}
    for path in IMAGE_ID_FILES:
        text = node.read_file(path)
        if text is not None and text.strip():
            facts["image_id"] = text.strip()
            break
    for name, args in RUNTIMES:
        path = node.which(name)
        if not path:
            continue
        rc, out, err = node.exec([path] + args)
        version = parse_version(out) if rc == 0 else None
        facts["container_runtimes"].append({"name": name, "version": version, "path": path})
    if facts["container_runtimes"]:
        first = facts["container_runtimes"][0]
        facts["container_runtime"] = {"name": first["name"], "version": first["version"]}
    kubelet = node.which("kubelet")
    if kubelet:
        rc, out, err = node.exec([kubelet, "--version"])
        if rc == 0:
            facts["agent"] = {"kind": "kubelet", "version": parse_version(out)}
    if facts["agent"] is None and node.which("dpkg-query"):
        rc, out, err = node.exec(["dpkg-query", "-W", "-f=${Status}|${Version}", "kubelet"])
        status, dummy, version = out.strip().partition("|")
        if rc == 0 and status.endswith(" installed") and version:
            facts["agent"] = {"kind": "kubelet", "version": gpu_stack.upstream_version(version) or version}
    return facts


def package_versions(node):
    """Installed driver, toolkit, fabric manager, DCGM and kubelet packages (one dpkg-query)."""
    if not node.which("dpkg-query"):
        return {}
    rc, out, err = node.exec(["dpkg-query", "-W", "-f=" + gpu_stack.DPKG_FORMAT] + list(STACK_PACKAGES))
    return gpu_stack.parse_dpkg_query(out)  # rc 1 only says some pattern matched nothing


def _module_section(node, gpu):
    for path, source in (("/sys/module/nvidia/version", "sysfs"), ("/proc/driver/nvidia/version", "proc")):
        text = node.read_file(path)
        if text is None:
            continue
        if source == "sysfs" and text.strip():
            return {"loaded": True, "version": text.strip(), "flavor": None, "source": source}
        parsed = gpu_stack.parse_nvrm_version(text)
        if parsed:
            return {"loaded": True, "version": parsed["version"], "flavor": parsed["flavor"], "source": source}
    # NVML answers with the loaded module's version; nvidia-smi fails when none is loaded.
    if gpu.get("driver_version"):
        return {"loaded": True, "version": gpu["driver_version"], "flavor": None, "source": "nvidia-smi"}
    return {"loaded": False, "version": None, "flavor": None, "source": None}


def _containerd_section(node):
    out = {"present": False, "source": None, "default_runtime": None, "runtimes": {},
           "nvidia_runtimes": [], "error": None}
    text = None
    binary = node.which("containerd")
    if binary:
        out["present"] = True
        rc, dump, err = node.exec([binary, "config", "dump"])
        if rc == 0 and dump.strip():
            text, out["source"] = dump, "containerd config dump"
        else:
            out["error"] = "containerd config dump failed (rc=%s): %s" % (rc, (err or dump).strip()[:200])
    if text is None:
        text = node.read_file(CONTAINERD_CONFIG)
        if text is not None:
            out["present"], out["source"] = True, CONTAINERD_CONFIG
    if text is not None:
        config = gpu_stack.parse_containerd_config(text)
        out.update(default_runtime=config["default_runtime"], runtimes=config["runtimes"],
                   nvidia_runtimes=gpu_stack.nvidia_runtimes(config))
        if config["errors"]:
            out["error"] = "; ".join(config["errors"])
    return out


def stack_section(node, gpu):
    """The GPU software stack pods need on this node."""
    packages = package_versions(node)
    drivers = sorted((name, ver) for name, ver in packages.items() if name.startswith("nvidia-driver"))
    facts = {"module": _module_section(node, gpu), "packages": packages, "driver_package": None}
    if drivers:
        name, version = drivers[-1]
        facts["driver_package"] = {"name": name, "version": version, "upstream": gpu_stack.upstream_version(version)}
    toolkit = {"installed": "nvidia-container-toolkit" in packages, "version": None, "source": None}
    if toolkit["installed"]:
        toolkit.update(version=gpu_stack.upstream_version(packages["nvidia-container-toolkit"]), source="package")
    ctk = node.which("nvidia-ctk")
    if ctk:
        rc, out, err = node.exec([ctk, "--version"])
        version = gpu_stack.parse_ctk_version(out) if rc == 0 else None
        if version:
            toolkit.update(installed=True, version=version, source="nvidia-ctk")
    facts["toolkit"] = toolkit
    facts["containerd"] = _containerd_section(node)
    fabric = {"installed": any(n.startswith("nvidia-fabricmanager") for n in packages), "version": None,
              "active": None, "nvswitch_count": len(node.list_dir(NVSWITCH_DIR) or [])}
    fm_bin = node.which("nv-fabricmanager")
    if fm_bin:
        rc, out, err = node.exec([fm_bin, "--version"])
        fabric["version"] = gpu_stack.parse_fabricmanager_version(out + "\n" + err)
        fabric["installed"] = True
    if fabric["installed"] and node.which("systemctl"):
        rc, out, err = node.exec(["systemctl", "is-active", "nvidia-fabricmanager.service"])
        fabric["active"] = out.strip() == "active"
    facts["fabricmanager"] = fabric
    return facts


def collect(node, smi_path=None, query_cuda=True, stack=True):
    """All facts for one node. ``smi_path`` None means look nvidia-smi up on PATH."""
    smi = smi_path or node.which("nvidia-smi")
    facts = gpu_section(node, smi, query_cuda=query_cuda)
    facts.update(node_section(node))
    if stack:
        facts["stack"] = stack_section(node, facts)
    facts["commands_run"] = node.commands
    return facts


def _read_file(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except (OSError, IOError):
        return None


def _list_dir(path):
    try:
        return sorted(os.listdir(path))
    except (OSError, IOError):
        return None


# Seconds any one command may take on the node.
COMMAND_TIMEOUT = 120


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="path"),
            query_cuda=dict(type="bool", default=True),
            stack=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    smi_path = module.params["nvidia_smi_path"]
    if smi_path and not os.access(smi_path, os.X_OK):
        module.fail_json(msg="nvidia_smi_path %s is not an executable file on %s"
                         % (smi_path, os.uname().nodename))

    def run(argv):
        # collect() reads the exit status; a tool that hangs (a wedged driver, a stray daemon
        # binary) fails the run naming the command instead of holding the play.
        return cmd.module_run(module, argv, timeout=COMMAND_TIMEOUT, ok=cmd.ANY_STATUS)

    node = NodeAccess(run=run, which=module.get_bin_path,
                      read_file=_read_file, uname=os.uname, list_dir=_list_dir)
    try:
        facts = collect(node, smi_path=smi_path, query_cuda=module.params["query_cuda"],
                        stack=module.params["stack"])
    except (GpuFactsError, cmd.CommandError) as exc:
        module.fail_json(msg="gpu_facts on %s: %s" % (os.uname().nodename, exc))
    module.exit_json(changed=False, ansible_facts={"hybridgpu_gpu": facts})


if __name__ == "__main__":
    main()
