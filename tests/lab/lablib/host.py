"""Host prerequisites: Debian packages and the podman runtime settings from lab-notes."""
import glob
import os
import shutil
import tomllib

from .util import log, run, write_if_changed

# prometheus: the lab's telemetry; iputils-ping and faketime: preflight probes from the control
# host and the clock-offset drill.
APT_PACKAGES = ["podman", "runc", "debootstrap", "nftables", "dpkg-dev", "openssh-client", "rsync",
                "iputils-ping", "faketime", "prometheus"]

# The crun rlimit / hybrid-cgroup fix measured in docs (lab-notes.md).
PODMAN_SETTINGS = {
    ("containers", "default_ulimits"): ["nofile=1024:1024", "nproc=1024:1024"],
    ("engine", "cgroup_manager"): "cgroupfs",
    ("engine", "runtime"): "runc",
}
DROPIN = "/etc/containers/containers.conf.d/50-hybridgpu-lab.conf"
DROPIN_TEXT = """# Written by hybridgpu lab (tests/lab/lab): crun cannot set rlimits or use the
# hybrid cgroup layout on these machines, runc with cgroupfs works.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""


def missing_packages():
    res = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n"] + APT_PACKAGES,
              check=False)
    ok = {line.split()[0] for line in res.stdout.splitlines()
          if len(line.split()) > 1 and line.split()[1].startswith("ii")}
    return [p for p in APT_PACKAGES if p not in ok]


def ensure_packages():
    missing = missing_packages()
    if not missing:
        return False
    log("installing host packages: " + " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], env=env, timeout=600)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
         "-o", "Dpkg::Options::=--force-confold"] + missing, env=env, timeout=1200)
    return True


def effective_podman_conf(etc="/etc/containers", usr="/usr/share/containers"):
    """Merge containers.conf and its drop-ins the way podman 4.3 does
    (drop-ins in lexical order override the main file, key by key)."""
    merged = {}
    files = [os.path.join(usr, "containers.conf"), os.path.join(etc, "containers.conf")]
    files += sorted(glob.glob(os.path.join(etc, "containers.conf.d", "*.conf")))
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = tomllib.load(fh)
        except (FileNotFoundError, tomllib.TOMLDecodeError):
            continue
        for table, values in data.items():
            if isinstance(values, dict):
                for key, val in values.items():
                    merged[(table, key)] = val
    return merged


def podman_conf_ok(merged):
    return all(merged.get(k) == v for k, v in PODMAN_SETTINGS.items())


def ensure_podman_conf():
    """podman 4.3 honours /etc/containers/containers.conf.d/ (checked on this machine),
    so the settings go into a drop-in, written only when not already in effect."""
    if podman_conf_ok(effective_podman_conf()):
        return False
    log("writing podman settings to " + DROPIN)
    write_if_changed(DROPIN, DROPIN_TEXT)
    return True


# Every node runs systemd, which holds several inotify instances: Debian's default of 128 per
# user runs out at about two dozen nodes (their units then fail to boot).
INOTIFY = {"fs.inotify.max_user_instances": 8192, "fs.inotify.max_user_watches": 524288}


def ensure_inotify():
    """Raise the host's inotify limits to INOTIFY where they are lower (until the next boot)."""
    raised = []
    for key, want in INOTIFY.items():
        path = "/proc/sys/" + key.replace(".", "/")
        with open(path) as fh:
            have = int(fh.read().split()[0])
        if have < want:
            with open(path, "w") as fh:
                fh.write("%d\n" % want)
            raised.append("%s %d -> %d" % (key, have, want))
    if raised:
        log("raised " + ", ".join(raised))
    return bool(raised)


def ensure_host():
    if shutil.which("apt-get") is None:
        raise SystemExit("the lab needs a Debian host (apt-get not found)")
    changed = ensure_packages()
    changed = ensure_podman_conf() or changed
    changed = ensure_inotify() or changed
    return changed
