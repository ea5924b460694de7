"""GPU speed and memory against PyTorch CUDA and CuPy, one process, interleaved.

    python benchmarks/gpu_speed.py                 # every workload, every peer installed
    python benchmarks/gpu_speed.py --quick         # small shapes, a smoke test
    python benchmarks/gpu_speed.py --json out.json
    python benchmarks/gpu_speed.py --gpt-half      # a bfloat16 gpt step: checked, timed

Workloads: those of `benchmarks/backend_speed.py` (the same inputs and the same functions):
`add100`/`add100_` (100 additions of 1.0 on [1000, 1000], out of place / in place), `relu`/
`relu_` on [1, 64, 512, 512], and the training steps of `examples/mlp.py` and
`examples/transformer_block.py`.

Columns, each timed once per round in a rotating order (interleaved), median and p25..p75 of
`--runs` rounds after warm-up:
- `gpu`: our gpu backend, called as users call it: numpy arguments copied to the device,
  the launch list, results and updated arguments copied back (host wall clock).
- `gpu-device`: our launch list alone, on arguments already on the device (CUDA events), as a
  call launches it: the CUDA graph captured at the program's second call, replayed (the list
  launched eagerly where capture was refused or `COMPILER_CUDA_GRAPH=0`).
- `torch`: PyTorch eager on CUDA tensors already on the device (CUDA events).
- `torch+copy`: PyTorch doing what `gpu` does: numpy to device, the step, results and updated
  parameters back to numpy (host wall clock).
- `cupy`: the elementwise workloads written by hand in CuPy (CUDA events).
- `gpu-bf16`: our launch list, as `gpu-device`, on the workload's inputs with every float32
  array in bfloat16 (storage `__nv_bfloat16`, float32 arithmetic, GEMMs through cublasGemmEx
  with float32 accumulation); its first whole call is checked against our numpy backend on
  the same bfloat16 inputs (within 2 units of bfloat16's last place of the largest output).

Before timing, `gpu` and `torch` run one step from the same inputs as our numpy backend and must
agree with it (outputs, or each parameter's update), so a faster column is never another
program. Memory: our plan's device bytes beyond the caller's arrays (the module's
`arena_bytes`: the plan's arena, the status word and split reductions' partials; plus
`output_bytes`), and PyTorch's `max_memory_allocated()` during one step minus the bytes
allocated before it (its caching allocator's live bytes, the same footing). Without a CUDA
device the script says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import backend_speed as bs  # noqa: E402  (its inputs, our functions and PyTorch's)
import compiler as cc  # noqa: E402

WORKLOADS = bs.WORKLOADS
ELEMENTWISE = ("add100", "add100_", "relu", "relu_")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _device():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:
        return None
    return cupy


def _as_numpy(v):
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    elif hasattr(v, "get"):
        v = v.get()
    return np.array(v, copy=True)


class Column:
    """`step()` runs one timed step; `device_timed` says whether `step` is timed with CUDA
    events (a device-side figure) or by the host clock around a synchronising call."""

    def __init__(self, step, device_timed, memory=None, first=None, params=None):
        self.step, self.device_timed, self.memory = step, device_timed, memory
        self.first, self.params = first, params or (lambda: [])


def first_step(step, params):
    before = [np.array(_as_numpy(p), np.float64) for p in params()]
    out = _as_numpy(step())
    return out, [np.asarray(_as_numpy(p), np.float64) - b for p, b in zip(params(), before)]


def make_gpu(workload, quick, cupy):
    args = bs.inputs(workload, quick)
    idx = bs.PARAM_ARGS.get(workload, ())
    t0 = time.perf_counter()
    prog = cc.compile(bs.OURS[workload], backend="gpu").lower(*args)
    prog(*[a.copy() for a in args])  # NVRTC, module load, arena
    compile_s = time.perf_counter() - t0
    plan = prog.plan
    memory = prog._exec.module.arena_bytes + plan.output_bytes   # (+ status, partials)
    call = Column(lambda: prog(*args), False, memory, params=lambda: [args[i] for i in idx])

    exe = prog._exec
    prog(*[a.copy() for a in args])  # the second call captures the list as a CUDA graph
    if exe._cuda_graph is not None:  # what a call launches: the graph, on its own buffers
        return call, Column(exe._cuda_graph.launch, True, memory), compile_s
    dev_in = [cupy.asarray(np.ascontiguousarray(a)).reshape(-1).view(cupy.uint8)
              if a.size else cupy.empty(1, cupy.uint8) for a in args]
    outputs = [cupy.empty(max(b.size, 1), cupy.uint8) for b in exe._output_buffers]
    device = Column(lambda: exe._run_launches(cupy, dev_in, outputs), True, memory)
    return call, device, compile_s


def half_inputs(workload, quick):
    """The workload's inputs with every float32 array in bfloat16 (labels stay integers)."""
    return tuple(a.astype(BF16) if a.dtype == np.float32 else a
                 for a in bs.inputs(workload, quick))


def make_gpu_bf16(workload, quick, cupy):
    """(the `gpu-bf16` column, None or why its first call differs from our numpy backend)."""
    args = half_inputs(workload, quick)
    fn = bs.OURS[workload]
    prog = cc.compile(fn, backend="gpu").lower(*args)
    got = np.asarray(prog(*[a.copy() for a in args]), np.float64)
    with np.errstate(all="ignore"):
        want = np.asarray(cc.compile(fn, backend="numpy")(*[a.copy() for a in args]),
                          np.float64)
    scale = float(np.abs(want).max()) if want.size else 0.0
    err = float(np.abs(got - want).max()) if want.size else 0.0
    why = None if err <= 2.0 ** -7 * max(scale, 1e-30) else \
        f"bfloat16 output differs by {err:.3g} (max |output| {scale:.3g})"
    exe = prog._exec
    dev_in = [cupy.asarray(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
              if a.size else cupy.empty(1, cupy.uint8) for a in args]
    outputs = [cupy.empty(max(b.size, 1), cupy.uint8) for b in exe._output_buffers]
    plan = prog.plan
    return Column(lambda: exe._run_launches(cupy, dev_in, outputs), True,
                  exe.module.arena_bytes + plan.output_bytes), why


def make_torch(workload, quick, torch):
    args = [torch.from_numpy(a).cuda() for a in bs.inputs(workload, quick)]
    idx = bs.PARAM_ARGS.get(workload, ())
    train = workload in ("mlp", "transformer")
    if train:
        for i in idx:
            args[i].requires_grad_(True)
    fn = bs.torch_steps(torch)[workload]
    copies = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(*copies)
    torch.cuda.synchronize()
    memory = torch.cuda.max_memory_allocated() - base
    del copies
    eager = Column(lambda: fn(*args), True, memory, params=lambda: [args[i] for i in idx])

    host = bs.inputs(workload, quick)

    def with_copies():
        dev = [torch.from_numpy(a).cuda() for a in host]
        if train:
            for i in idx:
                dev[i].requires_grad_(True)
        out = fn(*dev).cpu().numpy()
        for i in idx:
            host[i][...] = dev[i].detach().cpu().numpy()
        return out
    return eager, Column(with_copies, False, memory)


def make_cupy(workload, quick, cupy):
    x = cupy.asarray(bs.inputs(workload, quick)[0])

    def add100():
        y = x
        for _ in range(100):
            y = y + np.float32(1.0)
        return y

    def add100_():
        for _ in range(100):
            x.__iadd__(np.float32(1.0))
        return x
    steps = {"add100": add100, "add100_": add100_,
             "relu": lambda: cupy.maximum(x, np.float32(0)),
             "relu_": lambda: cupy.maximum(x, np.float32(0), out=x)}
    return Column(steps[workload], True)


def timed(col: Column, cupy) -> float:
    if col.device_timed:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        col.step()
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3
    t0 = time.perf_counter()
    col.step()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - t0


def run_workload(workload, quick, runs, warmup, cupy, torch, log):
    cols, checks, compile_s = {}, {}, None
    ref = bs._first_step(bs.make_ours(workload, quick, "numpy"))
    try:
        cols["gpu"], cols["gpu-device"], compile_s = make_gpu(workload, quick, cupy)
        checks["gpu"] = bs.check_same(workload, first_step(cols["gpu"].step,
                                                           cols["gpu"].params), ref)
    except Exception as e:
        log(f"  {workload}/gpu: can't run ({type(e).__name__}: {str(e)[:300]})")
        cols.pop("gpu", None), cols.pop("gpu-device", None)
    if torch is not None:
        try:
            cols["torch"], cols["torch+copy"] = make_torch(workload, quick, torch)
            checks["torch"] = bs.check_same(workload, first_step(cols["torch"].step,
                                                                 cols["torch"].params), ref)
        except Exception as e:
            log(f"  {workload}/torch: can't run ({type(e).__name__}: {str(e)[:300]})")
            cols.pop("torch", None), cols.pop("torch+copy", None)
    try:
        cols["gpu-bf16"], checks["gpu-bf16"] = make_gpu_bf16(workload, quick, cupy)
    except Exception as e:
        log(f"  {workload}/gpu-bf16: can't run ({type(e).__name__}: {str(e)[:300]})")
    if workload in ELEMENTWISE:
        cols["cupy"] = make_cupy(workload, quick, cupy)
    for c, why in checks.items():
        if why:
            log(f"  {workload}/{c} DIFFERS from our numpy backend: {why}")
    for col in cols.values():
        for _ in range(warmup):
            timed(col, cupy)
    times = {c: [] for c in cols}
    order = list(cols)
    for r in range(runs):
        for c in order[r % len(order):] + order[:r % len(order)]:
            times[c].append(timed(cols[c], cupy))
    return dict(times=times, memory={c: col.memory for c, col in cols.items()},
                checks=checks, compile_s=compile_s)


def fmt_time(s):
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def table(results) -> str:
    cols = ["gpu", "gpu-device", "gpu-bf16", "torch", "torch+copy", "cupy"]
    lines = ["| workload | " + " | ".join(cols) + " | torch / gpu-device | "
             "device bytes ours / torch | ours in bf16 |", "|---" * (len(cols) + 4) + "|"]
    for w, r in results.items():
        med = {c: float(np.median(t)) for c, t in r["times"].items() if t}
        cells = []
        for c in cols:
            if c not in med:
                cells.append("n/a")
                continue
            bad = " (DIFFERS)" if r["checks"].get(c) else ""
            cells.append(fmt_time(med[c]) + bad)
        ratio = (f"{med['torch'] / med['gpu-device']:.2f}x"
                 if "torch" in med and "gpu-device" in med else "n/a")
        mem = r["memory"]
        mems = f"{mem.get('gpu')} / {mem.get('torch')}"
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {ratio} | {mems} | "
                     f"{mem.get('gpu-bf16', 'n/a')} |")
    return "\n".join(lines)


def gpt_half(calls=10) -> int:
    """examples/gpt.py's step with its parameters in bfloat16 (no float32 master weights:
    the first step is what compares; with AdamW's moments in bfloat16 the second is NaN on
    every backend alike, so only the time of later calls means anything): the gpu's first
    loss beside the numpy backend's, then the median whole-call time of float32 and bfloat16.
    Exit status 1 when the losses differ by more than 2 bfloat16 ulp."""
    from compiler import nn
    from examples import gpt

    def build(dtype, backend):
        nn.set_default_dtype(dtype)
        try:
            model, opt, _ = gpt.make_model()
        finally:
            nn.set_default_dtype("float32")
        return cc.compile(gpt.train_step_for(model, opt), backend=backend)
    ids, targets = gpt.batch(np.random.default_rng(1))
    want = float(build("bfloat16", "numpy")(ids, targets))
    got = float(build("bfloat16", "gpu")(ids, targets))
    ok = abs(got - want) <= 2 * 2.0 ** -8 * abs(want)
    print(f"gpt bfloat16 first step: loss gpu {got!r}, numpy {want!r}"
          f"{'' if ok else ' DIFFERS'}")
    times = {}
    for dtype in ("float32", "bfloat16"):
        step = build(dtype, "gpu")
        step(ids, targets)
        ts = []
        with np.errstate(all="ignore"):
            for _ in range(calls):
                t0 = time.perf_counter()
                step(ids, targets)
                ts.append(time.perf_counter() - t0)
        times[dtype] = float(np.median(ts))
    print(f"gpt step on gpu, a whole call, median of {calls}: float32 "
          f"{fmt_time(times['float32'])}, bfloat16 {fmt_time(times['bfloat16'])}")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", help="write the raw times here")
    ap.add_argument("--gpt-half", action="store_true",
                    help="only: examples/gpt.py's training step in bfloat16 on the gpu beside "
                         "the numpy backend's, and its time beside float32's")
    args = ap.parse_args(argv)
    cupy = _device()
    if cupy is None:
        print("gpu_speed: no CUDA device (or no CuPy) here; nothing to measure")
        return 0
    if args.gpt_half:
        return gpt_half()
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"device: {props['name'].decode()}, CuPy {cupy.__version__}, "
          f"PyTorch {torch.__version__ if torch else 'absent'}; {args.runs} interleaved "
          f"rounds after {args.warmup} warm-ups; medians")
    results = {}
    for w in args.workloads.split(","):
        t0 = time.perf_counter()
        results[w] = run_workload(w, args.quick, args.runs, args.warmup, cupy, torch, print)
        cs = results[w]["compile_s"]
        print(f"  {w}: done in {time.perf_counter() - t0:.1f} s (our trace + lower + NVRTC + "
              f"first call: {cs if cs is None else round(cs, 2)} s)", flush=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
