"""Every real sample of each tool parses to its expected values (tests/unit/parsers/expected)."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import (
    chrony, nccl, ping, slurm, timedatectl, tracepath)

import realsamples


def _nccl(text, args):
    parsed = nccl.parse(text)
    parsed["summary"] = nccl.summarize(parsed)
    return parsed


def _slurm(text, args, kind):
    if kind == "squeue":
        return slurm.parse_squeue(text, **args)
    if kind == "scontrol":
        return slurm.parse_scontrol_jobs(text)
    if kind == "sprio":
        return slurm.parse_sprio(text)
    raise AssertionError("expected entry needs _kind squeue/scontrol/sprio, got %r" % kind)


PARSERS = {
    "nccl-tests": _nccl,
    "chrony": lambda text, args: chrony.parse_tracking(text),
    "timedatectl": lambda text, args: timedatectl.parse(text),
    "ping-mtu": lambda text, args: ping.parse(text),
    "tracepath": lambda text, args: tracepath.parse(text),
    "slurm": None,  # needs the entry's _kind, see test_real_sample
}


@pytest.mark.parametrize("tool", sorted(PARSERS))
def test_every_sample_has_an_expected_entry(tool):
    assert realsamples.coverage_problems(tool) == []


@pytest.mark.parametrize("tool,name", realsamples.cases(PARSERS))
def test_real_sample(tool, name):
    entry = realsamples.load_expected(tool).get(name)
    assert entry, "no expected entry for %s/%s" % (tool, name)
    text = realsamples.read_sample(tool, name)
    if tool == "slurm":
        result = _slurm(text, entry.get("_args", {}), entry.get("_kind"))
    else:
        result = PARSERS[tool](text, entry.get("_args", {}))
    realsamples.check(result, entry, "%s/%s" % (tool, name))


def test_every_tool_directory_has_a_parser():
    import os
    from hgpu_testenv import REAL_OUTPUTS
    nvidia = {"nvidia-smi-csv", "nvidia-smi-table", "nvidia-smi-xml"}  # test_parsers_nvidia_smi.py
    # DCGM and kubectl outputs: no module reads them, so the collection ships no parser for them.
    unread = {"dcgm-exporter", "dcgmi-diag", "kubectl-node"}
    present = {d for d in os.listdir(REAL_OUTPUTS) if os.path.isdir(os.path.join(REAL_OUTPUTS, d))}
    assert present - set(PARSERS) - nvidia - unread == set(), "sample directories without a parser test"
