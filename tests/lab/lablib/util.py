"""Small helpers: running commands, logging, waiting."""
import hashlib
import os
import subprocess
import sys
import time

VERBOSE = os.environ.get("HGPU_LAB_VERBOSE") == "1"


class LabError(Exception):
    """A lab step failed; the message says which and why."""


def log(msg):
    print("[lab] " + msg, flush=True)


def run(cmd, check=True, capture=True, input=None, timeout=None, env=None):
    """Run a command; return CompletedProcess (text). Raise LabError on failure when check."""
    if VERBOSE:
        log("$ " + " ".join(cmd))
    try:
        res = subprocess.run(cmd, input=input, text=True, timeout=timeout, env=env,
                             stdout=subprocess.PIPE if capture else None,
                             stderr=subprocess.PIPE if capture else None)
    except subprocess.TimeoutExpired:
        raise LabError("command timed out after %ss: %s" % (timeout, " ".join(cmd)))
    except FileNotFoundError:
        raise LabError("command not found: %s" % cmd[0])
    if check and res.returncode != 0:
        err = (res.stderr or "").strip() if capture else ""
        out = (res.stdout or "").strip() if capture else ""
        raise LabError("command failed (rc=%d): %s\n%s" % (
            res.returncode, " ".join(cmd), (err or out)[-3000:]))
    return res


def wait_for(what, probe, timeout, interval=0.5):
    """Call probe() until it returns a true value; raise LabError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            val = probe()
            if val:
                return val
        except Exception as exc:  # probes may fail while things start
            last = exc
        if time.monotonic() > deadline:
            raise LabError("timed out after %ss waiting for %s%s" % (
                timeout, what, (" (last error: %s)" % last) if last else ""))
        time.sleep(interval)


def hash_files(paths, extra=b""):
    """A short sha256 over file names and contents (directories walked in sorted order)."""
    h = hashlib.sha256(extra)
    for top in paths:
        if os.path.isdir(top):
            items = []
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames.sort()
                for f in sorted(filenames):
                    items.append(os.path.join(dirpath, f))
        else:
            items = [top]
        for p in items:
            h.update(os.path.relpath(p, os.path.dirname(top)).encode() + b"\0")
            st = os.stat(p)
            h.update(b"x" if st.st_mode & 0o111 else b"-")
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()[:16]


def write_if_changed(path, text, mode=0o644):
    """Write text to path only when it differs; return True when written."""
    try:
        with open(path) as fh:
            if fh.read() == text:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def die(msg):
    print("[lab] ERROR: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def safe_rmtree(top):
    """rmtree that first unmounts anything mounted below top (debootstrap mounts /proc)."""
    import shutil
    top = os.path.realpath(top)
    try:
        with open("/proc/mounts") as fh:
            mounts = [ln.split()[1] for ln in fh]
    except OSError:
        mounts = []
    for m in sorted(mounts, key=len, reverse=True):
        m = m.replace("\\040", " ")
        if m == top or m.startswith(top + "/"):
            subprocess.run(["umount", "-l", m], check=False)
    shutil.rmtree(top, ignore_errors=True)
