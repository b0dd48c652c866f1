"""Every real sample of each tool parses to its expected values (tests/unit/parsers/expected)."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils import chrony, nccl, ping, timedatectl, tracepath

import realsamples


def _nccl(text, args):
    parsed = nccl.parse(text)
    parsed["summary"] = nccl.summarize(parsed)
    return parsed


PARSERS = {
    "nccl-tests": _nccl,
    "chrony": lambda text, args: chrony.parse_tracking(text),
    "timedatectl": lambda text, args: timedatectl.parse(text),
    "ping-mtu": lambda text, args: ping.parse(text),
    "tracepath": lambda text, args: tracepath.parse(text),
}


@pytest.mark.parametrize("tool", sorted(PARSERS))
def test_every_sample_has_an_expected_entry(tool):
    assert realsamples.coverage_problems(tool) == []


def _cases():
    for tool in sorted(PARSERS):
        for name in realsamples.sample_names(tool):
            yield pytest.param(tool, name, id="%s/%s" % (tool, name))


@pytest.mark.parametrize("tool,name", list(_cases()))
def test_real_sample(tool, name):
    entry = realsamples.load_expected(tool).get(name)
    assert entry, "no expected entry for %s/%s" % (tool, name)
    result = PARSERS[tool](realsamples.read_sample(tool, name), entry.get("_args", {}))
    realsamples.check(result, entry, "%s/%s" % (tool, name))
