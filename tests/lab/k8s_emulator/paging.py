"""List continue tokens as kube-apiserver writes them (apiserver/pkg/storage/continue.go):
unpadded URL-safe base64 of `{"v":"meta.k8s.io/v1","rv":<list resourceVersion>,"start":"<last key>\\x00"}`.
The next page is read at that resourceVersion, after that key, so objects deleted or added
between pages neither shift nor skip the rest; a version older than the kept history is 410."""
import base64
import binascii
import json

from .errors import ApiError

TOKEN_VERSION = "meta.k8s.io/v1"


def _key(obj):
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def encode(rv, last):
    ns, name = _key(last)
    start = ("%s/%s" % (ns, name) if ns else name) + "\x00"
    data = json.dumps({"v": TOKEN_VERSION, "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def decode(token):
    """(resourceVersion, (namespace, name) of the last item returned)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(400, "BadRequest", "continue key is not valid: illegal base64 data")
    if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION:
        raise ApiError(400, "BadRequest", "continue key is not valid: server does not recognize this "
                       "encoded key")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0 or not isinstance(start, str) or not start.endswith("\x00"):
        raise ApiError(400, "BadRequest", "continue key is not valid: incorrect encoded start "
                       "resourceVersion (version %s)" % TOKEN_VERSION)
    ns, _, name = start[:-1].rpartition("/")
    return rv, (ns, name)


def after(obj, last):
    return last is None or _key(obj) > last


def expired():
    return ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use the continue "
                    "token in this response to retrieve the remainder of the results. Continuing with the "
                    "provided token results in an inconsistent list - objects that were created, modified, "
                    "or deleted between the time the first chunk was returned and now may show up in the list.")
