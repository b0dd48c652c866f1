"""CIDR overlap: sweep results, relations, IPv6, errors, and sweep == brute force."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import cidr

ONPREM = [
    {"name": "nodes", "cidr": "10.213.77.0/24", "kind": "node"},
    {"name": "pods", "cidr": "10.244.0.0/16", "kind": "pod"},
    {"name": "services", "cidr": "10.96.0.0/12", "kind": "service"},
    {"name": "mgmt", "cidr": "192.168.10.0/24", "kind": "management"},
    {"name": "v6-nodes", "cidr": "fd00:77::/64", "kind": "node"},
]


def _names(pairs):
    return [(p["a"]["name"], p["b"]["name"], p["relation"]) for p in pairs]


def test_vpc_containing_onprem_range():
    pairs = cidr.overlaps(ONPREM, [{"name": "default-vpc", "cidr": "10.0.0.0/8", "kind": "vpc"}])
    assert _names(pairs) == [("nodes", "default-vpc", "contained_by"),
                             ("pods", "default-vpc", "contained_by"),
                             ("services", "default-vpc", "contained_by")]
    assert pairs[0]["overlap"] == "10.213.77.0-10.213.77.255"


def test_adjacent_is_not_overlap():
    assert cidr.overlaps({"a": "10.0.0.0/24"}, {"b": "10.0.1.0/24"}) == []
    assert cidr.overlaps({"a": "10.0.0.0/25"}, {"b": "10.0.0.128/25"}) == []


def test_partial_equal_and_contains():
    pairs = cidr.overlaps({"a": "10.0.0.0/16", "e": "172.16.0.0/12"},
                          {"b": "10.0.5.0/24", "f": "172.16.0.0/12"})
    assert _names(pairs) == [("a", "b", "contains"), ("e", "f", "equal")]


def test_ipv6_overlap_and_no_cross_family():
    pairs = cidr.overlaps(ONPREM, [{"name": "v6-vpc", "cidr": "fd00::/16"},
                                   {"name": "v4", "cidr": "0.0.0.0/0"}])
    assert ("v6-nodes", "v6-vpc", "contained_by") in _names(pairs)
    assert all(p["ip_version"] == 6 for p in pairs if "v6" in p["b"]["name"])
    assert len([p for p in pairs if p["b"]["name"] == "v4"]) == 4


def test_within_side_only_when_asked():
    onprem = {"pods": "10.244.0.0/16", "pods-extra": "10.244.128.0/17"}
    assert cidr.overlaps(onprem, {}) == []
    assert _names(cidr.overlaps(onprem, {}, within_side=True)) == [("pods", "pods-extra", "contains")]


@pytest.mark.parametrize("entry,needle", [
    ({"name": "pods", "cidr": "10.0.0.0/33"}, "onprem[0] (pods): '10.0.0.0/33' is not a valid CIDR"),
    ({"name": "pods", "cidr": "10.0.0.5/24"}, "onprem[0] (pods): '10.0.0.5/24' has host bits set; did you mean 10.0.0.0/24?"),
    ({"name": "pods", "cidr": "10.0.0.0"}, "onprem[0] (pods): '10.0.0.0' is not a CIDR"),
    ({"name": "pods"}, "onprem[0]: expected a mapping with a 'cidr' key"),
    ({"name": "pods", "cidr": "10.0.0.0/8", "zone": "a"}, "onprem[0] (pods): unknown key(s) zone"),
])
def test_errors_name_the_entry(entry, needle):
    with pytest.raises(cidr.CidrError) as info:
        cidr.overlaps([entry], [])
    assert needle in str(info.value)


def _random_ranges(draw_list):
    out = []
    for i, (version, base, prefix) in enumerate(draw_list):
        if version == 4:
            bits = 8 + prefix % 25          # /8 .. /32 within 10.0.0.0/8
            net = (10 << 24) | (base & ((1 << 24) - 1))
            net &= ~((1 << (32 - bits)) - 1) & 0xFFFFFFFF
            out.append({"name": "r%d" % i, "cidr": "%d.%d.%d.%d/%d" % (
                net >> 24, (net >> 16) & 255, (net >> 8) & 255, net & 255, bits)})
        else:
            bits = 112 + prefix % 17        # /112 .. /128 within fd00::/112 region
            low = base & 0xFFFF
            low &= ~((1 << (128 - bits)) - 1) & 0xFFFF
            out.append({"name": "r%d" % i, "cidr": "fd00::%x/%d" % (low, bits)})
    return out


_entries = st.lists(st.tuples(st.sampled_from([4, 6]), st.integers(0, 2 ** 24 - 1),
                              st.integers(0, 100)), max_size=14)


@settings(max_examples=200, deadline=None)
@given(_entries, _entries, st.booleans())
def test_sweep_matches_brute_force(left, right, within):
    onprem = _random_ranges(left)
    cloud = _random_ranges(right)
    assert cidr.overlaps(onprem, cloud, within) == cidr.brute_force(onprem, cloud, within)
