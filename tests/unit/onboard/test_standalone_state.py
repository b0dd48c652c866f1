"""standalone_state: the package lines it parses are what dpkg-query prints."""
import shutil
import subprocess

import pytest

from ansible_collections.hybridgpu.fleet.plugins.modules.standalone_state import package_versions

FMT = "-f=${Package} ${Status} ${Version}\n"


def test_installed_removed_and_unknown_packages():
    lines = [
        "nvidia-driver-535 install ok installed 535.216.03-1",
        "nvidia-driver-550 hold ok installed 550.163.01-1",  # apt-mark hold: still installed
        "hybridgpu-node-agent deinstall ok config-files 0.1.0-1",  # removed, config left
        "nccl-tests install ok half-configured 2.13.9-1",
        "libc6:amd64 install ok installed 2.36-9+deb12u9",
    ]
    wanted = ["nvidia-driver-535", "nvidia-driver-550", "hybridgpu-node-agent", "nccl-tests", "libc6",
              "prometheus-node-exporter"]
    assert package_versions(lines, wanted) == {
        "nvidia-driver-535": "535.216.03-1", "nvidia-driver-550": "550.163.01-1",
        "hybridgpu-node-agent": None, "nccl-tests": None,
        "libc6": "2.36-9+deb12u9", "prometheus-node-exporter": None}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (Debian control host)")
def test_real_dpkg_query_output():
    # One call for several names, one of them unknown: rc 1, the known one still listed.
    res = subprocess.run(["dpkg-query", "-W", FMT, "dpkg", "no-such-package-hgpu"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "no-such-package-hgpu" in res.stderr
    got = package_versions(res.stdout.splitlines(), ["dpkg", "no-such-package-hgpu"])
    assert got["no-such-package-hgpu"] is None
    assert got["dpkg"] and got["dpkg"][0].isdigit()
