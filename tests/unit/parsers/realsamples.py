"""Helpers for the real-output parser tests.

Each sample directory under REAL_OUTPUTS (tests/conftest.py; env HGPU_REAL_OUTPUTS
overrides) has an expected-value table ``expected/<directory>.yaml`` mapping every
sample file name to the values its parse must give. A sample without an entry
fails (so new samples cannot be skipped silently), and so does an entry without a
sample.

Expected entries are ``{path: value}``. A path walks the parse result with ``/``
(``gpus/0/name``, ``rows/0/memory.total``); ``#path`` compares ``len()``;
``?path`` means "present and not None"; ``~path`` means "contains" (string or list).
An entry may carry ``_args`` (dict) passed to the parser.
"""
import os

import yaml

from hgpu_testenv import REAL_OUTPUTS

HERE = os.path.dirname(os.path.abspath(__file__))


def sample_dir(name):
    path = os.path.join(REAL_OUTPUTS, name)
    if not os.path.isdir(path):
        raise AssertionError(
            "real-output samples missing: %s (set HGPU_REAL_OUTPUTS to the real-outputs folder)" % path)
    return path


def sample_names(name):
    """Sorted sample file names of one tool directory (fails loudly when absent)."""
    path = sample_dir(name)
    return sorted(f for f in os.listdir(path) if os.path.isfile(os.path.join(path, f)))


def read_sample(name, filename):
    # newline='' keeps CRLF so parsers see the bytes the tool printed
    with open(os.path.join(sample_dir(name), filename), encoding="utf-8", newline="") as handle:
        return handle.read()


def load_expected(name):
    with open(os.path.join(HERE, "expected", name + ".yaml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def walk(result, path):
    node = result
    for part in path.split("/"):
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict):
            if part not in node:
                raise AssertionError("path %r: key %r missing (have %s)" % (path, part, sorted(node)[:20]))
            node = node[part]
        else:
            raise AssertionError("path %r: cannot descend into %r" % (path, node))
    return node


def check(result, expected, label):
    """Compare every expected path; collect all mismatches into one failure."""
    problems = []
    for key, want in expected.items():
        if key.startswith("_"):
            continue
        try:
            if key.startswith("#"):
                got = len(walk(result, key[1:]))
            elif key.startswith("?"):
                got = walk(result, key[1:]) is not None
            elif key.startswith("~"):
                container = walk(result, key[1:])
                if container is None or want not in container:
                    problems.append("%s: %r does not contain %r" % (key, container, want))
                continue
            else:
                got = walk(result, key)
        except (AssertionError, IndexError, ValueError, TypeError) as exc:
            problems.append("%s: %s" % (key, exc))
            continue
        if isinstance(want, bool):
            ok = got is want
        elif isinstance(want, int):
            ok = isinstance(got, int) and not isinstance(got, bool) and got == want
        elif isinstance(want, float):
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) and \
                abs(got - want) <= 1e-9 * max(1.0, abs(want))
        else:
            ok = got == want
        if not ok:
            problems.append("%s: got %r, want %r" % (key, got, want))
    if problems:
        raise AssertionError("%s:\n  %s" % (label, "\n  ".join(problems)))


def coverage_problems(name):
    """Samples without an expected entry, and entries without a sample."""
    files = set(sample_names(name))
    expected = set(load_expected(name))
    return sorted("no expected entry for sample %s/%s" % (name, f) for f in files - expected) + \
        sorted("expected entry %s/%s has no sample file" % (name, f) for f in expected - files)


def cases(tools):
    """pytest parameters (tool, sample name), one per real sample of each tool."""
    import pytest  # pylint: disable=import-outside-toplevel
    return [pytest.param(tool, name, id="%s/%s" % (tool, name))
            for tool in sorted(tools) for name in sample_names(tool)]
