"""Label selectors (string form and LabelSelector objects) and field selectors."""
import re


class SelectorError(ValueError):
    pass


_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(r"^\s*(%s)\s+(in|notin)\s*\(([^)]*)\)\s*$" % _KEY)
_OP_RE = re.compile(r"^\s*(%s)\s*(==|!=|=|>|<)\s*([-A-Za-z0-9_.]*)\s*$" % _KEY)
_EXISTS_RE = re.compile(r"^\s*(!?)\s*(%s)\s*$" % _KEY)


def _split_top(text):
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("unbalanced parentheses in selector %r" % text)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise SelectorError("unbalanced parentheses in selector %r" % text)
    parts.append(cur)
    return parts


def parse_label_selector(text):
    """Return a list of (key, op, values) requirements; op in in/notin/exists/!exists/gt/lt."""
    reqs = []
    if not text or not text.strip():
        return reqs
    for part in _split_top(text):
        if not part.strip():
            raise SelectorError("empty requirement in label selector %r" % text)
        m = _SET_RE.match(part)
        if m:
            values = [v.strip() for v in m.group(3).split(",") if v.strip()]
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = _OP_RE.match(part)
        if m:
            op = {"=": "in", "==": "in", "!=": "notin", ">": "gt", "<": "lt"}[m.group(2)]
            reqs.append((m.group(1), op, [m.group(3)]))
            continue
        m = _EXISTS_RE.match(part)
        if m:
            reqs.append((m.group(2), "!exists" if m.group(1) else "exists", []))
            continue
        raise SelectorError("unable to parse requirement: %r" % part.strip())
    return reqs


def label_selector_from_object(sel):
    """Requirements from a metav1.LabelSelector dict. None matches nothing; {} matches all."""
    if sel is None:
        return None
    reqs = [(k, "in", [v]) for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists",
              "DoesNotExist": "!exists"}.get(expr.get("operator"))
        if op is None:
            raise SelectorError("invalid label selector operator %r" % expr.get("operator"))
        reqs.append((expr.get("key"), op, list(expr.get("values") or [])))
    return reqs


def labels_match(reqs, labels):
    if reqs is None:
        return False
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        val = labels.get(key)
        if op == "in" and not (present and val in values):
            return False
        if op == "notin" and present and val in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
        if op in ("gt", "lt"):
            try:
                have, want = int(val), int(values[0])
            except (TypeError, ValueError, IndexError):
                return False
            if (op == "gt" and not have > want) or (op == "lt" and not have < want):
                return False
    return True


def parse_field_selector(text, allowed):
    """Return a list of (path, op, value) with op '=' or '!='; reject fields not in allowed."""
    reqs = []
    if not text or not text.strip():
        return reqs
    for part in text.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError("invalid field selector requirement %r" % part)
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in allowed:
            raise SelectorError('field label not supported: %s' % path)
        reqs.append((path, "!=" if op == "!=" else "=", value))
    return reqs


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if path == "spec.unschedulable":
        return "true" if cur else "false"
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs, obj):
    for path, op, value in reqs:
        have = field_value(obj, path)
        if (op == "=") != (have == value):
            return False
    return True
