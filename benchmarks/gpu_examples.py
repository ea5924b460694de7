"""The examples trained on the gpu backend beside the cpu backend, from the same inputs.

    python benchmarks/gpu_examples.py [--scale 1.0] [--json out.json]

For each example (`examples/mlp.py`, `cnn.py`, `gpt.py`, and three steps of
`transformer_block.py`): wall time of its `train()` on `gpu` and on `cpu` (compile included),
the first and last losses of both, the largest difference between the two loss curves, and
held-out accuracy where the example reports one. Each example runs on its own: one that fails
is reported and the others still run. Without a CUDA device it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from examples import cnn, gpt, mlp, transformer_block  # noqa: E402


def _train_transformer(steps, backend, log=None):
    step = cc.compile(transformer_block.train_step, backend=backend)
    args = transformer_block.example_inputs()
    return [float(step(*args)) for _ in range(steps)], None


def _losses_and_acc(name, steps, backend):
    if name == "mlp":
        return mlp.train(steps, backend, log=None)
    if name == "cnn":
        _, losses, acc = cnn.train(steps, backend, log=None)
        return losses, acc
    if name == "gpt":
        _, losses = gpt.train(steps, backend, log=None)
        return losses, None
    return _train_transformer(steps, backend)


STEPS = {"mlp": 300, "cnn": 100, "gpt": 200, "transformer_block": 3}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies each step count")
    ap.add_argument("--examples", default=",".join(STEPS))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        import cupy
        assert cupy.cuda.runtime.getDeviceCount() > 0
    except Exception as e:
        print(f"gpu_examples: no CUDA device here ({type(e).__name__}); nothing to run")
        return 0
    rows, results, failed = [], {}, 0
    for name in args.examples.split(","):
        steps = max(1, int(STEPS[name] * args.scale))
        res = {"steps": steps}
        for backend in ("gpu", "cpu"):
            t0 = time.perf_counter()
            try:
                losses, acc = _losses_and_acc(name, steps, backend)
                res[backend] = dict(seconds=time.perf_counter() - t0, losses=losses, acc=acc)
            except Exception as e:
                failed += 1
                res[backend] = dict(error=f"{type(e).__name__}: {e}")
                print(f"{name} on {backend} FAILED:\n{traceback.format_exc()}", flush=True)
        results[name] = res
        g, c = res["gpu"], res["cpu"]
        if "losses" in g and "losses" in c:
            diff = float(np.max(np.abs(np.subtract(g["losses"], c["losses"]))))
            acc = "" if g["acc"] is None else f"{g['acc']:.1%} / {c['acc']:.1%}"
            rows.append(f"| {name} | {steps} | {g['seconds']:.1f} s | {c['seconds']:.1f} s | "
                        f"{g['losses'][0]:.4f} -> {g['losses'][-1]:.4f} | "
                        f"{c['losses'][0]:.4f} -> {c['losses'][-1]:.4f} | {diff:.2e} | {acc} |")
        else:
            rows.append(f"| {name} | {steps} | {g.get('error', '')[:80]} | "
                        f"{c.get('error', '')[:80]} | | | | |")
        print(rows[-1], flush=True)
    print("| example | steps | gpu time | cpu time | gpu loss | cpu loss | max loss diff | "
          "accuracy gpu / cpu |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
