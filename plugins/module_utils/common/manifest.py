# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-node onboarding manifest: every artefact onboarding created, so removal reverses
exactly that and nothing else.

One JSON document per node::

    {"schema_version": 1, "node": "dh1-a100-01",
     "pre_onboarding": {...},            # standalone state, recorded once, never overwritten
     "sections": {"join": {"artefacts": [...], "facts": {...}}, "placement": {...}, ...}}

Each role writes its own section. Artefacts are dicts with a ``kind`` and the fields that
identify them (IDENTITY); recording the same artefact again updates it in place, so reruns
leave the document byte-identical. The file is written to a temporary sibling and renamed.
"""

from __future__ import annotations

import copy
import json
import os
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, record_page

SCHEMA_VERSION = 1

# Fields that identify an artefact of each kind (besides the kind itself).
IDENTITY = {
    "file": ("path",),
    "directory": ("path",),
    "dropin": ("path",),
    "unit": ("name",),
    "user": ("name",),
    "group": ("name",),
    "package": ("name",),
    "key": ("path",),
    "nft_table": ("family", "name"),
    "label": ("key",),
    "taint": ("key", "effect"),
    "api_object": ("cluster", "api_version", "resource", "namespace", "name"),
    "provider_rule": ("provider", "firewall", "name"),
}

SECTION_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class ManifestError(ValueError):
    """Bad manifest input; the message names the section and artefact."""


def identity(artefact):
    kind = artefact.get("kind")
    return (kind,) + tuple(str(artefact.get(f) or "") for f in IDENTITY[kind])


def check_artefacts(section, artefacts):
    out = []
    for i, art in enumerate(artefacts or []):
        where = "%s.artefacts[%d]" % (section, i)
        if not isinstance(art, dict):
            raise ManifestError("%s: expected a dict with kind and its identifying fields" % where)
        kind = art.get("kind")
        if kind not in IDENTITY:
            raise ManifestError("%s.kind: %r is not one of %s" % (where, kind, ", ".join(sorted(IDENTITY))))
        missing = [f for f in IDENTITY[kind] if f not in art or art[f] is None]
        # a cluster-scoped API object has no namespace
        if kind == "api_object" and "namespace" in missing:
            missing.remove("namespace")
        if missing:
            raise ManifestError("%s: a %s needs %s" % (where, kind, ", ".join(missing)))
        out.append(dict(art))
    return out


def empty(node):
    return {"schema_version": SCHEMA_VERSION, "node": node, "pre_onboarding": None, "sections": {}}


def merge(doc, node, section=None, artefacts=None, facts=None, pre_onboarding=None, replace=False):
    """Return a new document with `section` updated. The input is not modified.

    replace=False adds/updates artefacts and keeps earlier ones (removal must still see
    them); replace=True makes the section's artefact list exactly `artefacts` (for state
    that is fully re-declared on every run, like placement labels).
    """
    if not NODE_RE.match(node or ""):
        raise ManifestError("node: %r is not a node name" % (node,))
    doc = copy.deepcopy(doc) if doc else empty(node)
    if doc.get("node") != node:
        raise ManifestError("the manifest belongs to node %r, not %r" % (doc.get("node"), node))
    doc.setdefault("sections", {})
    if pre_onboarding is not None and not doc.get("pre_onboarding"):
        doc["pre_onboarding"] = pre_onboarding
    if section is None:
        return doc
    if not SECTION_RE.match(section):
        raise ManifestError("section: %r must be a lower-case name" % (section,))
    new = check_artefacts(section, artefacts)
    sec = doc["sections"].setdefault(section, {"artefacts": [], "facts": {}})
    if replace:
        merged = {}
    else:
        merged = dict((identity(a), a) for a in sec.get("artefacts", []))
    for art in new:
        merged[identity(art)] = art
    sec["artefacts"] = [merged[k] for k in sorted(merged)]
    if facts:
        sec.setdefault("facts", {}).update(facts)
    return doc


def artefacts(doc, kind=None):
    """Every artefact of every section (optionally one kind), tagged with its section."""
    out = []
    for name, sec in sorted(((doc or {}).get("sections") or {}).items()):
        for art in sec.get("artefacts", []):
            if kind is None or art.get("kind") == kind:
                out.append(dict(art, section=name))
    return out


def dumps(doc):
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def load(path):
    """The manifest at `path`, or None when there is none yet.

    A file that exists but cannot be read, is not JSON or is not a JSON object raises
    ManifestError: it must never read as an empty manifest.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError as err:
        raise ManifestError("%s is not valid JSON (%s); fix it or move it aside" % (path, err))
    except OSError as err:
        raise ManifestError("%s cannot be read (%s); check the file and its permissions" % (path, err.strerror or err))
    if not isinstance(doc, dict):
        raise ManifestError("%s holds a JSON %s, not a manifest object; fix it or move it aside"
                            % (path, type(doc).__name__))
    return doc


def baseline(doc, path):
    """The pre_onboarding block of `doc`; raises ManifestError when there is none.

    Steps after the baseline need it to tell what onboarding created from what the node
    already had, so a missing manifest or block stops them instead of reading as empty.
    """
    todo = ("run onboarding's baseline step first (role hybridgpu.fleet.node_join, tasks_from: baseline, "
            "as playbooks/onboard.yml does); a --check run records nothing")
    if doc is None:
        raise ManifestError("%s does not exist: the node's standalone state was never recorded "
                            "(the node was never onboarded); %s" % (path, todo))
    pre = doc.get("pre_onboarding")
    if not pre or not isinstance(pre, dict):
        raise ManifestError("%s has no pre_onboarding block: the node's standalone state was never "
                            "recorded; %s" % (path, todo))
    return pre


def _had(pre, art):
    """Whether the node had `art` before onboarding, per the pre_onboarding block."""
    kind = art.get("kind")
    if kind == "package":
        return bool((pre.get("packages") or {}).get(art.get("name")))
    if kind == "user":
        return art.get("name") in (pre.get("users") or [])
    if kind in ("directory", "file"):
        return bool((pre.get("paths") or {}).get(art.get("path")))
    if kind == "unit":
        return art.get("name") in (pre.get("active_units") or [])
    return False


def created(pre, artefacts):
    """Split `artefacts` into (created, had): what onboarding created and what the node had.

    Packages, users, directories and files the pre_onboarding block lists as present, and
    units it lists as active, are the node's own: they go to `had` and are never recorded, so removal never deletes them.
    An artefact with ``record_always`` (a folder onboarding uses whether or not it made
    it) is kept either way, with ``created`` saying whether onboarding made it.
    """
    made, had = [], []
    for art in artefacts or []:
        art = dict(art)
        always = art.pop("record_always", False)
        before = _had(pre, art)
        if always:
            art["created"] = not before
            made.append(art)
        elif before:
            had.append(art)
        else:
            made.append(art)
    return made, had


def render_page(doc, json_name):
    """The manifest's page: the node, its baseline and what each section added, then every artefact."""
    pre = doc.get("pre_onboarding") or {}
    sections = doc.get("sections") or {}
    kinds = {}
    for art in artefacts(doc):
        kinds[art.get("kind")] = kinds.get(art.get("kind"), 0) + 1
    summary = [("What", "onboarding manifest: what onboarding added to the node, which removal reverses"),
               ("Node", doc.get("node")),
               ("Standalone state recorded at", pre.get("recorded_at") or "not recorded"),
               ("Sections", ["%s (%d artefacts)" % (name, len(sec.get("artefacts") or []))
                             for name, sec in sorted(sections.items())]),
               ("Artefacts by kind", ["%s: %d" % (k, kinds[k]) for k in sorted(kinds, key=str)])]
    parts = [("Section %s" % name, {"artefacts": record_page.table(sec.get("artefacts") or []),
                                    "facts": sec.get("facts") or {}})
             for name, sec in sorted(sections.items())]
    return record_page.render("Onboarding manifest of %s" % doc.get("node"), summary, doc,
                              json_name, sections=parts, skip=("sections",))


def page_current(path):
    """Whether the page beside the manifest at ``path`` shows the manifest there now."""
    return record_page.page_current(path, render_page)


def write(path, doc):
    """Write the page and the JSON, each atomically (temp sibling + rename). Returns True
    when either changed."""
    text = dumps(doc)
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text and page_current(path):
                return False
    except FileNotFoundError:
        pass
    record_page.write_pair(path, text, render_page(record_page.normal(doc), os.path.basename(path)), mode=0o640)
    return True


def move(path, dest):
    """Move the manifest at ``path`` to ``dest`` (same file system); its page goes along,
    rendered again for the new file name."""
    doc = load(path)
    if doc is None:
        raise ManifestError("%s does not exist; there is no manifest to move" % path)
    files.write(record_page.html_path(dest), render_page(doc, os.path.basename(dest)), mode=0o640)
    files.move(path, dest)
    try:
        os.unlink(record_page.html_path(path))
    except FileNotFoundError:
        pass
