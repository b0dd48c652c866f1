"""Rendering of the owned nftables table; the output is checked by the real `nft -c`."""
import os
import shutil
import subprocess

import pytest

import hgpu_testenv

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import nft

BASE = {
    "management_sources": ["10.213.77.1/32"],
    "inbound": [
        {"name": "node-exporter", "protocol": "tcp", "ports": [9100], "sources": ["10.213.77.1/32"]},
        {"name": "nccl", "protocol": "tcp", "ports": ["40000-40100", 22222], "sources": ["10.213.77.0/28", "fd00::/64"]},
    ],
    "egress": {"enforce": True, "allow": [{"name": "api", "dest": "10.213.77.1", "ports": [6443, 7443]}]},
}


def nft_check(text):
    binary = shutil.which("nft") or "/usr/sbin/nft"
    return subprocess.run([binary, "-c", "-f", "-"], input=text, capture_output=True, text=True, check=False)


def test_render_is_accepted_by_nft():
    text = nft.render(BASE)
    assert "policy drop" in text
    assert 'ip saddr 10.213.77.1/32 tcp dport 22 accept comment "management-ssh"' in text
    assert 'ip saddr 10.213.77.0/28 tcp dport { 22222, 40000-40100 } accept comment "nccl"' in text
    assert 'ip6 saddr fd00::/64 tcp dport { 22222, 40000-40100 } accept comment "nccl"' in text
    assert 'ip daddr 10.213.77.1/32 tcp dport { 6443, 7443 } accept comment "api"' in text
    # replies of the management SSH pass the output chain even when picked up mid-stream
    assert 'ip daddr 10.213.77.1/32 tcp sport 22 accept comment "management-ssh-replies"' in text
    # frag-needed (destination-unreachable) and packet-too-big stay open for PMTU discovery
    assert "destination-unreachable" in text and "packet-too-big" in text
    res = nft_check(text)
    assert res.returncode == 0, res.stderr


def test_render_is_deterministic_and_order_independent():
    a = nft.render(BASE)
    shuffled = dict(BASE, inbound=[dict(BASE["inbound"][1], sources=["fd00::/64", "10.213.77.0/28"]),
                                   BASE["inbound"][0]])
    assert nft.render(BASE) == a
    assert sorted(nft.render(shuffled).splitlines()) == sorted(a.splitlines())


def test_no_output_chain_without_enforce():
    text = nft.render(dict(BASE, egress={"enforce": False, "allow": []}))
    assert "hook output" not in text
    assert nft_check(text).returncode == 0


@pytest.mark.parametrize("change, message", [
    ({"management_sources": []}, "management_sources: empty"),
    ({"control_address": "10.213.77.50"}, "the control host connects from 10.213.77.50"),
    ({"inbound": [{"name": "x", "ports": [80], "sources": ["0.0.0.0/0"]}]}, "opens the port to every address"),
    ({"inbound": [{"name": "x", "ports": [80]}]}, "inbound[0].sources: a narrowest source is required"),
    ({"inbound": [{"name": "x", "ports": [70000], "sources": ["10.0.0.0/8"]}]}, "inbound[0].ports[0]"),
    ({"inbound": [{"name": "x", "ports": [80], "sources": ["10.0.0.300/32"]}]}, "inbound[0].sources[0]"),
    ({"inbound": [{"name": "x", "ports": [80], "sources": ["10.0.0.0/8"], "prot": "tcp"}]}, "unknown key(s): prot"),
    ({"egress": {"allow": [{"ports": [1]}]}}, "egress.allow[0].dest: required"),
    ({"bogus": 1}, "unknown key(s): bogus"),
])
def test_bad_input_names_the_field(change, message):
    with pytest.raises(nft.RulesetError) as err:
        nft.render(dict(BASE, **change))
    assert message in str(err.value)


def test_control_address_covered():
    assert "management-ssh" in nft.render(dict(BASE, control_address="10.213.77.1"))


def test_canonical_listing_blanks_counters():
    a = "table inet x {\n  chain input {\n    counter packets 5 bytes 300 comment \"c\"\n  }\n}\n"
    b = a.replace("packets 5 bytes 300", "packets 9 bytes 999")
    assert nft.canonical_listing(a) == nft.canonical_listing(b)


@pytest.mark.parametrize("env, refused", [
    ({"SSH_CONNECTION": "10.213.77.50 41822 10.213.77.9 22"}, True),
    ({"SSH_CLIENT": "10.213.77.50 41822 22"}, True),
    ({"SSH_CONNECTION": "10.213.77.1 41822 10.213.77.9 22"}, False),
    ({}, False),
])
def test_the_module_checks_the_address_of_its_own_ssh_session(tmp_path, env, refused):
    """control_address_from_session: the address comes from the module's SSH session, so the
    management sources must cover it without gathered facts; outside a session nothing is checked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # an nft that accepts every ruleset and lists an empty table: the run gets past the address check
    (bin_dir / "nft").write_text("#!/bin/sh\ncat > /dev/null\nexit 0\n")
    (bin_dir / "nft").chmod(0o755)
    base_env = {k: v for k, v in os.environ.items() if k not in ("SSH_CONNECTION", "SSH_CLIENT")}
    args = {"table": "hgputest", "management_sources": ["10.213.77.1/32"], "control_address_from_session": True,
            "state_dir": str(tmp_path / "state"), "unit_dir": str(tmp_path / "units")}
    got = hgpu_testenv.run_module("nft_ruleset", args, check_mode=True,
                                  env=dict(base_env, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"], **env),
                                  clean_env=True)
    if refused:
        assert got.get("failed") and "the control host connects from 10.213.77.50" in got["msg"], got
    else:
        assert not got.get("failed"), got
    off = hgpu_testenv.run_module("nft_ruleset", dict(args, control_address_from_session=False), check_mode=True,
                                  env=dict(base_env, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"], **env),
                                  clean_env=True)
    assert not off.get("failed"), off
