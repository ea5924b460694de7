"""The short path of a call (compiler.api._FastCall, runtime.cpu.executable.FastRunner): a
call whose layout (types, shapes, strides, dtypes, scalars) was seen before skips the binding
and the checks made once per layout, and gives the same values, writes, results and errors as
the general path (`Program._run_bound`); a call the short path can't take (overlapping
arguments, a read-only array the program writes, a state guard that moved) goes the general
way. The `general` fixture counts the general path's calls; `general_path` gives a call's
result with the short path off, to compare bits."""
import sys
import threading
import types

import numpy as np
import pytest

import compiler as cc
from compiler import api, nn
from compiler.tensor import state_tensor
from runtime.arena import POOL_LIMIT
from runtime.cpu import pool
from tests.backends import AVAILABLE
from tests.error_lines import error_checker

pytestmark = pytest.mark.skipif("cpu" not in AVAILABLE, reason="the short path is the cpu "
                                "backend's")

line_of, check_error = error_checker(__file__)


@pytest.fixture
def general(monkeypatch):
    calls = []
    run_bound = api.Program._run_bound

    def counted(self, arrays, loc):
        if getattr(api, "FAST_CALLS", True):  # (general_path's calls aren't counted)
            calls.append(self)
        return run_bound(self, arrays, loc)
    monkeypatch.setattr(api.Program, "_run_bound", counted)
    return calls


def general_path(fn, *args):
    """fn(*args) with every call on the general path (fn traced afresh, args copied)."""
    was = getattr(api, "FAST_CALLS", True)
    api.FAST_CALLS = False
    try:
        return cc.compile(fn)(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    finally:
        api.FAST_CALLS = was


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def rng(seed=0):
    return np.random.default_rng(seed)


def affine(x):
    return x * 2.0 + 1.0


def test_a_seen_layout_takes_the_short_path_with_the_same_bits_and_fresh_outputs(general):
    x = rng().standard_normal(4).astype(np.float32)
    fn = cc.compile(affine)
    first, second, third = fn(x), fn(x), fn(x)
    assert len(general) == 1  # only the first call took the general path
    want = general_path(affine, x)
    assert same_bits(first, want) and same_bits(second, want) and same_bits(third, want)
    assert not np.shares_memory(second, third) and not np.shares_memory(second, x)
    assert second.flags.writeable and second.flags.c_contiguous
    assert second.ctypes.data % 64 == 0  # the plan's alignment, as the general path's
    info = fn.cache_info()
    assert (info.hits, info.misses) == (2, 1)


def test_changed_strides_dtype_or_contiguity_take_the_general_path(general):
    def f(x):
        return x.exp() * 3.0
    fn = cc.compile(f)
    base = rng(1).standard_normal(8).astype(np.float32)
    x = base[:4].copy()
    fn(x)
    fn(x)
    assert len(general) == 1
    strided = base[::2]                      # the same shape, not contiguous
    got = fn(strided)
    assert len(general) == 2 and same_bits(got, general_path(f, strided))
    fn(strided)                              # (copied each call: never the short path)
    assert len(general) == 3
    x64 = x.astype(np.float64)               # another dtype: traced, then short
    assert same_bits(fn(x64), general_path(f, x64))
    assert same_bits(fn(x64), general_path(f, x64))
    assert fn.traces == 2 and len(general) == 4
    assert same_bits(fn(x), general_path(f, x))  # the first layout is still remembered
    assert len(general) == 4


def twice(a, b):
    a.multiply_(2.0)
    return a + b


def test_an_aliased_pair_after_the_short_path_is_traced_as_views(general):
    fn = cc.compile(twice)
    a, b = np.ones(4), np.full(4, 3.0)
    fn(a, b)
    out = fn(a, b)
    assert len(general) == 1
    np.testing.assert_array_equal(a, [4.0] * 4)
    np.testing.assert_array_equal(out, [7.0] * 4)
    x = np.ones(4)
    out = fn(x, x)                           # the same layout, but one array twice
    assert len(general) == 2 and fn.traces == 2
    np.testing.assert_array_equal(out, [4.0] * 4)  # eager: both are the doubled array
    np.testing.assert_array_equal(x, [2.0] * 4)
    buf = np.arange(6.0)                     # overlapping slices of one buffer
    want = buf.copy()
    wa, wb = want[0:4], want[2:6]
    wa *= 2.0
    want_out = wa + wb
    out = fn(buf[0:4], buf[2:6])
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(buf, want)
    assert len(general) == 3
    c, d = np.ones(4), np.ones(4)            # apart again: the short path
    fn(c, d)
    assert len(general) == 3
    np.testing.assert_array_equal(c, [2.0] * 4)


def add_one_and_double(a):
    a.add_(1.0)
    return a * 2.0


def test_a_read_only_array_the_program_writes_raises_naming_the_call(general):
    fn = cc.compile(add_one_and_double)
    a = np.zeros(4, np.float32)
    fn(a)
    fn(a)
    assert len(general) == 1
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(cc.InplaceError) as e:
        fn(ro)  # <- read-only
    check_error(e, cc.InplaceError, "read-only", "argument 'a' is a read-only array")
    np.testing.assert_array_equal(ro, np.zeros(4, np.float32))  # nothing written
    np.testing.assert_array_equal(a, np.full(4, 2.0, np.float32))
    reads = cc.compile(affine)               # one that only reads it: the short path
    reads(a)
    calls = len(general)
    assert same_bits(reads(ro), general_path(affine, ro)) and len(general) == calls


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x).tanh()


def test_state_arrays_written_or_replaced_between_calls(general):
    net = Net()
    fn = cc.compile(lambda x: net(x))
    x = rng(2).standard_normal((3, 3)).astype(np.float32)

    def want():
        w, b = net.fc.weight, net.fc.bias
        return general_path(lambda x, w, b: (x @ w + b).tanh(), x, np.asarray(w),
                            np.asarray(b))
    fn(x)
    assert same_bits(fn(x), want()) and len(general) == 1
    net.fc.weight[...] *= 2.0                # written in place: read by the short path
    assert same_bits(fn(x), want()) and len(general) == 1
    net.fc = nn.Linear(3, 3)                 # replaced: the guard sends it to a new trace
    assert same_bits(fn(x), want())
    assert fn.traces == 2 and len(general) == 2
    assert same_bits(fn(x), want()) and len(general) == 2
    weight = net.fc.weight                   # a state array passed as the argument
    with pytest.raises(cc.TraceError) as e:
        fn(weight)  # <- state
    check_error(e, cc.TraceError, "state", "an array the program reads as state")


def accumulate(x, y):
    y.add_(x)
    return (x * 2.0).exp().sum()


def test_threads_racing_on_the_short_path_each_get_their_own_result(general):
    fn = cc.compile(accumulate)
    n, rounds = 6, 300
    xs = [rng(10 + i).standard_normal(64).astype(np.float32) for i in range(n)]
    ys = [np.zeros(64, np.float32) for _ in range(n)]
    fn(xs[0].copy(), np.zeros(64, np.float32))   # the layout is seen
    sums = [general_path(accumulate, x, np.zeros(64, np.float32)) for x in xs]
    start = threading.Barrier(n)
    wrong = []

    def work(i):
        start.wait(timeout=60)
        for _ in range(rounds):
            s = fn(xs[i], ys[i])
            if not same_bits(s, sums[i]):
                wrong.append((i, s))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    for x, y in zip(xs, ys):
        want = np.zeros(64, np.float32)
        for _ in range(rounds):
            want += x
        assert same_bits(y, want)
    assert len(general) == 1
    assert fn.cache_info().hits == n * rounds


def gather(x, i):
    return x[i] * 2.0  # <- gather


def test_an_index_out_of_range_on_the_short_path_raises_as_the_general_path(general):
    fn = cc.compile(gather)
    x = np.arange(5, dtype=np.float32)
    fn(x, np.array([1, 2]))
    np.testing.assert_array_equal(fn(x, np.array([4, 0])), [8.0, 0.0])
    assert len(general) == 1
    with pytest.raises(cc.DataError) as e:
        fn(x, np.array([1, 7]))
    check_error(e, cc.DataError, "gather", "7")
    with pytest.raises(cc.DataError) as g:
        general_path(gather, x, np.array([1, 7]))
    assert str(e.value) == str(g.value)


def test_scalars_returned_arguments_and_repeats_as_the_general_path(general):
    def f(x, s):
        return x, x * s, x.expand([3, 4])
    fn = cc.compile(f)
    x = rng(3).standard_normal(4).astype(np.float32)
    fn(x, 2.0)
    a, b, c = fn(x, 2.0)
    assert len(general) == 1
    assert a is x  # an argument comes back as itself
    _, wb, wc = general_path(f, x, 2.0)
    assert same_bits(b, wb) and same_bits(c, wc)
    assert np.shares_memory(c, x) and not c.flags.writeable  # a view of x, read-only
    assert same_bits(fn(x, 3.0)[1], x * np.float32(3.0)) and fn.traces == 2
    fn(x, 3.0)
    fn(x, 2)                                 # an int: another constant, another trace
    assert fn.traces == 3 and len(general) == 3


def test_a_program_called_directly_takes_the_short_path(general):
    x = rng(4).standard_normal((2, 3)).astype(np.float32)
    prog = cc.compile(affine).lower(x)
    prog(x)
    assert same_bits(prog(x), general_path(affine, x)) and len(general) == 1
    with pytest.raises(cc.ShapeError) as e:
        prog(x[:1])  # <- shape
    check_error(e, cc.ShapeError, "shape", "has shape [1, 3]")
    assert same_bits(prog(x), general_path(affine, x)) and len(general) == 1


def sgd_step(net):
    def step(x):
        loss = net(x).square().mean()
        loss.backward()
        with cc.no_grad():
            for p in net.parameters():
                p.subtract_(0.1 * p.grad)
        return loss
    return step


def test_a_read_only_state_array_the_step_writes_raises_and_nothing_is_written(general):
    net = Net()
    fn = cc.compile(sgd_step(net))
    x = rng(5).standard_normal((4, 3)).astype(np.float32)
    fn(x)
    fn(x)
    assert len(general) == 1
    before = [p.copy() for p in net.parameters()]
    net.fc.bias.flags.writeable = False
    with pytest.raises(cc.InplaceError) as e:
        fn(x)  # <- frozen
    check_error(e, cc.InplaceError, "frozen", "is a read-only array")
    for p, b in zip(net.parameters(), before):
        assert same_bits(p, b)  # nothing written: neither the weight nor the bias
    net.fc.bias.flags.writeable = True
    fn(x)
    assert len(general) == 2 and not same_bits(net.fc.weight, before[0])


def test_the_general_path_refuses_a_read_only_parameter_too(monkeypatch):
    # (a Parameter runs as a plain view made once: the Parameter's own flag is what counts)
    monkeypatch.setattr(api, "FAST_CALLS", False, raising=False)
    net = Net()
    fn = cc.compile(sgd_step(net))
    x = rng(7).standard_normal((4, 3)).astype(np.float32)
    fn(x)
    before = [p.copy() for p in net.parameters()]
    net.fc.weight.flags.writeable = False
    with pytest.raises(cc.InplaceError) as e:
        fn(x)  # <- general
    check_error(e, cc.InplaceError, "general", "is a read-only array")
    for p, b in zip(net.parameters(), before):
        assert same_bits(p, b)


def test_keyword_calls_take_the_general_path_with_the_same_bits(general):
    def f(x, scale):
        return x * scale
    fn = cc.compile(f)
    x = rng(6).standard_normal(5).astype(np.float32)
    y = np.full(5, 3.0, np.float32)
    fn(x, y)
    want = fn(x, y)
    assert len(general) == 1
    assert same_bits(fn(x, scale=y), want)   # the same program, bound on the general path
    assert len(general) == 2 and fn.traces == 1
    assert same_bits(fn(x, y), want) and len(general) == 2


def test_a_strided_state_array_takes_the_general_path():
    """Found after the merge: a parameter that is a non-contiguous view (a plain ndarray
    `base.T[::2]` handed to an optimizer) was read and written on the short path as if it
    were contiguous: wrong values from the second call, and its base's other elements
    written. It runs through a private copy, as on the general path."""
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    w = base.T[::2]
    assert not w.flags.c_contiguous
    before = base.copy()

    @cc.compile
    def step():
        t = state_tensor(w, "w", trainable=True)
        loss = (t * t).sum()
        loss.backward()
        with cc.no_grad():
            t.subtract_(0.25 * t.grad)
        return loss
    losses = [float(step()) for _ in range(3)]
    want = before.T[::2].astype(np.float64)
    for k in range(3):
        assert losses[k] == pytest.approx(float((want * want).sum()), rel=1e-6)
        want = want - 0.25 * 2 * want
    np.testing.assert_allclose(w, want, rtol=1e-6)
    np.testing.assert_array_equal(base.T[1::2], before.T[1::2])   # the rest untouched


# -- the native short call (FastRunner.native: `fast_one`, a builtin with no Python frame) ----
def short_call(fn):
    """The short call `fn` made for its one layout (asserted to be the native builtin)."""
    (fast,) = [f for f in fn._fast.values() if f]
    assert isinstance(fast.call, types.BuiltinFunctionType), fast.call
    return fast


def python_frames(f, *args):
    """The Python functions entered while `f(*args)` runs (C functions aren't counted)."""
    entered = []

    def hook(frame, event, arg):
        if event == "call":
            entered.append(frame.f_code.co_name)
    sys.setprofile(hook)
    try:
        f(*args)
    finally:
        sys.setprofile(None)
    return entered[1:]  # (the first is `f` itself)


def test_a_short_call_enters_no_python_function_but_the_drivers_own(general):
    x = rng(11).standard_normal(4).astype(np.float32)
    fn = cc.compile(affine)
    for _ in range(3):  # the general call, then the first short one builds the builtin
        fn(x)
    # No runner, no allocation helper: only `CompiledFunction.__call__` is Python.
    assert python_frames(lambda: fn(x)) == ["__call__"]
    prog = fn.lower(x)  # (the program cached for x: its short call is made)
    assert python_frames(lambda: prog(x)) == ["__call__"]
    assert len(general) == 1 and same_bits(fn(x), general_path(affine, x))


def test_the_native_short_call_keeps_every_check_and_leaks_nothing(general):
    fn = cc.compile(add_one_and_double)
    a = np.zeros(4, np.float32)
    for _ in range(3):
        fn(a)
    fast = short_call(fn)
    exe = fast.run.exe
    dtype, u8 = a.dtype, np.dtype(np.uint8)

    def counts():
        return (sys.getrefcount(a), sys.getrefcount(dtype), sys.getrefcount(u8),
                sys.getrefcount(exe), sys.getrefcount(exe._free),
                sys.getrefcount(exe._free[-1]), sys.getrefcount(api._SLOW))
    before = counts()
    for _ in range(2000):
        out = fn(a)
    del out
    assert counts() == before  # every reference taken is given back
    assert len(general) == 1
    np.testing.assert_array_equal(a, np.full(4, 2003.0, np.float32))
    first, second = fn(a), fn(a)  # fresh, aligned, writeable, owning its own buffer
    assert not np.shares_memory(first, second) and not np.shares_memory(first, a)
    assert first.ctypes.data % 64 == 0 and first.flags.writeable and first.base.dtype == u8
    np.testing.assert_array_equal(second, np.full(4, 4010.0, np.float32))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    refused = counts()[1:]
    for _ in range(100):  # refused: nothing ran, the general path decides
        assert fast.call((ro,)) is api._SLOW
    assert counts()[1:] == refused and not ro.any()
    with pytest.raises(cc.InplaceError) as e:
        fn(ro)  # <- native read-only
    check_error(e, cc.InplaceError, "native read-only", "argument 'a' is a read-only array")
    assert not ro.any()
    exe.release()  # the arenas given back (ARENA_LIMIT): the next call makes one
    calls = len(general)
    assert same_bits(fn(a), np.full(4, 4012.0, np.float32)) and len(general) == calls
    assert exe.idle_arena_bytes() == exe.plan.arena_bytes


def gather_shifted(x, i):
    return x[i + 1] * 2.0  # <- shifted


def test_a_computed_index_out_of_range_on_the_native_short_call_raises_as_the_general_path(
        general):
    fn = cc.compile(gather_shifted)
    x = np.arange(5, dtype=np.float32)
    for _ in range(3):
        fn(x, np.array([1, 2]))
    short_call(fn)  # (the index is computed: checked while the program runs)
    with pytest.raises(cc.DataError) as e:
        fn(x, np.array([1, 6]))
    check_error(e, cc.DataError, "shifted", "index 7")
    with pytest.raises(cc.DataError) as g:
        general_path(gather_shifted, x, np.array([1, 6]))
    assert str(e.value) == str(g.value)
    calls = len(general)
    np.testing.assert_array_equal(fn(x, np.array([3, 0])), [8.0, 2.0])
    assert len(general) == calls


def test_threads_racing_on_the_native_short_call_each_get_their_own_arena(general):
    fn = cc.compile(accumulate)
    n, rounds = 4, 300
    for _ in range(3):
        fn(np.zeros(64, np.float32), np.zeros(64, np.float32))
    exe = short_call(fn).run.exe
    xs = [rng(20 + i).standard_normal(64).astype(np.float32) for i in range(n)]
    ys = [np.zeros(64, np.float32) for _ in range(n)]
    sums = [general_path(accumulate, x, np.zeros(64, np.float32)) for x in xs]
    start = threading.Barrier(n)
    wrong = []

    def work(i):
        start.wait(timeout=60)
        for _ in range(rounds):
            s = fn(xs[i], ys[i])
            if not same_bits(s, sums[i]):
                wrong.append((i, s))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(general) == 1  # an empty pool made an arena: no general call
    for x, y in zip(xs, ys):
        want = np.zeros(64, np.float32)
        for _ in range(rounds):
            want += x
        assert same_bits(y, want)
    assert 1 <= len(exe._free) <= POOL_LIMIT


def test_a_program_calling_blas_takes_the_native_short_call_inside_blas_bracket(general):
    def mlp(x, w, b):
        return (x @ w + b).tanh()
    x, w, b = (rng(30 + k).standard_normal(s).astype(np.float32)
               for k, s in enumerate([(4, 8), (8, 8), (8,)]))
    fn = cc.compile(mlp)
    for _ in range(3):
        fn(x, w, b)
    exe = short_call(fn).run.exe
    assert exe._blas
    before = pool.blas_threads()
    # Python runs only the driver (its key of three arguments) and BLAS's bracket (OpenBLAS
    # on one thread meanwhile).
    assert python_frames(lambda: fn(x, w, b)) == ["__call__", "_fast_key", "blas_enter",
                                                  "blas_exit"]
    assert pool.blas_threads() == before
    assert same_bits(fn(x, w, b), general_path(mlp, x, w, b)) and len(general) == 1


@pytest.mark.parametrize("f, x", [
    (lambda x: (x * 2.0).T, np.arange(6, dtype=np.float32).reshape(2, 3)),
    (lambda x: (x * 2.0)[1::2], np.arange(6, dtype=np.float64)),
    (lambda x: x.sum(), np.arange(6, dtype=np.float32)),
    (lambda x: x * 2.0, np.ones((0, 3), np.float32)),
    (lambda x: x > 2.0, np.arange(6, dtype=np.float32)),
    (lambda x: x * 2.0, np.arange(6, dtype=np.float16)),
    (lambda x: x + 1, np.arange(6, dtype=np.int64)),
], ids=["transposed", "strided-offset", "0-d", "zero-size", "bool", "float16", "int64"])
def test_the_native_short_call_returns_the_general_paths_layout(general, f, x):
    fn = cc.compile(f)
    for _ in range(3):
        fn(x)
    short_call(fn)
    got, want = fn(x), general_path(f, x)
    assert same_bits(got, want) and got.strides == want.strides and len(general) == 1
    for flag in ("WRITEABLE", "C_CONTIGUOUS", "F_CONTIGUOUS", "ALIGNED", "OWNDATA"):
        assert got.flags[flag] == want.flags[flag], flag


def test_a_layers_short_call_checks_its_guards_then_runs_the_native_builtin(general):
    net = Net()
    fn = cc.compile(lambda x: net(x))
    x = rng(40).standard_normal((3, 3)).astype(np.float32)
    for _ in range(3):
        fn(x)
    (fast,) = [f for f in fn._fast.values() if f]
    assert fast.call is None and isinstance(fast.one, types.BuiltinFunctionType)
    # The driver, then _FastCall (the state guards' epoch), then native code but BLAS's
    # bracket.
    assert python_frames(lambda: fn(x)) == ["__call__", "__call__", "blas_enter", "blas_exit"]
    net.fc.weight[...] *= 2.0                # written in place: read by the native call
    want = general_path(lambda x, w, b: (x @ w + b).tanh(), x, np.asarray(net.fc.weight),
                        np.asarray(net.fc.bias))
    assert same_bits(fn(x), want) and len(general) == 1
    net.fc = nn.Linear(3, 3)                 # replaced: the guard sends it to a new trace
    fn(x)
    assert fn.traces == 2 and len(general) == 2
