"""Content negotiation: the request body types the server reads, and the Accept header.

As kube-apiserver, a body in a type it does not read is 415 UnsupportedMediaType and an Accept
that allows nothing it can write is 406 NotAcceptable. The emulator writes JSON (and YAML on
request) but not protobuf: `application/vnd.kubernetes.protobuf` bodies are 415, and an Accept
that lists protobuf with a JSON fallback (what kubectl and client-go send) gets JSON."""
import json

import yaml

from .errors import ApiError

BODY_TYPES = ("application/json", "application/yaml")
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml")
WRITES = ("application/json", "application/yaml")


def media_type(header):
    return (header or "").split(";")[0].strip().lower()


def unsupported(accepted):
    return ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                    "accepted media types include: %s" % ", ".join(accepted))


def read_body(headers, raw, verb):
    """The decoded body of a create/update (dict) or None; 415 for a type the server does not read."""
    if not raw:
        return None
    ctype = media_type(headers.get("Content-Type"))
    if verb == "patch":
        if ctype not in PATCH_TYPES:
            raise unsupported(PATCH_TYPES)
        return None  # the patch handler decodes it
    if ctype in ("", "application/json"):
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", "invalid JSON in request body: %s" % exc)
    if ctype == "application/yaml":
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ApiError(400, "BadRequest", "invalid YAML in request body: %s" % exc)
    raise unsupported(BODY_TYPES)


def response_type(accept):
    """The media type to answer in: application/json or application/yaml; 406 when the Accept
    header allows neither."""
    if not accept or not accept.strip():
        return "application/json"
    for part in accept.split(","):
        mtype = media_type(part)
        if mtype in ("application/json", "*/*", "application/*", "application/json-patch+json",
                     "application/merge-patch+json", "text/plain"):  # text/plain: pods/log
            return "application/json"
        if mtype == "application/yaml":
            return "application/yaml"
    raise ApiError(406, "NotAcceptable", "only the following media types are accepted: %s" % ", ".join(WRITES))
