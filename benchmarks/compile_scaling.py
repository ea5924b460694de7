"""Compile time against graph size: a per-phase table for chains and random DAGs.

    python benchmarks/compile_scaling.py            # 1k, 10k, 100k nodes (a few minutes)
    python benchmarks/compile_scaling.py --quick    # 1k and 10k only
    python benchmarks/compile_scaling.py --mlp      # 24-layer MLP: identical kernels once

Each row traces and plans one program (`fn.lower`, which allocates nothing) and reports the
seconds spent in each phase: tracing (autodiff included, it runs at `backward()`), then every
pass of the pipeline. Programs:

- chain:      `x = x * 1.0001 + 0.5` repeated (2 nodes per step);
- chain+bwd:  `x = tanh(x * w)` per layer with a `backward()` through all of them (the issue's
              3,000-layer case is about 30k nodes);
- dag:        a random DAG: each step combines the previous value with a random earlier one
              (seeded: `+`, `* 0.5 -`, or `tanh(*)`), then a sum;
- dag+bwd:    the same with `backward()`.

The passes run as for `backend="cpu"` (so `fuse` fuses), and the `codegen (cpu)` column is
the cpu backend's lowering of the planned graph: LLVM IR emitted, optimised at -O3, linked
(the in-memory code cache emptied first). Codegen is not part of the 100k-node target
and is skipped (`-`) above `--codegen-max` nodes (default 10,000): LLVM's
time grows with the number of kernels and the size of each fused loop (capped by
`passes.fusion.MAX_COST`).

Single-threaded; times are wall-clock seconds of one run (compile time, not run time).

`--targets`: the issue's compile-time targets, each workload in a fresh process (imports, LLVM's
start-up and the thread pool's module compiled first, outside the figure), cold caches (an
empty disk cache directory): CPU seconds of `lower` (trace, passes, codegen, LLVM; all
threads), the peak memory it added (`ru_maxrss` after minus before, MB), and `jax.jit` on the
same computation (`jit(f).lower(...).compile()`, CPU seconds, its own fresh process), medians
of `--repeat` runs:

- mlp:      the 24-layer MLP training step below (`deep_mlp`);
- chain20k: `x = x * 1.0001 + 0.5` 10,000 times (20k ops) on float32[16];
- sintanh:  `x = tanh(sin(x))` 500 times (1k ops) on float32[16];
- loop:     1,000 unrolled steps of `x = tanh(x * w)` with `backward()` to w (`chain_backward`);
- transformer: `examples/transformer_block.py`'s training step (no target, no jax row).

`--phases`: where the CPU seconds of `--targets`' cold compiles go (same fresh processes, no
jax): tracing (autodiff included), each pass, LLVM (parse, verify, optimise, object code),
linking, and the rest (the cpu emitter building the module's IR, the Program); medians of
`--repeat` runs.

`--parts`: LLVM's CPU and wall seconds (`jit.compile_ir` of each `--targets` workload's module,
in-memory and disk caches off, interleaved, medians of `--repeat`) compiled whole (`jit.SPLIT`
off: one module at -O3, as before), in parts on one thread, in parts on `jit.COMPILE_THREADS`
threads, and the same with llvmlite's lock held (`jit.UNLOCKED` off); then, for modules with
two -O3 groups, how often two compile threads were on a CPU at the same moment, with
llvmlite's lock bypassed and held (`_both_ran`: per-thread CPU time sampled every ~1 ms);
then a call's CPU time of the program built whole and in parts (`_step_times`).

`--mlp`: the CPU time of a cold compile (`lower`: trace, passes, codegen, LLVM; the in-memory
and disk code caches empty) of a training step of a 24-layer MLP (256 wide, batch 64, relu,
cross-entropy, SGD), with identical kernels emitted once per module (`emitter.DEDUPE`, the
default) and with one function per node, interleaved, medians of `--repeat` runs; and the
number of functions each module defines.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from compiler.api import _no_gc, _trace  # noqa: E402
from compiler.options import Options  # noqa: E402
from compiler.pass_pipeline import CompileState, donated_names, pipeline  # noqa: E402
from compiler.tracer import user_loc  # noqa: E402


def chain(steps):
    def f(x):
        for _ in range(steps):
            x = x * 1.0001 + 0.5
        return x
    return f, (np.ones(16, np.float32),)


def chain_backward(layers):
    def f(x, w):
        w.stop_gradient = False
        for _ in range(layers):
            x = (x * w).tanh()
        x.sum().backward()
        return w.grad
    return f, (np.ones(16, np.float32), np.full(16, 0.5, np.float32))


def dag(steps, backward=False):
    rng = np.random.default_rng(0)
    # Every value feeds the next one, and one more earlier value (a skip connection), so
    # dead-code elimination keeps them all.
    picks = [(i, int(rng.integers(0, i + 1)), int(rng.integers(3))) for i in range(steps)]

    def f(x, w):
        if backward:
            w.stop_gradient = False
        vals = [x * w]
        for i, j, op in picks:
            a, b = vals[i], vals[j]
            vals.append(a + b if op == 0 else a * 0.5 - b if op == 1 else (a * b).tanh())
        loss = vals[-1].sum()
        if backward:
            loss.backward()
            return loss, w.grad
        return loss
    return f, (np.ones(16, np.float32), np.full(16, 0.5, np.float32))


PROGRAMS = {
    # name: (builder, size parameter per 1k nodes)
    "chain": (chain, 250),
    "chain+bwd": (chain_backward, 111),
    "dag": (lambda n: dag(n), 500),
    "dag+bwd": (lambda n: dag(n, backward=True), 180),
}


def measure(fn, args, codegen_max=10_000) -> tuple[int, dict[str, float]]:
    with _no_gc():  # as fn.lower() does
        return _measure(fn, args, codegen_max)


def _codegen(state) -> float:
    from runtime.cpu import CpuExecutable, jit
    jit._cache.clear()
    t0 = time.perf_counter()
    CpuExecutable(state.graph, state.plan)
    return time.perf_counter() - t0


def _measure(fn, args, codegen_max=10_000) -> tuple[int, dict[str, float]]:
    times = {}
    t0 = time.perf_counter()
    graph, signature = _trace(fn, args, user_loc())
    times["trace"] = time.perf_counter() - t0
    nodes = len(graph.nodes)
    state = CompileState(graph, Options.make("cpu"), donated_names(graph, signature, ()))
    for name, run in pipeline():
        t0 = time.perf_counter()
        state = run(state)
        times[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    state.plan.report()
    state.plan.to_json()
    times["report"] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    # after the total: reported beside it, not in it (no target for codegen yet)
    times["codegen (cpu)"] = _codegen(state) if nodes <= codegen_max else float("nan")
    return nodes, times


def deep_mlp(layers=24, width=256, batch=64, classes=10):
    import compiler.nn.functional as F

    def step(x, labels, *params):
        for p in params:
            p.stop_gradient = False
        ws, bs = params[0::2], params[1::2]
        h = x
        for w, b in zip(ws[:-1], bs[:-1]):
            h = F.relu_(h @ w + b)
        loss = F.cross_entropy(h @ ws[-1] + bs[-1], labels)
        loss.backward()
        with cc.no_grad():
            for p in params:
                p.subtract_(0.1 * p.grad)
        return loss
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((batch, width)).astype(np.float32),
            rng.integers(0, classes, size=batch).astype(np.int64)]
    for i in range(layers):
        n_out = classes if i == layers - 1 else width
        args += [(rng.standard_normal((width, n_out)) / np.sqrt(width)).astype(np.float32),
                 np.zeros(n_out, np.float32)]
    return step, args


def cold_compile(fn, args, dedupe: bool) -> tuple[float, int]:
    """(CPU seconds of `lower` with both code caches empty, functions the module defines)."""
    import tempfile

    from runtime.cpu import disk_cache, emitter, jit
    emitter.DEDUPE = dedupe
    with tempfile.TemporaryDirectory() as d:
        os.environ["COMPILER_CACHE_DIR"] = d
        disk_cache._reset()
        jit._cache.clear()
        t0 = time.process_time()
        prog = cc.compile(fn, backend="cpu").lower(*args)
        t = time.process_time() - t0
    disk_cache._reset()
    return t, prog.source.count("\ndefine ")


def mlp_main(repeat: int) -> int:
    from runtime.cpu import emitter
    fn, args = deep_mlp()
    saved, env = emitter.DEDUPE, os.environ.get("COMPILER_CACHE_DIR")
    times = {True: [], False: []}
    counts = {}
    try:
        cold_compile(fn, args, True)  # (imports, LLVM's own start-up: not in the figures)
        for _ in range(repeat):
            for dedupe in (False, True):
                t, counts[dedupe] = cold_compile(fn, args, dedupe)
                times[dedupe].append(t)
    finally:
        emitter.DEDUPE = saved
        if env is None:
            os.environ.pop("COMPILER_CACHE_DIR", None)
        else:
            os.environ["COMPILER_CACHE_DIR"] = env
    print("| 24-layer MLP step, cold compile | functions defined | CPU s (median) | runs |")
    print("|---|---|---|---|")
    for dedupe, label in ((False, "one function per node"), (True, "identical kernels once")):
        print(f"| {label} | {counts[dedupe]} | {np.median(times[dedupe]):.3f} | "
              + " ".join(f"{t:.3f}" for t in times[dedupe]) + " |")
    print(f"\n(CPU seconds of `lower`, in-memory and disk caches empty, interleaved; "
          f"numpy {np.__version__}, one BLAS thread)")
    return 0


def sin_tanh_chain(ops):
    def f(x):
        for _ in range(ops // 2):
            x = x.sin().tanh()
        return x
    return f, (np.ones(16, np.float32),)


def transformer_step():
    """`examples/transformer_block.py`'s training step and inputs."""
    from examples import transformer_block as ex
    return ex.train_step, ex.example_inputs()


TARGETS = {  # name: (our builder, seconds the issue asks for; None: no target, no jax row)
    "mlp": (deep_mlp, 0.4),
    "chain20k": (lambda: chain(10_000), 4.5),
    "sintanh": (lambda: sin_tanh_chain(1000), 2.0),
    "loop": (lambda: chain_backward(1000), 20.0),
    "transformer": (transformer_step, None),
}


def _jax_workload(name):
    """(function, arguments) of `jax.jit` computing what our workload `name` computes."""
    import jax
    import jax.numpy as jnp
    if name == "mlp":
        _, args = deep_mlp()
        x, labels, params = args[0], args[1], args[2:]

        def loss_fn(params, x, labels):
            h = x
            for w, b in zip(params[0:-2:2], params[1:-2:2]):
                h = jax.nn.relu(h @ w + b)
            logits = h @ params[-2] + params[-1]
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

        def step(params, x, labels):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
            return loss, [p - 0.1 * g for p, g in zip(params, grads)]
        return step, (list(params), x, labels)
    x = np.ones(16, np.float32)
    if name == "chain20k":
        def f(x):
            for _ in range(10_000):
                x = x * 1.0001 + 0.5
            return x
        return f, (x,)
    if name == "sintanh":
        def f(x):
            for _ in range(500):
                x = jnp.tanh(jnp.sin(x))
            return x
        return f, (x,)

    def loss(w, x):
        for _ in range(1000):
            x = jnp.tanh(x * w)
        return x.sum()
    return jax.grad(loss), (np.full(16, 0.5, np.float32), x)


def _one_target(name: str, peer: str, before=None) -> dict:
    """In this (fresh) process: warm up, then one cold compile of workload `name`."""
    import resource
    import tempfile
    if peer == "jax":
        import jax
        jax.jit(lambda v: v * 2).lower(np.ones(4, np.float32)).compile()  # jax's start-up
        fn, args = _jax_workload(name)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.process_time()
        jax.jit(fn).lower(*args).compile()
        t = time.process_time() - t0
        return {"cpu_s": t, "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                       - rss0) / 1024}
    with tempfile.TemporaryDirectory() as d:
        os.environ["COMPILER_CACHE_DIR"] = d
        warm, warm_args = chain(3)  # imports, LLVM's start-up, the pool's module
        cc.compile(warm, backend="cpu").lower(*warm_args)
        from runtime.cpu import pool
        pool.ensure(1)  # (once per process; chain(3) has no parallel kernel to compile it)
        fn, args = TARGETS[name][0]()
        if before is not None:
            before()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0, w0 = time.process_time(), time.perf_counter()
        prog = cc.compile(fn, backend="cpu").lower(*args)
        t, w = time.process_time() - t0, time.perf_counter() - w0
        rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    return {"cpu_s": t, "wall_s": w, "rss_mb": rss, "functions": prog.source.count("\ndefine ")}


def _one_phases(name: str) -> dict:
    """In this (fresh) process: `_one_target(name, "ours")` with each phase's CPU seconds."""
    from compiler import api
    from compiler import pass_pipeline as pp
    from runtime.cpu import jit
    spent: dict[str, float] = {}

    def timed(key, fn):
        def run(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + time.process_time() - t0
        return run
    passes = pp.pipeline
    pp.pipeline = lambda: [(n, timed(n, f)) for n, f in passes()]
    api._trace = timed("trace", api._trace)
    jit._llvm_compile = timed("llvm", jit._llvm_compile)
    jit._link = timed("link", jit._link)
    out = _one_target(name, "ours", before=spent.clear)  # (not the warm-up's phases)
    return {"cpu_s": out["cpu_s"], "phases": spent}


def phases_main(repeat: int, names) -> int:
    import json
    import subprocess
    rows: dict[str, list] = {}
    for _ in range(repeat):
        for name in names:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one-phases", name],
                capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"({name}: failed: {out.stderr.strip().splitlines()[-1:]})",
                      file=sys.stderr)
                continue
            rows.setdefault(name, []).append(json.loads(out.stdout.splitlines()[-1]))
    keys = ["trace"] + [n for n, _ in pipeline()] + ["llvm", "link"]
    print("| workload | total | " + " | ".join(keys) + " | rest (emitter, Program) |")
    print("|---|" + "---|" * (len(keys) + 2))
    for name, rs in rows.items():
        med = {k: float(np.median([r["phases"].get(k, 0.0) for r in rs])) for k in keys}
        total = float(np.median([r["cpu_s"] for r in rs]))
        rest = float(np.median([r["cpu_s"] - sum(r["phases"].get(k, 0.0) for k in keys)
                                for r in rs]))
        print(f"| {name} | {total:.3f} | " + " | ".join(f"{med[k]:.3f}" for k in keys)
              + f" | {rest:.3f} |")
    print(f"\n(CPU seconds, medians of {repeat} cold compiles, each in a fresh process)")
    return 0


def jit_threads() -> int:
    from runtime.cpu import jit
    return jit.COMPILE_THREADS


def targets_main(repeat: int, names, with_jax: bool) -> int:
    import json
    import subprocess
    rows = {}
    for r in range(repeat):  # interleaved: one run of each, then the next round
        for name in names:
            for peer in ("ours", "jax") if with_jax and TARGETS[name][1] else ("ours",):
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--one-target", name, peer],
                    capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    print(f"({name}, {peer}: failed: {out.stderr.strip().splitlines()[-1:]})",
                          file=sys.stderr)
                    continue
                rows.setdefault((name, peer), []).append(json.loads(out.stdout.splitlines()[-1]))
    print("| workload | target CPU s | ours CPU s (median) | ours wall s (median) "
          "| ours peak MB added | functions | jax.jit CPU s (median) | jax.jit peak MB added "
          "| runs (ours, CPU s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        ours, jx = rows.get((name, "ours"), []), rows.get((name, "jax"), [])

        def med(rs, k, fmt):
            return format(float(np.median([x[k] for x in rs])), fmt) if rs else "—"
        target = "—" if TARGETS[name][1] is None else f"{TARGETS[name][1]:g}"
        print(f"| {name} | {target} | {med(ours, 'cpu_s', '.2f')} | "
              f"{med(ours, 'wall_s', '.2f')} | {med(ours, 'rss_mb', '.0f')} | "
              f"{ours[0]['functions'] if ours else '—'} | "
              f"{med(jx, 'cpu_s', '.2f')} | {med(jx, 'rss_mb', '.0f')} | "
              + " ".join(f"{x['cpu_s']:.2f}" for x in ours) + " |")
    print(f"\n(cold caches, a fresh process per run, CPU seconds of all threads, wall seconds "
          f"(LLVM on up to {jit_threads()} threads); peak memory: ru_maxrss after minus before "
          f"the compile; numpy {np.__version__}, one BLAS thread; load average "
          f"{os.getloadavg()[0]:.1f} at the end)")
    return 0


def _both_ran(parts, unlocked: bool) -> tuple[float, float]:
    """Two threads compiling the two biggest -O3 groups of `parts` (twice each, as
    `jit._compile_part` does: own context, own target machine), llvmlite's lock bypassed or
    not; a sampler reads each thread's time on a CPU (`/proc/self/task/<tid>/schedstat`,
    nanoseconds) every ~1 ms. Returns (the share of the samples in which both threads ran,
    wall seconds). Held, the lock lets one thread at a time into LLVM: ~0 whatever the
    load; bypassed, both run whenever the machine has two free cores."""
    import threading

    from runtime.cpu import jit
    full = sorted((p for p in parts if not p.light), key=lambda p: -p.size)[:2]
    saved, jit.UNLOCKED = jit.UNLOCKED, unlocked
    tids, done = [None, None], [False, False]

    def work(k):
        tids[k] = threading.get_native_id()
        for _ in range(2):
            jit._compile_part(full[k], 3, k)
        done[k] = True

    def on_cpu(tid):
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    for k in range(2):
        jit._target_machine(3, k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    w0 = time.perf_counter()
    try:
        for t in threads:
            t.start()
        while None in tids:
            time.sleep(0.0001)
        prev, both, one = [on_cpu(t) for t in tids], 0, 0
        while not any(done):
            time.sleep(0.001)
            try:
                now = [on_cpu(t) for t in tids]
            except FileNotFoundError:  # (a thread just ended)
                break
            ran = [a > b for a, b in zip(now, prev)]
            prev = now
            both += all(ran)
            one += any(ran) and not all(ran)
    finally:
        for t in threads:
            t.join()
        jit.UNLOCKED = saved
    return both / max(1, both + one), time.perf_counter() - w0


def _step_times(fn, args, repeat: int) -> dict:
    """CPU milliseconds of one call of the program built whole (False) and in parts (True):
    batches of calls of about 0.1 s each, interleaved, medians of 3 * `repeat`."""
    from runtime.cpu import jit
    progs, mine = {}, {}
    for split in (False, True):
        jit.SPLIT = split
        jit._cache.clear()
        mine[split] = [np.array(a, copy=True) for a in args]
        progs[split] = cc.compile(fn, backend="cpu").lower(*mine[split])
        progs[split](*mine[split])
    t0 = time.process_time()
    progs[True](*mine[True])
    n = max(1, int(0.1 / max(time.process_time() - t0, 1e-6)))
    times = {False: [], True: []}
    for _ in range(3 * repeat):
        for split, prog in progs.items():
            t0 = time.process_time()
            for _ in range(n):
                prog(*mine[split])
            times[split].append((time.process_time() - t0) / n * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def parts_main(repeat: int, names) -> int:
    import tempfile

    from runtime.cpu import jit, pool
    os.environ["COMPILER_CACHE_DIR"] = ""
    with tempfile.TemporaryDirectory():
        warm, warm_args = chain(3)
        cc.compile(warm, backend="cpu").lower(*warm_args)
    pool.ensure(1)
    threads = max(2, jit.COMPILE_THREADS)
    configs = {"whole": (False, 1, True), "parts, 1 thread": (True, 1, True),
               f"parts, {threads} threads": (True, threads, True),
               f"parts, {threads} threads, lock held": (True, threads, False)}
    saved = jit.SPLIT, jit.COMPILE_THREADS, jit.UNLOCKED
    print("| workload | " + " | ".join(f"{c}: CPU s / wall s" for c in configs)
          + " | both threads on a CPU: share of samples (wall) bypassed / lock held "
          "| a call's CPU ms: whole / parts |")
    print("|---|" + "---|" * (len(configs) + 2))
    try:
        for name in names:
            fn, args = TARGETS[name][0]()
            text = cc.compile(fn, backend="cpu").lower(*args).source
            got = {c: ([], []) for c in configs}
            for _ in range(repeat):
                for c, (split, th, unlocked) in configs.items():
                    jit.SPLIT, jit.COMPILE_THREADS, jit.UNLOCKED = split, th, unlocked
                    jit._cache.clear()
                    t0, w0 = time.process_time(), time.perf_counter()
                    jit.compile_ir(text, ["run"])
                    got[c][0].append(time.process_time() - t0)
                    got[c][1].append(time.perf_counter() - w0)
            parts = jit.plan_parts(text, threads=2)
            sampled = {u: [] for u in (True, False)}
            if parts is not None and sum(not p.light for p in parts) >= 2 \
                    and os.path.exists("/proc/self/task"):
                for _ in range(repeat):
                    for u in (True, False):
                        sampled[u].append(_both_ran(parts, u))
            both = " / ".join(f"{np.median([b for b, _ in sampled[u]]):.2f} "
                              f"({np.median([w for _, w in sampled[u]]):.2f} s)"
                              if sampled[u] else "—" for u in (True, False))
            step = _step_times(fn, args, repeat)
            print(f"| {name} | " + " | ".join(
                f"{np.median(v[0]):.3f} / {np.median(v[1]):.3f}" for v in got.values())
                + f" | {both} | {step[False]:.3f} / {step[True]:.3f} |", flush=True)
    finally:
        jit.SPLIT, jit.COMPILE_THREADS, jit.UNLOCKED = saved
    print(f"\n(medians of {repeat}, interleaved; load average {os.getloadavg()[0]:.1f} at the "
          f"end; {os.cpu_count()} CPUs)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k nodes only")
    parser.add_argument("--sizes", default=None, help="comma-separated node counts (e.g. 1000)")
    parser.add_argument("--codegen-max", type=int, default=10_000,
                        help="skip the cpu codegen column above this many traced nodes")
    parser.add_argument("--mlp", action="store_true",
                        help="cold compile of a 24-layer MLP, identical kernels once or not")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs per column of --mlp and --targets")
    parser.add_argument("--targets", nargs="?", const=",".join(TARGETS), default=None,
                        help="the issue's compile-time targets (optionally a comma-separated "
                             "subset: mlp,chain20k,sintanh,loop,transformer), jax.jit beside them")
    parser.add_argument("--no-jax", action="store_true", help="--targets without jax.jit")
    parser.add_argument("--phases", nargs="?", const=",".join(TARGETS), default=None,
                        help="per-phase CPU seconds of the --targets workloads (optionally "
                             "a comma-separated subset)")
    parser.add_argument("--parts", nargs="?", const=",".join(TARGETS), default=None,
                        help="LLVM's CPU and wall seconds, whole module against parts on 1 "
                             "and 2 threads (optionally a comma-separated subset)")
    parser.add_argument("--one-target", nargs=2, help=argparse.SUPPRESS)  # (a child process)
    parser.add_argument("--one-phases", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_target:
        import json
        print(json.dumps(_one_target(*args.one_target)))
        return 0
    if args.one_phases:
        import json
        print(json.dumps(_one_phases(args.one_phases)))
        return 0
    if args.parts:
        return parts_main(args.repeat, args.parts.split(","))
    if args.phases:
        return phases_main(args.repeat, args.phases.split(","))
    if args.targets:
        return targets_main(args.repeat, args.targets.split(","), not args.no_jax)
    if args.mlp:
        return mlp_main(args.repeat)
    sizes = [1000, 10_000] if args.quick else [1000, 10_000, 100_000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    header = None
    for name, (build, per_k) in PROGRAMS.items():
        for size in sizes:
            fn, fargs = build(max(1, size * per_k // 1000))
            nodes, times = measure(fn, fargs, args.codegen_max)
            if header is None:
                header = ["program", "nodes"] + list(times)
                print("| " + " | ".join(header) + " |")
                print("|" + "---|" * len(header))
            print(f"| {name} | {nodes} | " + " | ".join(
                "-" if times[k] != times[k] else f"{times[k]:.2f}" for k in header[2:])
                + " |", flush=True)
    print(f"\n(seconds, one run each, numpy {np.__version__}, one thread; "
          f"inplace='auto'; the 3,000-layer tanh chain: --sizes 30000 on chain+bwd)")
    _ = cc  # the public package is what is measured; keep the import explicit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
