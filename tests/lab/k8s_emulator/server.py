"""HTTPS front end: routing, auth, JSON in/out, one log line per request."""
import json
import logging
import re
import select
import socket
import ssl
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import apply, auth, certificates, identity, media, openapi, resources, reviews, tables, validation
from .controllers import Controllers, evict
from .store import ApiError, Store

log = logging.getLogger("k8s_emulator")
OPEN_PATHS = ("/version", "/healthz", "/livez", "/readyz")


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def _watch_timeout(query):
    """timeoutSeconds, else the request `timeout` (a Go duration, what kubectl --request-timeout
    sends), else None (the store's default)."""
    if query.get("timeoutSeconds", "").isdigit():
        return float(query["timeoutSeconds"])
    found = _DURATION.match(query.get("timeout", ""))
    if found:
        return float(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[found.group(2)]
    return None


def _peer_cert(connection):
    """The client certificate (DER) the TLS handshake verified, or None."""
    try:
        return connection.getpeercert(binary_form=True)
    except (AttributeError, ValueError, OSError):
        return None


def _store_sub(sub):
    """CSR approval writes go through the store like status (spec kept); the strategy in
    certificates.admit decides what changes."""
    return "status" if sub == "approval" else (sub or None)


def _grace(value):
    """DeleteOptions.gracePeriodSeconds (query or body), or None."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, "BadRequest", "invalid gracePeriodSeconds %r" % (value,))


class _Ended:
    """Tells a watch to end: the emulator stops, or the client closed its connection (a
    watching client sends nothing, so a readable socket means EOF)."""

    def __init__(self, stopping, connection):
        self.stopping = stopping
        self.connection = connection

    def is_set(self):
        if self.stopping.is_set():
            return True
        try:
            return bool(select.select([self.connection], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, ssl_context, emulator):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.ssl_context = ssl_context
        self.emulator = emulator
        super().__init__(addr, handler)

    def finish_request(self, request, client_address):
        # TLS handshake here, in the per-connection thread, not in the accept loop.
        try:
            request.settimeout(30)
            # Answers go out as soon as they are written: with Nagle's algorithm a response
            # written in two parts (headers, body) waits for the client's delayed ACK (40 ms).
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake from %s failed: %s", client_address, exc)
            return
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            try:
                request.close()
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hybridgpu-k8s-emulator"
    timeout = 60

    def log_message(self, fmt, *args):  # silence the default stderr logging
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for text in getattr(self, "_warnings", None) or []:
            self.send_header("Warning", '299 - "%s"' % text.replace('"', '\\"'))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._code = code

    def _stream(self, code, events):
        """A watch: one JSON event per line, chunked, until the generator ends."""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._code = code
        try:
            for event in events:
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            events.close()

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self):
        start = time.monotonic()
        self._code = 0
        self._user = "-"
        self._warnings = []
        emu = self.server.emulator
        try:
            # Always drain the body first: an early error must not leave it on the
            # keep-alive connection.
            raw = self._read_body()
            code, body, ctype = emu.dispatch(self, lambda: raw)
            if isinstance(body, types.GeneratorType):
                self._stream(code, body)
            else:
                if ctype is None and getattr(self, "_rtype", None) == "application/yaml":
                    body, ctype = yaml.safe_dump(body, default_flow_style=False), "application/yaml"
                self._send(code, body, ctype or "application/json")
        except ApiError as exc:
            self._send(exc.code, exc.status())
        except Exception as exc:  # any bug still answers with a Status, and is logged
            log.exception("internal error on %s %s", self.command, self.path)
            self._send(500, ApiError(500, "InternalError", "internal error: %s" % exc).status())
        finally:
            emu.log_request(self.command, self.path, self._code, self._user,
                            (time.monotonic() - start) * 1000, self.client_address[0])

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


class Emulator:
    def __init__(self, cluster, binds, port, cert, key, token_file, node_grace=40.0,
                 version="v1.30.4", log_file=None, rules_file=None, tick=0.2, pdb_lag=0.2,
                 confirm_pod_deletion=False, client_ca=None, signing_cert=None, signing_key=None,
                 signing_duration=365 * 24 * 3600, auto_approve_groups=()):
        self.cluster = cluster
        self.version = version
        validation.preload()  # a missing schema package fails the start, not every write
        self.store = Store()
        self.tokens = auth.TokenFile(token_file)
        self.rules = auth.Rules(rules_file)
        self.controllers = Controllers(self.store, node_grace=node_grace, tick=tick, pdb_lag=pdb_lag,
                                       confirm_pod_deletion=confirm_pod_deletion)
        self._log_lock = threading.Lock()
        self.stopping = threading.Event()
        self._log_fh = open(log_file, "a", encoding="utf-8") if log_file else None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        self.client_ca = client_ca
        if client_ca:  # ask for (do not require) a client certificate signed by the cluster CA
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(client_ca)
        signer = certificates.Signer(signing_cert, signing_key, signing_duration) if signing_key else None
        self.identity = identity.IdentityControllers(self.store, signer, tick=tick,
                                                     auto_approve_groups=auto_approve_groups)
        self.servers = []
        for host in binds:
            srv = _Server((host, port), Handler, ctx, self)
            port = srv.server_address[1]  # port 0: the first bind picks, the rest reuse it
            self.servers.append(srv)
        self.port = port
        self.binds = list(binds)
        self._threads = []

    @property
    def url(self):
        host = self.binds[0]
        return "https://%s:%d" % ("[%s]" % host if ":" in host else host, self.port)

    def start(self):
        for srv in self.servers:
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                                 name="k8s-emulator-%s" % self.cluster, daemon=True)
            t.start()
            self._threads.append(t)
        self.controllers.start()
        if self.client_ca:
            with open(self.client_ca, "rb") as fh:
                self.identity.publish_cluster_info(self.url, fh.read())
        self.identity.start()
        return self

    def stop(self):
        self.stopping.set()  # ends open watches
        self.controllers.stop()
        self.identity.stop()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None

    def log_request(self, method, path, code, user, ms, client):
        line = "%s %s %s %s %s %s %d %.1fms" % (
            time.strftime("%Y-%m-%dT%H:%M:%S"), self.cluster, client, user, method, path, code, ms)
        if self._log_fh:
            with self._log_lock:
                self._log_fh.write(line + "\n")
                self._log_fh.flush()
        log.info(line)

    # ---- request dispatch ----
    def dispatch(self, handler, read_body):
        url = urlsplit(handler.path)
        path = url.path.rstrip("/") or "/"
        multi = parse_qs(url.query, keep_blank_values=True)
        query = {k: v[-1] for k, v in multi.items()}
        query["dryRun"] = multi.get("dryRun", [])
        method = handler.command
        if path in OPEN_PATHS:
            return self._open_path(path)
        user = auth.authenticate(handler.headers, self.tokens, self.store, _peer_cert(handler.connection))
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        handler._user = user.name
        handler._rtype = media.response_type(handler.headers.get("Accept"))
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["openapi"]:
            auth.authorize_path(user, path)
            return self._openapi(parts[1:])
        if len(parts) <= (2 if parts[:1] == ["api"] else 3):  # discovery, not a resource
            auth.authorize_path(user, path)
        if parts == ["api"]:
            return 200, resources.api_versions("%s:%d" % (self.binds[0], self.port)), None
        if parts == ["apis"]:
            doc = resources.api_group_list()
            doc["groups"] += reviews.groups()
            return 200, doc, None
        if len(parts) == 2 and parts[0] == "apis":
            group = resources.api_group(parts[1]) or reviews.group(parts[1])
            if group is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 200, group, None
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            doc = resources.resource_list(group, version) or reviews.resource_list(group, version)
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 200, doc, None
        if len(rest) == 1 and (group, version, rest[0]) in reviews.KINDS:
            code, body = reviews.serve(user, group, version, rest[0], self._verb(method, None, "", query),
                                       media.read_body(handler.headers, read_body(), "create"), self.rules)
            return code, body, None
        ns = None
        if (rest[0] == "namespaces" and len(rest) >= 3
                and (group, version, rest[2]) in resources.BY_PATH
                and resources.BY_PATH[(group, version, rest[2])].namespaced):
            ns, rest = rest[1], rest[2:]
        res = resources.BY_PATH.get((group, version, rest[0]))
        if res is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in res.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = self._verb(method, name, sub, query)
        auth.authorize(user, verb, res, sub, ns, name, self.rules, query, self.store)
        return self._serve(handler, user, verb, res, ns, name, sub, query, read_body)

    @staticmethod
    def _openapi(rest):
        if rest == ["v2"]:
            return 200, openapi.v2_document(), "application/json"
        if rest == ["v3"]:
            return 200, openapi.v3_index(), "application/json"
        doc = openapi.v3_document("/".join(rest[1:])) if rest[:1] == ["v3"] else None
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return 200, doc, "application/json"

    def _open_path(self, path):
        if path == "/version":
            major, minor = (self.version.lstrip("v").split(".") + ["0"])[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": self.version,
                         "gitCommit": "0" * 40, "gitTreeState": "clean",
                         "buildDate": "2024-08-14T00:00:00Z", "goVersion": "go1.22.5",
                         "compiler": "gc", "platform": "linux/amd64",
                         "emulator": "hybridgpu-k8s-emulator"}, None
        return 200, "ok", "text/plain; charset=utf-8"

    @staticmethod
    def _verb(method, name, sub, query):
        if method in ("GET", "HEAD"):
            if name:
                return "get"
            return "watch" if query.get("watch") in ("1", "true") else "list"
        if method == "POST":
            if name and sub != "eviction":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method "
                               "on the requested resource")
            return "create"
        if method == "PUT":
            if not name:
                raise ApiError(405, "MethodNotAllowed", "PUT needs an object name")
            return "update"
        if method == "PATCH":
            if not name:
                raise ApiError(405, "MethodNotAllowed", "PATCH needs an object name")
            return "patch"
        if method == "DELETE":
            return "delete" if name else "deletecollection"
        raise ApiError(405, "MethodNotAllowed", "method %s not allowed" % method)

    @staticmethod
    def _list_options(verb, query):
        """ListOptions validation as upstream: 422 Invalid on ListOptions."""
        match = query.get("resourceVersionMatch", "")
        errs = []
        if verb == "watch":
            if match and match != "NotOlderThan":
                errs.append(validation.not_supported("resourceVersionMatch", match, ["NotOlderThan", ""]))
            if "sendInitialEvents" in query:  # the WatchList gate is off in 1.30; clients fall back to list+watch
                errs.append(validation.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for watch "
                                                 "unless the WatchList feature gate is enabled"))
        elif match:
            if not query.get("resourceVersion"):
                errs.append(validation.forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                                 "unless resourceVersion is provided"))
            if query.get("continue"):
                errs.append(validation.forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                                 "when continue is provided"))
            if match not in ("Exact", "NotOlderThan"):
                errs.append(validation.not_supported("resourceVersionMatch", match,
                                                     ["Exact", "NotOlderThan", ""]))
            elif match == "Exact" and query.get("resourceVersion") == "0":
                errs.append(validation.forbidden("resourceVersionMatch", 'resourceVersionMatch "exact" is '
                                                 'forbidden for resourceVersion "0"'))
        if errs:
            texts = [e.text() for e in errs]
            raise ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: %s'
                           % (texts[0] if len(texts) == 1 else "[%s]" % ", ".join(texts)),
                           {"group": "meta.k8s.io", "kind": "ListOptions",
                            "causes": [{"reason": e.reason, "message": e.message, "field": e.field}
                                       for e in errs]})

    @staticmethod
    def _dry_run(verb, values):
        """True for dryRun=All; any other value is 422 Invalid on the options, as upstream."""
        values = [v for v in values if v != ""] if isinstance(values, list) else values
        if not values:
            return False
        if values == ["All"]:
            return True
        kind = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}.get(
            verb, "DeleteOptions")
        why = "Unsupported value: []string{%s}: supported values: \"All\"" % ", ".join(
            json.dumps(v) for v in values)
        raise ApiError(422, "Invalid", '%s.meta.k8s.io "" is invalid: dryRun: %s' % (kind, why),
                       {"group": "meta.k8s.io", "kind": kind,
                        "causes": [{"reason": "FieldValueNotSupported", "message": why,
                                    "field": "dryRun"}]})

    @staticmethod
    def _json(raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", "invalid JSON in request body: %s" % exc)

    def _serve(self, handler, user, verb, res, ns, name, sub, query, read_body):
        store = self.store
        raw = read_body()

        def admit(old, new):
            auth.admit_node(user, res, sub, old, new)
            certificates.admit(user, res, sub, old, new)

        if sub == "log":
            return self._pod_log(handler, verb, ns, name, query, raw, admit)
        dry = False
        if verb in ("create", "update", "patch", "delete", "deletecollection"):
            dry = self._dry_run(verb, query["dryRun"])
        fv = query.get("fieldValidation") or "Warn"  # the 1.30 default
        if sub == "eviction":
            body = self._json(raw) or {}
            dry = dry or self._dry_run("delete", (body.get("deleteOptions") or {}).get("dryRun"))
            return 201, evict(store, ns, name, body, dry), None
        if verb in ("watch", "list"):
            self._list_options(verb, query)
        if verb == "watch":
            events = store.watch(res, ns, query.get("labelSelector"), query.get("fieldSelector"),
                                 query.get("resourceVersion"), _watch_timeout(query),
                                 query.get("allowWatchBookmarks") in ("1", "true"),
                                 _Ended(self.stopping, handler.connection))
            if tables.wants_table(handler.headers.get("Accept")):
                events = tables.watch_table(res.plural, events, query.get("includeObject") or "Metadata")
            return 200, events, None
        if verb in ("list", "get") and tables.wants_table(handler.headers.get("Accept")):
            return 200, tables.for_request(store, res, ns, name, query), None
        if verb == "list":
            limit = int(query["limit"]) if query.get("limit", "").isdigit() else None
            return 200, store.list(res, ns, query.get("labelSelector"),
                                   query.get("fieldSelector"), limit, query.get("continue"),
                                   query.get("resourceVersion"),
                                   query.get("resourceVersionMatch")), None
        if verb == "get":
            return 200, store.get(res, ns, name), None
        if verb == "create":
            if res.namespaced and ns is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 201, store.create(res, ns, media.read_body(handler.headers, raw, verb), admit, dry, fv,
                                     handler._warnings), None
        if verb == "update":
            return 200, store.update(res, ns, name, media.read_body(handler.headers, raw, verb), _store_sub(sub), admit,
                                     dry, fv, handler._warnings), None
        if verb == "patch":
            ctype = handler.headers.get("Content-Type")
            media.read_body(handler.headers, raw, verb)
            if media.media_type(ctype) == "application/apply-patch+yaml":
                return apply.serve(store, res, ns, name, raw, _store_sub(sub), query, admit, dry, fv,
                                   handler._warnings)
            return 200, store.patch(res, ns, name, ctype, self._json(raw), _store_sub(sub),
                                    admit, dry, fv, handler._warnings), None
        if verb == "delete":
            opts = self._json(raw) or {}
            dry = dry or self._dry_run("delete", opts.get("dryRun"))
            policy = query.get("propagationPolicy") or opts.get("propagationPolicy")
            if opts.get("orphanDependents") is True:
                policy = "Orphan"
            pre = opts.get("preconditions") or {}
            grace = query.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
            gone, deleted = store.delete(res, ns, name, policy, admit, pre.get("uid"),
                                         pre.get("resourceVersion"), dry, _grace(grace))
            if res.plural in ("pods", "namespaces") or not deleted:
                return 200, gone, None  # an object still held (Terminating, finalizers) comes back
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success",
                         "details": {"name": name, "group": res.group, "kind": res.plural,
                                     "uid": gone["metadata"]["uid"]}}, None
        if verb == "deletecollection":
            lst = store.list(res, ns, query.get("labelSelector"), query.get("fieldSelector"))
            for item in lst["items"]:
                try:
                    store.delete(res, item["metadata"].get("namespace"),
                                 item["metadata"]["name"], query.get("propagationPolicy"), admit,
                                 dry_run=dry)
                except ApiError as exc:
                    if exc.code != 404:
                        raise
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success"}, None
        raise ApiError(405, "MethodNotAllowed", "unsupported request")

    def _pod_log(self, handler, verb, ns, name, query, raw, admit):
        store = self.store
        from .resources import BY_PLURAL
        pods = BY_PLURAL["pods"]
        if verb == "get":
            store.get(pods, ns, name)
            text = store.logs.get((ns, name), "")
            if query.get("tailLines", "").isdigit():
                lines = text.splitlines(keepends=True)
                n = int(query["tailLines"])
                text = "".join(lines[-n:]) if n else ""
            if query.get("limitBytes", "").isdigit():
                text = text.encode()[:int(query["limitBytes"])].decode(errors="ignore")
            return 200, text, "text/plain"
        if verb == "update":
            with store.lock:
                pod = store.get(pods, ns, name)
                admit(pod, pod)
                text = raw.decode("utf-8", errors="replace")
                if query.get("append") in ("1", "true"):
                    text = store.logs.get((ns, name), "") + text
                store.logs[(ns, name)] = text
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "details": {"name": name, "kind": "pods"}}, None
        raise ApiError(405, "MethodNotAllowed", "pods/log supports GET and PUT (emulator "
                       "extension for the node agent)")
