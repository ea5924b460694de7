"""All-or-nothing calls: a signal whose handler raises KeyboardInterrupt, arriving at any moment
of a call, reaches the caller, and every caller array the call mutates is then either fully
updated or untouched, all of them alike (compiler.signals).

Each test fires SIGALRM at delays spread over one uninterrupted call's duration and past it
(before, during and after the run); the delays come from a measured call, but no assertion
depends on timing: whatever moment the signal lands, the same two outcomes are allowed."""
import gc
import os
import signal
import threading
import time

import numpy as np
import pytest

import compiler as cc
from tests.backends import AVAILABLE

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")

FRACTIONS = (0.0, 0.03, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.5)


@pytest.fixture
def alarm():
    """Installs a SIGALRM handler that calls `alarm.on_signal()` (if set) and raises
    KeyboardInterrupt; restores the previous handler and disarms the timer after the test.
    Python callbacks of the garbage collector are set aside meanwhile: a handler that runs
    inside one has its exception printed and dropped by CPython (hypothesis installs one when
    its tests ran earlier in the same process: the interrupt then never reached the caller),
    which is no moment of our call."""
    class Alarm:
        on_signal = None
        calls = 0

    def handler(signum, frame):
        Alarm.calls += 1
        if Alarm.on_signal is not None:
            Alarm.on_signal()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    Alarm.handler = handler
    callbacks = gc.callbacks[:]
    gc.callbacks.clear()
    try:
        yield Alarm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.callbacks[:] = callbacks


def state(arrays, before, after) -> str:
    """'before' or 'after' when every array equals its value before (after) the call, bit for
    bit; else which arrays hold what."""
    def one(a, b, c):
        bits = f"u{a.itemsize}"
        a = a.view(bits)
        if np.array_equal(a, b.view(bits)):
            return "before"
        if np.array_equal(a, c.view(bits)):
            return "after"
        return f"torn ({np.count_nonzero(a != b.view(bits))} of {a.size} elements written)"
    states = [one(a, b, c) for a, b, c in zip(arrays, before, after)]
    return states[0] if len(set(states)) == 1 else " / ".join(states)


def check_all_or_nothing(alarm, fn, make_args):
    """Calls `fn(*make_args())` once undisturbed (the reference), then once per delay with
    SIGALRM firing after that delay; asserts the KeyboardInterrupt reached the caller each
    time and the mutated arrays ended all before or all after, and were so whenever the
    handler ran. Returns the outcomes."""
    originals = [np.array(a, order="K") for a in make_args()]
    durations = []
    for _ in range(3):  # (the first call allocates the arena: the last ones time a call)
        args = make_args()
        start = time.perf_counter()
        fn(*args)
        durations.append(time.perf_counter() - start)
    duration = min(durations[1:])
    after = [np.array(a, order="K") for a in args]
    assert state(after, originals, originals) != "before"
    sigint = signal.getsignal(signal.SIGINT)
    outcomes = []
    for fraction in FRACTIONS:
        args = make_args()
        seen = []
        alarm.on_signal = lambda: seen.append(state(args, originals, after))
        returned = False
        try:
            signal.setitimer(signal.ITIMER_REAL, max(fraction * duration, 1e-5))
            fn(*args)
            returned = True
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the interrupt comes after the call
                time.sleep(0.001)
        except KeyboardInterrupt:
            pass
        else:
            pytest.fail("the KeyboardInterrupt never reached the caller")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        final = state(args, originals, after)
        assert final in ("before", "after"), f"delay {fraction:.2f} x the call: {final}"
        assert len(seen) == 1 and seen[0] in ("before", "after"), \
            f"delay {fraction:.2f} x the call: the handler ran while the arrays were {seen}"
        assert signal.getsignal(signal.SIGALRM) is alarm.handler  # the handlers are back
        assert signal.getsignal(signal.SIGINT) is sigint
        outcomes.append((fraction, returned, final))
    return outcomes


def test_chunked_loop_of_numpy_backend(alarm):
    # pow_ has no out= form on the numpy executor: a Python loop over 512-element chunks
    fn = cc.compile(lambda w: w.pow_(2.0), backend="numpy")
    make = lambda: [np.linspace(0.5, 1.5, 1 << 19, dtype=np.float32)]  # noqa: E731
    check_all_or_nothing(alarm, fn, make)
    # A call from another thread (Python runs no handler there; none is swapped) works
    (w,), errors = make(), []

    def worker():
        try:
            fn(w)
        except BaseException as e:
            errors.append(e)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert not errors and w.tobytes() == (make()[0] ** np.float32(2.0)).tobytes()


def two_updates(a, b):
    a.add_(1.0)
    b.add_(1.0)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_fortran_ordered_argument_written_back(alarm, backend):
    # `a` runs on a private row-major copy, written back after the native call; `b` is
    # updated in place by it (large: a signal lands in the native call more often than not)
    def make():
        a = np.asfortranarray(np.arange(4096, dtype=np.float32).reshape(64, 64))
        return [a, np.arange(1 << 22, dtype=np.float32)]
    check_all_or_nothing(alarm, cc.compile(two_updates, backend=backend), make)


def several(a, b, c):
    a.pow_(2.0)
    b.add_(a)
    c.subtract_(b)
    return a.sum()


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("layouts", ["CCC", "CFC", "FFF"])
def test_several_mutated_arguments(alarm, backend, layouts):
    # (row-major arguments are written while the program runs, the others after it)
    def make():
        base = np.linspace(-1, 1, 1 << 18, dtype=np.float32).reshape(512, 512)
        return [np.array(base + k, order=o) for k, o in enumerate(layouts)]
    check_all_or_nothing(alarm, cc.compile(several, backend=backend), make)


def test_deferred_handlers_nest_and_restore():
    from compiler.signals import DeferredSignals
    got = []

    def handler(signum, frame):
        got.append("handler")
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with DeferredSignals():
            with DeferredSignals():
                os.kill(os.getpid(), signal.SIGUSR1)
                for _ in range(100):  # (the handler would run at one of these bytecodes)
                    time.sleep(0)
                got.append("inner end")
            got.append("outer end")
        assert got == ["inner end", "outer end", "handler"]
        assert signal.getsignal(signal.SIGUSR1) is handler
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0)
        assert got[-1] == "handler" and len(got) == 4
    finally:
        signal.signal(signal.SIGUSR1, previous)
