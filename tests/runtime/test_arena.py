"""The planned numpy executor: caller's arrays, donation, aliasing arguments, the arena."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from runtime import arena
from runtime.arena import ArenaExecutable
from tests.backends import AVAILABLE

from tests.backends import numpy_compile

X = np.arange(12, dtype=np.float64).reshape(3, 4)


def test_arena_is_allocated_once_per_program_and_reused():
    def f(x):
        return ((x * 2.0).exp() + 1.0).sum()
    fn = numpy_compile(f)
    prog = fn.lower(X)
    assert prog._exec.arena is None           # lower() allocates nothing
    first = fn(X)
    arena = prog._exec.arena
    assert arena.nbytes == prog.plan.arena_bytes > 0
    assert fn(X) == first and prog._exec.arena is arena


def test_sanitizer_poisons_dead_buffers_but_not_live_ones():
    def f(x):
        a = x * 2.0
        b = a.sin()      # a dies here (b can't take it: a is read below)
        c = b * a
        return c.sum()
    prog = numpy_compile(f, sanitize=False).lower(X)
    exe = ArenaExecutable(prog.graph, prog.plan, sanitize=True)
    outs, _ = exe.run([X.copy()])
    np.testing.assert_allclose(outs[0], (np.sin(2 * X) * 2 * X).sum())
    assert np.all(exe.arena == 0xFF)  # everything in the arena is dead at the end


def test_outputs_never_alias_the_arena_and_only_views_alias_an_input():
    def f(x):
        y = x * 2.0
        return y, x.reshape([12]), x
    x = X.copy()
    fn = numpy_compile(f)
    y, flat, same = fn(x)
    prog = fn.lower(x)
    assert not np.shares_memory(y, x)
    assert same is x and flat.base is x     # the argument and a view of it, as NumPy returns
    for out in (y, flat, same):
        assert not np.shares_memory(out, prog._exec.arena)
    y2, _, _ = fn(x)
    assert y2 is not y and np.array_equal(y, 2 * X)  # a second call doesn't clobber results


def test_mutated_input_returned_is_the_callers_array():
    def f(x):
        return x.add_(1.0)
    x = X.copy()
    out = numpy_compile(f)(x)
    assert out is x and np.array_equal(x, X + 1)


def test_same_array_passed_twice_is_one_storage():
    def f(x, y):
        x.add_(1.0)          # writes x...
        return y * 1.0       # ...and y, the same array, sees it (eager NumPy / PyTorch)
    a = X.copy()
    out = numpy_compile(f)(a, a)
    np.testing.assert_array_equal(out, X + 1)
    np.testing.assert_array_equal(a, X + 1)     # x's update lands in the caller's array


def test_overlapping_arguments_are_detected():
    def f(x, y):
        x.scale_(2.0)
        return y.sum()
    a = X.copy()
    total = numpy_compile(f)(a[0:2], a[1:3])
    assert np.isclose(total, 2 * X[1].sum() + X[2].sum())  # y sees x's write to row 1
    np.testing.assert_array_equal(a[0:2], 2 * X[0:2])
    np.testing.assert_array_equal(a[2], X[2])


def test_donation_errors():
    def f(x, y):
        return F.relu(x) + y
    a = X.copy()
    with pytest.raises(cc.InplaceError, match="donated twice"):
        numpy_compile(f, donate=("x", 0)).lower(a, a.copy())
    with pytest.raises(cc.InplaceError, match="shares memory with argument 'y'"):
        numpy_compile(f, donate=("x",))(a, a)
    with pytest.raises(cc.InplaceError, match="not an array argument"):
        numpy_compile(f, donate=(5,)).lower(a, a.copy())


def test_donated_input_buffer_is_reused_by_the_program():
    def f(x):
        return (x * 2.0).exp()
    x = X.copy()
    fn = numpy_compile(f, donate=("x",))
    prog = fn.lower(x)
    assert prog.plan.arena_bytes == 64 and prog.plan.output_bytes == 0  # just a constant
    out = fn(x)
    np.testing.assert_allclose(out, np.exp(2 * X))
    assert np.shares_memory(out, x)  # the result lives in the donated buffer


def test_read_only_donated_array_is_refused():
    x = X.copy()
    x.flags.writeable = False
    with pytest.raises(cc.InplaceError, match="read-only"):
        numpy_compile(lambda x: x * 2.0, donate=(0,))(x)


# -- planning allocates nothing; a call that can't get its memory says so ----------------------
def huge(x):
    big = cc.zeros([200000, 200000])     # 149 GiB of float32
    return (big + 1.0).sum() + x.sum()


def test_planning_a_149_gib_program_allocates_nothing():
    prog = numpy_compile(huge).lower(X)
    assert prog.plan.arena_bytes >= 200000 * 200000 * 4
    assert prog._exec.arena is None          # nothing allocated yet
    assert str(prog.plan.arena_bytes) in prog.plan.report()


def test_calling_a_program_bigger_than_the_machine_raises_before_touching_anything():
    def f(x):
        x.add_(1.0)                          # would write into the caller's array...
        return huge(x)
    x = X.copy()
    with pytest.raises(cc.InsufficientMemoryError, match=r"needs \d+ B .* only \d+ B") as e:
        numpy_compile(f)(x)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, cc.CompilerError)
    assert f"{prog_bytes(f)} B" in str(e.value) and "test_arena.py:" in str(e.value)
    np.testing.assert_array_equal(x, X)      # ...but nothing ran


@pytest.mark.parametrize("backend", AVAILABLE)
def test_only_calls_that_need_much_new_memory_ask_the_os(backend, monkeypatch):
    # Reading /proc/meminfo is a third of a small call's time: a call that needs fewer than
    # CHECKED_BYTES new bytes doesn't ask; one that needs more is refused when they're missing.
    asked = []

    def nothing_available():
        asked.append(1)
        return 0
    monkeypatch.setattr(arena, "available_memory", nothing_available)
    small = numpy_compile(lambda x: x * 2.0, backend=backend)
    np.testing.assert_array_equal(small(X), X * 2.0)
    assert asked == []
    n = arena.CHECKED_BYTES // 8
    big = numpy_compile(lambda x: x.expand([2, n]) + 1.0, backend=backend)
    with pytest.raises(cc.InsufficientMemoryError, match=r"only 0 B"):
        big(np.ones(n))
    assert asked == [1]


def prog_bytes(f):
    plan = numpy_compile(f).lower(X).plan
    return plan.arena_bytes + plan.output_bytes
