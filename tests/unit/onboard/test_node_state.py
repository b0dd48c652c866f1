"""node_state: the one reading of units, packages and nft tables that onboarding's baseline,
removal's checks and its restore step share. Each case states what a line must parse to."""
import shutil
import subprocess

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state

LIST_UNITS = """\
chrony.service                 loaded active running chrony, an NTP client/server
dbus.service                   loaded active running D-Bus System Message Bus
slurmd.service                 loaded active running Slurm node daemon

"""

DPKG = """\
nvidia-driver-535 ii  535.216.03-1
nvidia-driver-550 hi  550.163.01-1
hybridgpu-node-agent rc  0.1.0-1
nccl-tests iF  2.13.9-1
old-exporter ri  1.0-1
broken-pkg iiR 2.0-1
purged-pkg un
libc6:amd64 ii  2.36-9+deb12u9
"""

RULESET = """\
table inet filter {
\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t}
}
table ip nat {
}
table inet hybridgpu {
}
"""


def test_active_units_are_the_first_column():
    assert node_state.active_units(LIST_UNITS) == ["chrony.service", "dbus.service", "slurmd.service"]
    assert node_state.active_units("") == []


def test_nft_tables_from_list_tables_and_from_a_ruleset():
    listing = "table inet filter\ntable ip nat\ntable inet hybridgpu\n"
    want = [("inet", "filter"), ("ip", "nat"), ("inet", "hybridgpu")]
    assert node_state.nft_tables(listing) == want
    assert node_state.nft_tables(RULESET) == want
    assert node_state.nft_tables("") == []


@pytest.mark.parametrize("name, abbrev, is_configured, is_present", [
    ("nvidia-driver-535", "ii", True, True),       # installed
    ("nvidia-driver-550", "hi", True, True),       # held (apt-mark hold): still installed
    ("hybridgpu-node-agent", "rc", False, False),  # removed, configuration files left
    ("nccl-tests", "iF", False, True),            # half-configured: files on disk
    ("old-exporter", "ri", True, True),            # marked for removal, not removed yet
    ("broken-pkg", "iiR", True, True),             # reinstallation required, still installed
    ("purged-pkg", "un", False, False),            # known to dpkg, not installed
    ("libc6", "ii", True, True),                   # architecture qualifier dropped
])
def test_dpkg_status_lines(name, abbrev, is_configured, is_present):
    status = node_state.dpkg_status(DPKG)
    assert status[name][0] == abbrev
    assert node_state.configured(abbrev) is is_configured
    assert node_state.present(abbrev) is is_present


def test_installed_versions_only_for_configured_packages():
    wanted = ["nvidia-driver-535", "nvidia-driver-550", "hybridgpu-node-agent", "nccl-tests",
              "old-exporter", "purged-pkg", "libc6", "never-heard-of"]
    assert node_state.installed_versions(DPKG, wanted) == {
        "nvidia-driver-535": "535.216.03-1", "nvidia-driver-550": "550.163.01-1",
        "hybridgpu-node-agent": None, "nccl-tests": None, "old-exporter": "1.0-1",
        "purged-pkg": None, "libc6": "2.36-9+deb12u9", "never-heard-of": None}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (Debian control host)")
def test_real_dpkg_query_output():
    # One call for several names, one of them unknown: rc 1, the known one still listed.
    res = subprocess.run(["dpkg-query", "-W", "-f=" + node_state.DPKG_QUERY_FORMAT, "dpkg", "no-such-package-hgpu"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "no-such-package-hgpu" in res.stderr
    got = node_state.installed_versions(res.stdout, ["dpkg", "no-such-package-hgpu"])
    assert got["no-such-package-hgpu"] is None
    assert got["dpkg"] and got["dpkg"][0].isdigit()
