"""Where the transformer step's time goes on the cpu backend, node by node, at 1 thread.

    python benchmarks/transformer_profile.py [--repeat 7] [--top 25] [--no-torch]
    python benchmarks/transformer_profile.py --blocks [--repeat 7]

Builds `examples/transformer_block.py`'s step with a `profile=True` executable (a tick after
every node: ~1 us each) and prints (1) every GEMM the step makes (matmul and the fused `gemm`
weight updates): shapes, batch, which operands are transposed (by their strides), our median
time and GFLOP/s, and `torch.matmul` on operands of the same layout at 1 thread beside it;
(2) the other nodes summed by op, and the most expensive single nodes. Times are the calling
thread's CPU time (the machine is shared); the load average is printed.

`--blocks`: the MLP and transformer steps at 1 and 2 threads with parallel GEMMs cut into
64-row blocks (the old `gemm_kernels.GEMM_ROWS`) and into today's `gemm_rows` blocks, and
backend_speed.py's torch eager step at 1 and 2 threads, all six interleaved in one process:
medians of wall and process CPU time per call (CPU 2/1 is what splitting costs, robust on a
shared machine, where wall times are not).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from examples import transformer_block as ex_tf  # noqa: E402
from examples import mlp as ex_mlp  # noqa: E402
from runtime.cpu import gemm_kernels  # noqa: E402
from runtime.cpu.executable import CpuExecutable  # noqa: E402


class _CpuTimed(CpuExecutable):
    """Ticks in the calling thread's CPU time (at 1 thread every kernel, BLAS included, runs
    on it): robust where other sessions share the cores, unlike wall time."""

    profile_clock = staticmethod(time.thread_time_ns)


def _layout(place) -> str:
    """'N' when the last dim is the unit stride, 'T' when the one before is."""
    if len(place.shape) < 2 or place.strides[-1] == 1:
        return "N"
    return "T" if place.strides[-2] == 1 else "?"


def _torch_like(torch, place, rng):
    """A torch tensor of the place's shape whose strides are ordered as the place's."""
    order = sorted(range(len(place.shape)), key=lambda d: -place.strides[d])
    base = torch.from_numpy(rng.standard_normal([place.shape[d] for d in order])
                            .astype(np.float32))
    return base.permute([order.index(d) for d in range(len(place.shape))])


def _torch_time(torch, fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        for _ in range(5):
            fn()
        times.append((time.thread_time() - t0) / 5)
    return float(np.median(times))


def gemm_rows(exe, prof, torch, repeat):
    rng = np.random.default_rng(0)
    rows = []
    for node, sec in prof:
        if node.op not in ("matmul", "gemm"):
            continue
        places = [exe.places[id(v)] for v in node.inputs]
        x, y = places[0], places[1]
        xs, ys = list(x.shape), list(y.shape)
        tx, ty = _layout(x), _layout(y)
        if node.op == "gemm":
            if node.attrs["trans_a"]:
                xs = xs[::-1]
                tx = {"N": "T", "T": "N"}.get(tx, tx)
            if node.attrs["trans_b"]:
                ys = ys[::-1]
                ty = {"N": "T", "T": "N"}.get(ty, ty)
        m, k, n = xs[-2], xs[-1], ys[-1]
        batch = int(np.prod(node.out.shape[:-2])) if len(node.out.shape) > 2 else 1
        flops = 2 * batch * m * n * k
        tt = None
        if torch is not None:
            a, b = _torch_like(torch, x, rng), _torch_like(torch, y, rng)
            if node.op == "gemm":
                a = a.T if node.attrs["trans_a"] else a
                b = b.T if node.attrs["trans_b"] else b
                c = torch.zeros(m, n)
                tt = _torch_time(torch, lambda: c.addmm_(a, b, alpha=-0.01), repeat)
            else:
                tt = _torch_time(torch, lambda: torch.matmul(a, b), repeat)
        rows.append((node, batch, m, n, k, tx + ty, sec, flops, tt))
    return rows


def _copy(args):
    return tuple(np.array(a) for a in args)


def _torch_step(torch, bs, name, make, threads):
    """backend_speed.py's torch eager step on copies of the inputs, at `threads` threads."""
    args = [torch.from_numpy(a) for a in _copy(make())]
    for i in bs.PARAM_ARGS[name]:
        args[i].requires_grad_(True)
    fn = bs.torch_steps(torch)[name]

    def call():
        torch.set_num_threads(threads)
        return fn(*args)
    call()
    return call, ()


def blocks(repeat, with_torch=True):
    """Old (64-row) against new GEMM blocks, 1 and 2 threads, interleaved (torch eager too)."""
    torch = bs = None
    if with_torch:
        # idle OpenMP threads sleep (as in backend_speed.py): spinning ones would take the
        # cores from the program timed next
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("KMP_BLOCKTIME", "0")
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "backend_speed", os.path.join(ROOT, "benchmarks", "backend_speed.py"))
        bs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bs)
        import torch
    saved = gemm_kernels.GEMM_ROWS, gemm_kernels.GEMM_ROWS_MIN
    for name, step, make in (("mlp", ex_mlp.train_step, ex_mlp.example_inputs),
                             ("transformer", ex_tf.train_step, ex_tf.example_inputs)):
        progs = {}
        for label, rows in (("64-row", (64, 64)), ("new", saved)):
            gemm_kernels.GEMM_ROWS, gemm_kernels.GEMM_ROWS_MIN = rows
            for threads in (1, 2):
                # (a fresh function per build: the module is emitted with these blocks)
                fn = cc.compile(lambda *a, _s=step: _s(*a), threads=threads)
                args = _copy(make())
                fn(*args)
                progs[label, threads] = (fn, args)
        gemm_kernels.GEMM_ROWS, gemm_kernels.GEMM_ROWS_MIN = saved
        if torch is not None:
            for threads in (1, 2):
                progs["torch", threads] = _torch_step(torch, bs, name, make, threads)
        res = {k: [] for k in progs}
        for r in range(repeat):
            keys = list(progs) if r % 2 == 0 else list(progs)[::-1]
            for k in keys:
                fn, args = progs[k]
                w0, c0 = time.perf_counter(), time.process_time()
                for _ in range(3):
                    fn(*args)
                res[k].append(((time.perf_counter() - w0) / 3, (time.process_time() - c0) / 3))
        print(f"{name}: load average {os.getloadavg()[0]:.2f}")
        med = {k: np.median(np.array(v), axis=0) * 1e3 for k, v in res.items()}
        for label in ("64-row", "new") + (("torch",) if torch is not None else ()):
            (w1, c1), (w2, c2) = med[label, 1], med[label, 2]
            print(f"  {label:7} 1 thread {w1:7.2f} ms (CPU {c1:7.2f})  2 threads {w2:7.2f} ms "
                  f"(CPU {c2:7.2f})  wall 1/2 {w1 / w2:.2f}x  CPU 2/1 {c2 / c1:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--blocks", action="store_true")
    cli = ap.parse_args()
    if cli.blocks:
        blocks(cli.repeat, not cli.no_torch)
        return
    torch = None
    if not cli.no_torch:
        import torch
        torch.set_num_threads(1)
    args = ex_tf.example_inputs()
    prog = cc.compile(ex_tf.train_step, backend="cpu", threads=1).lower(*args)
    exe = _CpuTimed(prog.graph, prog.plan, profile=True)
    inputs = [np.ascontiguousarray(a) for a in args]
    exe.run(inputs)
    prof = exe.profile(inputs, repeat=cli.repeat)
    total = sum(s for _, s in prof)
    print(f"load average {os.getloadavg()[0]:.2f}; step (sum of nodes) {total * 1e3:.1f} ms")
    rows = gemm_rows(exe, prof, torch, cli.repeat)
    g_ours = sum(r[6] for r in rows)
    g_torch = sum(r[8] for r in rows) if torch is not None else float("nan")
    print(f"\nGEMMs: {len(rows)} nodes, ours {g_ours * 1e3:.2f} ms, torch {g_torch * 1e3:.2f} ms")
    print(f"{'op':7} {'line':>5} {'batch':>5} {'m':>5} {'n':>5} {'k':>5} {'tr':2} "
          f"{'ours ms':>8} {'GF/s':>6} {'torch ms':>8} {'GF/s':>6}")
    for node, batch, m, n, k, tr, sec, flops, tt in rows:
        line = getattr(node.loc, "line", "") if node.loc is not None else ""
        ts = f"{tt * 1e3:8.3f} {flops / tt * 1e-9:6.1f}" if tt else ""
        print(f"{node.op:7} {line!s:>5} {batch:5} {m:5} {n:5} {k:5} {tr:2} {sec * 1e3:8.3f} "
              f"{flops / sec * 1e-9:6.1f} {ts}")
    by_op: dict = {}
    for node, sec in prof:
        if node.op in ("matmul", "gemm"):
            continue
        by_op[node.op] = by_op.get(node.op, 0.0) + sec
    print(f"\nother nodes: {(total - g_ours) * 1e3:.2f} ms, by op:")
    for op, sec in sorted(by_op.items(), key=lambda t: -t[1]):
        print(f"  {op:24} {sec * 1e3:8.3f} ms")
    print(f"\nthe {cli.top} most expensive non-GEMM nodes:")
    others = sorted(((s, n) for n, s in prof if n.op not in ("matmul", "gemm")),
                    key=lambda t: -t[0])
    for sec, node in others[:cli.top]:
        print(f"  {sec * 1e3:8.3f} ms {node.op:20} {tuple(node.out.shape)} {node.loc}")


if __name__ == "__main__":
    main()
