#!/usr/bin/python3
"""Lab stand-in for modprobe, for the NVIDIA kernel modules.

A lab node is a container: it cannot load kernel modules. This modprobe keeps the "loaded"
NVIDIA module as state under /run (a tmpfs, so a reboot of the node unloads it), the way the
kernel does for the commands an administrator runs:

    modprobe nvidia                 load the installed driver's module (a no-op when one is loaded)
    modprobe -r nvidia_uvm ... nvidia   unload; refused while a process holds /dev/nvidia* open

Loading copies the installed driver's facts (/usr/lib/hybridgpu-lab/driver.json) to the loaded
state and makes the device files; nvidia-smi reports the loaded version and fails with NVML's
version mismatch when the installed driver differs. Other modules are not found, as in a
container without /lib/modules. Python 3 standard library only.
"""
import json
import os
import platform
import sys

# The environment overrides are for the stand-in's own tests.
DRIVER_PATH = os.environ.get("HGPU_DRIVER_JSON", "/usr/lib/hybridgpu-lab/driver.json")
STATE_PATH = os.environ.get("HGPU_KMOD_STATE", "/run/hybridgpu-lab/nvidia-module.json")
SPEC_PATH = os.environ.get("HGPU_GPU_SPEC", "/etc/hybridgpu-lab/gpu-spec.json")
DEV = os.environ.get("HGPU_DEV_DIR", "/dev")
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem")


def err(text):
    sys.stderr.write("modprobe: FATAL: %s\n" % text)
    return 1


def device_files():
    try:
        with open(SPEC_PATH, encoding="utf-8") as fh:
            count = int(json.load(fh).get("count", 1))
    except (OSError, ValueError):
        count = 1
    return ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] + ["nvidia%d" % i for i in range(count)]


def holders():
    """PIDs with a /dev/nvidia* file open."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        fd_dir = "/proc/%s/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith(DEV + "/nvidia"):
                found.append(int(pid))
                break
    return found


def load():
    if os.path.exists(STATE_PATH):
        return 0
    try:
        with open(DRIVER_PATH, encoding="utf-8") as fh:
            driver = json.load(fh)
    except (OSError, ValueError):
        return err("Module nvidia not found in directory /lib/modules/%s" % platform.release())
    os.makedirs(os.path.dirname(STATE_PATH), exist_ok=True)
    tmp = STATE_PATH + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(driver, fh)
    os.replace(tmp, STATE_PATH)
    for name in device_files():
        path = os.path.join(DEV, name)
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8"):
                pass
            os.chmod(path, 0o666)
    return 0


def unload(names):
    if not os.path.exists(STATE_PATH):
        return 0
    busy = holders()
    if busy:
        # The first module named is the one the kernel refuses to remove.
        return err("Module %s is in use." % names[0])
    for name in device_files():
        try:
            os.unlink(os.path.join(DEV, name))
        except FileNotFoundError:
            pass
    os.unlink(STATE_PATH)
    return 0


def main(argv):
    remove = False
    quiet = False
    names = []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-v", "--verbose", "-a", "--all", "-b", "--use-blacklist"):
            continue
        elif arg.startswith("-"):
            return err("unsupported option %s (lab stand-in)" % arg)
        else:
            names.append(arg.replace("-", "_"))
    if not names:
        sys.stderr.write("modprobe: ERROR: missing parameters. See -h.\n")
        return 1
    others = [n for n in names if n not in NVIDIA_MODULES]
    if others:
        return 1 if quiet else err("Module %s not found in directory /lib/modules/%s" % (others[0], platform.release()))
    return unload(names) if remove else load()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
