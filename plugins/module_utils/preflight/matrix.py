# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hardware and software matrix: rows, disagreeing columns, version rules, wave, holds.

Input is one facts dict per node in the shape ``gpu_facts`` returns (see ``normalise``),
plus the cloud side either from cloud nodes' facts or from declared values. Output is a
plain, JSON-able dict whose order and content depend only on the input, so a rerun with
nothing changed gives the same result.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import inputs, stack as gpu_stack, version_rules

SCHEMA_VERSION = 1

# Distinguishing columns, in display order.
COLUMNS = [
    ("gpu_model", "GPU model"),
    ("gpu_count", "GPUs"),
    ("gpu_memory_mib", "GPU memory (MiB)"),
    ("mig_mode", "MIG"),
    ("driver_branch", "Driver branch"),
    ("cuda_version", "Max CUDA"),
    ("os", "OS"),
    ("kernel", "Kernel"),
    ("container_runtime", "Container runtime"),
    ("agent_version", "kubelet/agent"),
]
COLUMN_IDS = [c[0] for c in COLUMNS]

HOLD_REASONS = ("air_gapped", "shared_non_ai_production", "hardware_generation_far",
                "hardware_generation_unknown", "unsigned_boundary")

DEFAULT_CLOUD = {
    # The managed cloud cluster's default: Ubuntu 22.04 x86 64-bit OS image, H200 workers.
    "name": "cloud",
    "os_image": "Ubuntu 22.04 x86_64",
    "worker_spec": {"gpu_model": "NVIDIA H200", "gpu_count": 8},
}


class MatrixError(ValueError):
    """Bad input; the message names the node and the field."""


def _first(data, *keys):
    for key in keys:
        if isinstance(data, dict) and data.get(key) not in (None, ""):
            return data[key]
    return None


def _os_key(os_id, version_id):
    if not os_id:
        return None
    return ("%s %s" % (str(os_id).lower(), version_id or "")).strip()


def parse_os_image(text):
    """'Ubuntu 22.04 x86_64' -> ('ubuntu 22.04', 'x86_64')."""
    if not text:
        return None, None
    parts = str(text).replace("-", " ").split()
    arch = None
    words = []
    for part in parts:
        if part.lower() in ("x86_64", "amd64", "x86", "aarch64", "arm64"):
            arch = {"amd64": "x86_64", "x86": "x86_64", "arm64": "aarch64"}.get(part.lower(), part.lower())
        elif part.lower() in ("64", "bit", "64bit", "lts"):
            continue
        else:
            words.append(part)
    version = next((w for w in words if re.match(r"^\d+(\.\d+)*$", w)), None)
    name = next((w for w in words if not re.match(r"^\d", w)), None)
    if version and len(version.split(".")) > 2 and name and name.lower() == "ubuntu":
        version = ".".join(version.split(".")[:2])
    return _os_key(name, version), arch


def normalise(facts, index=0):
    """One node's facts -> flat dict of the matrix columns plus identity fields.

    Accepted shape (gpu_facts): hostname, node_group, side ('owned'|'cloud'),
    gpu {model, count, memory_mib, mig_mode}, driver_version, cuda_version, kernel,
    os {pretty, id, version_id}, image_id, container_runtime, agent_version (or
    kubelet_version). Flat gpu_model/gpu_count/gpu_memory_mib/mig_mode also work.
    """
    if not isinstance(facts, dict):
        raise MatrixError("nodes[%d]: expected a mapping of facts, got %s" % (index, type(facts).__name__))
    name = _first(facts, "hostname", "node", "inventory_hostname")
    if not name:
        raise MatrixError("nodes[%d]: no hostname" % index)
    gpu, os_facts = inputs.node_facts(facts, "nodes[%d] (%s)" % (index, name), MatrixError)
    side = facts.get("side") or "owned"
    if side not in ("owned", "cloud"):
        raise MatrixError("nodes[%d] (%s): side %r is not owned or cloud" % (index, name, side))
    count = _first(gpu, "count")
    if count is None:
        count = facts.get("gpu_count")
    memory = _first(gpu, "memory_mib") or facts.get("gpu_memory_mib")
    for field, value in (("gpu.count", count), ("gpu.memory_mib", memory)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise MatrixError("nodes[%d] (%s): %s must be an integer, got %r" % (index, name, field, value))
    driver = facts.get("driver_version")
    row = {
        "hostname": str(name),
        "node_group": facts.get("node_group"),
        "side": side,
        "gpu_model": _first(gpu, "model") or facts.get("gpu_model"),
        "gpu_count": count,
        "gpu_memory_mib": memory,
        "mig_mode": _first(gpu, "mig_mode") or facts.get("mig_mode"),
        "driver_version": driver,
        "driver_branch": version_rules.driver_branch(driver),
        "cuda_version": facts.get("cuda_version"),
        "os": _os_key(_first(os_facts, "id") or facts.get("os_id"),
                      _first(os_facts, "version_id") or facts.get("os_version_id")),
        "os_pretty": _first(os_facts, "pretty", "pretty_name"),
        "kernel": facts.get("kernel"),
        "image_id": facts.get("image_id"),
        "container_runtime": facts.get("container_runtime"),
        "agent_version": _first(facts, "agent_version", "kubelet_version"),
    }
    return row


def _slug(model):
    if not model:
        return "unknown"
    text = re.sub(r"^(NVIDIA|TESLA)\s+", "", str(model).strip(), flags=re.I)
    text = re.sub(r"^(NVIDIA|TESLA)\s+", "", text, flags=re.I)
    token = re.split(r"[\s\-_/]+", text)[0]
    return re.sub(r"[^a-z0-9]", "", token.lower()) or "unknown"


def _group(nodes, side, prefix=""):
    groups = {}
    for node in nodes:
        key = tuple(node[c] for c in COLUMN_IDS)
        groups.setdefault(key, []).append(node)
    rows = []
    for key, members in groups.items():
        members.sort(key=lambda n: n["hostname"])
        rows.append({"key": key, "members": members})
    rows.sort(key=lambda r: (_slug(r["members"][0]["gpu_model"]),
                             str(r["members"][0]["driver_branch"]),
                             r["members"][0]["hostname"]))
    used = {}
    out = []
    for row in rows:
        first = row["members"][0]
        base = prefix + "%s-%s" % (_slug(first["gpu_model"]), first["driver_branch"] or "nodriver")
        used[base] = used.get(base, 0) + 1
        row_id = base if used[base] == 1 else "%s-%d" % (base, used[base])
        out.append({
            "id": row_id,
            "side": side,
            "source": "facts",
            "nodes": [m["hostname"] for m in row["members"]],
            "node_count": len(row["members"]),
            "node_groups": sorted({m["node_group"] for m in row["members"] if m["node_group"]}),
            "values": {c: first[c] for c in COLUMN_IDS},
            "driver_versions": sorted({m["driver_version"] for m in row["members"] if m["driver_version"]}),
            "image_ids": sorted({m["image_id"] for m in row["members"] if m["image_id"]}),
            "os_pretty": sorted({m["os_pretty"] for m in row["members"] if m["os_pretty"]}),
        })
    return out


def _declared_cloud_row(cloud):
    spec = cloud.get("worker_spec") or {}
    os_key, arch = parse_os_image(cloud.get("os_image"))
    driver = spec.get("driver_version")
    return {
        "id": cloud.get("name") or "cloud",
        "side": "cloud",
        "source": "declared",
        "nodes": [],
        "node_count": cloud.get("node_count"),
        "node_groups": [],
        "values": {
            "gpu_model": spec.get("gpu_model"),
            "gpu_count": spec.get("gpu_count"),
            "gpu_memory_mib": spec.get("gpu_memory_mib"),
            "mig_mode": spec.get("mig_mode"),
            "driver_branch": version_rules.driver_branch(driver),
            "cuda_version": spec.get("cuda_version"),
            "os": os_key,
            "kernel": spec.get("kernel"),
            "container_runtime": spec.get("container_runtime"),
            "agent_version": cloud.get("kubernetes_version"),
        },
        "driver_versions": [driver] if driver else [],
        "image_ids": [cloud["os_image"]] if cloud.get("os_image") else [],
        "os_pretty": [cloud["os_image"]] if cloud.get("os_image") else [],
        "data_centre": cloud.get("data_centre"),
        "kubernetes_version": cloud.get("kubernetes_version"),
        "arch": arch,
    }


def _cloud_rows(cloud_nodes, declared):
    if cloud_nodes:
        rows = _group(cloud_nodes, "cloud", prefix="cloud-")
        # Declared values fill what the facts lack (data centre, Kubernetes version...).
        for row in rows:
            row["data_centre"] = declared.get("data_centre")
            row["kubernetes_version"] = declared.get("kubernetes_version")
            if declared.get("node_count") is not None:
                row["declared_node_count"] = declared["node_count"]
        return rows
    return [_declared_cloud_row(dict(DEFAULT_CLOUD, **declared))]


def build(nodes, cloud=None, job_image_cuda=None, api_server_versions=None,
          holds=None, boundary_status=None, max_generation_distance=2,
          cuda_compat="strict", cuda_driver_table=None, stack=None):
    """Build the matrix. See module docs of compat_matrix for every argument (``stack``: stack.judge's list)."""
    if not isinstance(nodes, list):
        raise MatrixError("nodes: expected a list of per-node facts")
    if cuda_compat not in ("strict", "minor_compat"):
        raise MatrixError("cuda_compat: %r is not strict or minor_compat" % (cuda_compat,))
    normal = [normalise(n, i) for i, n in enumerate(nodes)]
    seen = set()
    for node in normal:
        if node["hostname"] in seen:
            raise MatrixError("nodes: hostname %r appears twice" % node["hostname"])
        seen.add(node["hostname"])
    owned = [n for n in normal if n["side"] == "owned"]
    cloud_nodes = [n for n in normal if n["side"] == "cloud"]
    rows = _group(owned, "owned") + _cloud_rows(cloud_nodes, dict(cloud or {}))
    by_node = {}
    for row in rows:
        for name in row["nodes"]:
            by_node[name] = row["id"]
        arch = version_rules.gpu_architecture(row["values"]["gpu_model"])
        row["architecture"] = arch["architecture"] if arch else None
        row["compute_capability"] = arch["compute_capability"] if arch else None

    disagreements = []
    for col in COLUMN_IDS:
        distinct = {repr(r["values"][col]) for r in rows if r["values"][col] is not None}
        if len(distinct) > 1:
            disagreements.append(col)
    ref = rows[-1]["values"]
    for row in rows:
        # Cells that differ from the cloud row, for highlighting.
        row["differs_from_cloud"] = [c for c in COLUMN_IDS if row["side"] == "owned"
                                     and row["values"][c] is not None and ref[c] is not None
                                     and row["values"][c] != ref[c]]

    checks = _apply_rules(rows, job_image_cuda, api_server_versions or {}, cuda_compat, cuda_driver_table) + gpu_stack.checks(rows, stack)
    violations = []
    for check in checks:
        if check["status"] in ("fail", "warn"):
            row = next(r for r in rows if r["id"] == check["row"])
            rule = version_rules.RULES.get(check["rule"]) or gpu_stack.RULES[check["rule"]]
            violations.append({
                "rule": check["rule"],
                "severity": "warning" if check["status"] == "warn" else rule["severity"],
                "citation": rule["citation"],
                "rows": [check["row"]],
                "nodes": list(check["nodes"] if "nodes" in check else row["nodes"]),  # stack: the failing nodes
                "message": check["message"],
            })

    cloud_row = rows[-1]
    hold_list = _holds(normal, by_node, cloud_row, holds or {}, boundary_status,
                       max_generation_distance)
    wave = _wave([r for r in rows if r["side"] == "owned"], {h["node"] for h in hold_list})
    return {
        "schema_version": SCHEMA_VERSION,
        "columns": [{"id": c, "title": t} for c, t in COLUMNS],
        "rows": rows,
        "disagreements": disagreements,
        "inputs": {
            "job_image_cuda": job_image_cuda,
            "api_server_versions": dict(sorted((api_server_versions or {}).items())),
            "cuda_compat": cuda_compat,
            "max_generation_distance": max_generation_distance,
        },
        "checks": checks,
        "violations": violations,
        "holds": hold_list,
        "wave": wave,
    }


def _apply_rules(rows, image_cuda, api_versions, cuda_compat, table):
    checks = []
    cloud_rows = [r for r in rows if r["side"] == "cloud"]
    cloud_os = cloud_rows[0]["values"]["os"] if cloud_rows else None
    cloud_api = api_versions.get("cloud") or (cloud_rows[0].get("kubernetes_version") if cloud_rows else None)
    for row in rows:
        vals = row["values"]
        if image_cuda is not None:
            # The oldest driver in the row decides.
            drivers = sorted(row["driver_versions"], key=lambda d: version_rules.parse_version(d) or ())
            status, msg = version_rules.check_cuda_driver(image_cuda, drivers[0] if drivers else None,
                                                          vals["cuda_version"], cuda_compat, table)
            checks.append({"rule": "cuda-driver-minimum", "row": row["id"], "status": status, "message": msg})
        api = api_versions.get(row["side"]) or (cloud_api if row["side"] == "owned" else None)
        if row["side"] == "cloud" and row["source"] == "declared":
            status, msg = "not_evaluated", "declared cloud row: control plane and workers share the chosen version"
        else:
            status, msg = version_rules.check_kubelet_skew(vals["agent_version"], api)
        checks.append({"rule": "kubelet-apiserver-skew", "row": row["id"], "status": status, "message": msg})
        if row["side"] == "owned":
            status, msg = version_rules.check_os_match(vals["os"], cloud_os)
            checks.append({"rule": "os-image-match", "row": row["id"], "status": status, "message": msg})
    return checks


def _holds(normal, by_node, cloud_row, markers, boundary_status, max_distance):
    cloud_arch = version_rules.gpu_architecture(cloud_row["values"]["gpu_model"])
    unsigned = boundary_status and boundary_status.get("status") != "signed"
    out = []
    for node in sorted((n for n in normal if n["side"] == "owned"), key=lambda n: n["hostname"]):
        name = node["hostname"]
        mark = markers.get(name) or {}
        unknown = set(mark) - {"air_gapped", "shared_non_ai_production", "security_signoff"}
        if unknown:
            raise MatrixError("holds.%s: unknown marker(s) %s" % (name, ", ".join(sorted(unknown))))
        reasons = []
        if mark.get("air_gapped"):
            reasons.append({"reason": "air_gapped", "detail": "no permitted outbound path"})
        if mark.get("shared_non_ai_production"):
            reasons.append({"reason": "shared_non_ai_production",
                            "detail": "shared with non-AI production systems"})
        arch = version_rules.gpu_architecture(node["gpu_model"])
        if arch is None or cloud_arch is None:
            reasons.append({"reason": "hardware_generation_unknown",
                            "detail": "GPU architecture of %r or of the cloud row is not known"
                                      % (node["gpu_model"],)})
        else:
            distance = abs(cloud_arch["generation"] - arch["generation"])
            if distance > max_distance:
                reasons.append({"reason": "hardware_generation_far",
                                "detail": "%s is %d generation(s) from the cloud row's %s (max %d)"
                                          % (arch["architecture"], distance,
                                             cloud_arch["architecture"], max_distance)})
        if mark.get("security_signoff") is False:
            reasons.append({"reason": "unsigned_boundary",
                            "detail": "security owner has not signed off for this node"})
        elif unsigned and _covered(boundary_status, node):
            reasons.append({"reason": "unsigned_boundary",
                            "detail": "access boundary unsigned: %s"
                                      % "; ".join(boundary_status.get("reasons") or ["not signed"])})
        if reasons:
            out.append({"node": name, "row": by_node[name], "reasons": reasons})
    return out


def _covered(status, node):
    scope = status.get("applies_to")
    if not scope or (not scope.get("nodes") and not scope.get("groups")):
        return True
    return node["hostname"] in scope.get("nodes", []) or (
        node["node_group"] is not None and node["node_group"] in scope.get("groups", []))


def _wave(owned_rows, held):
    """One unheld node per owned row (first by name) plus one spare.

    The spare comes from the row with the most unheld nodes left after its representative
    (ties: row order), taking the next node by name. Taking it from the largest row means
    the upgrade/removal rehearsal takes the smallest share of any distinct hardware group
    out of service, and every row keeps its validated representative.
    """
    picks = []
    uncovered = []
    leftovers = []
    for row in owned_rows:
        free = [n for n in row["nodes"] if n not in held]
        if not free:
            uncovered.append({"row": row["id"], "reason": "every node in the row is held"})
            continue
        picks.append({"node": free[0], "row": row["id"], "purpose": "row_representative"})
        leftovers.append((row, free[1:]))
    spare = None
    best = None
    for row, rest in leftovers:
        if rest and (best is None or len(rest) > len(best[1])):
            best = (row, rest)
    if best:
        spare = {"node": best[1][0], "row": best[0]["id"], "purpose": "rehearsal_spare"}
        picks.append(spare)
    return {
        "nodes": picks,
        "spare": spare,
        "uncovered_rows": uncovered,
        "rationale": ("one unheld node per distinct owned row (first by hostname), plus a spare "
                      "for the upgrade/removal rehearsal from the row with the most unheld nodes "
                      "left (ties: row order)"),
        "notes": [] if spare else ["no row has a second unheld node; no spare for the rehearsal"],
    }
