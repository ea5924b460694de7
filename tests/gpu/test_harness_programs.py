"""The gpu backend's generated CUDA C, run for real on the host through the CPU fiber harness
(tests/gpu/harness), against the numpy backend: every seed program, every example's step,
one program per registry op and output dtype (the first opdb sample that contains it), and
a fixed sample of 40 random programs (tests/passes/program_gen.py) — each under both thread
schedules, with the program's own call semantics (`Program.__call__`: argument binding, the
caller's mutated arrays written back, the returned structure).

The launch list that runs here is the one the CuPy runtime runs on a device. The libraries are
built in batches (`harness.prebuild`: one g++ call for many programs) to keep CI time down.
"""
from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
from tests.gpu import harness

pytest.importorskip("runtime.gpu.executable",
                    reason="the CUDA C emitter (runtime/gpu/emitter.py) is not here yet")
pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _sub in ("tests", os.path.join("tests", "passes")):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

from compiler.cli import load_example  # noqa: E402
from examples import seeds  # noqa: E402

SCHEDULES = harness.SCHEDULES
EXAMPLES = ["mlp", "transformer_block", "cnn", "gpt"]
RANDOM_PROGRAMS = 40
BF16 = np.dtype(ml_dtypes.bfloat16)


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _flat(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _flat(tree[k])]
    return [tree]


def assert_same(got, want, what, rtol):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, np.ndarray):
            assert g == w, f"{what}, result {i}"
            continue
        assert isinstance(g, np.ndarray) and g.shape == w.shape and g.dtype == w.dtype, \
            f"{what}, result {i}: {getattr(g, 'shape', g)} {getattr(g, 'dtype', '')} " \
            f"!= {w.shape} {w.dtype}"
        if w.dtype == BF16:   # (NumPy's kind "V": compared as the float32 it widens to)
            g, w = g.astype(np.float32), w.astype(np.float32)
        if w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w, err_msg=f"{what}, result {i}")
            continue
        tol = max(rtol, 1e-12 if w.dtype == np.float64 else 0.0)
        scale = float(np.max(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 0.0
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * (1.0 + scale),
                                   err_msg=f"{what}, result {i}")


def check(gpu_prog, numpy_call, args, what, rtol=1e-5, module=None):
    """`gpu_prog` through the harness under each schedule, and `numpy_call` (a callable of
    the same arguments): the same results and the same caller arrays afterwards. `args` is
    a function giving fresh arguments (arguments that share memory must be made anew).
    `module`: an edited copy of the program's launch list to run instead."""
    want_args = args()
    try:
        with np.errstate(all="ignore"):
            want = numpy_call(*want_args)
    except cc.CompilerError as e:   # e.g. a label out of range: the same error, before the run
        with pytest.raises(type(e)):
            harness.on_host(gpu_prog)(*args())
        return
    # arrays a program reads as state (a layer's parameters) are updated by each call: every
    # schedule starts from the same values
    states = [a.copy() for a in gpu_prog.state_arrays]
    for schedule in SCHEDULES:
        for a, initial in zip(gpu_prog.state_arrays, states):
            a[...] = initial
        got_args = args()
        got = harness.on_host(gpu_prog, schedule, module)(*got_args)
        assert_same(got, want, f"{what} ({schedule})", rtol)
        assert_same(got_args, want_args, f"{what}: arguments after the call ({schedule})", rtol)


# ---- building the libraries in batches ------------------------------------------------------

# The seeds over Paddle's [1,64,512,512] relu tensor (64 MiB: ~50 s each through the fiber
# harness, mostly the numpy comparison and 16M fiber iterations) run in the default run on a
# corner of it (every other value negative, as in the full one) with each launch's grid cut to
# 2 blocks, so that every thread still goes round the grid-stride loop several times (the full
# tensor's 65,536 blocks of 256 exceed the capped grid: the loop is what covers the rest).
# The full size is in the slow run.
BIG_BYTES = 1 << 20
SMALL_GRID = 2


def _is_big(args):
    return any(isinstance(a, np.ndarray) and a.nbytes > BIG_BYTES for a in args)


def _corner(a):
    """Two of each leading axis, the whole last one (the sign pattern of the seed's array)."""
    if not isinstance(a, np.ndarray) or a.nbytes <= BIG_BYTES:
        return a
    return np.ascontiguousarray(a[tuple(slice(0, 2) for _ in a.shape[:-1])])


def _small_grid(prog):
    import dataclasses

    from runtime.gpu.launch import GpuModule
    module = prog._exec.module
    launches = [ln if ln.library else dataclasses.replace(ln, grid=(SMALL_GRID, 1, 1))
                for ln in module.launches]
    elements = max(n.out.size for n in prog.graph.nodes)
    # (each thread takes at least 4 turns of the loop)
    assert all(ln.library or 4 * SMALL_GRID * ln.block[0] <= elements for ln in launches)
    return GpuModule(module.source, launches, module.arena_bytes, module.arena_alignment,
                     module.status_offset, module.scratch_bytes)


def _lower_seeds():
    """{title: (fn, args, check, program, module or None)}: the big seeds at their corner
    size, with the cut grid."""
    out = {}
    for title, fn, args, ok in seeds.SEEDS:
        small = _is_big(args)
        if small:
            args = tuple(_corner(a) for a in args)
        prog = cc.compile(fn, backend="gpu").lower(*_copy(args))
        out[title] = (fn, args, ok, prog, _small_grid(prog) if small else None)
    return out


@pytest.fixture(scope="module")
def seed_programs():
    progs = _lower_seeds()
    harness.prebuild([p._exec.module for *_, p, _ in progs.values()])
    return progs


@pytest.mark.parametrize("title", [s[0] for s in seeds.SEEDS])
def test_seed_programs_match_the_numpy_backend(seed_programs, title):
    fn, args, ok, prog, module = seed_programs[title]
    check(prog, cc.compile(fn, backend="numpy"), lambda: _copy(args), title, module=module)
    if ok is not None:
        call = _copy(args)
        assert ok(harness.on_host(prog, module=module)(*call), *args), title


@pytest.mark.slow
@pytest.mark.parametrize("title", [s[0] for s in seeds.SEEDS if _is_big(s[2])])
def test_big_seed_programs_at_full_size_match_the_numpy_backend(title):
    (_, fn, args, ok) = next(s for s in seeds.SEEDS if s[0] == title)
    prog = cc.compile(fn, backend="gpu").lower(*_copy(args))
    check(prog, cc.compile(fn, backend="numpy"), lambda: _copy(args), title)
    if ok is not None:
        assert ok(harness.on_host(prog)(*_copy(args)), *args), title


# The examples' steps at their own size take minutes through the fiber harness (gpt's ~6x the
# mlp's kernels, the transformer's [8, 128, 256] activations, each thread a fiber under both
# schedules): the slow run has them; the default run has the transformer's, the cnn's and
# gpt's at a tiny size (the same ops: embedding, causal attention, layer norms, conv and pool
# with their gradients, BatchNorm, AdamW and SGD on the layers' state arrays) and the mlp's at
# its own (cheap; its batch of 256 is long enough for the split reductions, `_slices`).
TINY_GPT = {"batch": 2, "context": 8, "dim": 16, "heads": 2, "layers": 1}
TINY = {"transformer_block": {"batch": 2, "seq": 16, "d_model": 32, "d_mlp": 64}}


def _tiny_step(module, name, backend):
    """(the program, its arguments) of `name`'s step at the tiny size."""
    if name == "gpt":
        size = module.Size(**TINY_GPT)
        return module.build_program(backend=backend, size=size), module.example_inputs(size)
    if name == "cnn":   # (a batch of 4 images; the net's own shapes)
        step = cc.compile(module.train_step_for(*module.make_net()), backend=backend)
        args = module.images(np.random.default_rng(0), n=4)
        return step.lower(*_copy(args)), args
    args = module.example_inputs(**TINY[name])
    return cc.compile(module.train_step, backend=backend).lower(*_copy(args)), args


@pytest.mark.parametrize("name,size", [("mlp", "small")] + [(n, "tiny") for n in EXAMPLES
                                                              if n != "mlp"]
                         + [pytest.param(n, "small", marks=pytest.mark.slow) for n in EXAMPLES
                            if n != "mlp"])
def test_example_steps_match_the_numpy_backend(name, size):
    module = load_example(name)
    if size == "tiny":
        prog, args = _tiny_step(module, name, "gpu")
        ref, _ = _tiny_step(module, name, "numpy")
        check(prog, ref, lambda: _copy(args), name, rtol=1e-4)
        return
    if name == "gpt":
        size = module.SIZES["small"]
        prog = module.build_program(backend="gpu", size=size)
        ref = module.build_program(backend="numpy", size=size)
        check(prog, ref, lambda: _copy(module.example_inputs(size)), name, rtol=1e-4)
        return
    prog = module.build_program(backend="gpu")
    ref = module.build_program(backend="numpy")
    check(prog, ref, lambda: _copy(module.example_inputs()), name, rtol=1e-4)


def _one_program_per_op():
    """For each registry op and output dtype, the first opdb sample whose graph contains it
    (as the NVRTC test picks them, one search per session: `picks.py`): every op's kernels
    run."""
    from opdb.samples import SAMPLES

    from tests.gpu.picks import first_per_key
    return first_per_key(SAMPLES, lambda n: (n.op, n.out.dtype.name), "op-and-dtype")


@pytest.fixture(scope="module")
def op_programs():
    seen, picked = _one_program_per_op()
    harness.prebuild([p._exec.module for _, p in picked])
    return seen, picked


def test_every_registry_op_runs_and_matches_the_numpy_backend(op_programs):
    from compiler.ops import REGISTRY
    seen, picked = op_programs
    missing = set(REGISTRY) - {op for op, _ in seen}
    # the samples are forward calls: gradient-only ops run in the examples' training steps
    # (the cnn's; gelu_grad: the transformer's); the all-reduce ops exist only in distributed
    # programs (issue 12, cpu)
    assert missing <= {"conv2d_grad_input", "conv2d_grad_weight", "max_pool2d_grad", "gemm",
                       "gelu_grad", "allreduce_start", "allreduce_wait", "bucket_pack"}, \
        sorted(missing)
    failures = []
    for sample, prog in picked:
        try:
            check(prog, cc.compile(sample.fn, backend="numpy"), lambda: _copy(sample.args),
                  f"opdb sample {sample.id}", rtol=1e-5)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{sample.id}: {str(e)[:600]}")
    assert not failures, f"{len(failures)} of {len(picked)} op samples differ:\n" + \
        "\n".join(failures)


def _random_programs():
    """A fixed sample: the first RANDOM_PROGRAMS programs of a derandomized hypothesis run."""
    from hypothesis import HealthCheck, given, settings
    from program_gen import programs
    out = []

    @settings(max_examples=RANDOM_PROGRAMS, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(errors=False))
    def collect(prog):
        out.append(prog)
    collect()
    return out[:RANDOM_PROGRAMS]


@pytest.fixture(scope="module")
def random_programs():
    built = []
    for rp in _random_programs():
        fn = rp.build()
        built.append((rp, fn, cc.compile(fn, backend="gpu").lower(*rp.arrays())))
    harness.prebuild([p._exec.module for *_, p in built])
    return built


def test_random_programs_match_the_numpy_backend(random_programs):
    assert len(random_programs) == RANDOM_PROGRAMS
    failures = []
    for rp, fn, prog in random_programs:
        try:
            check(prog, cc.compile(fn, backend="numpy"), rp.arrays, "random program",
                  rtol=1e-9)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{rp}\n{str(e)[:800]}")
    assert not failures, f"{len(failures)} of {len(random_programs)} differ:\n" + \
        "\n\n".join(failures)


def _without(src: str, at: int) -> str:
    return src[:at] + "/* removed */" + src[at + len("__syncthreads();"):]


def _block_reduce_barriers(src: str) -> list[int]:
    import re
    start = src.index("__device__ T block_reduce(")
    body = src[start:src.index("\n}\n", start)]
    return [start + m.start() for m in re.finditer(r"__syncthreads\(\);", body)]


def test_the_emitters_block_reduction_fails_without_each_of_its_barriers():
    """The emitter's `block_reduce` (warp shuffles, then shared memory across warps) with one
    of its three `__syncthreads()` removed at a time must give a wrong answer (or a deadlock)
    under some schedule:
      - in the generated CUDA C of a softmax and a row sum, for the 2nd and 3rd barrier (the
        launches get 2 blocks for 6 rows: the kernels are grid-stride loops, so a block
        reduces several rows). The 1st ("sh is free") guards a reuse of the same shared
        array by the next call, which none of these kernels makes (softmax's two reductions
        use two arrays; a row sum's result is read by thread 0 only);
      - in a kernel over the emitter's prelude that makes that reuse (a row's mean, then its
        variance, into one array, every thread using both), for all three."""
    import dataclasses

    import compiler.nn.functional as F
    from runtime.gpu.emitter import BLOCK_PRELUDE
    from runtime.gpu.launch import GpuModule, Launch
    from runtime.gpu.scalar import PRELUDE

    def f(x):
        return F.softmax(x, axis=1), x.sum(axis=1)

    x = np.random.default_rng(5).standard_normal((6, 300))
    x32 = x.astype(np.float32)
    prog = cc.compile(f, backend="gpu").lower(x32)
    want = cc.compile(f, backend="numpy")(x32)
    module = prog._exec.module
    launches = [dataclasses.replace(ln, grid=(2, 1, 1)) for ln in module.launches]
    src = module.source
    sites = _block_reduce_barriers(src)
    assert len(sites) == 3
    programs = [GpuModule(s, launches, module.arena_bytes, module.arena_alignment,
                          module.status_offset)
                for s in [src] + [_without(src, at) for at in sites[1:]]]

    norm = PRELUDE + BLOCK_PRELUDE + r"""
extern "C" __global__ void row_norm(const double *__restrict__ x, double *__restrict__ y) {
  __shared__ double sh[32];
  for (long long o = blockIdx.x; o < 6LL; o += gridDim.x) {
    double a = 0.0, b = 0.0;
    for (long long j = threadIdx.x; j < 300LL; j += blockDim.x) a += x[o * 300LL + j];
    const double mean = block_reduce<SumOp>(a, 0.0, sh) / 300.0;
    for (long long j = threadIdx.x; j < 300LL; j += blockDim.x) {
      const double d = x[o * 300LL + j] - mean;
      b += d * d;
    }
    const double var = block_reduce<SumOp>(b, 0.0, sh) / 300.0;
    for (long long j = threadIdx.x; j < 300LL; j += blockDim.x)
      y[o * 300LL + j] = (x[o * 300LL + j] - mean) / sqrt(var + 1e-5);
  }
}
"""
    launch = [Launch("row_norm", (2, 1, 1), (256, 1, 1), 0, (("input", 0, 0),
                                                             ("output", 0, 0)))]
    norms = [GpuModule(s, launch) for s in [norm] + [_without(norm, at)
                                                      for at in _block_reduce_barriers(norm)]]
    harness.prebuild(programs + norms)
    mean = x.mean(axis=1, keepdims=True)
    want_norm = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)

    def right(module, schedule):
        try:
            if module in norms:
                got = harness.run_on_cpu(module, [x], [(x.shape, np.float64)],
                                         schedule).outputs
                return np.allclose(got[0], want_norm, rtol=1e-10, atol=1e-12)
            got = harness.on_host(prog, schedule, module)(x32.copy())
        except harness.HarnessError:
            return False
        return all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))

    for intact in (programs[0], norms[0]):
        assert all(right(intact, schedule) for schedule in SCHEDULES)
    unnoticed = [k for k, module in enumerate(programs[1:] + norms[1:])
                 if all(right(module, schedule) for schedule in SCHEDULES)]
    assert not unnoticed, f"copies without a barrier that still gave the right answer: " \
        f"{unnoticed}"


def test_random_draws_are_the_same_bits_on_numpy_cpu_and_the_gpu_code():
    """A step reproduces bit for bit across backends, normal numbers included
    (Box-Muller from correctly rounded operations; NVRTC and the harness don't contract FMAs)."""
    import compiler.nn.functional as F

    def draw(s):
        return (cc.rand([300, 257], seed=s), cc.randn([1000], seed=s),
                cc.randn([77], "float64", seed=s), F.dropout(cc.ones([64, 64]), 0.3, seed=s))
    seed = np.array(2 ** 40 + 77, np.uint64)
    want = cc.compile(draw, backend="numpy")(seed)
    on_cpu = cc.compile(draw, backend="cpu")(seed)
    on_gpu = harness.on_host(cc.compile(draw, backend="gpu").lower(seed))(seed)
    for w, c, g in zip(want, on_cpu, on_gpu):
        np.testing.assert_array_equal(c, w)
        np.testing.assert_array_equal(g, w)
