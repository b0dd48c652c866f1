# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Images of a moved job, pinned by digest and pre-pulled onto the cloud pool before it moves.

On-prem digest of an image (onprem_digest), first match wins:
- the reference carries one (`repo@sha256:<hex>`);
- a pin: `repo@sha256:<hex>` in the class's `image_pins` or the pass's `images.pins`, for the
  image's repository;
- the on-prem kubelets: `Node.status.images[].names` lists `<repo>@sha256:<hex>` beside
  `<repo>:<tag>` for every image a node holds; the entry that names the image gives the digest
  (nodes that disagree about a tag are a refusal: the site runs more than one image under it).
None found: the move is refused naming the image, unless the class sets `allow_unpinned_images`.

Pre-pull (PrePuller.ensure), before the first attempt of a class and whenever its digest changes:
a Job `ovf-prepull-...` in the overflow namespace of the cloud cluster, labelled
`hybridgpu.io/overflow-prepull`, on the cloud pool (the pass's node selector and tolerations),
runs one container with the image referenced by digest (after the registry mapping) and a no-op
command. Its pod's `containerStatuses[].imageID` (`docker-pullable://repo@sha256:...`,
`repo@sha256:...`) must carry the on-prem digest; a pull error, a timeout or another digest refuses
the move (ImageRefused names both digests). The pull time measured is the pod's PodScheduled
transition (else its startTime, which the kubelet sets before pulling) to the container's start.

The record of what was pulled is a ConfigMap `hgpu-overflow-prepull` in the same namespace: one
data key per class, JSON {mapped repo: {digest, pull_s, at, job, node}}. It sits beside the pool it
describes, every pass (an AWX job in a fresh container too) reads it, and it is replaced under its
resourceVersion, so two passes never lose each other's entries. A class whose record holds the
digest is not pulled again.
"""
from __future__ import annotations

import calendar
import hashlib
import json
import re
import time

from ..common import k8s
from .ledger_kube import KubeObjects

PREPULL_LABEL = "hybridgpu.io/overflow-prepull"
RECORD_NAME = "hgpu-overflow-prepull"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


class ImageRefused(ValueError):
    """The job's image cannot be moved: no on-prem digest, or the cloud pool pulls another one."""


def split_ref(image):
    """(repository, tag or None, digest or None) of an image reference."""
    rest, sep, digest = image.partition("@")
    digest = digest if sep else None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1:], digest
    return rest, None, digest


def normalize(repo):
    """A repository as the kubelet names it: Docker Hub's implicit `docker.io/` and `library/`."""
    first = repo.split("/", 1)[0]
    if "/" not in repo or ("." not in first and ":" not in first and first != "localhost"):
        if "/" not in repo:
            repo = "library/" + repo
        repo = "docker.io/" + repo
    return repo


def digest_of(text):
    """The `sha256:<hex>` in an imageID or a reference, None when there is none."""
    found = DIGEST.findall(text or "")
    return found[-1] if found else None


def by_digest(image, digest):
    """The reference `repo@sha256:...` (the tag, if any, dropped: the digest names the content)."""
    repo = split_ref(image)[0]
    return "%s@%s" % (repo, digest)


def _pins(pins):
    out = {}
    for pin in pins or []:
        repo, dummy, digest = split_ref(pin)
        if digest and DIGEST.fullmatch(digest):
            out[normalize(repo)] = digest
    return out


def check_pins(pins, where):
    """Errors for pins that are not `repo@sha256:<64 hex>`."""
    return ["%s: %r is not <repo>@sha256:<64 hex>" % (where, p) for p in pins or []
            if not (isinstance(p, str) and DIGEST.fullmatch(split_ref(p)[2] or ""))]


def node_digests(nodes, image):
    """{digest: [node names]} of the on-prem nodes whose status.images names `image`."""
    repo, tag, dummy = split_ref(image)
    want = normalize(repo)
    names = set(["%s:%s" % (want, tag or "latest"), "%s:%s" % (repo, tag or "latest")])
    found = {}
    for node in nodes or []:
        for entry in (node.get("status") or {}).get("images") or []:
            listed = entry.get("names") or []
            if not any(n in names for n in listed):
                continue
            for n in listed:
                nrepo, dummy, ndigest = split_ref(n)
                if ndigest and normalize(nrepo) == want and DIGEST.fullmatch(ndigest):
                    found.setdefault(ndigest, []).append(node["metadata"]["name"])
    return found


def onprem_digest(image, pins=None, nodes=None):
    """(digest, source) of `image` as the site runs it; (None, why) when none can be found.
    ValueError when the on-prem nodes hold different digests under the same tag."""
    repo, dummy, digest = split_ref(image)
    if digest:
        if not DIGEST.fullmatch(digest):
            raise ValueError("image %s: digest %s is not sha256:<64 hex>" % (image, digest))
        return digest, "reference"
    pinned = _pins(pins).get(normalize(repo))
    if pinned:
        return pinned, "pin"
    found = node_digests(nodes, image)
    if len(found) > 1:
        raise ValueError("image %s: on-prem nodes run different digests under it (%s)" % (
            image, "; ".join("%s on %s" % (d, ", ".join(sorted(n))) for d, n in sorted(found.items()))))
    if found:
        return next(iter(found)), "node status"
    return None, "no on-prem node reports it and no pin names %s" % repo


def _ts(text):
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text.replace("Z", "")[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def pull_seconds(pod, container="prepull"):
    """Seconds from the pod's scheduling (else its startTime) to the container's start; None if unknown."""
    st = pod.get("status") or {}
    begin = None
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            begin = _ts(c.get("lastTransitionTime"))
    if begin is None:
        begin = _ts(st.get("startTime"))
    for cs in st.get("containerStatuses") or []:
        if cs.get("name") != container:
            continue
        state = cs.get("state") or {}
        started = _ts((state.get("running") or {}).get("startedAt") or (state.get("terminated") or {}).get("startedAt"))
        if begin is not None and started is not None:
            return max(0.0, started - begin)
    return None


def class_key(cls_name):
    """ConfigMap data key for a class (class names outside [-._a-zA-Z0-9] are hashed)."""
    if re.fullmatch(r"[-._a-zA-Z0-9]{1,200}", cls_name or ""):
        return cls_name
    return "class-" + hashlib.sha256((cls_name or "").encode("utf-8")).hexdigest()[:16]


def job_name(cls_name, digest):
    clean = re.sub(r"[^a-z0-9-]+", "-", (cls_name or "").lower()).strip("-")[:30].rstrip("-")
    tail = digest.split(":", 1)[-1][:12]
    return "ovf-prepull-%s-%s" % (clean, tail) if clean else "ovf-prepull-%s" % tail


class PrePuller(object):
    """Pre-pulls images on the cloud pool through one Kube client (common/k8s.py)."""

    def __init__(self, kube, namespace, node_selector=None, tolerations=None, command=None, timeout_s=600.0,
                 poll_s=2.0, sleep=time.sleep, clock=time.time):
        self.kube = kube
        self.ns = namespace
        self.node_selector = dict(node_selector or {})
        self.tolerations = list(tolerations or [])
        self.command = list(command or ["true"])
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s)
        self.sleep = sleep
        self.clock = clock
        self.objects = KubeObjects(kube, namespace)

    # -- the record ---------------------------------------------------------------------
    def records(self):
        """{class key: {mapped repo: entry}} as recorded on the cloud cluster ({} when none)."""
        cm = self.objects.get("configmap", RECORD_NAME)
        out = {}
        for key, text in ((cm or {}).get("data") or {}).items():
            try:
                out[key] = json.loads(text)
            except ValueError:
                continue
        return out

    def recorded(self, cls_name, repo):
        return (self.records().get(class_key(cls_name)) or {}).get(repo)

    def _record(self, cls_name, repo, entry, tries=5):
        key = class_key(cls_name)
        for dummy in range(tries):
            cm = self.objects.get("configmap", RECORD_NAME)
            if cm is None:
                body = {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": RECORD_NAME, "namespace": self.ns, "labels": {PREPULL_LABEL: "record"}},
                        "data": {key: json.dumps({repo: entry}, sort_keys=True)}}
                try:
                    return self.objects.create("configmap", body)
                except k8s.K8sError as err:
                    if err.conflict:
                        continue
                    raise
            data = dict(cm.get("data") or {})
            try:
                cur = json.loads(data.get(key) or "{}")
            except ValueError:
                cur = {}
            cur[repo] = entry
            data[key] = json.dumps(cur, sort_keys=True)
            cm["data"] = data
            try:
                return self.objects.replace("configmap", cm)      # carries the resourceVersion read
            except k8s.K8sError as err:
                if err.conflict:
                    continue
                raise
        raise k8s.K8sError("record the pre-pull of %s" % repo, message="ConfigMap %s/%s kept changing" % (self.ns, RECORD_NAME))

    # -- the pull -----------------------------------------------------------------------
    def body(self, name, cls_name, ref):
        pod = {"restartPolicy": "Never",
               "containers": [{"name": "prepull", "image": ref, "command": list(self.command),
                               "imagePullPolicy": "IfNotPresent"}]}
        if self.node_selector:
            pod["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            pod["tolerations"] = list(self.tolerations)
        labels = {PREPULL_LABEL: class_key(cls_name)[:63].strip("-_.") or "class"}
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": self.ns, "labels": labels,
                             "annotations": {"hybridgpu.io/overflow-prepull-image": ref}},
                "spec": {"backoffLimit": 0, "activeDeadlineSeconds": max(1, int(self.timeout_s)),
                         "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}

    def ensure(self, cls_name, image, digest):
        """Make sure the cloud pool holds `image` (mapped reference) at `digest`.
        Returns {"outcome": "recorded"|"pulled", "ref", "digest", "pull_s", "node"}; raises ImageRefused."""
        repo = split_ref(image)[0]
        ref = by_digest(image, digest)
        have = self.recorded(cls_name, repo)
        if have and have.get("digest") == digest:
            return dict(have, outcome="recorded", ref=ref)
        name = job_name(cls_name, digest)
        self.kube.delete_job(self.ns, name, propagation="Background")   # a leftover of a pass that stopped
        self._gone(name)
        self.kube.create_job(self.ns, self.body(name, cls_name, ref))
        try:
            got = self._wait(name, ref, digest)
        finally:
            self.kube.delete_job(self.ns, name, propagation="Background")
        entry = {"digest": digest, "pull_s": got["pull_s"], "at": round(self.clock(), 3), "job": name,
                 "node": got["node"], "image_id": got["image_id"]}
        self._record(cls_name, repo, entry)
        return dict(entry, outcome="pulled", ref=ref)

    def _gone(self, name):
        deadline = self.clock() + self.timeout_s
        while self.kube.get_job(self.ns, name) is not None:
            if self.clock() > deadline:
                raise ImageRefused("pre-pull Job %s/%s from an earlier pass is still being deleted" % (self.ns, name))
            self.sleep(self.poll_s)

    def _wait(self, name, ref, digest):
        deadline = self.clock() + self.timeout_s
        while True:
            pods = self.kube.list_pods(self.ns, label_selector="job-name=%s" % name)
            for pod in pods:
                st = pod.get("status") or {}
                for cs in st.get("containerStatuses") or []:
                    waiting = (cs.get("state") or {}).get("waiting") or {}
                    if waiting.get("reason") in PULL_ERRORS:
                        raise ImageRefused("the cloud pool cannot pull %s (on-prem digest %s): %s %s" % (
                            ref, digest, waiting.get("reason"), waiting.get("message") or ""))
                    state = cs.get("state") or {}
                    if not (state.get("running") or state.get("terminated")) or not cs.get("imageID"):
                        continue
                    pulled = digest_of(cs["imageID"])
                    if pulled != digest:
                        raise ImageRefused("the cloud pool pulled %s as %s, on-prem runs %s: digests differ" % (
                            ref, pulled or cs["imageID"], digest))
                    return {"pull_s": pull_seconds(pod, cs.get("name")), "image_id": cs["imageID"],
                            "node": (pod.get("spec") or {}).get("nodeName")}
                if st.get("phase") == "Failed":
                    raise ImageRefused("pre-pull pod %s of %s failed: %s %s" % (
                        pod["metadata"]["name"], ref, st.get("reason") or "", st.get("message") or ""))
            if self.clock() > deadline:
                raise ImageRefused("pre-pull of %s (on-prem digest %s) did not start on the cloud pool in %.0f s" % (
                    ref, digest, self.timeout_s))
            self.sleep(self.poll_s)


def images_of(pod_spec, rewrites):
    """[(where, container, on-prem image)] of a carried pod spec: the image before the registry
    mapping, read back from the carry rewrites."""
    before = dict((r["field"], r["from"]) for r in rewrites or [] if str(r.get("field", "")).endswith("image"))
    out = []
    for kind in ("initContainers", "containers"):
        for c in pod_spec.get(kind) or []:
            where = "%s.%s.image" % (kind, c.get("name"))
            onprem = before.get(where) or (before.get("image") if kind == "containers" and c.get("name") == "job" else None)
            out.append((where, c, onprem or c.get("image") or ""))
    return out


def prepare(spec, cls, settings, puller, nodes):
    """Pin every image of a carried spec by digest and pre-pull it on the cloud pool.
    settings: the pass's `images` option. Returns [{"image", "ref", "digest", "source", "outcome",
    "pull_s"}] and rewrites spec in place; raises ImageRefused before anything is held."""
    pins = list(settings.get("pins") or []) + list(cls.get("image_pins") or [])
    done = []
    seen = {}
    for where, c, onprem in images_of(spec["pod_spec"], spec.get("rewrites")):
        try:
            digest, source = onprem_digest(onprem, pins, nodes)
        except ValueError as exc:
            raise ImageRefused(str(exc))
        if digest is None:
            if cls.get("allow_unpinned_images"):
                done.append({"image": onprem, "ref": c["image"], "digest": None, "source": source,
                             "outcome": "unpinned", "pull_s": None})
                continue
            raise ImageRefused("image %s has no on-prem digest (%s); pin it (%s) or set allow_unpinned_images "
                               "on class %s" % (onprem, source, "repo@sha256:<hex>", cls.get("name")))
        mapped = c["image"]
        key = (split_ref(mapped)[0], digest)
        if key not in seen:
            seen[key] = puller.ensure(cls.get("name"), mapped, digest)
        got = seen[key]
        if mapped != got["ref"]:
            spec["rewrites"].append({"field": where, "from": mapped, "to": got["ref"],
                                     "why": "pinned by the on-prem digest (%s), pre-pulled on the cloud pool" % source})
            c["image"] = got["ref"]
        done.append({"image": onprem, "ref": got["ref"], "digest": digest, "source": source,
                     "outcome": got["outcome"], "pull_s": got.get("pull_s")})
    return done


def measured_pulls(records):
    """{class key: seconds} from the pre-pull record: the slowest image of each class."""
    out = {}
    for key, images in (records or {}).items():
        times = [e.get("pull_s") for e in (images or {}).values() if isinstance(e, dict) and e.get("pull_s") is not None]
        if times:
            out[key] = max(times)
    return out
