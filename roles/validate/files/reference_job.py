#!/usr/bin/python3
"""Validation reference job (hybridgpu.fleet validate role, step 2).

Full-batch gradient descent on a seeded linear regression, the same on both sides. Inputs
come from the environment (REF_SEED, REF_SAMPLES, REF_FEATURES, REF_STEPS, REF_LR,
REF_PRECISION, REF_DEVICE) so the owned and the cloud run get the same inputs through the same
Job spec.

REF_DEVICE=cuda (the role's default) trains with PyTorch on the GPU the Job was given, with
deterministic algorithms, and checks the GPU's result against the same training done in the
Python standard library on the CPU: the run fails unless they agree to REF_GPU_TOLERANCE
(relative, default 1e-9 in float64, 1e-4 in float32). No CUDA device, no PyTorch or a wrong
answer each fail the run with a line saying which. REF_DEVICE=cpu trains in the standard
library only (no GPU work: for estates without GPUs).

Prints one marked JSON line: a checksum of the learned weights rounded to 9 significant
digits (the same on every GPU model and on the CPU for this well-conditioned problem), the
final mean squared error (the task metric), and the GPU check.
"""
import hashlib
import json
import os
import random
import struct
import sys
import syslog


def inputs():
    return {"seed": int(os.environ.get("REF_SEED", "1234")),
            "samples": int(os.environ.get("REF_SAMPLES", "512")),
            "features": int(os.environ.get("REF_FEATURES", "8")),
            "steps": int(os.environ.get("REF_STEPS", "200")),
            "lr": float(os.environ.get("REF_LR", "0.05")),
            "precision": os.environ.get("REF_PRECISION", "float64"),
            "device": os.environ.get("REF_DEVICE", "cuda")}


def data(p):
    rng = random.Random(p["seed"])
    true_w = [rng.uniform(-2, 2) for dummy in range(p["features"])]
    xs = [[rng.gauss(0, 1) for dummy in range(p["features"])] for dummy in range(p["samples"])]
    ys = [sum(a * b for a, b in zip(x, true_w)) + rng.gauss(0, 0.1) for x in xs]
    return xs, ys


def train_cpu(p, xs, ys):
    """Standard-library training; float32 rounds every weight update through a 4-byte float."""
    def q(value):
        if p["precision"] == "float32":
            return struct.unpack("f", struct.pack("f", value))[0]
        return value

    n, d = len(xs), p["features"]
    w = [0.0] * d
    for dummy in range(p["steps"]):
        grad = [0.0] * d
        for x, y in zip(xs, ys):
            err = sum(a * b for a, b in zip(x, w)) - y
            for j in range(d):
                grad[j] += err * x[j]
        w = [q(wj - p["lr"] * g / n) for wj, g in zip(w, grad)]
    return w


def train_torch(p, xs, ys, device):
    """The same descent as one matrix product per step on `device`, deterministic kernels."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch  # pylint: disable=import-error
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float32 if p["precision"] == "float32" else torch.float64
    x = torch.tensor(xs, dtype=dtype, device=device)
    y = torch.tensor(ys, dtype=dtype, device=device)
    w = torch.zeros(p["features"], dtype=dtype, device=device)
    n = float(len(xs))
    for dummy in range(p["steps"]):
        w = w - p["lr"] * (x.t() @ (x @ w - y)) / n
    if device != "cpu":
        torch.cuda.synchronize()
    return [float(v) for v in w.cpu().tolist()]


def gpu(p):
    """(device name, driver-visible GPU count) or raise RuntimeError naming what is missing."""
    try:
        import torch  # pylint: disable=import-error
    except ImportError:
        raise RuntimeError("PyTorch is not in the image (REF_DEVICE=cuda needs an image with PyTorch and CUDA)")
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to the container (torch %s, CUDA build %s)"
                           % (torch.__version__, torch.version.cuda))
    return torch.cuda.get_device_name(0), torch.cuda.device_count()


def rounded_checksum(w):
    return hashlib.sha256(",".join("%.9g" % v for v in w).encode()).hexdigest()


def main():
    p = inputs()
    xs, ys = data(p)
    report = dict(p)
    cpu_w = train_cpu(p, xs, ys)
    w = cpu_w
    if p["device"] == "cuda":
        try:
            name, count = gpu(p)
        except RuntimeError as exc:
            report["error"] = str(exc)
            print("HGPU_REF " + json.dumps(report, sort_keys=True), flush=True)
            return 2
        w = train_torch(p, xs, ys, "cuda")
        tol = float(os.environ.get("REF_GPU_TOLERANCE", "1e-4" if p["precision"] == "float32" else "1e-9"))
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(w, cpu_w))
        report["gpu"] = {"name": name, "count": count, "max_rel_diff_vs_cpu": worst, "tolerance": tol,
                         "check": "pass" if worst <= tol else "fail"}
    elif p["device"] != "cpu":
        report["error"] = "REF_DEVICE must be cuda or cpu, not %r" % p["device"]
        print("HGPU_REF " + json.dumps(report, sort_keys=True), flush=True)
        return 2
    report["loss"] = sum((sum(a * b for a, b in zip(x, w)) - y) ** 2 for x, y in zip(xs, ys)) / len(xs)
    report["checksum"] = rounded_checksum(w)
    print("HGPU_REF " + json.dumps(report, sort_keys=True), flush=True)
    log_marker(os.environ.get("REF_LOG_MARKER"), os.environ.get("REF_LOG_IDENT", "hgpu-validate"))
    return 1 if report.get("gpu", {}).get("check") == "fail" else 0


def log_marker(marker, ident):
    """The line validation looks for where the site's logs go: on stdout (the container log)
    and to syslog under ``ident`` (the node's journal where /dev/log reaches it)."""
    if not marker:
        return
    print(marker, flush=True)
    syslog.openlog(ident, 0, syslog.LOG_USER)
    syslog.syslog(syslog.LOG_INFO, marker)
    syslog.closelog()


if __name__ == "__main__":
    sys.exit(main())
