# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small validator for the YAML documents preflight reads (boundary, path table).

Every problem is reported as ``<file>: <field.path>: <problem>`` so an operator can find
it without reading code. Unknown keys are rejected. Malformed YAML is reported with the
line and column PyYAML gives.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os
import re

try:
    import yaml
    HAS_YAML = True
except ImportError:  # reported when a file is read, not at import
    HAS_YAML = False


class SchemaError(Exception):
    """One or more validation problems; ``errors`` holds the formatted lines."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(SchemaError, self).__init__("\n".join(self.errors))


def format_path(parts):
    """['a', 'b', 1, 'c'] -> 'a.b[1].c'; empty -> '<root>'."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += "[%d]" % part
        elif out:
            out += "." + part
        else:
            out = part
    return out or "<root>"


class _Ctx:
    def __init__(self, filename):
        self.filename = filename
        self.errors = []

    def add(self, path, problem):
        self.errors.append("%s: %s: %s" % (self.filename, format_path(path), problem))


class Spec:
    """Base of all field specs. ``check`` returns the (possibly normalised) value."""

    def check(self, value, path, ctx):
        raise NotImplementedError


def _type_name(value):
    if value is None:
        return "null"
    return {dict: "mapping", list: "list", str: "string", bool: "boolean",
            int: "integer", float: "number"}.get(type(value), type(value).__name__)


class Str(Spec):
    def __init__(self, pattern=None, nonempty=True, hint=None):
        self.pattern = re.compile(pattern) if pattern else None
        self.nonempty = nonempty
        self.hint = hint

    def check(self, value, path, ctx):
        if not isinstance(value, str):
            ctx.add(path, "expected a string, got %s" % _type_name(value))
            return value
        if self.nonempty and not value.strip():
            ctx.add(path, "must not be empty")
        elif self.pattern and not self.pattern.match(value):
            ctx.add(path, "%r does not match %s" % (value, self.hint or self.pattern.pattern))
        return value


class Int(Spec):
    def __init__(self, minimum=None, maximum=None):
        self.minimum = minimum
        self.maximum = maximum

    def check(self, value, path, ctx):
        if isinstance(value, bool) or not isinstance(value, int):
            ctx.add(path, "expected an integer, got %s" % _type_name(value))
            return value
        if self.minimum is not None and value < self.minimum:
            ctx.add(path, "%d is below the minimum %d" % (value, self.minimum))
        if self.maximum is not None and value > self.maximum:
            ctx.add(path, "%d is above the maximum %d" % (value, self.maximum))
        return value


class Bool(Spec):
    def check(self, value, path, ctx):
        if not isinstance(value, bool):
            ctx.add(path, "expected true or false, got %s" % _type_name(value))
        return value


class Enum(Spec):
    def __init__(self, choices):
        self.choices = list(choices)

    def check(self, value, path, ctx):
        if value not in self.choices:
            ctx.add(path, "%r is not one of %s" % (value, ", ".join(map(str, self.choices))))
        return value


class Timestamp(Spec):
    """A date or an ISO 8601 date-time; normalised to an aware UTC datetime."""

    def check(self, value, path, ctx):
        parsed = parse_timestamp(value)
        if parsed is None:
            ctx.add(path, "expected an ISO 8601 date or date-time, got %r" % (value,))
            return value
        return parsed


def parse_iso_datetime(value):
    """An ISO 8601 date-time (``Z`` or an offset allowed) as a datetime, naive when it names no
    timezone; a date becomes midnight; None when it is neither."""
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_timestamp(value):
    """A timestamp as aware UTC; one without a timezone is read as UTC."""
    dt = parse_iso_datetime(value)
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.astimezone(datetime.timezone.utc)


class Version(Spec):
    """A dotted version written as a string ("12.4", "1.31.2").

    YAML reads an unquoted 12.4 as a number (and 12.10 as 12.1), so a number is refused with
    the hint to quote it. ``parts`` is the (fewest, most) numeric parts; ``prefix_v`` accepts
    a leading "v" as Kubernetes writes it.
    """

    def __init__(self, parts=(2, 3), prefix_v=False, example="12.4"):
        self.parts = parts
        self.prefix_v = prefix_v
        self.example = example

    def check(self, value, path, ctx):
        if isinstance(value, bool) or not isinstance(value, str):
            ctx.add(path, "expected a quoted version like \"%s\", got %s %r" % (self.example, _type_name(value), value))
            return value
        text = value[1:] if self.prefix_v and value.startswith("v") else value
        if not re.match(r"^[0-9]+(\.[0-9]+)*$", text) or not self.parts[0] <= len(text.split(".")) <= self.parts[1]:
            ctx.add(path, "%r is not a version like %s" % (value, self.example))
        return value


class ListOf(Spec):
    def __init__(self, item, min_items=0, unique=False):
        self.item = item
        self.min_items = min_items
        self.unique = unique

    def check(self, value, path, ctx):
        if not isinstance(value, list):
            ctx.add(path, "expected a list, got %s" % _type_name(value))
            return value
        if len(value) < self.min_items:
            ctx.add(path, "needs at least %d item(s)" % self.min_items)
        out = []
        seen = set()
        for i, item in enumerate(value):
            checked = self.item.check(item, path + [i], ctx)
            if self.unique and isinstance(checked, (str, int)):
                if checked in seen:
                    ctx.add(path + [i], "duplicate entry %r" % (checked,))
                seen.add(checked)
            out.append(checked)
        return out


class Field:
    def __init__(self, spec, required=True, default=None):
        self.spec = spec
        self.required = required
        self.default = default


class Map(Spec):
    """A mapping with known keys; any other key is an error."""

    def __init__(self, fields):
        self.fields = fields

    def check(self, value, path, ctx):
        if not isinstance(value, dict):
            ctx.add(path, "expected a mapping, got %s" % _type_name(value))
            return value
        out = {}
        for key in value:
            if key not in self.fields:
                ctx.add(path + [str(key)], "unknown key (allowed: %s)" % ", ".join(sorted(self.fields)))
        for key, field in self.fields.items():
            if key in value:
                out[key] = field.spec.check(value[key], path + [key], ctx)
            elif field.required:
                ctx.add(path + [key], "is required")
            else:
                out[key] = field.default() if callable(field.default) else field.default
        return out


class MapOf(Spec):
    """A mapping whose keys are names (optionally from a fixed set) and values share a spec."""

    def __init__(self, value_spec, keys=None, key_pattern=None, key_hint=None):
        self.value_spec = value_spec
        self.keys = list(keys) if keys else None
        self.key_pattern = re.compile(key_pattern) if key_pattern else None
        self.key_hint = key_hint

    def check(self, value, path, ctx):
        if not isinstance(value, dict):
            ctx.add(path, "expected a mapping, got %s" % _type_name(value))
            return value
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                ctx.add(path + [str(key)], "key must be a string")
                continue
            if self.keys is not None and key not in self.keys:
                ctx.add(path + [key], "unknown key (allowed: %s)" % ", ".join(self.keys))
                continue
            if self.key_pattern is not None and not self.key_pattern.match(key):
                ctx.add(path + [key], "key %r does not match %s" % (key, self.key_hint or self.key_pattern.pattern))
                continue
            out[key] = self.value_spec.check(item, path + [key], ctx)
        return out


class Custom(Spec):
    """Wraps a function ``fn(value) -> (normalised, problem_or_None)``."""

    def __init__(self, fn):
        self.fn = fn

    def check(self, value, path, ctx):
        normalised, problem = self.fn(value)
        if problem:
            ctx.add(path, problem)
            return value
        return normalised


def validate(data, spec, filename):
    """Validate ``data`` against ``spec``; return the normalised data or raise SchemaError."""
    ctx = _Ctx(filename)
    out = spec.check(data, [], ctx)
    if ctx.errors:
        raise SchemaError(ctx.errors)
    return out


def collect(data, spec, filename):
    """Like validate() but return (normalised, errors) instead of raising."""
    ctx = _Ctx(filename)
    out = spec.check(data, [], ctx)
    return out, ctx.errors


class Document:
    """A YAML document type: its spec, the checks across fields that run once the spec holds,
    and the class that wraps the normalised data (called as ``build(doc, filename)``)."""

    def __init__(self, spec, cross_check, build):
        self.spec = spec
        self.cross_check = cross_check
        self.build = build

    def parse(self, data, filename):
        """Validate parsed YAML; raise SchemaError listing every problem."""
        doc, errors = collect(data, self.spec, filename)
        if not errors:
            errors = self.cross_check(doc, filename)
        if errors:
            raise SchemaError(errors)
        return self.build(doc, filename)

    def load(self, path):
        """Read, parse and validate a file; errors name the file by its base name."""
        name = os.path.basename(path)
        return self.parse(load_yaml_file(path, name), name)

    def load_text(self, text, filename):
        return self.parse(load_yaml_text(text, filename), filename)


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate key %r" % (key,), key_node.start_mark)
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


if HAS_YAML:
    class _UniqueKeyLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""

    _UniqueKeyLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_text(text, filename):
    """Parse YAML text; malformed input raises SchemaError naming file, line and column."""
    if not HAS_YAML:
        raise SchemaError(["%s: cannot be read: the Python library PyYAML is missing on the host that runs "
                           "the module (install python3-yaml or PyYAML there)" % filename])
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = "line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else "unknown position"
        problem = exc.problem or exc.context or "malformed YAML"
        raise SchemaError(["%s: %s: malformed YAML: %s" % (filename, where, problem)])
    except yaml.YAMLError as exc:
        raise SchemaError(["%s: malformed YAML: %s" % (filename, exc)])


def load_yaml_file(path, display_name=None):
    """Read and parse a YAML file; a missing or unreadable file raises SchemaError."""
    name = display_name or path
    try:
        with open(path, "r", encoding="utf-8") as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        raise SchemaError(["%s: cannot read: %s" % (name, exc.strerror or exc)])
    except UnicodeDecodeError as exc:
        raise SchemaError(["%s: not UTF-8 text: %s" % (name, exc)])
    return load_yaml_text(text, name)
