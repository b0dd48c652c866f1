#!/usr/bin/python3
"""dcgmi stand-in (lab): `dcgmi diag -r <1|2|3>` prints the table of DCGM 3.3's dcgmi diag
(layout as in real captures: Metadata, Deployment, then Integration/Hardware/Stress for
levels 2 and 3) for the GPUs of the lab GPU spec.

Spec keys (/etc/hybridgpu-lab/gpu-spec.json, HGPU_GPU_SPEC): `faults.dcgm_diag`, a list of
{"test": "<row name>", "gpu": <index>, "message": "<Error row text>"}; each named test then
reads `Fail` (Deployment) or `Fail - GPU: <i>` and its message follows as an `Error` row,
wrapped at the table width like dcgmi does. No driver (driver.json absent): the error dcgmi
prints when the host engine cannot start, exit status 255.
"""
import json
import os
import sys

SPEC = os.environ.get("HGPU_GPU_SPEC", "/etc/hybridgpu-lab/gpu-spec.json")
DRIVER = os.environ.get("HGPU_DRIVER_JSON", "/usr/lib/hybridgpu-lab/driver.json")
VERSION = "3.3.9"
# PCI device ids of the lab's GPU models (as `GPU Device IDs Detected` prints them).
DEVICE_IDS = {"NVIDIA A100-SXM4-80GB": "20b2", "NVIDIA L40S": "26b9", "NVIDIA H200": "2335"}
DEPLOYMENT = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
              "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
LEVELS = {2: [("Integration", ["PCIe"]), ("Hardware", ["GPU Memory"]), ("Stress", [])],
          3: [("Integration", ["PCIe"]), ("Hardware", ["GPU Memory", "Diagnostic"]),
              ("Stress", ["Targeted Stress", "Targeted Power", "Memory Bandwidth"])]}
NAME_W, VALUE_W = 25, 46
RULE = "+" + "-" * (NAME_W + 2) + "+" + "-" * (VALUE_W + 2) + "+"


def load(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def row(name, value):
    return "| %-*s | %-*s |" % (NAME_W, name, VALUE_W, value)


def wrapped(name, text):
    """dcgmi cuts a long cell at the column width; a cut between words keeps the blank."""
    lines, rest = [], text
    while len(rest) > VALUE_W:
        cut = rest.rfind(" ", 0, VALUE_W + 1)
        cut = VALUE_W if cut <= 0 else cut
        lines.append(rest[:cut])
        rest = rest[cut:]
    lines.append(rest)
    return [row(name if i == 0 else "", part) for i, part in enumerate(lines)]


def section(name, closed):
    head = ("-----  %s  " % name).ljust(NAME_W + 2, "-")
    edge = "|" if closed else "+"
    return "%s%s+%s%s" % (edge, head, "-" * (VALUE_W + 2), edge)


def diag(level, spec, driver):
    faults = {f.get("test"): f for f in (spec.get("faults") or {}).get("dcgm_diag") or [] if isinstance(f, dict)}
    count = int(spec.get("count", 0)) - int((spec.get("faults") or {}).get("hide_gpus") or 0)
    out = ["Successfully ran diagnostic for group.", RULE, row("Diagnostic", "Result"),
           "+" + "=" * (NAME_W + 2) + "+" + "=" * (VALUE_W + 2) + "+", section("Metadata", True),
           row("DCGM Version", VERSION), row("Driver Version Detected", driver["version"]),
           row("GPU Device IDs Detected", ",".join([DEVICE_IDS.get(spec.get("model"), "20b2")] * count)),
           section("Deployment", True)]
    for name in DEPLOYMENT:
        fault = faults.get(name)
        out.append(row(name, "Fail" if fault else "Pass"))
        if fault:
            out.extend(wrapped("Error", fault.get("message") or "GPU %s failed %s" % (fault.get("gpu", 0), name)))
    for sect, tests in LEVELS.get(level, []):
        out.append(section(sect, False))
        for name in tests:
            fault = faults.get(name)
            if not fault:
                out.append(row(name, "Pass - All"))
                continue
            bad = int(fault.get("gpu", 0))
            good = [str(i) for i in range(count) if i != bad]
            out.append(row(name, "Pass - GPUs: " + ", ".join(good)) if good else row(name, "Fail - GPU: %d" % bad))
            if good:
                out.append(row("", "Fail - GPU: %d" % bad))
            out.extend(wrapped("Warning" if fault.get("warning") else "Error",
                               fault.get("message") or "GPU %d failed %s" % (bad, name)))
    out.append(RULE)
    return "\n".join(out) + "\n", 1 if faults else 0


def main(argv):
    if len(argv) < 1 or argv[0] != "diag":
        sys.stderr.write("dcgmi stand-in: only `dcgmi diag -r <level>` is supported\n")
        return 2
    level = 1
    args = argv[1:]
    for i, arg in enumerate(args):
        if arg in ("-r", "--run") and i + 1 < len(args):
            level = int(args[i + 1]) if args[i + 1].isdigit() else 1
    driver = load(DRIVER)
    if driver is None:
        sys.stdout.write("Error: unable to establish a connection to the specified host: localhost\n"
                         "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
        return 255
    text, rc = diag(level, load(SPEC) or {}, driver)
    sys.stdout.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
