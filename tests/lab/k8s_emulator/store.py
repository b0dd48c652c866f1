"""In-memory object store: CRUD, resourceVersion, defaulting, validation and patching."""
import base64
import collections
import copy
import datetime
import re
import secrets as pysecrets
import threading
import time
import uuid

from . import lifecycle, paging
from . import patch as patchlib
from . import validation
from .errors import ApiError
from .resources import BY_PLURAL
from .selectors import (SelectorError, fields_match, labels_match, parse_field_selector,
                        parse_label_selector)

NODE_NAME_ANNOTATION = "hybridgpu.io/node-name"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_RANDOM_CHARS = "bcdfghjklmnpqrstvwxz2456789"
HISTORY = 5000          # write events kept for watch and resourceVersionMatch=Exact
BOOKMARK_EVERY = 60.0   # seconds between watch bookmarks, as kube-apiserver
DEFAULT_WATCH_TIMEOUT = 1800.0
# One write: (resourceVersion, ADDED|MODIFIED|DELETED, plural, object after, object before).
Event = collections.namedtuple("Event", "rv type plural obj prev")


def not_found(res, name):
    group = res.group
    what = "%s.%s" % (res.plural, group) if group else res.plural
    return ApiError(404, "NotFound", '%s "%s" not found' % (what, name),
                    {"name": name, "group": group, "kind": res.plural})


def conflict(res, name):
    what = "%s.%s" % (res.plural, res.group) if res.group else res.plural
    return ApiError(409, "Conflict",
                    'Operation cannot be fulfilled on %s "%s": the object has been modified; '
                    "please apply your changes to the latest version and try again" % (what, name),
                    {"name": name, "group": res.group, "kind": res.plural})


def invalid(res, name, field, value, why):
    return validation.invalid_error(res, name, [validation.invalid(field, value, why)])


def now_rfc3339(offset=0.0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    if not text:
        return None
    try:
        text = text.replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def parse_rv(text):
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ApiError(400, "BadRequest", 'invalid resource version "%s"' % text)
    if value < 0:
        raise ApiError(400, "BadRequest", 'invalid resource version "%s"' % text)
    return value


def _same(a, b):
    """Equal apart from metadata.resourceVersion."""
    ma, mb = dict(a.get("metadata") or {}), dict(b.get("metadata") or {})
    ma.pop("resourceVersion", None)
    mb.pop("resourceVersion", None)
    return ma == mb and {k: v for k, v in a.items() if k != "metadata"} == \
        {k: v for k, v in b.items() if k != "metadata"}


def random_suffix(n=5):
    return "".join(pysecrets.choice(_RANDOM_CHARS) for _ in range(n))


def validate_labels(res, name, labels):
    for key, value in (labels or {}).items():
        prefix, _, lname = key.rpartition("/")
        if (not _LABEL_NAME.match(lname) or len(lname) > 63
                or (prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)))):
            raise invalid(res, name, "metadata.labels", key,
                          "name part must consist of alphanumeric characters, '-', '_' or '.', "
                          "and must start and end with an alphanumeric character")
        if not isinstance(value, str) or len(value) > 63 or (value and not _LABEL_NAME.match(value)):
            raise invalid(res, name, "metadata.labels", value,
                          "a valid label must be an empty string or consist of alphanumeric "
                          "characters, '-', '_' or '.', and must start and end with an "
                          "alphanumeric character")


class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.objects = {plural: {} for plural in BY_PLURAL}
        self.logs = {}
        self.node_tokens = {}
        self.events = collections.deque()
        self.compacted_rv = 0
        for ns in SYSTEM_NAMESPACES:
            self.create(BY_PLURAL["namespaces"], None, {"metadata": {"name": ns}})
        # Like a watch cache that started here: older resourceVersions are "too old".
        self.events.clear()
        self.compacted_rv = self.rv

    # ---- reading ----
    def get(self, res, ns, name):
        with self.lock:
            obj = self.objects[res.plural].get((ns, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def find(self, res, ns, name):
        with self.lock:
            obj = self.objects[res.plural].get((ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, plural, ns=None):
        """Live objects (not copies): for controllers holding the lock."""
        return [o for (ons, _), o in sorted(self.objects[plural].items())
                if ns is None or ons == ns]

    @staticmethod
    def _selectors(res, label_selector, field_selector):
        try:
            return (parse_label_selector(label_selector),
                    parse_field_selector(field_selector, res.field_labels))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc))

    @staticmethod
    def _matcher(ns, lreqs, freqs):
        def match(obj):
            return (obj is not None and (ns is None or obj["metadata"].get("namespace") == ns)
                    and labels_match(lreqs, obj["metadata"].get("labels")) and fields_match(freqs, obj))
        return match

    def list(self, res, ns=None, label_selector=None, field_selector=None, limit=None,
             cont=None, resource_version=None, match=None):
        """List; `resource_version` with `match` ("", NotOlderThan, Exact) as upstream:
        "0" is any state, N not older than N (504 when the store never got there),
        Exact N the state at N rebuilt from the write history (410 when that is gone)."""
        lreqs, freqs = self._selectors(res, label_selector, field_selector)
        keep = self._matcher(ns, lreqs, freqs)
        want = parse_rv(resource_version) if resource_version not in (None, "", "0") else None
        after = None
        if cont:  # the list goes on at the token's version, after its last key (paging.py)
            want, after = paging.decode(cont)
            match = "Exact"
        elif want is not None:
            self._wait_for_rv(want)
        with self.lock:
            if match == "Exact" and want is not None:
                try:
                    objs = self._state_at(res.plural, want)
                except ApiError:
                    if cont:
                        raise paging.expired()
                    raise
                meta = {"resourceVersion": str(want)}
            else:
                objs = self.items(res.plural, ns)
                meta = {"resourceVersion": str(self.rv)}
            out = [copy.deepcopy(o) for o in objs if keep(o) and paging.after(o, after)]
        if limit and limit < len(out):
            meta["continue"] = paging.encode(int(meta["resourceVersion"]), out[limit - 1])
            meta["remainingItemCount"] = len(out) - limit
            out = out[:limit]
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta,
                "items": out}

    def _wait_for_rv(self, want, wait=3.0):
        """A read not older than `want`: wait a little for it, then 504 as kube-apiserver."""
        deadline = time.monotonic() + wait
        with self.lock:
            while self.rv < want:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d"
                                   % (want, self.rv),
                                   {"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1})
                self.changed.wait(left)

    def too_old(self, rv):
        return ApiError(410, "Expired", "too old resource version: %d (%d)" % (rv, self.compacted_rv))

    def _state_at(self, plural, rv):
        """The objects of one kind as they were at resourceVersion `rv` (lock held)."""
        if rv < self.compacted_rv:
            raise self.too_old(rv)
        state = dict(self.objects[plural])
        for ev in reversed(self.events):
            if ev.rv <= rv:
                break
            if ev.plural != plural:
                continue
            key = ((ev.obj or ev.prev)["metadata"].get("namespace"), (ev.obj or ev.prev)["metadata"]["name"])
            if ev.prev is None:
                state.pop(key, None)
            else:
                state[key] = ev.prev
        return [o for dummy, o in sorted(state.items())]

    def _record(self, etype, plural, obj, prev):
        self.events.append(Event(self.rv, etype, plural, copy.deepcopy(obj), prev))
        while len(self.events) > HISTORY:
            self.compacted_rv = self.events.popleft().rv

    # ---- watching ----
    def watch(self, res, ns=None, label_selector=None, field_selector=None,
              resource_version=None, timeout=None, bookmarks=False, stopped=None):
        """Watch events (dicts) after `resource_version`, or the current objects as ADDED
        first when it is unset or "0". Ends at `timeout` seconds or when `stopped` is set.
        An object that stops (starts) matching the selectors is DELETED (ADDED)."""
        lreqs, freqs = self._selectors(res, label_selector, field_selector)
        keep = self._matcher(ns, lreqs, freqs)
        since = parse_rv(resource_version) if resource_version not in (None, "", "0") else None
        return self._events(res, ns, keep, since, timeout, bookmarks, stopped)

    def _events(self, res, ns, keep, since, timeout, bookmarks, stopped):
        start = time.monotonic()
        deadline = start + (DEFAULT_WATCH_TIMEOUT if timeout is None else timeout)

        def event(etype, obj):
            return {"type": etype, "object": copy.deepcopy(obj)}

        with self.lock:
            if since is None:
                pending = [event("ADDED", o) for o in self.items(res.plural, ns) if keep(o)]
                since = self.rv
            elif since < self.compacted_rv:
                yield {"type": "ERROR", "object": self.too_old(since).status()}
                return
            else:
                pending = []
        last_bookmark = start
        while True:
            for ev in pending:
                yield ev
            now = time.monotonic()
            if now >= deadline or (stopped is not None and stopped.is_set()):
                return
            with self.lock:
                if since < self.compacted_rv:
                    yield {"type": "ERROR", "object": self.too_old(since).status()}
                    return
                news = []
                for ev in reversed(self.events):
                    if ev.rv <= since:
                        break
                    news.append(ev)
                pending = []
                for ev in reversed(news):
                    since = ev.rv
                    if ev.plural != res.plural:
                        continue
                    now_in, was_in = keep(ev.obj) and ev.type != "DELETED", keep(ev.prev)
                    if ev.type == "DELETED":
                        if was_in:
                            pending.append(event("DELETED", ev.obj))
                    elif now_in:
                        pending.append(event("MODIFIED" if was_in else "ADDED", ev.obj))
                    elif was_in:
                        pending.append(event("DELETED", ev.obj))
                # A bookmark every BOOKMARK_EVERY seconds, and one 2 s before the timeout.
                next_bookmark = min(last_bookmark + BOOKMARK_EVERY, deadline - 2.0)
                if not pending and bookmarks and now >= next_bookmark and now - last_bookmark >= 1.0:
                    last_bookmark = now
                    pending.append({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(self.rv), "creationTimestamp": None}}})
                    since = self.rv
                if not pending:
                    wake = deadline
                    if bookmarks:
                        wake = min(wake, max(next_bookmark, last_bookmark + 1.0))
                    self.changed.wait(max(0.05, min(wake - now, 1.0)))

    # ---- writing ----
    def _commit(self, res, obj, dry_run=False):
        if dry_run:  # validated and answered like the real write; nothing is stored
            return copy.deepcopy(obj)
        meta = obj["metadata"]
        key = (meta.get("namespace"), meta["name"])
        prev = self.objects[res.plural].get(key)
        if prev is not None and prev is not obj and _same(prev, obj):
            return copy.deepcopy(prev)  # a no-op write: no new resourceVersion, no event
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.objects[res.plural][key] = obj
        self._record("ADDED" if prev is None else "MODIFIED", res.plural, obj, prev)
        if res.plural == "secrets" and meta.get("namespace") == "kube-system":
            self._index_node_tokens()
        self.changed.notify_all()
        return copy.deepcopy(obj)

    def put_internal(self, res, obj):
        """Controller write: no admission, no conflict check."""
        with self.lock:
            return self._commit(res, copy.deepcopy(obj))

    def create(self, res, ns, body, admit=None, dry_run=False, field_validation=None,
               warnings=None):
        """Create an object. `field_validation` is the request's fieldValidation directive
        (Ignore, Warn, Strict) and turns on the API validation; None is a trusted internal write.
        Warnings for the client are appended to `warnings`."""
        found = []
        if field_validation is not None:
            validation.check_body_type(res, body)
        elif not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "request body must be a JSON object")
        obj = copy.deepcopy(body)
        if field_validation is not None:
            obj["kind"], obj["apiVersion"] = res.kind, res.api_version
            found = validation.decode_object(res, obj, field_validation)
        meta = obj.setdefault("metadata", {}) or {}
        obj["metadata"] = meta
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(400, "BadRequest",
                               "the namespace of the provided object does not match the "
                               "namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(20):
                    cand = meta["generateName"] + random_suffix()
                    if (ns, cand) not in self.objects[res.plural]:
                        meta["name"] = cand
                        break
            name = meta.get("name")
            if not name:
                raise validation.invalid_error(res, "", [validation.required(
                    "metadata.name", "name or generateName is required")])
            pattern = _DNS_LABEL if res.plural == "namespaces" else _SUBDOMAIN
            if not pattern.match(name) or len(name) > 253:
                raise invalid(res, name, "metadata.name", name,
                              "a lowercase RFC 1123 subdomain must consist of lower case "
                              "alphanumeric characters, '-' or '.'")
            validate_labels(res, name, meta.get("labels"))
            if res.namespaced and (None, ns) not in self.objects["namespaces"]:
                raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                               {"name": ns, "kind": "namespaces"})
            if (meta.get("namespace"), name) in self.objects[res.plural]:
                what = "%s.%s" % (res.plural, res.group) if res.group else res.plural
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (what, name),
                               {"name": name, "group": res.group, "kind": res.plural})
            if res.namespaced and res.plural != "resourcequotas":
                self._check_quota(res, ns, name)
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                meta.pop(key, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            self._default(res, obj)
            if field_validation is not None:
                validation.check_rules(res, obj)
            if admit:
                admit(None, obj)
            if warnings is not None:
                warnings.extend(found)
            return self._commit(res, obj, dry_run)

    def _check_quota(self, res, ns, name):
        """Object-count ResourceQuota admission: 403 'exceeded quota', as kube-apiserver answers."""
        what = "%s.%s" % (res.plural, res.group) if res.group else res.plural
        key = "count/" + what
        for (qns, qname), quota in sorted(self.objects["resourcequotas"].items()):
            if qns != ns:
                continue
            hard = ((quota.get("spec") or {}).get("hard") or {}).get(key)
            if hard is None:
                continue
            used = sum(1 for (ons, _) in self.objects[res.plural] if ons == ns)
            if used + 1 > int(hard):
                raise ApiError(403, "Forbidden",
                               '%s "%s" is forbidden: exceeded quota: %s, requested: %s=1, used: %s=%d, '
                               'limited: %s=%s' % (what, name, qname, key, key, used, key, hard),
                               {"name": name, "group": res.group, "kind": res.plural})

    def _default(self, res, obj):
        kind = res.kind
        meta = obj["metadata"]
        if kind == "Namespace":
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        elif kind == "Pod":
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            for c in spec.get("containers") or []:
                c.setdefault("terminationMessagePolicy", "File")
                c.setdefault("imagePullPolicy", "IfNotPresent")
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif kind == "Node":
            obj.setdefault("spec", {})
            obj.setdefault("status", {})
        elif kind == "Job":
            spec = obj.setdefault("spec", {})
            spec.setdefault("parallelism", 1)
            spec.setdefault("completions", 1)
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("suspend", False)
            spec.setdefault("completionMode", "NonIndexed")
            uid = meta["uid"]
            tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
            labels = tmeta.setdefault("labels", {})
            labels.update({"controller-uid": uid, "batch.kubernetes.io/controller-uid": uid,
                           "job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"]})
            if not spec.get("manualSelector"):
                spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            obj["status"] = {}
        elif kind == "DaemonSet":
            from .daemonsets import default as daemonset_default
            daemonset_default(obj)
        elif kind == "PodDisruptionBudget":
            obj["status"] = {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0,
                             "expectedPods": 0, "observedGeneration": 0}
        elif kind == "Secret":
            obj.setdefault("type", "Opaque")
            string_data = obj.pop("stringData", None) or {}
            data = obj.setdefault("data", {}) or {}
            obj["data"] = data
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            ann = meta.get("annotations") or {}
            if (obj["type"] == SA_TOKEN_TYPE and meta.get("namespace") == "kube-system"
                    and ann.get(NODE_NAME_ANNOTATION) and not data.get("token")):
                token = pysecrets.token_urlsafe(32)
                data["token"] = base64.b64encode(token.encode()).decode()

    def _index_node_tokens(self):
        tokens = {}
        for obj in self.items("secrets", "kube-system"):
            node = (obj["metadata"].get("annotations") or {}).get(NODE_NAME_ANNOTATION)
            raw = (obj.get("data") or {}).get("token")
            if obj.get("type") == SA_TOKEN_TYPE and node and raw:
                try:
                    tokens[base64.b64decode(raw).decode()] = node
                except (ValueError, UnicodeDecodeError):
                    continue
        self.node_tokens = tokens

    def _finish_write(self, res, old, new, subresource, check_rv):
        """Merge an incoming full object onto old per subresource rules."""
        name = old["metadata"]["name"]
        if not isinstance(new, dict):
            raise ApiError(400, "BadRequest", "request body must be a JSON object")
        nmeta = new.get("metadata") or {}
        if nmeta.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the "
                           "name on the URL (%s)" % (nmeta.get("name"), name))
        rv = nmeta.get("resourceVersion")
        if check_rv and rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(res, name)
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = copy.deepcopy(new["status"])
            return result
        result = copy.deepcopy(new)
        result["kind"], result["apiVersion"] = res.kind, res.api_version
        meta = result.setdefault("metadata", {}) or {}
        result["metadata"] = meta
        for key in ("name", "namespace", "uid", "creationTimestamp", "generation",
                    "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        if res.has_status:
            if "status" in old:
                result["status"] = copy.deepcopy(old["status"])
            else:
                result.pop("status", None)
        if res.kind == "Secret":
            string_data = result.pop("stringData", None) or {}
            data = result.setdefault("data", {}) or {}
            result["data"] = data
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        validate_labels(res, name, meta.get("labels"))
        if old.get("spec") != result.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return result

    @staticmethod
    def _check_update(res, old, new):
        validation.check_rules(res, new)
        validation.update_errors(res, old, new)

    def update(self, res, ns, name, body, subresource=None, admit=None, dry_run=False,
               field_validation=None, warnings=None):
        found = []
        if field_validation is not None:
            validation.check_body_type(res, body)
            body = copy.deepcopy(body)
            found = validation.decode_object(res, body, field_validation)
        with self.lock:
            old = self.objects[res.plural].get((ns, name))
            if old is None:
                raise not_found(res, name)
            new = self._finish_write(res, old, body, subresource, True)
            if field_validation is not None:
                self._check_update(res, old, new)
            if warnings is not None:
                warnings.extend(found)
            if admit:
                admit(old, new)
            return self._commit_update(res, old, new, dry_run)

    def patch(self, res, ns, name, content_type, body, subresource=None, admit=None,
              dry_run=False, field_validation=None, warnings=None):
        ctype = (content_type or "").split(";")[0].strip().lower()
        with self.lock:
            old = self.objects[res.plural].get((ns, name))
            if old is None:
                raise not_found(res, name)
            try:
                if ctype == "application/merge-patch+json":
                    if not isinstance(body, dict):
                        raise patchlib.PatchError("merge patch must be a JSON object")
                    patched = patchlib.merge_patch(old, body)
                elif ctype == "application/strategic-merge-patch+json":
                    patched = patchlib.strategic_merge_patch(old, body, res.kind)
                elif ctype == "application/json-patch+json":
                    patched = patchlib.json_patch(old, body)
                else:
                    raise ApiError(415, "UnsupportedMediaType",
                                   "the body of the request was in an unknown format - accepted "
                                   "media types include: application/json-patch+json, "
                                   "application/merge-patch+json, "
                                   "application/strategic-merge-patch+json")
            except patchlib.PatchError as exc:
                raise ApiError(422, "Invalid", str(exc))
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "patch result is not an object")
            # A resourceVersion in the patch is a precondition.
            want_rv = None
            if isinstance(body, dict):
                want_rv = (body.get("metadata") or {}).get("resourceVersion")
            else:
                want_rv = (patched.get("metadata") or {}).get("resourceVersion")
                if want_rv == old["metadata"]["resourceVersion"]:
                    want_rv = None
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise conflict(res, name)
            patched.setdefault("metadata", {})["resourceVersion"] = \
                old["metadata"]["resourceVersion"]
            found = []
            if field_validation is not None:
                validation.check_body_type(res, patched)
                found = validation.decode_object(res, patched, field_validation)
            new = self._finish_write(res, old, patched, subresource, False)
            if field_validation is not None:
                self._check_update(res, old, new)
            if warnings is not None:
                warnings.extend(found)
            if admit:
                admit(old, new)
            return self._commit_update(res, old, new, dry_run)

    def _commit_update(self, res, old, new, dry_run):
        """Commit an update; one that removes the last finalizer of a deleted object deletes it."""
        lifecycle.check_update(res, old, new)
        if lifecycle.deletes_on_update(old, new):
            if dry_run:
                return copy.deepcopy(new)
            return self.delete_internal(res, old)
        return self._commit(res, new, dry_run)

    def delete(self, res, ns, name, propagation=None, admit=None, precondition_uid=None,
               precondition_rv=None, dry_run=False, grace=None):
        """Delete as upstream (see lifecycle.py); returns (object, deleted_now)."""
        with self.lock:
            old = self.objects[res.plural].get((ns, name))
            if old is None:
                raise not_found(res, name)
            if precondition_uid and precondition_uid != old["metadata"]["uid"]:
                raise conflict(res, name)
            if precondition_rv and precondition_rv != old["metadata"]["resourceVersion"]:
                raise conflict(res, name)
            if admit:
                admit(old, None)
            if dry_run:
                gone = copy.deepcopy(old)
                if res.plural == "namespaces":
                    gone.setdefault("status", {})["phase"] = "Terminating"
                return gone, True
            if res.plural == "namespaces":
                return self.delete_internal(res, old, propagation), True
            return lifecycle.delete(self, res, old, propagation, grace)

    def delete_internal(self, res, obj, propagation=None):
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace"), meta["name"])
            gone = self.objects[res.plural].pop(key, None)
            if gone is None:
                return copy.deepcopy(obj)
            self.rv += 1
            prev = gone
            gone = copy.deepcopy(gone)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record("DELETED", res.plural, gone, prev)
            if res.plural == "pods":
                self.logs.pop(key, None)
            if res.plural == "secrets" and meta.get("namespace") == "kube-system":
                self._index_node_tokens()
            if res.plural == "namespaces":
                for plural, objs in self.objects.items():
                    for okey in [k for k in objs if BY_PLURAL[plural].namespaced
                                 and k[0] == meta["name"]]:
                        if okey in objs:
                            self.delete_internal(BY_PLURAL[plural], objs[okey], "Orphan")
                self._index_node_tokens()
                gone.setdefault("status", {})["phase"] = "Terminating"
            # Dependents are the garbage collector's (lifecycle.collect).
            self.changed.notify_all()
            return gone
