"""Lab layout: paths, nodes, matrix rows and clusters (see docs/lab-design.md)."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_SRC = os.path.dirname(HERE)                      # tests/lab
ROOT = os.path.dirname(os.path.dirname(LAB_SRC))     # repo root
LAB_DIR = os.path.abspath(os.environ.get("HGPU_LAB_DIR", os.path.join(ROOT, ".lab")))
IMAGE_SRC = os.path.join(LAB_SRC, "image")
INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")

NETWORK = "hgpu-lab"
SUBNET = "10.213.77.0/24"
BRIDGE_IP = "10.213.77.1"
# The API guard onboarding keeps on this host in front of the emulator's API (the inventory's
# api-front host; inventories/lab/group_vars/all.yml names it).
API_GUARD_TABLE = "hybridgpu_api_guard"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = "localhost/hgpu-lab-base"
NODE_IMAGE = "localhost/hgpu-lab-node"
# Image label (inherited by any container made from the image, e.g. Molecule's).
IMAGE_LABEL = "io.hybridgpu.lab.image=1"
# Set only on the lab's own node containers and network at creation; `lab down` removes
# exactly the containers that carry it.
NODE_LABEL_KEY = "io.hybridgpu.lab.node"

# Matrix rows: what the GPU stand-ins report and which driver branch a node gets.
ROWS = {
    "a100-535": {
        "driver": "nvidia-driver-535", "driver_version": "535.230.02-1",
        "node_group": "ng_a100_535",
        "spec": {"model": "NVIDIA A100-SXM4-80GB", "count": 8, "memory_mib": 81920,
                 "pci_base": "00000000:10:00.0", "mig": "Disabled", "compute_cap": "8.0",
                 "power_limit_w": 400,
                 "nccl": {"busbw_gbps": 230.0, "algbw_ratio": 0.5714, "latency_us": 25.0}},
    },
    "l40s-550": {
        "driver": "nvidia-driver-550", "driver_version": "550.163.01-1",
        "node_group": "ng_l40s_550",
        "spec": {"model": "NVIDIA L40S", "count": 4, "memory_mib": 46068,
                 "pci_base": "00000000:41:00.0", "mig": "N/A", "compute_cap": "8.9",
                 "power_limit_w": 350,
                 "nccl": {"busbw_gbps": 21.0, "algbw_ratio": 0.6667, "latency_us": 40.0}},
    },
    "cloud-h200": {
        "driver": "nvidia-driver-570", "driver_version": "570.172.08-1",
        "node_group": "ng_cloud_h200",
        "spec": {"model": "NVIDIA H200", "count": 8, "memory_mib": 143771,
                 "pci_base": "00000000:19:00.0", "mig": "Disabled", "compute_cap": "9.0",
                 "power_limit_w": 700,
                 "nccl": {"busbw_gbps": 370.0, "algbw_ratio": 0.5714, "latency_us": 20.0}},
    },
}

NODES = [
    {"name": "owned-a100-1", "role": "owned", "row": "a100-535", "ip": "10.213.77.11"},
    {"name": "owned-a100-2", "role": "owned", "row": "a100-535", "ip": "10.213.77.12"},
    {"name": "owned-l40s-1", "role": "owned", "row": "l40s-550", "ip": "10.213.77.13"},
    {"name": "cloud-h200-1", "role": "cloud", "row": "cloud-h200", "ip": "10.213.77.21"},
    {"name": "cloud-h200-2", "role": "cloud", "row": "cloud-h200", "ip": "10.213.77.22"},
]

# `lab up --owned N`: N light owned nodes beside the declared ones, so that a wave can be measured
# at a dozen or two dozen nodes. They are the a100 row (node group ng_a100_535, kubeadm join) and
# carry only what preflight and onboarding read: the driver, its kernel module stand-in and the
# GPU stack, not the collectives' nccl-tests and mpirun. `lab up` without --owned removes them.
LIGHT_ROW = "a100-535"
LIGHT_PREFIX = "owned-light-"
LIGHT_FIRST_IP = 65
LIGHT_MAX = 60
# Their addresses (.65 to .124) in one range: the narrowest source of their own paths.
LIGHT_RANGE = "10.213.77.64/26"


def light_nodes(count):
    return [{"name": "%s%02d" % (LIGHT_PREFIX, i), "role": "owned", "row": LIGHT_ROW,
             "ip": "10.213.77.%d" % (LIGHT_FIRST_IP + i - 1), "light": True} for i in range(1, count + 1)]


def light_count():
    """How many light owned nodes the last `lab up` declared (0 without .lab/light-nodes)."""
    try:
        with open(path("light-nodes")) as fh:
            return int(fh.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def all_nodes():
    """The declared nodes and the light owned nodes `lab up --owned N` added."""
    return NODES + light_nodes(light_count())


CLUSTERS = {
    "onprem": {"port": 6443, "version": "v1.30.4"},
    "cloud": {"port": 7443, "version": "v1.30.4"},
}


def path(*parts):
    """A path under the lab state directory."""
    return os.path.join(LAB_DIR, *parts)


def api_url(cluster):
    return "https://%s:%d" % (BRIDGE_IP, CLUSTERS[cluster]["port"])


# The images the lab's "registry" holds, as every node's runtime reports them (node agent,
# /etc/hybridgpu-lab/images.json): no registry exists here, so the digest is a fixed stand-in.
# inventories/lab pins the overflow job image to the same digest (hgpu_overflow_images).
LAB_IMAGES = {"localhost/overflow-job:1": "sha256:906ffb75a644f27877b4f8dca6e48188ce08dc42367542e52da08ec8eee7c9a3"}


def gpu_spec(node):
    """The initial gpu-spec.json document of a node."""
    spec = dict(ROWS[node["row"]]["spec"])
    spec["uuid_seed"] = node["name"]
    spec["faults"] = {"xid": [], "hide_gpus": 0, "nccl_wrong": 0, "nccl_busbw_factor": 1.0, "dcgm_diag": []}
    # Overrides for the GPU stack stand-ins (fabricmanager_version: what nv-fabricmanager reports).
    spec["stack"] = {}
    return spec
