"""The cpu backend's generated transcendental functions against the libm calls they replaced
and against NumPy: one process, one core, interleaved, median of 21 runs over 2^20 elements.

    python benchmarks/transcendentals.py

"libm" builds the same program with the scalar function rendered as a call to glibc's libm
(what `runtime/cpu/scalar.py` did before: LLVM can't vectorise such a loop).
"""
from __future__ import annotations

import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from runtime.cpu import scalar  # noqa: E402

CASES = [("exp", "float32"), ("log", "float32"), ("tanh", "float32"), ("sin", "float32"),
         ("cos", "float32"), ("tan", "float32"), ("erf", "float32"), ("log", "float64"),
         ("erf", "float64")]
GENERATED = {"exp": "fast_exp", "log": "fast_log", "tanh": "fast_tanh32",
             "sin": "fast_trig32", "cos": "fast_trig32", "tan": "fast_trig32",
             "erf": ("fast_erf32", "fast_erf64")}


def build(name, x, use_libm):
    """A compiled `t.<name>()` over x, generated or (use_libm) through libm."""
    saved = {}
    if use_libm:
        for attr in ("fast_exp", "fast_log", "fast_tanh32", "fast_erf32", "fast_erf64"):
            saved[attr] = getattr(scalar, attr)
            setattr(scalar, attr, (lambda fname: lambda b, v: scalar.libm(b, fname, v))(
                attr.split("_")[1].rstrip("3264")))
        saved["fast_trig32"] = scalar.fast_trig32
        scalar.fast_trig32 = lambda b, fname, v: scalar.libm(b, fname, v)
    try:
        return cc.compile(lambda t: getattr(t, name)(), backend="cpu").lower(x)
    finally:
        for attr, fn in saved.items():
            setattr(scalar, attr, fn)


def main():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    rng = np.random.default_rng(0)
    print("| function | generated | libm (before) | NumPy | libm / generated |")
    print("|---|---|---|---|---|")
    for name, dtype in CASES:
        x = rng.uniform(0.1, 10, 1 << 20).astype(dtype)
        gen, lib = build(name, x, False), build(name, x, True)
        if name == "erf":
            try:
                from scipy.special import erf as np_fn
            except ImportError:
                np_fn = None
        else:
            np_fn = getattr(np, name)
        runs = {"gen": [], "lib": [], "np": []}
        for _ in range(21):
            for key, fn in (("gen", lambda: gen(x)), ("lib", lambda: lib(x)),
                            ("np", (lambda: np_fn(x)) if np_fn else None)):
                if fn is None:
                    continue
                t0 = time.perf_counter()
                fn()
                runs[key].append(time.perf_counter() - t0)
        med = {k: np.median(v) * 1e3 if v else float("nan") for k, v in runs.items()}
        np_cell = f"{med['np']:.2f} ms" if runs["np"] else "—"
        print(f"| {name} {dtype} | {med['gen']:.2f} ms | {med['lib']:.2f} ms | {np_cell} | "
              f"{med['lib'] / med['gen']:.1f}× |")


if __name__ == "__main__":
    main()
