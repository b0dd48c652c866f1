#!/usr/bin/python3
"""Lab stand-in for nvidia-smi.

Reads the node's GPU spec (/etc/hybridgpu-lab/gpu-spec.json, env HGPU_GPU_SPEC) and the
installed lab driver (/usr/lib/hybridgpu-lab/driver.json, env HGPU_DRIVER_JSON) and prints
what a real nvidia-smi prints for the same hardware: the --query-gpu CSV forms, -L, the
default table and -q -x XML. Python 3 standard library only (it runs on bare Debian nodes).
"""
import hashlib
import json
import os
import sys
import time
import uuid
from xml.sax.saxutils import escape

SPEC_PATH = "/etc/hybridgpu-lab/gpu-spec.json"
DRIVER_PATH = "/usr/lib/hybridgpu-lab/driver.json"
# Present when the node's modprobe stand-in is installed (hybridgpu-lab-nvidia-kmod): it names
# the loaded module's state, which nvidia-smi then reports instead of the installed driver.
KMOD_PATH = "/usr/lib/hybridgpu-lab/kmod.json"

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")
NO_DEVICES = "No devices were found\n"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: %s\n"
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

# Per-model facts a real board reports; the spec may override some of them.
MODELS = {
    "NVIDIA A100-SXM4-80GB": {
        "arch": "Ampere", "compute_cap": "8.0", "vbios": "92.00.36.00.02", "power_limit_w": 400,
        "sm_max": 1410, "mem_max": 1593, "idle_sm": 1410, "idle_mem": 1593, "idle_w": 62.5,
        "idle_temp": 31, "mem_temp": 38, "reserved_mib": 869, "mig": True, "fan": None,
        "device_id": "20B210DE", "subsys": "147F10DE", "pstate": "P0", "persistence": "On",
    },
    "NVIDIA L40S": {
        "arch": "Ada Lovelace", "compute_cap": "8.9", "vbios": "95.02.66.00.02", "power_limit_w": 350,
        "sm_max": 2520, "mem_max": 9001, "idle_sm": 210, "idle_mem": 405, "idle_w": 34.1,
        "idle_temp": 29, "mem_temp": None, "reserved_mib": 609, "mig": False, "fan": None,
        "device_id": "26B910DE", "subsys": "185110DE", "pstate": "P8", "persistence": "Off",
    },
    "NVIDIA H200": {
        "arch": "Hopper", "compute_cap": "9.0", "vbios": "96.00.A5.00.03", "power_limit_w": 700,
        "sm_max": 1980, "mem_max": 3201, "idle_sm": 345, "idle_mem": 3201, "idle_w": 76.2,
        "idle_temp": 30, "mem_temp": 38, "reserved_mib": 614, "mig": True, "fan": None,
        "device_id": "233510DE", "subsys": "18BE10DE", "pstate": "P0", "persistence": "On",
    },
    "NVIDIA H100 80GB HBM3": {
        "arch": "Hopper", "compute_cap": "9.0", "vbios": "96.00.A5.00.01", "power_limit_w": 700,
        "sm_max": 1980, "mem_max": 2619, "idle_sm": 345, "idle_mem": 2619, "idle_w": 69.9,
        "idle_temp": 31, "mem_temp": 40, "reserved_mib": 479, "mig": True, "fan": None,
        "device_id": "233010DE", "subsys": "16C110DE", "pstate": "P0", "persistence": "On",
    },
}
GENERIC_MODEL = {
    "arch": "Ampere", "compute_cap": "8.0", "vbios": "00.00.00.00.01", "power_limit_w": 300,
    "sm_max": 1500, "mem_max": 1500, "idle_sm": 300, "idle_mem": 405, "idle_w": 30.0,
    "idle_temp": 30, "mem_temp": None, "reserved_mib": 500, "mig": False, "fan": None,
    "device_id": "000010DE", "subsys": "000010DE", "pstate": "P8", "persistence": "Off",
}


class SmiError(Exception):
    """An error nvidia-smi reports with a message and an exit code."""

    def __init__(self, text, code):
        super().__init__(text)
        self.text = text
        self.code = code


def load_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def load_state(env=None):
    """Return (spec, driver) or raise SmiError like a machine without driver/GPUs."""
    env = os.environ if env is None else env
    try:
        driver = load_json(env.get("HGPU_DRIVER_JSON", DRIVER_PATH))
    except (OSError, ValueError):
        raise SmiError(NO_DRIVER, 9)
    try:
        kmod = load_json(env.get("HGPU_KMOD_JSON", KMOD_PATH))
    except (OSError, ValueError):
        kmod = None
    if kmod:
        # NVML talks to the loaded module: none loaded, or one of another version than the
        # installed library (a package changed without a reload or reboot), fails as for real.
        try:
            loaded = load_json(kmod["loaded_state"])
        except (OSError, ValueError):
            raise SmiError(NO_DRIVER, 9)
        if loaded.get("version") != driver.get("version"):
            raise SmiError(MISMATCH % ".".join(str(driver.get("version", "")).split(".")[:2]), 18)
    try:
        spec = load_json(env.get("HGPU_GPU_SPEC", SPEC_PATH))
    except (OSError, ValueError):
        raise SmiError(NO_DEVICES, 6)
    return spec, driver


def _pci_parts(base):
    # "00000000:10:00.0" -> (domain, bus, device, function)
    domain, bus, rest = base.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


def build_gpus(spec):
    """The GPUs this node reports, as dicts of raw values (faults applied)."""
    model_name = spec.get("model", "NVIDIA A100-SXM4-80GB")
    model = dict(MODELS.get(model_name, GENERIC_MODEL))
    faults = spec.get("faults") or {}
    count = int(spec.get("count", 1)) - int(faults.get("hide_gpus", 0) or 0)
    count = max(count, 0)
    domain, bus, device, function = _pci_parts(spec.get("pci_base", "00000000:10:00.0"))
    step = int(spec.get("pci_bus_step", 16))
    seed = spec.get("uuid_seed", model_name)
    state = spec.get("state") or {}
    ecc_faults = {str(k): int(v) for k, v in (faults.get("ecc_uncorrected") or {}).items()}
    total = int(spec.get("memory_mib", 81920))
    reserved = int(state.get("memory_reserved_mib", model["reserved_mib"]))
    used = int(state.get("memory_used_mib", 0))
    mig = spec.get("mig", "Disabled") if model["mig"] else None
    gpus = []
    for index in range(count):
        digest = hashlib.sha256(("%s:%d" % (seed, index)).encode()).digest()
        gpu_bus = (bus + index * step) & 0xFF
        gpus.append({
            "index": index,
            "name": model_name,
            "arch": model["arch"],
            "uuid": "GPU-%s" % uuid.UUID(bytes=digest[:16]),
            "serial": str(int.from_bytes(digest[16:24], "big") % 10 ** 13).zfill(13),
            "pci_domain": domain, "pci_bus": gpu_bus, "pci_device": device,
            "bus_id": "%08X:%02X:%02X.%X" % (domain, gpu_bus, device, function),
            "device_id": model["device_id"], "subsys": model["subsys"],
            "vbios": spec.get("vbios_version", model["vbios"]),
            "compute_cap": str(spec.get("compute_cap", model["compute_cap"])),
            "mem_total": total, "mem_reserved": reserved, "mem_used": used,
            "mem_free": max(total - reserved - used, 0),
            "mig": mig,
            "temp": int(state.get("temperature_c", model["idle_temp"])),
            "mem_temp": model["mem_temp"],
            "util_gpu": int(state.get("utilization_gpu", 0)),
            "util_mem": int(state.get("utilization_memory", 0)),
            "power_draw": float(state.get("power_draw_w", model["idle_w"])),
            "power_limit": float(spec.get("power_limit_w", model["power_limit_w"])),
            "persistence": "Enabled" if state.get("persistence", model["persistence"]) == "On"
                           else "Disabled",
            "pstate": state.get("pstate", model["pstate"]),
            "clock_sm": int(state.get("clock_sm_mhz", model["idle_sm"])),
            "clock_mem": int(state.get("clock_mem_mhz", model["idle_mem"])),
            "clock_sm_max": model["sm_max"], "clock_mem_max": model["mem_max"],
            "fan": model["fan"],
            "ecc_uncorrected": ecc_faults.get(str(index), 0),
        })
    return gpus


# --query-gpu fields: canonical name -> (unit or None, value getter). A getter returns a
# string, or None for "[N/A]".
def _mig_value(gpu):
    return gpu["mig"]


def _num(fmt, key):
    return lambda g, d: fmt % g[key]


FIELDS = {
    "timestamp": (None, lambda g, d: time.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (time.time() % 1 * 1000)),
    "driver_version": (None, lambda g, d: d["version"]),
    "count": (None, lambda g, d: str(d["_count"])),
    "name": (None, lambda g, d: g["name"]),
    "serial": (None, lambda g, d: g["serial"]),
    "uuid": (None, lambda g, d: g["uuid"]),
    "pci.bus_id": (None, lambda g, d: g["bus_id"]),
    "pci.domain": (None, lambda g, d: "0x%04X" % g["pci_domain"]),
    "pci.bus": (None, lambda g, d: "0x%02X" % g["pci_bus"]),
    "pci.device": (None, lambda g, d: "0x%02X" % g["pci_device"]),
    "pci.device_id": (None, lambda g, d: "0x" + g["device_id"]),
    "pci.sub_device_id": (None, lambda g, d: "0x" + g["subsys"]),
    "index": (None, lambda g, d: str(g["index"])),
    "display_mode": (None, lambda g, d: "Disabled"),
    "display_active": (None, lambda g, d: "Disabled"),
    "persistence_mode": (None, lambda g, d: g["persistence"]),
    "vbios_version": (None, lambda g, d: g["vbios"]),
    "pstate": (None, lambda g, d: g["pstate"]),
    "fan.speed": ("%", lambda g, d: None if g["fan"] is None else str(g["fan"])),
    "memory.total": ("MiB", _num("%d", "mem_total")),
    "memory.reserved": ("MiB", _num("%d", "mem_reserved")),
    "memory.used": ("MiB", _num("%d", "mem_used")),
    "memory.free": ("MiB", _num("%d", "mem_free")),
    "compute_mode": (None, lambda g, d: "Default"),
    "compute_cap": (None, lambda g, d: g["compute_cap"]),
    "utilization.gpu": ("%", lambda g, d: None if g["mig"] == "Enabled" else str(g["util_gpu"])),
    "utilization.memory": ("%", lambda g, d: None if g["mig"] == "Enabled" else str(g["util_mem"])),
    "ecc.mode.current": (None, lambda g, d: "Enabled"),
    "ecc.mode.pending": (None, lambda g, d: "Enabled"),
    "ecc.errors.corrected.volatile.total": (None, lambda g, d: "0"),
    "ecc.errors.uncorrected.volatile.total": (None, lambda g, d: str(g["ecc_uncorrected"])),
    "ecc.errors.corrected.aggregate.total": (None, lambda g, d: "0"),
    "ecc.errors.uncorrected.aggregate.total": (None, lambda g, d: str(g["ecc_uncorrected"])),
    "temperature.gpu": (None, _num("%d", "temp")),
    "temperature.memory": (None, lambda g, d: "N/A" if g["mem_temp"] is None else str(g["mem_temp"])),
    "power.management": (None, lambda g, d: "Enabled"),
    "power.draw": ("W", _num("%.2f", "power_draw")),
    "power.draw.instant": ("W", _num("%.2f", "power_draw")),
    "power.limit": ("W", _num("%.2f", "power_limit")),
    "enforced.power.limit": ("W", _num("%.2f", "power_limit")),
    "power.default_limit": ("W", _num("%.2f", "power_limit")),
    "power.max_limit": ("W", _num("%.2f", "power_limit")),
    "clocks.current.graphics": ("MHz", _num("%d", "clock_sm")),
    "clocks.current.sm": ("MHz", _num("%d", "clock_sm")),
    "clocks.current.memory": ("MHz", _num("%d", "clock_mem")),
    "clocks.max.graphics": ("MHz", _num("%d", "clock_sm_max")),
    "clocks.max.sm": ("MHz", _num("%d", "clock_sm_max")),
    "clocks.max.memory": ("MHz", _num("%d", "clock_mem_max")),
    "mig.mode.current": (None, lambda g, d: _mig_value(g)),
    "mig.mode.pending": (None, lambda g, d: _mig_value(g)),
    "pcie.link.gen.current": (None, lambda g, d: "4"),
    "pcie.link.gen.max": (None, lambda g, d: "4"),
    "pcie.link.width.current": (None, lambda g, d: "16"),
    "pcie.link.width.max": (None, lambda g, d: "16"),
}
# Aliases nvidia-smi accepts; output headers always use the canonical name.
ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "clocks.gr": "clocks.current.graphics", "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory", "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory", "power.draw.average": "power.draw",
}


def query_gpu(gpus, driver, fields_arg, fmt_arg):
    """Render --query-gpu output; raise SmiError for unknown fields or formats."""
    fmt = [part.strip() for part in fmt_arg.split(",") if part.strip()]
    if not fmt or fmt[0] != "csv" or any(f not in ("csv", "noheader", "nounits") for f in fmt):
        raise SmiError('"%s" is not a valid format.\n\n' % fmt_arg, 2)
    names = []
    for raw in fields_arg.split(","):
        name = raw.strip()
        if not name:
            continue
        canonical = ALIASES.get(name, name)
        if canonical not in FIELDS:
            raise SmiError('Field "%s" is not a valid field to query.\n\n' % name, 2)
        names.append(canonical)
    if not names:
        raise SmiError('Field "" is not a valid field to query.\n\n', 2)
    units = "nounits" not in fmt
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(n if FIELDS[n][0] is None else "%s [%s]" % (n, FIELDS[n][0])
                               for n in names))
    for gpu in gpus:
        cells = []
        for name in names:
            unit, getter = FIELDS[name]
            value = getter(gpu, driver)
            if value is None:
                cells.append("[N/A]")
            elif unit and units:
                cells.append("%s %s" % (value, unit))
            else:
                cells.append(value)
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def list_gpus(gpus):
    return "".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in gpus)


def _table_name(name):
    return name if len(name) <= 26 else name[:24] + "..."


def table(gpus, driver, now=None):
    """The default nvidia-smi screen (R535+ wide layout)."""
    now = time.localtime() if now is None else now
    rule = "+" + "-" * 89 + "+"
    split = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out = [time.asctime(now) + "       ", rule,
           "| " + ("NVIDIA-SMI " + driver["version"]).ljust(34)
           + ("Driver Version: " + driver["version"]).ljust(31)
           + ("CUDA Version: " + driver["cuda"]).ljust(23) + "|",
           split,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for g in gpus:
        pm = "On" if g["persistence"] == "Enabled" else "Off"
        if g["mig"] == "Enabled":
            ecc = "On"
        else:
            ecc = str(g["ecc_uncorrected"])
        fan = "N/A" if g["fan"] is None else "%d%%" % g["fan"]
        util = "N/A" if g["mig"] == "Enabled" else "%d%%" % g["util_gpu"]
        out.append("|%4d  %s%s|   %s %3s |%21s |" % (
            g["index"], _table_name(g["name"]).ljust(31), pm.ljust(4), g["bus_id"], "Off", ecc))
        out.append("| %3s  %3dC    %-2s%15dW / %4dW |%8dMiB / %6dMiB |%8s%13s |" % (
            fan, g["temp"], g["pstate"], round(g["power_draw"]), round(g["power_limit"]),
            g["mem_used"], g["mem_total"], util, "Default"))
        out.append("|%41s|%24s|%21s |" % ("", "", g["mig"] or "N/A"))
        out.append(split)
    out += ["", rule,
            "| Processes:".ljust(90) + "|",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|",
            "|  No running processes found".ljust(90) + "|",
            rule]
    return "\n".join(out) + "\n"


def xml_report(gpus, driver, now=None):
    """nvidia-smi -q -x (nvsmi_device_v12 layout, tab indented like the real tool)."""
    now = time.localtime() if now is None else now
    lines = ['<?xml version="1.0" ?>',
             '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
             "<nvidia_smi_log>",
             "\t<timestamp>%s</timestamp>" % time.asctime(now),
             "\t<driver_version>%s</driver_version>" % escape(driver["version"]),
             "\t<cuda_version>%s</cuda_version>" % escape(driver["cuda"]),
             "\t<attached_gpus>%d</attached_gpus>" % len(gpus)]

    def add(depth, tag, value=None):
        if value is None:
            lines.append("\t" * depth + "<%s>" % tag)
        else:
            lines.append("\t" * depth + "<%s>%s</%s>" % (tag, escape(str(value)), tag))

    def close(depth, tag):
        lines.append("\t" * depth + "</%s>" % tag)

    for g in gpus:
        lines.append('\t<gpu id="%s">' % g["bus_id"])
        add(2, "product_name", g["name"])
        add(2, "product_brand", "NVIDIA")
        add(2, "product_architecture", g["arch"])
        add(2, "display_mode", "Disabled")
        add(2, "display_active", "Disabled")
        add(2, "persistence_mode", g["persistence"])
        add(2, "mig_mode")
        add(3, "current_mig", g["mig"] or "N/A")
        add(3, "pending_mig", g["mig"] or "N/A")
        close(2, "mig_mode")
        add(2, "mig_devices", "None")
        add(2, "serial", g["serial"])
        add(2, "uuid", g["uuid"])
        add(2, "minor_number", g["index"])
        add(2, "vbios_version", g["vbios"])
        add(2, "pci")
        add(3, "pci_bus", "%02X" % g["pci_bus"])
        add(3, "pci_device", "%02X" % g["pci_device"])
        add(3, "pci_domain", "%04X" % g["pci_domain"])
        add(3, "pci_device_id", g["device_id"])
        add(3, "pci_bus_id", g["bus_id"])
        add(3, "pci_sub_system_id", g["subsys"])
        close(2, "pci")
        add(2, "fan_speed", "N/A" if g["fan"] is None else "%d %%" % g["fan"])
        add(2, "performance_state", g["pstate"])
        add(2, "fb_memory_usage")
        add(3, "total", "%d MiB" % g["mem_total"])
        add(3, "reserved", "%d MiB" % g["mem_reserved"])
        add(3, "used", "%d MiB" % g["mem_used"])
        add(3, "free", "%d MiB" % g["mem_free"])
        close(2, "fb_memory_usage")
        add(2, "compute_mode", "Default")
        add(2, "utilization")
        mig_on = g["mig"] == "Enabled"
        add(3, "gpu_util", "N/A" if mig_on else "%d %%" % g["util_gpu"])
        add(3, "memory_util", "N/A" if mig_on else "%d %%" % g["util_mem"])
        close(2, "utilization")
        add(2, "ecc_mode")
        add(3, "current_ecc", "Enabled")
        add(3, "pending_ecc", "Enabled")
        close(2, "ecc_mode")
        add(2, "ecc_errors")
        add(3, "volatile")
        add(4, "sram_correctable", 0)
        add(4, "sram_uncorrectable", 0)
        add(4, "dram_correctable", 0)
        add(4, "dram_uncorrectable", g["ecc_uncorrected"])
        close(3, "volatile")
        close(2, "ecc_errors")
        add(2, "temperature")
        add(3, "gpu_temp", "%d C" % g["temp"])
        add(3, "memory_temp", "N/A" if g["mem_temp"] is None else "%d C" % g["mem_temp"])
        close(2, "temperature")
        add(2, "gpu_power_readings")
        add(3, "power_state", g["pstate"])
        add(3, "power_draw", "%.2f W" % g["power_draw"])
        add(3, "current_power_limit", "%.2f W" % g["power_limit"])
        add(3, "default_power_limit", "%.2f W" % g["power_limit"])
        add(3, "max_power_limit", "%.2f W" % g["power_limit"])
        close(2, "gpu_power_readings")
        add(2, "clocks")
        add(3, "graphics_clock", "%d MHz" % g["clock_sm"])
        add(3, "sm_clock", "%d MHz" % g["clock_sm"])
        add(3, "mem_clock", "%d MHz" % g["clock_mem"])
        close(2, "clocks")
        add(2, "max_clocks")
        add(3, "graphics_clock", "%d MHz" % g["clock_sm_max"])
        add(3, "sm_clock", "%d MHz" % g["clock_sm_max"])
        add(3, "mem_clock", "%d MHz" % g["clock_mem_max"])
        close(2, "max_clocks")
        lines.append("\t\t<processes>")
        lines.append("\t\t</processes>")
        lines.append("\t\t<accounted_processes>")
        lines.append("\t\t</accounted_processes>")
        lines.append("\t</gpu>")
    lines += ["", "</nvidia_smi_log>"]
    return "\n".join(lines) + "\n"


def select(gpus, ident):
    """Apply -i/--id: indexes, UUIDs or PCI bus ids, comma separated."""
    chosen = []
    for part in ident.split(","):
        part = part.strip()
        match = [g for g in gpus if part in (str(g["index"]), g["uuid"], g["bus_id"])
                 or (part.lower().startswith("0000") and g["bus_id"].lower().endswith(part.lower()[4:]))]
        if not match:
            raise SmiError(NO_DEVICES, 6)
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def parse_args(argv):
    opts = {"query": None, "format": None, "id": None, "list": False, "q": False, "x": False,
            "apps": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, val = arg.partition("=")
        if key in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            if not eq:
                i += 1
                if i >= len(argv):
                    raise SmiError(BAD_ARGS, 2)
                val = argv[i]
            name = {"--query-gpu": "query", "--query-compute-apps": "apps", "--format": "format",
                    "-i": "id", "--id": "id"}[key]
            opts[name] = val
        elif arg in ("-L", "--list-gpus"):
            opts["list"] = True
        elif arg in ("-q", "--query"):
            opts["q"] = True
        elif arg in ("-x", "--xml-format"):
            opts["x"] = True
        elif arg == "-qx" or arg == "-xq":
            opts["q"] = opts["x"] = True
        elif arg.startswith("-i") and len(arg) > 2:
            opts["id"] = arg[2:]
        else:
            raise SmiError(BAD_ARGS, 2)
        i += 1
    return opts


def run(argv, env=None):
    """Return (stdout text, exit code) for one nvidia-smi invocation."""
    try:
        opts = parse_args(argv)
        spec, driver = load_state(env)
        gpus = build_gpus(spec)
        if not gpus:
            raise SmiError(NO_DEVICES, 6)
        driver = dict(driver, _count=len(gpus))
        if opts["id"] is not None:
            gpus = select(gpus, opts["id"])
        if opts["query"] is not None:
            if opts["format"] is None:
                raise SmiError('"--format" option is required when using "--query-gpu".\n\n', 2)
            return query_gpu(gpus, driver, opts["query"], opts["format"]), 0
        if opts["apps"] is not None:
            # No CUDA process ever runs on a stand-in GPU: the header only.
            fmt = opts["format"] or ""
            if "csv" not in fmt:
                raise SmiError('"--format" option is required when using "--query-compute-apps".\n\n', 2)
            if "noheader" in fmt:
                return "", 0
            names = [p.strip() for p in opts["apps"].split(",") if p.strip()]
            return ", ".join(n + " [MiB]" if n in ("used_memory", "used_gpu_memory") else n
                             for n in names) + "\n", 0
        if opts["list"]:
            return list_gpus(gpus), 0
        if opts["x"] and opts["q"]:
            return xml_report(gpus, driver), 0
        if opts["q"] or opts["x"]:
            raise SmiError(BAD_ARGS, 2)
        return table(gpus, driver), 0
    except SmiError as err:
        return err.text, err.code


def main():
    text, code = run(sys.argv[1:])
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
