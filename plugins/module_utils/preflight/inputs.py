# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight input documents: the matrix inputs, the declared cloud row, the address ranges
and the path-MTU targets.

Each is checked with the schema layer, so every problem reads ``<file>: <field.path>: <problem>``;
unknown keys, wrong types and impossible values (negative counts, unquoted or malformed
versions, CIDRs with host bits) are refused. ``load_inputs`` reads every given file and
reports the problems of all of them at once.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema as s

CUDA_COMPAT = ("strict", "minor_compat")
HOLD_MARKERS = ("air_gapped", "shared_non_ai_production", "security_signoff")

# Defaults of the optional matrix inputs (the compat_matrix defaults).
MATRIX_DEFAULTS = {
    "job_image_cuda": None,
    "holds": {},
    "cuda_compat": "strict",
    "max_generation_distance": 2,
    "cuda_driver_table": {},
}

_CUDA = s.Version(parts=(2, 3), example="12.4")
_DRIVER = s.Version(parts=(2, 3), example="550.54.15")

MATRIX = s.Map({
    "job_image_cuda": s.Field(_CUDA, required=False),
    "holds": s.Field(s.MapOf(s.Map({m: s.Field(s.Bool(), required=False) for m in HOLD_MARKERS})),
                     required=False, default=dict),
    "cuda_compat": s.Field(s.Enum(CUDA_COMPAT), required=False, default="strict"),
    "max_generation_distance": s.Field(s.Int(minimum=0), required=False, default=2),
    "cuda_driver_table": s.Field(s.MapOf(_DRIVER, key_pattern=r"^[0-9]+\.[0-9]+$", key_hint="major.minor like 12.4"),
                                 required=False, default=dict),
})

WORKER_SPEC = s.Map({
    "gpu_model": s.Field(s.Str(), required=False),
    "gpu_count": s.Field(s.Int(minimum=0), required=False),
    "gpu_memory_mib": s.Field(s.Int(minimum=0), required=False),
    "mig_mode": s.Field(s.Str(), required=False),
    "driver_version": s.Field(_DRIVER, required=False),
    "cuda_version": s.Field(_CUDA, required=False),
    "kernel": s.Field(s.Str(), required=False),
    "container_runtime": s.Field(s.Str(), required=False),
})

CLOUD = s.Map({
    "name": s.Field(s.Str(), required=False),
    "data_centre": s.Field(s.Str(), required=False),
    "kubernetes_version": s.Field(s.Version(parts=(2, 3), prefix_v=True, example="1.31.2"), required=False),
    "node_count": s.Field(s.Int(minimum=0), required=False),
    "os_image": s.Field(s.Str(), required=False),
    "worker_spec": s.Field(WORKER_SPEC, required=False),
})


def _cidr(value):
    """Custom check: an address/prefix string without host bits."""
    if not isinstance(value, str) or "/" not in value:
        return value, "%r is not a CIDR (address/prefix)" % (value,)
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        return value, "%r is not a valid CIDR: %s" % (value, exc)
    if network.network_address != ipaddress.ip_interface(value).ip:
        return value, "%r has host bits set; did you mean %s?" % (value, network)
    return value, None


RANGE_LIST = s.ListOf(s.Map({
    "name": s.Field(s.Str(), required=False),
    "cidr": s.Field(s.Custom(_cidr)),
    "kind": s.Field(s.Str(), required=False),
}))
RANGE_MAP = s.MapOf(s.Custom(_cidr))

_MTU = s.Int(minimum=68, maximum=65535)
PMTU_TARGET = s.Map({
    "id": s.Field(s.Str()),
    "source": s.Field(s.Str()),
    "destination": s.Field(s.Str(), required=False),
    "address": s.Field(s.Str(), required=False),
    "expected_mtu": s.Field(_MTU, required=False),
    "max_mtu": s.Field(_MTU, required=False),
    "min_mtu": s.Field(_MTU, required=False),
})

# What each input file is, for the failure message: "<file>: invalid <what>: <field>: <problem>".
LABELS = {
    "matrix": "matrix inputs",
    "cloud": "cloud row",
    "onprem_ranges": "address ranges",
    "cloud_ranges": "address ranges",
    "pmtu_targets": "path-MTU targets",
}


def check_matrix(data, name):
    """Matrix inputs as written, every absent key at its default; raises SchemaError."""
    data = {} if data is None else data
    s.validate(data, MATRIX, name)
    return dict(MATRIX_DEFAULTS, **data)


def check_cloud(data, name):
    """The declared cloud row, returned as written (absent keys stay absent so the matrix
    defaults apply); raises SchemaError."""
    data = {} if data is None else data
    s.validate(data, CLOUD, name)
    return data


def check_ranges(data, name):
    """A list of {name, cidr, kind} or a name: cidr mapping, returned as written."""
    s.validate(data, RANGE_MAP if isinstance(data, dict) else RANGE_LIST, name)
    return data


def resolve_pmtu_targets(targets, hosts, name="pmtu_targets"):
    """Path-MTU targets with ``address`` filled from the path table's ``hosts`` by
    ``destination``; ids must be unique. Raises SchemaError."""
    s.validate(targets, s.ListOf(PMTU_TARGET), name)
    errors = []
    out = []
    seen = set()
    for i, target in enumerate(targets):
        where = "%s: %s" % (name, s.format_path([i]))
        if target["id"] in seen:
            errors.append("%s.id: duplicate id %r" % (where, target["id"]))
        seen.add(target["id"])
        if target.get("min_mtu", 576) > target.get("max_mtu", 1500):
            errors.append("%s.min_mtu: %d is above max_mtu %d"
                          % (where, target.get("min_mtu", 576), target.get("max_mtu", 1500)))
        address = target.get("address")
        if address is None and "destination" not in target:
            errors.append("%s: needs destination (a path-table host) or address" % where)
        elif address is None and target["destination"] not in (hosts or {}):
            errors.append("%s.destination: %r is not a host of the path table (known: %s)"
                          % (where, target["destination"], ", ".join(sorted(hosts or {})) or "none"))
        else:
            address = address if address is not None else hosts[target["destination"]]
        out.append(dict(target, address=address))
    if errors:
        raise s.SchemaError(errors)
    return out


# The node facts the matrix reads (the gpu_facts shape, see matrix.normalise): each one value.
NODE_FACTS = ("hostname", "node", "inventory_hostname", "node_group", "side", "gpu_model", "gpu_count", "gpu_memory_mib",
              "mig_mode", "driver_version", "cuda_version", "os_id", "os_version_id", "kernel", "image_id",
              "container_runtime", "agent_version", "kubelet_version")
NODE_FACT_MAPS = {"gpu": ("model", "count", "memory_mib", "mig_mode"), "os": ("pretty", "pretty_name", "id", "version_id")}


def node_facts(facts, where, error):
    """The gpu and os mappings of one node's facts ({} when absent); raises ``error`` naming
    ``where`` and the field when one of them is not a mapping (gpu: "A100") or a fact the
    matrix reads is a list or a mapping."""
    maps = {}
    for field, keys in NODE_FACT_MAPS.items():
        maps[field] = facts.get(field) or {}
        if not isinstance(maps[field], dict):
            raise error("%s: %s must be a mapping of %s, got %r%s" % (
                where, field, ", ".join(keys), facts[field], " (a bare model goes in gpu_model)" if field == "gpu" else ""))
    values = [(key, facts.get(key)) for key in NODE_FACTS]
    values += [("%s.%s" % (field, key), maps[field].get(key)) for field, keys in NODE_FACT_MAPS.items() for key in keys]
    for key, value in values:
        if isinstance(value, (dict, list)):
            raise error("%s: %s must be a single value, got %r" % (where, key, value))
    return maps["gpu"], maps["os"]


CHECKS = {
    "matrix": check_matrix,
    "cloud": check_cloud,
    "onprem_ranges": check_ranges,
    "cloud_ranges": check_ranges,
}


def load_inputs(files, pmtu_targets=None, path_hosts=None, pmtu_targets_name="pmtu_targets"):
    """Read and check every file in ``files`` (kind -> path, None skips it) and resolve the
    path-MTU targets.

    Returns (result, problems): result holds one entry per kind that loaded cleanly (plus
    ``pmtu_targets``); problems is a list of (kind, errors) for every kind that did not.
    """
    result = {}
    problems = []
    for kind in ("matrix", "cloud", "onprem_ranges", "cloud_ranges"):
        path = files.get(kind)
        if path is None:
            continue
        name = os.path.basename(path)
        try:
            result[kind] = CHECKS[kind](s.load_yaml_file(path, name), name)
        except s.SchemaError as exc:
            problems.append((kind, exc.errors))
    try:
        result["pmtu_targets"] = resolve_pmtu_targets(pmtu_targets or [], path_hosts, pmtu_targets_name)
    except s.SchemaError as exc:
        problems.append(("pmtu_targets", exc.errors))
    return result, problems


def failure_message(problems):
    """One line per problem: ``<file>: invalid <what>: <field.path>: <problem>``."""
    lines = []
    for kind, errors in problems:
        for error in errors:
            name, sep, rest = error.partition(": ")
            lines.append("%s: invalid %s: %s" % (name, LABELS[kind], rest) if sep else error)
    return "\n".join(lines)
