"""SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview (`kubectl auth whoami`),
answered from the emulator's own authorizer. Nothing is stored, as upstream."""
from . import auth
from .errors import ApiError
from .resources import BY_PLURAL

AUTHZ = ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview")
AUTHN = ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview")
KINDS = {(g, v, p): k for g, v, p, k in (AUTHZ, AUTHN)}
OPEN_NON_RESOURCE = ("/api", "/apis", "/healthz", "/livez", "/readyz", "/version", "/openapi")


def groups():
    """The APIGroup entries for /apis."""
    out = []
    for group, version, dummy, dummy2 in (AUTHN, AUTHZ):
        gv = {"groupVersion": "%s/%s" % (group, version), "version": version}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return out


def group(name):
    for entry in groups():
        if entry["name"] == name:
            return dict(entry, kind="APIGroup", apiVersion="v1")
    return None


def resource_list(group_name, version):
    for g, v, plural, kind in (AUTHZ, AUTHN):
        if (g, v) == (group_name, version):
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "%s/%s" % (g, v),
                    "resources": [{"name": plural, "singularName": kind.lower(), "namespaced": False,
                                   "kind": kind, "verbs": ["create"]}]}
    return None


class _Other:
    """A resource the emulator does not serve, for the authorizer."""

    def __init__(self, plural):
        self.plural = plural


def _allowed(user, attrs, rules):
    verb = attrs.get("verb") or ""
    plural = attrs.get("resource") or ""
    res = BY_PLURAL.get(plural) or _Other(plural)
    try:
        auth.authorize(user, verb, res, attrs.get("subresource") or "", attrs.get("namespace") or None,
                       attrs.get("name") or None, rules)
    except ApiError:
        return False  # RBAC gives no reason for a denial
    return True


def serve(user, group_name, version, plural, verb, body, rules):
    """(code, body) for a POST to one of the review resources; None when the path is not one."""
    kind = KINDS.get((group_name, version, plural))
    if kind is None:
        return None
    if verb != "create":
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    api_version = "%s/%s" % (group_name, version)
    if kind == "SelfSubjectReview":
        info = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        return 201, {"kind": kind, "apiVersion": api_version, "metadata": {"creationTimestamp": None},
                     "status": {"userInfo": info}}
    body = body if isinstance(body, dict) else {}
    spec = body.get("spec") or {}
    if spec.get("resourceAttributes"):
        allowed = _allowed(user, spec["resourceAttributes"], rules)
    elif spec.get("nonResourceAttributes"):
        path = spec["nonResourceAttributes"].get("path") or ""
        allowed = "system:masters" in user.groups or (
            spec["nonResourceAttributes"].get("verb") == "get" and path.startswith(OPEN_NON_RESOURCE))
    else:
        raise ApiError(422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                       'spec.resourceAttributes: Invalid value: "null": exactly one of nonResourceAttributes '
                       'or resourceAttributes must be specified',
                       {"group": "authorization.k8s.io", "kind": "SelfSubjectAccessReview",
                        "causes": [{"reason": "FieldValueInvalid", "field": "spec.resourceAttributes",
                                    "message": "Invalid value: \"null\": exactly one of nonResourceAttributes "
                                               "or resourceAttributes must be specified"}]})
    status = {"allowed": allowed}
    if allowed and "system:masters" in user.groups:
        status["reason"] = 'allowed by the group "system:masters"'
    return 201, {"kind": kind, "apiVersion": api_version,
                 "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}
