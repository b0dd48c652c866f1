"""Build the execution environment from execution-environment.yml and prove it.

No registry is reachable here, so the build runs FROM the lab's local Debian 12 base image
(build arg EE_BASE_IMAGE) and every pip install reads wheels that `pip download` put into the
build context on the host (the host's pip configuration reaches its local indexes). The work
folder build/ee/ and podman's layer cache are kept between runs: only the collection layer
is rebuilt when the checkout changes. Inside the image, `ansible-playbook --syntax-check`
runs on every playbook of the installed collection.
"""
import fcntl
import glob
import os
import shutil
import subprocess
import sys

import pytest
import yaml


pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
WORK = os.path.join(ROOT, "build", "ee")
TAG = "localhost/hybridgpu-fleet-ee:test"


class _Loader(yaml.SafeLoader):
    """Safe loader that reads Ansible's tags (!unsafe in the credential injectors) as strings."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node))
# Playbooks AWX runs in the EE. Those that AWX does not run (awx_apply.yml configures AWX
# from a control host and needs awx.awx, which the EE does not carry) are listed in
# awx/controller.yml as awx_not_templated_playbooks.
with open(os.path.join(ROOT, "awx", "controller.yml")) as _fh:
    NOT_IN_EE = set(yaml.load(_fh, Loader=_Loader)["awx_not_templated_playbooks"])
PLAYBOOKS = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
                   if os.path.basename(p) not in NOT_IN_EE)


def run(cmd, cwd=ROOT, timeout=900, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env, check=False)
    assert res.returncode == 0, "%s failed (rc=%d):\n%s\n%s" % (
        " ".join(cmd), res.returncode, res.stdout[-4000:], res.stderr[-4000:])
    return res


def _ee():
    with open(os.path.join(ROOT, "execution-environment.yml")) as fh:
        return yaml.safe_load(fh)


def _pip_pins(ee):
    """Everything pip installs in the build: the EE's own pins plus ansible-builder's helpers."""
    deps = ee["dependencies"]
    pins = [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"]]
    return pins + ["pip", "setuptools", "wheel", "bindep", "pyyaml", "packaging", "dumb-init==1.2.5"]


def test_ee_definition_pins_what_the_control_host_runs():
    ee = _ee()
    assert ee["version"] == 3
    deps = ee["dependencies"]
    with open(os.path.join(ROOT, "requirements.txt")) as fh:
        reqs = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    assert deps["python"] == "requirements.txt"
    assert all("==" in r for r in reqs), "requirements.txt must pin exact versions: %s" % reqs
    core = next(r for r in reqs if r.startswith("ansible-core=="))
    assert deps["ansible_core"]["package_pip"] == core
    with open(os.path.join(ROOT, deps["galaxy"])) as fh:
        galaxy = yaml.safe_load(fh)
    with open(os.path.join(ROOT, "galaxy.yml")) as fh:
        version = yaml.safe_load(fh)["version"]
    names = [c["name"] for c in galaxy["collections"]]
    assert any(n.endswith("hybridgpu-fleet-%s.tar.gz" % version) for n in names), names


@pytest.fixture(scope="module")
def ee_image(lab):
    return build_ee_image()


def build_ee_image():
    """Build TAG from this checkout (also used by test_awx_runner.py); needs the lab's base image.
    Two lanes building at once take turns on a lock in the work folder."""
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, "build.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build()


def _build():
    from lablib import image  # noqa: E402  (tests/lab is on sys.path via conftest)
    base = image.base_ref()
    assert image.image_exists(base), "lab base image %s missing: run tests/lab/lab up" % base
    ee = _ee()
    ctx_src = os.path.join(WORK, "src")
    os.makedirs(ctx_src, exist_ok=True)
    # The EE definition and its files, with the tarball and wheels beside them.
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), ctx_src)
    shutil.copy(os.path.join(ROOT, "requirements.txt"), ctx_src)
    shutil.copytree(os.path.join(ROOT, "execution-environment"), os.path.join(ctx_src, "execution-environment"),
                    dirs_exist_ok=True, ignore=shutil.ignore_patterns("wheels", "*.tar.gz", ".gitignore"))
    for old in glob.glob(os.path.join(ctx_src, "execution-environment", "*.tar.gz")):
        os.unlink(old)
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--force", "--output-path",
         os.path.join(ctx_src, "execution-environment"), ROOT])
    wheels = os.path.join(ctx_src, "execution-environment", "wheels")
    stamp = os.path.join(wheels, ".pins")
    pins = "\n".join(_pip_pins(ee)) + "\n" + open(os.path.join(ROOT, "requirements.txt")).read()
    if not os.path.exists(stamp) or open(stamp).read() != pins:
        shutil.rmtree(wheels, ignore_errors=True)
        run([os.path.join(BIN, "pip"), "download", "--quiet", "--only-binary=:all:", "--dest", wheels,
             "--python-version", "3.11", "-r", os.path.join(ROOT, "requirements.txt"), *_pip_pins(ee)],
            timeout=900)
        with open(stamp, "w") as fh:
            fh.write(pins)
    ctx = os.path.join(WORK, "context")
    run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", ctx,
         "--output-filename", "Containerfile"], cwd=ctx_src)
    run(["podman", "build", "--network", "none", "--layers",
         "--build-arg", "EE_BASE_IMAGE=" + base,
         "--build-arg", "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=--offline --no-deps",
         "-t", TAG, "-f", os.path.join(ctx, "Containerfile"), ctx], timeout=900)
    return TAG


def in_image(tag, script, timeout=300):
    return subprocess.run(["podman", "run", "--rm", "--network", "none", tag, "bash", "-c", script],
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_ee_has_the_pinned_stack(ee_image):
    res = in_image(ee_image, "ansible --version | head -1; python3 -c 'import kubernetes, netaddr, jmespath; "
                             "print(kubernetes.__version__, netaddr.__version__)'; ansible-galaxy collection list "
                             "hybridgpu.fleet")
    assert res.returncode == 0, res.stdout + res.stderr
    with open(os.path.join(ROOT, "requirements.txt")) as fh:
        pins = dict(ln.strip().split("==") for ln in fh if "==" in ln)
    assert "core %s]" % pins["ansible-core"] in res.stdout, res.stdout
    assert pins["kubernetes"] in res.stdout and pins["netaddr"] in res.stdout, res.stdout
    assert "hybridgpu.fleet" in res.stdout and "/usr/share/ansible/collections" in res.stdout, res.stdout


def test_every_playbook_passes_syntax_check_inside_the_ee(ee_image):
    assert PLAYBOOKS
    script = "; ".join("ansible-playbook -i localhost, --syntax-check hybridgpu.fleet.%s >/tmp/out 2>&1 "
                       "|| { echo FAIL %s; cat /tmp/out; }" % (p, p) for p in PLAYBOOKS)
    res = in_image(ee_image, script)
    assert res.returncode == 0 and "FAIL" not in res.stdout, res.stdout + res.stderr
