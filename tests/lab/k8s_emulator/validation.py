"""Object validation as kube-apiserver 1.30 does it, for the kinds the emulator serves.

Two layers, in the real server's order:
- decoding: the Kubernetes 1.30 JSON schema (from the `kubernetes-validate` package, strict
  variant) decides types and unknown fields. A wrong type or an unparsable quantity is 400
  BadRequest "<Kind> in version ... cannot be handled as a <Kind>: ..."; unknown fields are
  dropped with a warning, or are 400 "strict decoding error: unknown field ..." with
  fieldValidation=Strict.
- field rules (what a schema cannot say: enums, ranges, immutability, required values, a
  non-empty list) answer 422 Invalid with one cause per field error, in apimachinery's
  wording (Required value, Invalid value, Unsupported value, Forbidden, Duplicate value).

Schemas are loaded once per process: the shared definitions on first use, one validator per kind.
"""
import base64
import binascii
import copy
import functools
import json
import os
import re

from .errors import ApiError

SCHEMA_VERSION = "v1.30.0-local-strict"
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_QUANTITY_RE_TEXT = "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_PERCENT = re.compile(r"^[0-9]+%$")

RESTART = ["Always", "OnFailure", "Never"]
TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"


# ---- field errors (apimachinery util/validation/field) ----
def _value(value):
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, sort_keys=True)


class FieldError:
    def __init__(self, reason, field, message):
        self.reason, self.field, self.message = reason, field, message

    def text(self):
        return "%s: %s" % (self.field, self.message)


def required(field, detail=""):
    return FieldError("FieldValueRequired", field, "Required value" + (": " + detail if detail else ""))


def invalid(field, value, detail):
    return FieldError("FieldValueInvalid", field, "Invalid value: %s: %s" % (_value(value), detail))


def not_supported(field, value, supported):
    return FieldError("FieldValueNotSupported", field, "Unsupported value: %s: supported values: %s"
                      % (_value(value), ", ".join(json.dumps(s) for s in supported)))


def forbidden(field, detail):
    return FieldError("FieldValueForbidden", field, "Forbidden: " + detail)


def duplicate(field, value):
    return FieldError("FieldValueDuplicate", field, "Duplicate value: %s" % _value(value))


def qualified_kind(res):
    return "%s.%s" % (res.kind, res.group) if res.group else res.kind


def invalid_error(res, name, errors):
    """422 Invalid for a list of FieldErrors, shaped like apierrors.NewInvalid."""
    texts = [e.text() for e in errors]
    summary = texts[0] if len(texts) == 1 else "[%s]" % ", ".join(texts)
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified_kind(res), name, summary),
                    {"name": name, "group": res.group, "kind": res.kind,
                     "causes": [{"reason": e.reason, "message": e.message, "field": e.field}
                                for e in errors]})


def bad_request(res, message):
    return ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: %s'
                    % (res.kind, res.version, res.kind, message))


# ---- decoding: types and unknown fields against the JSON schema ----
def _schema_dir():
    import kubernetes_validate
    return os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema",
                        SCHEMA_VERSION)


@functools.lru_cache(maxsize=None)
def _registry():
    from referencing import Registry, Resource
    with open(os.path.join(_schema_dir(), "_definitions.json"), encoding="utf-8") as fh:
        defs = json.load(fh)
    return Resource.from_contents(defs) @ Registry()


@functools.lru_cache(maxsize=None)
def _validator(kind, api_version):
    """The Draft 2020-12 validator for one kind (None when the package has no schema for it)."""
    import jsonschema
    from referencing import Resource
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = os.path.join(_schema_dir(), "%s-%s.json" % (kind.lower(), group_version))
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        schema = json.load(fh)
    registry = Resource.from_contents(schema) @ _registry()
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def preload():
    """Load the shared schema definitions now (raises ImportError without kubernetes-validate)."""
    _registry()


def field_path(parts):
    out = ""
    for p in parts:
        out += "[%d]" % p if isinstance(p, int) else ("." + p if out else p)
    return out


def _json_type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _leaf_errors(err):
    if err.context:
        for sub in err.context:
            yield from _leaf_errors(sub)
    else:
        yield err


def decode(res, obj, field_validation="Warn"):
    """Check types and unknown fields of `obj` in place. Unknown fields are removed; returns the
    warnings for them (empty under Strict, which raises instead, and under Ignore)."""
    validator = _validator(res.kind, res.api_version)
    if validator is None:
        return []
    unknown, removals = [], []
    for err in validator.iter_errors(obj):
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = set((err.schema.get("properties") or {}))
            for key in sorted(set(err.instance) - known):
                unknown.append(field_path(path + [key]))
                removals.append((path, key))
        elif err.validator == "required":
            continue  # a field rule (422), checked by the kind's rules below
        elif err.validator == "oneOf" and err.instance is None:
            continue  # null for an int-or-string / quantity: the field is unset
        else:
            leaf = next(_leaf_errors(err))
            want = leaf.schema.get("type") if isinstance(leaf.schema, dict) else None
            want = [t for t in (want if isinstance(want, list) else [want]) if t and t != "null"]
            raise bad_request(res, "json: cannot unmarshal %s into Go struct field %s.%s of type %s"
                              % (_json_type(err.instance), res.kind, field_path(path),
                                 "/".join(want) or "value"))
    if unknown and field_validation == "Strict":
        raise bad_request(res, "strict decoding error: " + ", ".join(
            'unknown field "%s"' % f for f in unknown))
    for path, key in removals:
        node = obj
        for p in path:
            node = node[p]
        node.pop(key, None)
    if field_validation == "Ignore":
        return []
    return ['unknown field "%s"' % f for f in unknown]


def check_quantities(res, obj):
    """Resource quantities must parse (a decoding error upstream, so 400)."""
    spots = []
    spec = obj.get("spec") or {}
    if res.kind == "Job":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    if res.kind in ("Pod", "Job"):
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                for part in ("limits", "requests"):
                    spots.append(((c.get("resources") or {}).get(part)) or {})
    elif res.kind == "Node":
        st = obj.get("status") or {}
        spots += [st.get("capacity") or {}, st.get("allocatable") or {}]
    elif res.kind == "ResourceQuota":
        spots.append(spec.get("hard") or {})
    for spot in spots:
        for value in spot.values():
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, (int, float)):
                continue
            if not isinstance(value, str) or not _QUANTITY.match(value):
                raise bad_request(res, "quantities must match the regular expression %s"
                                  % _QUANTITY_RE_TEXT)


# ---- field rules ----
def _nonneg(errs, field, value, positive=False):
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return
    if positive and value <= 0:
        errs.append(invalid(field, value, "must be greater than 0"))
    elif value < 0:
        errs.append(invalid(field, value, "must be greater than or equal to 0"))


def _enum(errs, field, value, allowed, optional=True):
    if value is None or (value == "" and optional):
        return
    if value not in allowed:
        errs.append(not_supported(field, value, allowed))


def _selector(errs, field, selector):
    for i, expr in enumerate((selector or {}).get("matchExpressions") or []):
        _enum(errs, "%s.matchExpressions[%d].operator" % (field, i), expr.get("operator"),
              ["In", "NotIn", "Exists", "DoesNotExist"], optional=False)


def _tolerations(errs, field, tolerations):
    for i, t in enumerate(tolerations or []):
        f = "%s[%d]" % (field, i)
        _enum(errs, f + ".operator", t.get("operator"), ["Equal", "Exists"])
        _enum(errs, f + ".effect", t.get("effect"), TAINT_EFFECTS)
        if t.get("operator") == "Exists" and t.get("value"):
            errs.append(invalid(f + ".operator", t.get("value"),
                                "value must be empty when `operator` is 'Exists'"))
        if not t.get("key") and t.get("operator", "Equal") != "Exists":
            errs.append(invalid(f + ".operator", t.get("operator", "Equal"),
                                "operator must be Exists when `key` is empty, which means \"match all "
                                "values and all keys\""))


def _gpu_resources(errs, field, resources):
    limits = (resources or {}).get("limits") or {}
    requests = (resources or {}).get("requests") or {}
    for name in sorted(set(limits) | set(requests)):
        if "/" not in name or name.startswith("kubernetes.io/"):
            continue  # extended resources (nvidia.com/gpu): whole numbers, requests == limits
        for part, values in (("limits", limits), ("requests", requests)):
            if name in values and not re.match(r"^[0-9]+$", str(values[name])):
                errs.append(invalid("%s.%s[%s]" % (field, part, name), values[name],
                                    "must be an integer"))
        if name in limits and name in requests and str(limits[name]) != str(requests[name]):
            errs.append(invalid("%s.requests[%s]" % (field, name), requests[name],
                                "must be equal to %s limit of %s" % (name, limits[name])))


def pod_spec_errors(spec, field):
    errs = []
    containers = spec.get("containers") or []
    if not containers:
        errs.append(required(field + ".containers"))
    seen = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            f = "%s.%s[%d]" % (field, key, i)
            cname = c.get("name")
            if not cname:
                errs.append(required(f + ".name"))
            elif not _DNS_LABEL.match(cname) or len(cname) > 63:
                errs.append(invalid(f + ".name", cname, "a lowercase RFC 1123 label must consist of "
                                    "lower case alphanumeric characters or '-', and must start and "
                                    "end with an alphanumeric character"))
            elif cname in seen:
                errs.append(duplicate(f + ".name", cname))
            seen.add(cname)
            if not c.get("image"):
                errs.append(required(f + ".image"))
            _enum(errs, f + ".imagePullPolicy", c.get("imagePullPolicy"), ["Always", "Never", "IfNotPresent"])
            _enum(errs, f + ".terminationMessagePolicy", c.get("terminationMessagePolicy"),
                  ["File", "FallbackToLogsOnError"])
            _gpu_resources(errs, f + ".resources", c.get("resources"))
    _enum(errs, field + ".restartPolicy", spec.get("restartPolicy"), RESTART)
    _enum(errs, field + ".dnsPolicy", spec.get("dnsPolicy"),
          ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"])
    _nonneg(errs, field + ".activeDeadlineSeconds", spec.get("activeDeadlineSeconds"), positive=True)
    _nonneg(errs, field + ".terminationGracePeriodSeconds", spec.get("terminationGracePeriodSeconds"))
    _tolerations(errs, field + ".tolerations", spec.get("tolerations"))
    required_terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                       .get("requiredDuringSchedulingIgnoredDuringExecution")) or {})
    terms_field = field + ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if "requiredDuringSchedulingIgnoredDuringExecution" in (((spec.get("affinity") or {})
                                                             .get("nodeAffinity")) or {}) \
            and not required_terms.get("nodeSelectorTerms"):
        errs.append(required(terms_field + ".nodeSelectorTerms", "must have at least one node selector term"))
    for i, term in enumerate(required_terms.get("nodeSelectorTerms") or []):
        for key in ("matchExpressions", "matchFields"):
            for j, expr in enumerate(term.get(key) or []):
                _enum(errs, "%s.nodeSelectorTerms[%d].%s[%d].operator" % (terms_field, i, key, j),
                      expr.get("operator"), ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"],
                      optional=False)
    return errs


def _pod_template_defaults(template):
    """Defaulting of a Job's pod template before validation (restartPolicy Always, as upstream)."""
    spec = template.get("spec") or {}
    out = dict(spec)
    out.setdefault("restartPolicy", "Always")
    return out


def _rules_job(obj):
    errs = []
    spec = obj.get("spec") or {}
    for key in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        _nonneg(errs, "spec." + key, spec.get(key))
    _nonneg(errs, "spec.activeDeadlineSeconds", spec.get("activeDeadlineSeconds"), positive=True)
    _enum(errs, "spec.completionMode", spec.get("completionMode"), ["NonIndexed", "Indexed"])
    _selector(errs, "spec.selector", spec.get("selector"))
    template = spec.get("template") or {}
    pod_spec = _pod_template_defaults(template)
    errs += pod_spec_errors(pod_spec, "spec.template.spec")
    if pod_spec.get("restartPolicy") in RESTART and pod_spec["restartPolicy"] not in ("OnFailure", "Never"):
        errs.append(not_supported("spec.template.spec.restartPolicy", pod_spec["restartPolicy"],
                                  ["OnFailure", "Never"]))
    return errs


def _rules_node(obj):
    errs = []
    seen = set()
    for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
        f = "spec.taints[%d]" % i
        key = t.get("key") or ""
        name = key.rpartition("/")[2]
        if not key:
            errs.append(required(f + ".key"))
        elif not _QUALIFIED.match(name) or len(name) > 63:
            errs.append(invalid(f + ".key", key, "name part must consist of alphanumeric characters, "
                                "'-', '_' or '.', and must start and end with an alphanumeric character"))
        if not t.get("effect"):
            errs.append(required(f + ".effect"))
        else:
            _enum(errs, f + ".effect", t.get("effect"), TAINT_EFFECTS)
        if (key, t.get("effect")) in seen:
            errs.append(duplicate(f, "%s:%s" % (key, t.get("effect"))))
        seen.add((key, t.get("effect")))
    return errs


def _rules_pdb(obj):
    errs = []
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if isinstance(value, str):
            if not _PERCENT.match(value):
                errs.append(invalid("spec." + key, value, "a valid percent string must be a numeric "
                                    "string followed by an ending '%' (e.g. '1%',  or '93%', regex used "
                                    "for validation is '[0-9]+%')"))
            elif int(value[:-1]) > 100:
                errs.append(invalid("spec." + key, value, "must not be greater than 100%"))
        else:
            _nonneg(errs, "spec." + key, value)
    _selector(errs, "spec.selector", spec.get("selector"))
    _enum(errs, "spec.unhealthyPodEvictionPolicy", spec.get("unhealthyPodEvictionPolicy"),
          ["IfHealthyBudget", "AlwaysAllow"])
    return errs


def _rules_lease(obj):
    errs = []
    spec = obj.get("spec") or {}
    _nonneg(errs, "spec.leaseDurationSeconds", spec.get("leaseDurationSeconds"), positive=True)
    _nonneg(errs, "spec.leaseTransitions", spec.get("leaseTransitions"))
    return errs


def _rules_secret(obj):
    errs = []
    for key, value in (obj.get("data") or {}).items():
        if not _CONFIG_KEY.match(key) or len(key) > 253:
            errs.append(invalid("data[%s]" % key, key, "a valid config key must consist of alphanumeric "
                                "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                                "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
    if obj.get("type") == "kubernetes.io/service-account-token":
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        if not ann.get(SA_NAME_ANNOTATION):
            errs.append(required("metadata.annotations[%s]" % SA_NAME_ANNOTATION))
    return errs


def _secret_data(res, obj):
    for value in (obj.get("data") or {}).values():
        if value is None:
            continue
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise bad_request(res, "illegal base64 data at input byte 0")


_RULES = {"Job": _rules_job, "Node": _rules_node, "PodDisruptionBudget": _rules_pdb,
          "Lease": _rules_lease, "Secret": _rules_secret,
          "Pod": lambda obj: pod_spec_errors(obj.get("spec") or {}, "spec")}


def check_body_type(res, body):
    """kind/apiVersion in the body must match the URL (either may be left out)."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "request body must be a JSON object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version and api_version != res.api_version:
        raise ApiError(400, "BadRequest", "the API version in the data (%s) does not match the "
                       "expected API version (%s)" % (api_version, res.api_version))
    if kind and kind != res.kind:
        raise ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: converting '
                       "(%s.%s) to (%s): unknown conversion"
                       % (kind, res.version, res.kind, res.version, kind, res.kind))


def check_field_validation(value):
    if value not in (None, "") and value not in FIELD_VALIDATION:
        raise ApiError(400, "BadRequest", 'fieldValidation: Unsupported value: "%s": supported values: '
                       '"Ignore", "Warn", "Strict"' % value)


def decode_object(res, obj, field_validation="Warn"):
    """The decoding checks (400) on an incoming object; unknown fields are removed from it.
    Returns the warnings for the client."""
    check_field_validation(field_validation)
    warnings = decode(res, obj, field_validation or "Warn")
    check_quantities(res, obj)
    if res.kind == "Secret":
        _secret_data(res, obj)
    return warnings


def check_rules(res, obj):
    """The field rules (422 Invalid) for a whole object after defaulting."""
    rule = _RULES.get(res.kind)
    errs = rule(obj) if rule else []
    if errs:
        raise invalid_error(res, (obj.get("metadata") or {}).get("name", ""), errs)


# ---- update rules ----
_POD_MUTABLE_MESSAGE = ("pod updates may not change fields other than `spec.containers[*].image`,"
                        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                        "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                        "(allow it to be set to 1 if it was previously negative)")


def _pod_spec_masked(spec, tolerations):
    spec = copy.deepcopy(spec or {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            c.pop("image", None)
    spec.pop("activeDeadlineSeconds", None)
    spec["tolerations"] = tolerations
    spec.pop("schedulingGates", None)
    return spec


def update_errors(res, old, new):
    errs = []
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    if res.kind == "Pod" and ospec != nspec:
        otol = ospec.get("tolerations") or []
        ntol = nspec.get("tolerations") or []
        tol_ok = all(t in ntol for t in otol)
        if not tol_ok or _pod_spec_masked(ospec, None) != _pod_spec_masked(nspec, None):
            errs.append(forbidden("spec", _POD_MUTABLE_MESSAGE))
    elif res.kind == "Job":
        for key in ("selector", "completions", "completionMode", "podFailurePolicy"):
            if ospec.get(key) != nspec.get(key):
                errs.append(invalid("spec." + key, nspec.get(key), "field is immutable"))
        if ospec.get("template") != nspec.get("template") and not _job_template_change_allowed(old, new):
            errs.append(invalid("spec.template", nspec.get("template"), "field is immutable"))
    elif res.kind == "Secret":
        if old.get("type") != new.get("type"):
            errs.append(invalid("type", new.get("type"), "field is immutable"))
        if old.get("immutable"):
            if old.get("data") != new.get("data"):
                errs.append(forbidden("data", "field is immutable when `immutable` is set"))
            if not new.get("immutable"):
                errs.append(forbidden("immutable", "field is immutable when `immutable` is set"))
    elif res.kind == "PodDisruptionBudget" or res.kind == "Node":
        pass
    if errs:
        raise invalid_error(res, old["metadata"]["name"], errs)


def _job_template_change_allowed(old, new):
    """A suspended Job that never started may change its pods' scheduling directives."""
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    if not ospec.get("suspend") or (old.get("status") or {}).get("startTime"):
        return False

    def masked(template):
        template = copy.deepcopy(template or {})
        meta = template.setdefault("metadata", {})
        meta.pop("labels", None)
        meta.pop("annotations", None)
        pod = template.setdefault("spec", {})
        for key in ("nodeSelector", "affinity", "tolerations", "schedulingGates"):
            pod.pop(key, None)
        return template

    return masked(ospec.get("template")) == masked(nspec.get("template"))
