#!/usr/bin/env python3
"""The overflow lab users' program: a small deterministic training loop with full checkpoints.

Pure python3 standard library, so it runs on the lab nodes' python3: inside the user's Kubernetes
Job or Slurm batch script (userjobs.py), wherever that job runs, and on the control host as the
local reference run. It knows nothing about overflow: it reads its inputs from a directory and
writes its output directory.

    ovfjob.py train --out DIR [--inputs DIR] [--steps N] [--ckpt-every K] [--resume CKPT]
                    [--stop-at STEP] [--seed S] [--pace SECONDS]

Training state in a checkpoint: model (weights, bias), optimiser (SGD momentum buffers),
scheduler (step decay: base lr, gamma, period, last step), step, and the RNG state
(random.getstate()). A run resumed from a checkpoint continues bit-for-bit like the
uninterrupted run. Output directory: metrics.json (loss per step, input checksums),
checkpoint.json (last state).
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time

DIM = 8


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root):
    """Same as rsync_stager.tree_digest: sha256 over sorted `<sha256>  <relpath>` lines."""
    lines = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            lines.append("%s  %s\n" % (file_sha256(full), os.path.relpath(full, root)))
    lines.sort(key=lambda ln: ln.split("  ", 1)[1])
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def _write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, sort_keys=True, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def new_state(seed):
    rng = random.Random(seed)
    true_w = [rng.uniform(-1, 1) for _ in range(DIM)]
    return {"model": {"w": [0.0] * DIM, "b": 0.0},
            "optimizer": {"momentum": 0.9, "buf_w": [0.0] * DIM, "buf_b": 0.0},
            "scheduler": {"base_lr": 0.05, "gamma": 0.5, "period": 40, "last_step": 0},
            "step": 0, "true_w": true_w, "seed": seed,
            "rng": _rng_to_json(rng.getstate())}


def _rng_to_json(state):
    return [state[0], list(state[1]), state[2]]


def _rng_from_json(doc):
    return (doc[0], tuple(doc[1]), doc[2])


def lr_at(sched, step):
    return sched["base_lr"] * (sched["gamma"] ** (step // sched["period"]))


def train_step(state, rng, batch=16):
    """One SGD-with-momentum step on a noisy linear target; returns the batch loss."""
    w, b = state["model"]["w"], state["model"]["b"]
    opt = state["optimizer"]
    lr = lr_at(state["scheduler"], state["step"])
    gw, gb, loss = [0.0] * DIM, 0.0, 0.0
    for _ in range(batch):
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        y = sum(t * xi for t, xi in zip(state["true_w"], x)) + 0.3 + rng.gauss(0, 0.05)
        err = sum(wi * xi for wi, xi in zip(w, x)) + b - y
        loss += err * err
        for i in range(DIM):
            gw[i] += 2 * err * x[i] / batch
        gb += 2 * err / batch
    for i in range(DIM):
        opt["buf_w"][i] = opt["momentum"] * opt["buf_w"][i] + gw[i]
        w[i] -= lr * opt["buf_w"][i]
    opt["buf_b"] = opt["momentum"] * opt["buf_b"] + gb
    state["model"]["b"] = b - lr * opt["buf_b"]
    state["step"] += 1
    state["scheduler"]["last_step"] = state["step"]
    return loss / batch


def input_digests(inputs_dir):
    if not inputs_dir or not os.path.isdir(inputs_dir):
        return {}
    return dict((f, "sha256:" + file_sha256(os.path.join(inputs_dir, f))) for f in sorted(os.listdir(inputs_dir)))


def train(out, steps=120, ckpt_every=20, resume=None, stop_at=None, seed=None, inputs=None, pace=0.0):
    os.makedirs(out, exist_ok=True)
    digests = input_digests(inputs)
    if seed is None:
        # the data decides the run: seed from the input checksums (0 without inputs)
        seed = int(hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:8], 16) if digests else 0
    curve = []
    if resume:
        with open(resume) as fh:
            ck = json.load(fh)
        state, curve = ck["state"], ck["curve"]
    else:
        state = new_state(seed)
    rng = random.Random()
    rng.setstate(_rng_from_json(state["rng"]))
    while state["step"] < steps:
        if stop_at is not None and state["step"] >= stop_at:
            break
        curve.append(round(train_step(state, rng), 12))
        if pace:
            time.sleep(pace)      # wall time per step (drills that act while the job runs)
        if state["step"] % ckpt_every == 0 or state["step"] == steps:
            state["rng"] = _rng_to_json(rng.getstate())
            _write_json(os.path.join(out, "checkpoint.json"), {"state": state, "curve": curve})
    state["rng"] = _rng_to_json(rng.getstate())
    done = state["step"] >= steps
    metrics = {"steps": state["step"], "finished": done, "seed": state["seed"], "inputs": digests,
               "final_loss": curve[-1] if curve else None, "curve": curve}
    _write_json(os.path.join(out, "metrics.json"), metrics)
    return metrics


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("train")
    s.add_argument("--steps", type=int, default=120)
    s.add_argument("--ckpt-every", type=int, default=20)
    s.add_argument("--stop-at", type=int)
    s.add_argument("--seed", type=int)
    s.add_argument("--pace", type=float, default=0.0, help="seconds to sleep per step")
    s.add_argument("--out", required=True)
    s.add_argument("--inputs")
    s.add_argument("--resume")
    a = p.parse_args(argv)
    m = train(a.out, a.steps, a.ckpt_every, a.resume, a.stop_at, a.seed, a.inputs, a.pace)
    print(json.dumps({"steps": m["steps"], "final_loss": m["final_loss"], "digest": tree_digest(a.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
