"""Node image: debootstrap rootfs -> `podman import` base -> `podman build` node image.
Each image is tagged with a hash of its inputs, so an unchanged tree is never rebuilt."""
import os
import tempfile

from . import config
from .util import hash_files, log, run, safe_rmtree


def _packages():
    with open(os.path.join(config.IMAGE_SRC, "packages.txt")) as fh:
        return [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]


def base_key():
    extra = ("%s|minbase|%s|" % (config.SUITE, config.MIRROR)).encode()
    return hash_files([os.path.join(config.IMAGE_SRC, "packages.txt")], extra)


def node_key():
    return hash_files([config.IMAGE_SRC], (base_key() + config.IMAGE_LABEL).encode())


def base_ref():
    return "%s:%s" % (config.BASE_IMAGE, base_key())


def node_ref():
    return "%s:%s" % (config.NODE_IMAGE, node_key())


def image_exists(ref):
    return run(["podman", "image", "exists", ref], check=False).returncode == 0


def _rootfs_tar():
    """Return the cached rootfs tarball, making it with debootstrap when absent."""
    cache = config.path("cache")
    os.makedirs(cache, exist_ok=True)
    tar = os.path.join(cache, "rootfs-%s.tar" % base_key())
    if os.path.exists(tar):
        return tar
    # A fresh directory each time: debootstrap refuses to extract over leftovers.
    rootfs = tempfile.mkdtemp(prefix="rootfs-%s." % base_key(), dir=cache)
    try:
        log("debootstrap %s (minbase + %d packages) ..." % (config.SUITE, len(_packages())))
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(_packages()),
             config.SUITE, rootfs, config.MIRROR], timeout=1800)
        pack_rootfs(rootfs, tar)
    finally:
        safe_rmtree(rootfs)
    return tar


def pack_rootfs(rootfs, tar):
    """Drop apt caches and lists from a debootstrap tree and tar it up."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        d = os.path.join(rootfs, sub)
        for f in os.listdir(d):
            p = os.path.join(d, f)
            if os.path.isfile(p) and f.endswith((".deb", "_Packages", "_InRelease", "_Release")):
                os.unlink(p)
    tmp = tar + ".tmp"
    run(["tar", "--numeric-owner", "--xattrs", "-C", rootfs, "-cf", tmp, "."], timeout=600)
    os.replace(tmp, tar)


def _image_id(ref):
    res = run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], check=False)
    return res.stdout.strip() if res.returncode == 0 else None


def tag_latest(ref):
    """Point NODE_IMAGE:latest (what Molecule scenarios use) at the current node image."""
    latest = config.NODE_IMAGE + ":latest"
    if _image_id(latest) != _image_id(ref):
        run(["podman", "tag", ref, latest])


def ensure_images():
    """Make sure the node image exists and is tagged :latest; return (ref, built: bool)."""
    ref = node_ref()
    if image_exists(ref):
        tag_latest(ref)
        return ref, False
    base = base_ref()
    if not image_exists(base):
        tar = _rootfs_tar()
        log("importing base image " + base)
        run(["podman", "import", tar, base], timeout=600)
    log("building node image " + ref)
    run(["podman", "build", "--network", "none", "--build-arg", "BASE=" + base,
         "--label", config.IMAGE_LABEL, "-t", ref, "-f",
         os.path.join(config.IMAGE_SRC, "Containerfile"), config.IMAGE_SRC], timeout=600)
    tag_latest(ref)
    _drop_stale(ref)
    return ref, True


def _drop_stale(ref):
    """Untag older node images (those still used by a container stay: no -f)."""
    res = run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", config.NODE_IMAGE], check=False)
    for old in res.stdout.split():
        if old not in (ref, config.NODE_IMAGE + ":latest"):
            run(["podman", "rmi", old], check=False)


def remove_images():
    """Remove every lab image and the rootfs cache (`lab down --purge`)."""
    for repo in (config.NODE_IMAGE, config.BASE_IMAGE):
        res = run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", repo], check=False)
        for ref in res.stdout.split():
            # No -f: an image still used by some other container (e.g. Molecule's) stays.
            r = run(["podman", "rmi", ref], check=False)
            if r.returncode != 0:
                log("kept %s: %s" % (ref, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "in use"))
    safe_rmtree(config.path("cache"))
