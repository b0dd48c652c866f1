#!/usr/bin/python3
"""Validation reference job (hybridgpu.fleet validate role, step 2).

A real, deterministic computation in the Python standard library: full-batch gradient
descent on a seeded linear regression. Inputs come from the environment (REF_SEED,
REF_SAMPLES, REF_FEATURES, REF_STEPS, REF_LR, REF_PRECISION) so the owned and the cloud run
get the same inputs through the same Job spec. Prints one marked JSON line: a checksum of
the learned weights (exact float repr) and the final mean squared error (the task metric).
"""
import hashlib
import json
import os
import random
import struct
import syslog


def main():
    seed = int(os.environ.get("REF_SEED", "1234"))
    n = int(os.environ.get("REF_SAMPLES", "512"))
    d = int(os.environ.get("REF_FEATURES", "8"))
    steps = int(os.environ.get("REF_STEPS", "200"))
    lr = float(os.environ.get("REF_LR", "0.05"))
    precision = os.environ.get("REF_PRECISION", "float64")
    rng = random.Random(seed)
    true_w = [rng.uniform(-2, 2) for dummy in range(d)]
    xs = [[rng.gauss(0, 1) for dummy in range(d)] for dummy in range(n)]
    ys = [sum(a * b for a, b in zip(x, true_w)) + rng.gauss(0, 0.1) for x in xs]

    def q(value):
        # float32 precision: round every weight update through a 4-byte float
        if precision == "float32":
            return struct.unpack("f", struct.pack("f", value))[0]
        return value

    w = [0.0] * d
    for dummy in range(steps):
        grad = [0.0] * d
        for x, y in zip(xs, ys):
            err = sum(a * b for a, b in zip(x, w)) - y
            for j in range(d):
                grad[j] += err * x[j]
        w = [q(wj - lr * g / n) for wj, g in zip(w, grad)]
    loss = sum((sum(a * b for a, b in zip(x, w)) - y) ** 2 for x, y in zip(xs, ys)) / n
    checksum = hashlib.sha256(",".join(repr(v) for v in w).encode()).hexdigest()
    print("HGPU_REF " + json.dumps({"checksum": checksum, "loss": loss, "seed": seed, "samples": n,
                                    "features": d, "steps": steps, "lr": lr,
                                    "precision": precision}, sort_keys=True))
    log_marker(os.environ.get("REF_LOG_MARKER"), os.environ.get("REF_LOG_IDENT", "hgpu-validate"))


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
    main()
