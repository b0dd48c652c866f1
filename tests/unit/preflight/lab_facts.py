"""Facts shaped like gpu_facts output for the lab nodes (docs/lab-design.md)."""
import copy


def _node(name, side, model, count, mem, driver, cuda, agent=None, group=None):
    return {
        "hostname": name,
        "side": side,
        "node_group": group,
        "gpu": {"model": model, "count": count, "memory_mib": mem, "mig_mode": "Disabled"},
        "driver_version": driver,
        "cuda_version": cuda,
        "kernel": "6.1.0-28-amd64",
        "os": {"pretty": "Debian GNU/Linux 12 (bookworm)", "id": "debian", "version_id": "12"},
        "image_id": "localhost/hgpu-node:lab",
        "container_runtime": None,
        "agent_version": agent,
    }


LAB = [
    _node("owned-a100-2", "owned", "NVIDIA A100-SXM4-80GB", 8, 81920, "535.230.02", "12.2", group="owned"),
    _node("owned-a100-1", "owned", "NVIDIA A100-SXM4-80GB", 8, 81920, "535.230.02", "12.2", group="owned"),
    _node("owned-l40s-1", "owned", "NVIDIA L40S", 4, 46068, "550.163.01", "12.4", group="owned"),
    _node("cloud-h200-1", "cloud", "NVIDIA H200", 8, 143771, "570.172.08", "12.8", agent="v1.31.2"),
    _node("cloud-h200-2", "cloud", "NVIDIA H200", 8, 143771, "570.172.08", "12.8", agent="v1.31.2"),
]


def lab():
    return copy.deepcopy(LAB)
