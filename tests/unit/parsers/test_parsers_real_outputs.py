"""Every real sample of each tool parses to its expected values (tests/unit/parsers/expected)."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import (
    chrony, dcgm, kubectl_node, nccl, ping, slurm, timedatectl, tracepath)

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


def _exporter(text, args):
    parsed = dcgm.parse_prometheus(text)
    parsed["summary"] = dcgm.exporter_summary(parsed)
    return parsed


def _node(text, kind):
    if kind == "status":
        return kubectl_node.parse_status(text)
    if kind == "labels":
        labels, errors = kubectl_node.parse_labels(text)
        return {"labels": labels, "errors": errors, "gpu": kubectl_node.gpu_info(labels)}
    raise AssertionError("expected entry needs _kind labels/status, got %r" % kind)


PARSERS = {
    "nccl-tests": _nccl,
    "chrony": lambda text, args: chrony.parse_tracking(text),
    "timedatectl": lambda text, args: timedatectl.parse(text),
    "ping-mtu": lambda text, args: ping.parse(text),
    "tracepath": lambda text, args: tracepath.parse(text),
    "dcgm-exporter": _exporter,
    "dcgmi-diag": lambda text, args: dcgm.parse_diag(text),
    "kubectl-node": None,  # needs the entry's _kind
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
    if tool == "kubectl-node":
        result = _node(text, entry.get("_kind"))
    elif tool == "slurm":
        result = _slurm(text, entry.get("_args", {}), entry.get("_kind"))
    else:
        result = PARSERS[tool](text, entry.get("_args", {}))
    realsamples.check(result, entry, "%s/%s" % (tool, name))


def test_every_tool_directory_has_a_parser():
    # Every sample directory is read by a parser of the collection: none is exempt.
    import os
    from hgpu_testenv import REAL_OUTPUTS
    nvidia = {"nvidia-smi-csv", "nvidia-smi-table", "nvidia-smi-xml"}  # test_parsers_nvidia_smi.py
    present = {d for d in os.listdir(REAL_OUTPUTS) if os.path.isdir(os.path.join(REAL_OUTPUTS, d))}
    assert present - set(PARSERS) - nvidia == set(), "sample directories without a parser test"
    assert set(PARSERS) | nvidia <= present, "parser tests for sample directories that do not exist"
