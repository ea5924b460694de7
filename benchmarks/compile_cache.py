"""Compile time of the examples on the cpu backend, without and with the disk cache.

    python benchmarks/compile_cache.py                 # mlp and transformer_block, 5 rounds
    python benchmarks/compile_cache.py --rounds 9 cnn

Every measurement is a fresh Python process (so neither the in-memory cache nor a warm LLJIT
helps), which times `cc.compile(train_step, backend="cpu").lower(*inputs)`: trace, passes,
LLVM IR emission and then either LLVM (-O3, object code) or the disk cache's load, and the ORC
link. Per round and example, interleaved: "cold" runs with an empty cache directory (LLVM runs,
then the entry is stored), "warm" runs again on the directory the cold run filled (LLVM is
skipped: the child checks that its LLVM counter stayed 0). The table gives medians and
p25..p75 of the seconds, and the saving. Single-threaded BLAS; wall-clock of `lower` only
(interpreter start-up and imports excluded).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import compiler as cc
from compiler.cli import load_example
from runtime.cpu import jit
module = load_example({name!r})
jit._init()  # target machine and symbols: per process, paid with or without the cache
t0 = time.perf_counter()
module.build_program(backend="cpu")  # (the cnn and gpt steps close over their layers)
seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "llvm": jit.STATS["llvm"], "hit": jit.STATS["hit"]}}))
"""


def measure(name: str, cache: str) -> dict:
    env = dict(os.environ, COMPILER_CACHE_DIR=cache, OPENBLAS_NUM_THREADS="1")
    env.pop("COMPILER_SANITIZE", None)
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, name=name)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("examples", nargs="*", default=["mlp", "transformer_block"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    times = {(n, k): [] for n in args.examples for k in ("cold", "warm")}
    for _ in range(args.rounds):
        for name in args.examples:
            with tempfile.TemporaryDirectory() as d:
                cache = os.path.join(d, "cache")
                cold = measure(name, cache)
                warm = measure(name, cache)
            assert cold["llvm"] >= 1 and cold["hit"] == 0, cold
            assert warm["llvm"] == 0 and warm["hit"] >= 1, warm
            times[name, "cold"].append(cold["seconds"])
            times[name, "warm"].append(warm["seconds"])
    print(f"compile time (`lower`, backend='cpu'), seconds: median [p25..p75] of "
          f"{args.rounds} fresh processes each")
    print("| example | no disk cache (LLVM) | disk cache hit | saved |")
    print("|---|---|---|---|")
    for name in args.examples:
        cells = []
        for kind in ("cold", "warm"):
            t = np.array(times[name, kind])
            cells.append(f"{np.median(t):.3f} [{np.percentile(t, 25):.3f}.."
                         f"{np.percentile(t, 75):.3f}]")
        saved = np.median(times[name, "cold"]) - np.median(times[name, "warm"])
        ratio = np.median(times[name, "cold"]) / np.median(times[name, "warm"])
        print(f"| {name} | {cells[0]} | {cells[1]} | {saved:.3f} s ({ratio:.1f}x) |")


if __name__ == "__main__":
    main()
