"""The nftables provider through a fake nft (nft needs root and a network namespace, so the
real binary runs in the lab's Molecule scenario and integration test); it passes the
provider test kit."""
import re

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as cf
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.cloud_firewall import nftables

from cloud_firewall_kit import RULES, ProviderKit, converge

TABLE = "hybridgpu_provider"
_LINE = re.compile(r'ip6? saddr (\{ [^}]+ \}|\S+) (tcp|udp) dport (\{ [^}]+ \}|\S+) accept')


class FakeNft:
    """Tables by name; answers list/-c/-f/delete like nft, and lists a table as written."""

    def __init__(self):
        self.tables = {"hybridgpu": "table inet hybridgpu {\n  chain input {\n  }\n}\n"}
        self.calls = []

    def __call__(self, args, data=None):
        self.calls.append(list(args))
        if args[1:3] == ["list", "table"]:
            text = self.tables.get(args[4])
            return (0, text, "") if text else (1, "", "Error: No such file or directory")
        if args[1:3] == ["-c", "-f"]:
            return 0, "", ""
        if args[1:3] == ["-f", "-"]:
            name = re.search(r"^delete table inet (\S+)$", data, re.M).group(1)
            self.tables[name] = data.split("delete table inet %s\n" % name, 1)[1]
            return 0, "", ""
        if args[1:3] == ["delete", "table"]:
            return (0, "", "") if self.tables.pop(args[4], None) else (1, "", "Error: No such file or directory")
        raise AssertionError(args)


class Harness:
    all_open_stays = False  # the table's policy drop replaces the preset

    def __init__(self, state_dir):
        self.nft = FakeNft()
        self.state_dir = state_dir

    def provider(self):
        return nftables.NftProvider(self.nft, ["10.213.77.1/32"], table=TABLE, state_dir=self.state_dir)

    def hand_add(self, protocol, port, source):
        # as `nft add rule inet hybridgpu_provider input ...` would: after the last rule
        text = self.nft.tables[TABLE]
        head, tail = text.rsplit("\n  }\n", 1)
        self.nft.tables[TABLE] = "%s\n    ip saddr %s %s dport %s accept\n  }\n%s" % (
            head, source.split("/")[0] if source.endswith("/32") else source, protocol, port, tail)

    def open_all(self):
        self.nft.tables.pop(TABLE, None)

    def backend_rules(self):
        text = self.nft.tables.get(TABLE)
        if text is None:
            return None
        out = set()
        for line in text.splitlines():
            m = _LINE.search(line)
            if not m or 'comment "management-ssh"' in line:
                continue
            srcs, proto, ports = m.groups()
            for src in srcs.strip("{} ").split(", "):
                src = src if "/" in src else src + ("/32" if ":" not in src else "/128")
                for port in ports.strip("{} ").split(", "):
                    out.add((proto, port.replace(" ", ""), src))
        return out

    def untouched(self):
        return {k: v for k, v in self.nft.tables.items() if k != TABLE}


@pytest.fixture
def harness(tmp_path):
    return Harness(str(tmp_path))


class TestNftProvider(ProviderKit):
    pass


def test_the_table_drops_by_default_and_keeps_management_ssh(harness):
    converge(harness.provider(), RULES)
    text = harness.nft.tables[TABLE]
    assert "policy drop;" in text
    assert 'ip saddr 10.213.77.1/32 tcp dport 22 accept comment "management-ssh"' in text
    assert 'ip saddr { 198.51.100.0/28, 203.0.113.5/32 } tcp dport 40000-40100 accept comment "nccl"' in text


def test_a_hand_removed_line_of_ours_is_written_again(harness):
    converge(harness.provider(), RULES)
    harness.nft.tables[TABLE] = "\n".join(line for line in harness.nft.tables[TABLE].splitlines()
                                          if 'comment "dns"' not in line) + "\n"
    state = harness.provider().read()
    assert [r["name"] for r in state["rules"]] == ["nccl", "scrape-node-exporter"]
    assert [r["name"] for r in converge(harness.provider(), RULES)["add"]] == ["dns"]
    assert 'comment "dns"' in harness.nft.tables[TABLE]


def test_a_table_the_collection_did_not_write_is_not_taken_for_its_rules(harness):
    harness.nft.tables[TABLE] = "table inet %s {\n  chain input {\n    ip saddr 192.0.2.1 tcp dport 22 accept\n  }\n}\n" % TABLE
    state = harness.provider().read()
    assert state["firewall"]["created"] is False and not state["rules"] and len(state["drift"]) == 1
    assert not cf.removal_plan(state)["delete"]


def test_rules_written_by_the_earlier_release_read_as_attached(harness, tmp_path):
    converge(harness.provider(), RULES)
    (tmp_path / ("%s.rules.json" % TABLE)).write_text('[{"name": "dns", "protocol": "udp", "ports": ["53"], '
                                                      '"sources": ["2001:db8:5::/48"]}]')
    state = harness.provider().read()
    assert state["attached"] and [r["name"] for r in state["rules"]] == ["dns"]


def test_removal_that_keeps_hand_made_lines_needs_the_management_sources(harness):
    converge(harness.provider(), RULES)
    harness.hand_add("tcp", "8080", "192.0.2.77/32")
    bare = nftables.NftProvider(harness.nft, [], table=TABLE, state_dir=harness.state_dir)
    with pytest.raises(cf.ProviderError, match="remove_drift=true"):
        bare.execute(cf.removal_plan(bare.read()))
    assert harness.provider().read()["rules"] == cf.normalize_rules(RULES)


class BootNode(FakeNft):
    """FakeNft plus systemctl: enabled units and the calls made."""

    def __init__(self):
        super().__init__()
        self.enabled = set()

    def __call__(self, args, data=None):
        if args[0] != "systemctl":
            return super().__call__(args, data)
        self.calls.append(list(args))
        if args[1] == "is-enabled":
            return (0 if args[-1] in self.enabled else 1), "", ""
        if args[1] == "enable":
            self.enabled.add(args[2])
        elif args[1] == "disable":
            self.enabled.discard(args[2])
        return 0, "", ""


def test_the_table_loads_at_boot_and_stays_in_step(tmp_path):
    node = BootNode()
    units = tmp_path / "units"
    units.mkdir()
    fw = nftables.NftProvider(node, ["10.213.77.1/32"], table=TABLE, state_dir=str(tmp_path / "state"), boot=True,
                              unit_dir=str(units), nft_binary="/usr/sbin/nft")
    converge(fw, RULES)
    unit, copy = units / ("hybridgpu-nft-%s.service" % TABLE), tmp_path / "state" / (TABLE + ".boot.nft")

    assert fw.ensure_boot(check_mode=True) and not unit.exists() and not copy.exists()
    assert fw.ensure_boot()
    assert "ExecStart=/usr/sbin/nft -f %s" % copy in unit.read_text()
    assert copy.read_text() == "table inet %s {}\ndelete table inet %s\n%s" % (TABLE, TABLE, node.tables[TABLE])
    assert node.enabled == {unit.name} and ["systemctl", "daemon-reload"] in node.calls
    # counters moving is no change; a rule added is
    node.tables[TABLE] = node.tables[TABLE].replace("counter", "counter packets 7 bytes 420", 1)
    assert not fw.ensure_boot()
    converge(fw, RULES[:1])
    assert fw.ensure_boot() and node.tables[TABLE] in copy.read_text()
    # a unit someone disabled is enabled again
    node.enabled.clear()
    assert fw.ensure_boot() and node.enabled == {unit.name}
    # no table: nothing loads at boot
    del node.tables[TABLE]
    assert fw.ensure_boot() and not unit.exists() and not copy.exists() and not node.enabled
    assert not fw.ensure_boot()


def test_boot_off_touches_nothing(tmp_path):
    node = BootNode()
    fw = nftables.NftProvider(node, ["10.213.77.1/32"], table=TABLE, state_dir=str(tmp_path), unit_dir=str(tmp_path))
    converge(fw, RULES)
    assert not fw.ensure_boot() and not any(c[0] == "systemctl" for c in node.calls)
