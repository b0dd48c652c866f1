#!/usr/bin/env python3
"""Build the lab's Debian packages and a flat apt repository index.

    tests/lab/packages/build.py OUTDIR        (or: build_all(outdir) from Python)

Every package is `Architecture: all` and built with `dpkg-deb --build --root-owner-group`.
OUTDIR then holds the .deb files, `Packages`, `Packages.gz` and a `Release` file, so a node
can use `deb [trusted=yes] file:/srv/hybridgpu-apt ./`.

Packages:
- the driver branches (defined in DRIVERS below), each shipping the nvidia-smi stand-in and
  /usr/lib/hybridgpu-lab/driver.json;
- every `<dir>/package.json` next to this file (nccl-tests, hybridgpu-node-agent, and any
  package another part of the lab adds the same way);
- real Debian packages named in debian-packages.txt (nodes cannot reach a Debian mirror):
  `apt-get download` fetches them on the host into a cache directory (default: `debian-cache`
  next to OUTDIR, i.e. .lab/debian-cache), and they are copied into OUTDIR unchanged.

The build is deterministic (fixed mtimes, SOURCE_DATE_EPOCH, sorted inputs) and skipped when
a content hash of all inputs matches the one recorded in OUTDIR/.build-hash.
Needs dpkg-deb and dpkg-scanpackages (Debian package dpkg-dev).
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH = 1735689600  # 2025-01-01T00:00:00Z: fixed mtime for every file and the Release date
MAINTAINER = "hybridgpu lab <lab@hybridgpu.invalid>"
HASH_FILE = ".build-hash"
DEBIAN_LIST = os.path.join(HERE, "debian-packages.txt")

# Driver branches: (branch, version, highest CUDA version the driver supports).
# CUDA per branch as in NVIDIA's CUDA toolkit release notes (toolkit/driver table):
# R535 shipped with CUDA 12.2, R550 with 12.4, R570 with 12.8.
DRIVERS = [
    ("535", "535.230.02", "12.2"),
    ("535", "535.247.01", "12.2"),  # a later release of the same branch: in-branch upgrade
    ("550", "550.163.01", "12.4"),
    ("570", "570.172.08", "12.8"),
]
DEB_REVISION = "1"


def driver_packages():
    """Package definitions for the driver branches."""
    branches = sorted({branch for branch, _, _ in DRIVERS})
    packages = []
    for branch, version, cuda in DRIVERS:
        others = ", ".join("nvidia-driver-%s" % b for b in branches if b != branch)
        packages.append({
            "name": "nvidia-driver-%s" % branch,
            "version": "%s-%s" % (version, DEB_REVISION),
            "section": "non-free/kernel",
            "depends": "python3",
            "provides": "nvidia-driver (= %s)" % version,
            "conflicts": others,
            "replaces": others,
            "description": "NVIDIA driver %s (hybridgpu lab stand-in)\n"
                           " Lab stand-in for the NVIDIA %s driver branch (CUDA %s): ships an\n"
                           " nvidia-smi that reports the GPUs of /etc/hybridgpu-lab/gpu-spec.json."
                           % (version, branch, cuda),
            "files": [
                {"src": os.path.join(HERE, "nvidia-smi", "nvidia_smi.py"),
                 "dest": "/usr/bin/nvidia-smi", "mode": 0o755},
                {"data": json.dumps({"branch": branch, "version": version, "cuda": cuda},
                                    sort_keys=True) + "\n",
                 "dest": "/usr/lib/hybridgpu-lab/driver.json", "mode": 0o644},
            ],
        })
    return packages


def fabricmanager_packages():
    """nvidia-fabricmanager-<branch> for every driver version, in lockstep with it (NVIDIA
    publishes one fabric manager per driver version): the nv-fabricmanager stand-in, its
    unit and /usr/lib/hybridgpu-lab/fabricmanager.json with the version."""
    here = os.path.join(HERE, "fabricmanager")
    packages = []
    for branch, version, _ in DRIVERS:
        # One fabric manager at a time, as NVIDIA's packages: each conflicts with the other branches.
        others = ", ".join("nvidia-fabricmanager-%s" % b for b, _v, _x in DRIVERS if b != branch)
        packages.append({
            "name": "nvidia-fabricmanager-%s" % branch,
            "version": "%s-%s" % (version, DEB_REVISION),
            "section": "non-free/utils",
            "depends": "python3",
            "conflicts": others,
            "replaces": others,
            "description": "NVIDIA fabric manager %s (hybridgpu lab stand-in)\n"
                           " Lab stand-in for NVSwitch systems: prints the real version line and, as a\n"
                           " service, runs only with the same driver version." % version,
            "files": [
                {"src": os.path.join(here, "nv_fabricmanager.py"), "dest": "/usr/bin/nv-fabricmanager", "mode": 0o755},
                {"src": os.path.join(here, "nvidia-fabricmanager.service"),
                 "dest": "/lib/systemd/system/nvidia-fabricmanager.service", "mode": 0o644},
                {"data": json.dumps({"version": version}) + "\n",
                 "dest": "/usr/lib/hybridgpu-lab/fabricmanager.json", "mode": 0o644},
            ],
            "postinst": "postinst", "prerm": "prerm",
            "_from": os.path.join(here, "postinst"),
        })
    return packages


def dir_packages():
    """Package definitions from <dir>/package.json files."""
    packages = []
    for path in sorted(glob.glob(os.path.join(HERE, "*", "package.json"))):
        with open(path, encoding="utf-8") as handle:
            pkg = json.load(handle)
        base = os.path.dirname(path)
        for entry in pkg.get("files", []):
            entry["src"] = os.path.join(base, entry["src"])
            entry["mode"] = int(str(entry.get("mode", "0644")), 8)
        pkg["_from"] = path
        packages.append(pkg)
    return packages


def all_packages():
    return driver_packages() + fabricmanager_packages() + dir_packages()


def debian_names(path=DEBIAN_LIST):
    """Package names from the Debian list file (one a line, `#` comments)."""
    if not os.path.exists(path):
        return []
    names = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name = line.split("#", 1)[0].strip()
            if name and name not in names:
                names.append(name)
    return names


def cached_debs(cache, name):
    """Paths of the cached .deb files of package `name` (any version, any architecture)."""
    return sorted(glob.glob(os.path.join(glob.escape(cache), glob.escape(name) + "_*.deb")))


def fetch_debian(cache, names, env=None):
    """`apt-get download` every listed package that has no .deb in the cache yet.
    Runs `apt-get update` once and retries when the host's package lists lack one."""
    os.makedirs(cache, exist_ok=True)
    missing = [n for n in names if not cached_debs(cache, n)]
    if not missing:
        return []
    cmd = ["apt-get", "download", "-q"] + missing
    res = subprocess.run(cmd, cwd=cache, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
        res = subprocess.run(cmd, cwd=cache, env=env, capture_output=True, text=True)
    still = [n for n in missing if not cached_debs(cache, n)]
    if res.returncode != 0 or still:
        raise RuntimeError("apt-get download %s (in %s) failed: %s"
                           % (" ".join(missing), cache, (res.stderr or res.stdout).strip()))
    return missing


def debian_debs(cache, names):
    """{file name: path} of the cached .debs of the listed packages; a listed package with
    nothing in the cache is an error naming the list file."""
    found, absent = {}, []
    for name in names:
        paths = cached_debs(cache, name)
        if not paths:
            absent.append(name)
        for path in paths:
            found[os.path.basename(path)] = path
    if absent:
        raise RuntimeError("%s lists %s but %s holds no .deb for it (run build.py without "
                           "--no-download, or apt-get download it there)"
                           % (os.path.basename(DEBIAN_LIST), ", ".join(absent), cache))
    return found


def deb_name(pkg):
    return "%s_%s_all.deb" % (pkg["name"], pkg["version"])


def control_text(pkg, installed_kib):
    fields = [("Package", pkg["name"]), ("Version", pkg["version"]), ("Architecture", "all"),
              ("Maintainer", pkg.get("maintainer", MAINTAINER)),
              ("Installed-Size", str(installed_kib)),
              ("Section", pkg.get("section", "misc")), ("Priority", "optional")]
    for key in ("depends", "provides", "conflicts", "replaces", "breaks"):
        if pkg.get(key):
            fields.append((key.capitalize(), pkg[key]))
    fields.append(("Description", pkg["description"]))
    return "".join("%s: %s\n" % kv for kv in fields)


def inputs_hash(packages, debian=None):
    """Hash of everything that goes into the repository (sources, definitions, this script,
    the bytes of the copied Debian packages)."""
    digest = hashlib.sha256()
    for name in sorted(debian or {}):
        with open(debian[name], "rb") as handle:
            digest.update(b"debian\0" + name.encode() + b"\0" + hashlib.sha256(handle.read()).digest())
    with open(os.path.abspath(__file__), "rb") as handle:
        digest.update(handle.read())
    for pkg in packages:
        digest.update(json.dumps({k: v for k, v in pkg.items() if k != "files"},
                                 sort_keys=True).encode())
        for entry in pkg["files"]:
            digest.update(entry["dest"].encode() + b"\0" + oct(entry["mode"]).encode())
            if "src" in entry:
                with open(entry["src"], "rb") as handle:
                    digest.update(handle.read())
            else:
                digest.update(entry["data"].encode())
    return digest.hexdigest()


def _stage(pkg, root):
    size = 0
    for entry in pkg["files"]:
        dest = os.path.join(root, entry["dest"].lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if "src" in entry:
            shutil.copyfile(entry["src"], dest)
        else:
            with open(dest, "w", encoding="utf-8") as handle:
                handle.write(entry["data"])
        os.chmod(dest, entry["mode"])
        size += os.path.getsize(dest)
    debian = os.path.join(root, "DEBIAN")
    os.makedirs(debian, exist_ok=True)
    if pkg.get("conffiles"):
        with open(os.path.join(debian, "conffiles"), "w", encoding="utf-8") as handle:
            handle.write("".join(c + "\n" for c in pkg["conffiles"]))
    for script in ("postinst", "prerm", "postrm", "preinst"):
        if pkg.get(script):
            path = os.path.join(debian, script)
            shutil.copyfile(os.path.join(os.path.dirname(pkg["_from"]), pkg[script]), path)
            os.chmod(path, 0o755)
    with open(os.path.join(debian, "control"), "w", encoding="utf-8") as handle:
        handle.write(control_text(pkg, max(1, (size + 1023) // 1024)))
    # Directories 0755, fixed mtimes everywhere: byte-identical rebuilds.
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (EPOCH, EPOCH), follow_symlinks=False)
    os.utime(root, (EPOCH, EPOCH))


def build_deb(pkg, outdir, env):
    with tempfile.TemporaryDirectory(prefix="hgpu-deb-") as tmp:
        root = os.path.join(tmp, "root")
        os.makedirs(root)
        os.chmod(root, 0o755)
        _stage(pkg, root)
        target = os.path.join(outdir, deb_name(pkg))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, target],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    return target


def write_index(outdir, env, arches=("all",)):
    """Packages, Packages.gz and Release for a flat repository."""
    result = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=outdir, env=env,
                            check=True, capture_output=True, text=True)
    packages = result.stdout
    with open(os.path.join(outdir, "Packages"), "w", encoding="utf-8") as handle:
        handle.write(packages)
    with open(os.path.join(outdir, "Packages.gz"), "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(packages.encode())
    lines = ["Origin: hybridgpu-lab", "Label: hybridgpu-lab", "Architectures: " + " ".join(arches),
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(EPOCH))]
    for algo, title in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        lines.append(title + ":")
        for name in ("Packages", "Packages.gz"):
            path = os.path.join(outdir, name)
            with open(path, "rb") as handle:
                digest = hashlib.new(algo, handle.read()).hexdigest()
            lines.append(" %s %d %s" % (digest, os.path.getsize(path), name))
    with open(os.path.join(outdir, "Release"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def deb_arch(name):
    """Architecture part of a Debian file name (name_version_arch.deb)."""
    return name[:-len(".deb")].rsplit("_", 1)[-1]


def build_all(outdir, force=False, debian_cache=None, debian_list=DEBIAN_LIST):
    """Build every package into outdir; return {'built': bool, 'debs': [file names]}.
    With debian_cache, the .debs of the packages in debian_list are taken from that
    directory (fetch_debian() fills it) and copied in as they are."""
    outdir = os.path.abspath(outdir)
    os.makedirs(outdir, exist_ok=True)
    packages = all_packages()
    debian = debian_debs(debian_cache, debian_names(debian_list)) if debian_cache else {}
    names = sorted([deb_name(p) for p in packages] + list(debian))
    if len(set(names)) != len(names):
        raise ValueError("two package definitions produce the same .deb file")
    want = inputs_hash(packages, debian)
    hash_path = os.path.join(outdir, HASH_FILE)
    current = None
    if os.path.exists(hash_path):
        with open(hash_path, encoding="utf-8") as handle:
            current = handle.read().strip()
    present = all(os.path.exists(os.path.join(outdir, n)) for n in names + ["Packages", "Packages.gz"])
    if not force and current == want and present:
        return {"built": False, "debs": names}
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), LC_ALL="C", TZ="UTC")
    # Drop stale .debs (renamed or removed packages) so the index lists exactly this set.
    for old in glob.glob(os.path.join(outdir, "*.deb")):
        if os.path.basename(old) not in names:
            os.unlink(old)
    for pkg in packages:
        build_deb(pkg, outdir, env)
    for name, path in sorted(debian.items()):
        shutil.copyfile(path, os.path.join(outdir, name))
    arches = ["all"] + sorted({deb_arch(n) for n in debian} - {"all"})
    write_index(outdir, env, arches)
    with open(hash_path, "w", encoding="utf-8") as handle:
        handle.write(want + "\n")
    return {"built": True, "debs": names}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", help="apt repository directory to write")
    parser.add_argument("--force", action="store_true", help="rebuild even if inputs are unchanged")
    parser.add_argument("--debian-cache", help="where the Debian packages of debian-packages.txt "
                        "are downloaded (default: debian-cache next to OUTDIR)")
    parser.add_argument("--no-download", action="store_true",
                        help="use only what the cache holds (fails if a listed package is missing)")
    args = parser.parse_args(argv)
    cache = args.debian_cache or os.path.join(os.path.dirname(os.path.abspath(args.outdir)),
                                              "debian-cache")
    for tool in ("dpkg-deb", "dpkg-scanpackages"):
        if shutil.which(tool) is None:
            sys.stderr.write("build.py: %s not found; install the Debian package dpkg-dev\n" % tool)
            return 2
    try:
        names = debian_names()
        if names and not args.no_download:
            fetched = fetch_debian(cache, names)
            if fetched:
                print("downloaded %s into %s" % (" ".join(fetched), cache))
        result = build_all(args.outdir, force=args.force, debian_cache=cache)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        sys.stderr.write("build.py: %s\n" % exc)
        return 1
    print("%s %d packages in %s" % ("built" if result["built"] else "up to date:",
                                     len(result["debs"]), os.path.abspath(args.outdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
