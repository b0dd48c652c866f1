#!/usr/bin/python3
"""nv-fabricmanager stand-in (lab). `nv-fabricmanager --version` prints
`Fabric Manager version is : <version>`; run as the nvidia-fabricmanager service it starts only
when its version equals the installed driver's, else it logs the real daemon's mismatch message
and exits 1, as the real fabric manager does.

The version is the package's (/usr/lib/hybridgpu-lab/fabricmanager.json); the lab GPU spec's
`stack.fabricmanager_version` overrides it, so a test can give one node a wrong version.
"""
import json
import os
import sys
import time

SPEC = os.environ.get("HGPU_GPU_SPEC", "/etc/hybridgpu-lab/gpu-spec.json")
DRIVER = os.environ.get("HGPU_DRIVER_JSON", "/usr/lib/hybridgpu-lab/driver.json")
OWN = os.environ.get("HGPU_FABRICMANAGER_JSON", "/usr/lib/hybridgpu-lab/fabricmanager.json")


def load(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def version():
    override = (load(SPEC).get("stack") or {}).get("fabricmanager_version")
    return override or load(OWN).get("version")


def main(argv):
    if argv[:1] in (["--version"], ["-v"]):
        sys.stdout.write("Fabric Manager version is : %s\n" % version())
        return 0
    driver = load(DRIVER).get("version")
    if driver != version():
        sys.stderr.write("fabric manager NVIDIA GPU driver interface version %s doesn't match with driver version %s. "
                         "Please update with the matching NVIDIA driver package.\n" % (version(), driver))
        return 1
    sys.stderr.write("Successfully configured all the available NVSwitches to route GPU NVLink traffic.\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
