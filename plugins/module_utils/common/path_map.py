# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network path table: schema, derived probes and the connection-direction verdict.

Each allowed path is tested from both sides of its narrowest rule: the path itself must
connect, and two derived negative probes must be refused: the neighbouring port from the
same source, and the same port from a listed host outside the narrowest source CIDR.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema as s

try:
    import netaddr
except ImportError:  # pragma: no cover
    netaddr = None

SCHEMA_VERSION = 1
DIRECTIONS = ("outbound_from_site", "inbound_to_site", "within_site", "within_cloud")
PROTOCOLS = ("tcp", "udp", "icmp")
ID = r"^[a-z0-9][a-z0-9._-]*$"


def _cidr(value):
    if not isinstance(value, str) or "/" not in value:
        return value, "%r is not a CIDR (address/prefix)" % (value,)
    try:
        net = netaddr.IPNetwork(value)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return value, "%r is not a CIDR" % (value,)
    if net.ip != net.network:
        return value, "%r has host bits set; did you mean %s?" % (value, net.cidr)
    return str(net.cidr), None


def _address(value):
    # a string only: netaddr reads an integer as an address and fails on a list with AttributeError
    if not isinstance(value, str):
        return value, "%r is not an IP address" % (value,)
    try:
        return str(netaddr.IPAddress(value)), None
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return value, "%r is not an IP address" % (value,)


def _port(value):
    """22 or '8000-8010' -> (low, high)."""
    if isinstance(value, bool):
        return value, "expected a port or 'low-high', got a boolean"
    if isinstance(value, int):
        low = high = value
    elif isinstance(value, str) and "-" in value:
        try:
            low, high = (int(p) for p in value.split("-", 1))
        except ValueError:
            return value, "%r is not a port range" % (value,)
    else:
        return value, "expected a port or 'low-high', got %r" % (value,)
    if not 1 <= low <= high <= 65535:
        return value, "port %r is outside 1-65535" % (value,)
    return [low, high], None


def _endpoint():
    return s.Map({
        "host": s.Field(s.Str(), required=False),
        "group": s.Field(s.Str(), required=False),
        "cidr": s.Field(s.Custom(_cidr), required=False),
    })


SPEC = s.Map({
    "schema_version": s.Field(s.Enum([SCHEMA_VERSION])),
    "hosts": s.Field(s.MapOf(s.Custom(_address))),
    "groups": s.Field(s.MapOf(s.ListOf(s.Str(), min_items=1, unique=True)), required=False, default=dict),
    "paths": s.Field(s.ListOf(s.Map({
        "id": s.Field(s.Str(ID, hint="a lower-case id")),
        "source": s.Field(_endpoint()),
        "destination": s.Field(_endpoint()),
        "direction": s.Field(s.Enum(DIRECTIONS)),
        "protocol": s.Field(s.Enum(PROTOCOLS)),
        "ports": s.Field(s.ListOf(s.Custom(_port)), required=False, default=list),
        "purpose": s.Field(s.Str()),
        "management": s.Field(s.Bool(), required=False, default=False),
        "expected": s.Field(s.Enum(["allow", "deny"])),
        "narrowest_source": s.Field(s.Custom(_cidr), required=False),
        "probe_from": s.Field(s.Str(), required=False),
    }), min_items=1)),
})


class PathTable:
    def __init__(self, doc, filename):
        self.doc = doc
        self.filename = filename

    @property
    def paths(self):
        return self.doc["paths"]

    def members(self, endpoint):
        """Host names an endpoint names (a CIDR names the listed hosts inside it)."""
        if endpoint.get("host"):
            return [endpoint["host"]]
        if endpoint.get("group"):
            return list(self.doc["groups"][endpoint["group"]])
        net = netaddr.IPNetwork(endpoint["cidr"])
        return sorted(h for h, a in self.doc["hosts"].items() if netaddr.IPAddress(a) in net)

    def probes(self):
        """Every probe the table implies, in a stable order."""
        out = []
        for path in self.paths:
            out.extend(self._path_probes(path))
        return out

    def _path_probes(self, path):
        sources = [path["probe_from"]] if path.get("probe_from") else self.members(path["source"])
        dests = self.members(path["destination"])
        port = path["ports"][0][0] if path["ports"] else None
        base = {"path": path["id"], "protocol": path["protocol"], "direction": path["direction"],
                "management": path["management"]}
        probes = []
        src = sources[0] if sources else None
        for dest in dests:
            probe = dict(base, id="%s:%s:%s" % (path["id"], path["expected"], dest),
                         kind="listed", source=src, destination=dest,
                         address=self.doc["hosts"][dest], port=port, expected=path["expected"])
            if src is None:
                probe["not_derivable"] = "no listed host in the source to run the probe on; set probe_from"
            probes.append(probe)
        if path["expected"] != "allow":
            return probes
        for dest in dests:
            if path["protocol"] != "icmp" and src is not None:
                probes.append(dict(base, id="%s:neighbour_port:%s" % (path["id"], dest),
                                   kind="neighbour_port", source=src, destination=dest,
                                   address=self.doc["hosts"][dest],
                                   port=_neighbour_port(path["ports"]), expected="deny"))
            outsider = self._unlisted_source(path, dest)
            probe = dict(base, id="%s:unlisted_source:%s" % (path["id"], dest),
                         kind="unlisted_source", source=outsider, destination=dest,
                         address=self.doc["hosts"][dest], port=port, expected="deny")
            if outsider is None:
                probe["not_derivable"] = "no listed host outside %s to probe from" % path["narrowest_source"]
            probes.append(probe)
        return probes

    def _unlisted_source(self, path, dest):
        """A listed host outside the path's narrowest source that no other allowed path lets
        reach `dest` on this port (else the "refused" probe would be refused for nothing)."""
        net = netaddr.IPNetwork(path["narrowest_source"])
        port = path["ports"][0][0] if path["ports"] else None
        for host in sorted(self.doc["hosts"]):
            if host == dest or netaddr.IPAddress(self.doc["hosts"][host]) in net:
                continue
            if self.allowed(host, dest, path["protocol"], port):
                continue
            return host
        return None

    def allowed(self, source, dest, protocol, port):
        """True when some allowed path lets host `source` reach host `dest` on protocol/port."""
        addr = netaddr.IPAddress(self.doc["hosts"][source])
        for other in self.paths:
            if other["expected"] != "allow" or other["protocol"] != protocol:
                continue
            if port is not None and not any(lo <= port <= hi for lo, hi in other["ports"]):
                continue
            if dest not in self.members(other["destination"]):
                continue
            if addr in netaddr.IPNetwork(other["narrowest_source"]):
                return True
        return False


def _neighbour_port(ranges):
    """The first port above the highest listed one (below the lowest at 65535)."""
    high = max(r[1] for r in ranges)
    if high < 65535:
        return high + 1
    return min(r[0] for r in ranges) - 1


def _cross_check(doc, filename):
    errors = []
    hosts = doc["hosts"]
    for group, members in sorted(doc["groups"].items()):
        for i, member in enumerate(members):
            if member not in hosts:
                errors.append('%s: groups.%s[%d]: unknown host "%s"' % (filename, group, i, member))
    seen = set()
    for i, path in enumerate(doc["paths"]):
        where = "%s: paths[%d]" % (filename, i)
        if path["id"] in seen:
            errors.append("%s.id: duplicate path id %r" % (where, path["id"]))
        seen.add(path["id"])
        for end in ("source", "destination"):
            given = [k for k in ("host", "group", "cidr") if path[end].get(k) is not None]
            if len(given) != 1:
                errors.append("%s.%s: give exactly one of host, group, cidr" % (where, end))
                continue
            if given[0] == "host" and path[end]["host"] not in hosts:
                errors.append('%s.%s.host: unknown host "%s"' % (where, end, path[end]["host"]))
            if given[0] == "group" and path[end]["group"] not in doc["groups"]:
                errors.append('%s.%s.group: unknown group "%s"' % (where, end, path[end]["group"]))
        if path["protocol"] == "icmp" and path["ports"]:
            errors.append("%s.ports: icmp has no ports" % where)
        if path["protocol"] != "icmp" and not path["ports"]:
            errors.append("%s.ports: %s needs at least one port" % (where, path["protocol"]))
        if path["expected"] == "allow" and not path.get("narrowest_source"):
            errors.append("%s.narrowest_source: required when expected is allow" % where)
        if path.get("probe_from") and path["probe_from"] not in hosts:
            errors.append('%s.probe_from: unknown host "%s"' % (where, path["probe_from"]))
        if path.get("narrowest_source") and path["source"].get("host") in hosts:
            addr = netaddr.IPAddress(hosts[path["source"]["host"]])
            if addr not in netaddr.IPNetwork(path["narrowest_source"]):
                errors.append("%s.narrowest_source: %s does not contain the source host %s (%s)"
                              % (where, path["narrowest_source"], path["source"]["host"], addr))
    return errors


PATH_TABLE = s.Document(SPEC, _cross_check, PathTable)


def parse_path_table(data, filename):
    """Validate parsed YAML; raise schema.SchemaError listing every problem."""
    return PATH_TABLE.parse(data, filename)


def load_path_table(path):
    """Read, parse and validate a path table file; errors name the file by its base name."""
    return PATH_TABLE.load(path)


def evaluate(probes, results):
    """Merge probe results ({id: {observed: open|closed|error, elapsed_ms, evidence}}).

    Each probe gets ``verdict``: pass | fail | not_run | not_derivable.
    """
    out = []
    for probe in probes:
        row = dict(probe)
        res = (results or {}).get(probe["id"])
        if probe.get("not_derivable"):
            row["verdict"] = "not_derivable"
        elif res is None:
            row["verdict"] = "not_run"
        else:
            observed = res.get("observed")
            row["observed"] = observed
            row["elapsed_ms"] = res.get("elapsed_ms")
            row["evidence"] = res.get("evidence")
            want = "open" if probe["expected"] == "allow" else "closed"
            row["verdict"] = "pass" if observed == want else "fail"
        out.append(row)
    return out


def direction_verdict(table, evaluated=None):
    """Management traffic only initiated from the owned site; no inbound management port open.

    Returns {'verdict': pass|fail|unverified, 'reasons': [...]}.
    """
    reasons = []
    proven_closed = []
    for path in table.paths:
        if not path["management"]:
            continue
        if path["direction"] == "inbound_to_site" and path["expected"] == "allow":
            reasons.append("path %s allows inbound management traffic into the site" % path["id"])
    for probe in evaluated or []:
        if not probe["management"] or probe["direction"] != "inbound_to_site":
            continue
        if probe.get("observed") == "open":
            reasons.append("inbound management port %s/%s on %s is open (probe %s)"
                           % (probe["protocol"], probe["port"], probe["destination"], probe["id"]))
        elif probe.get("verdict") == "pass" and probe["expected"] == "deny":
            proven_closed.append(probe["id"])
    if reasons:
        return {"verdict": "fail", "reasons": reasons, "proven_closed": sorted(proven_closed)}
    if not proven_closed:
        return {"verdict": "unverified", "proven_closed": [],
                "reasons": ["no inbound_to_site management probe has shown its port closed yet"]}
    return {"verdict": "pass", "proven_closed": sorted(proven_closed),
            "reasons": ["management paths start from the site; inbound management ports refused"]}
