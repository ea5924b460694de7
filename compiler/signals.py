"""All-or-nothing calls: Python signal handlers that would run inside a region run right after it.

CPython runs a Python signal handler in the main thread, between bytecodes, so a handler that
raises (`KeyboardInterrupt` from Ctrl-C, a `SIGALRM` timeout) can split the Python code of a
call: the numpy executor's chunked loops, several write-backs of private copies in a row. A
call that writes the caller's arrays runs that code inside `DeferredSignals()`, so that every
caller array ends either fully updated or untouched, and the interrupt still reaches the
caller, after the call.

How: for the region, each signal that has a Python handler gets a handler that only records
it; the original handlers are put back at the end and then called, in arrival order, with
the signal number and the frame the signal found. Blocking the signals with
`signal.pthread_sigmask` instead is not enough: it blocks them for the calling thread only, the
kernel then hands a process-directed signal to another thread that doesn't block it (numpy's
BLAS threads), whose C handler marks it pending, and the main thread runs the Python handler
inside the region all the same (seen on CPython 3.11 with numpy's second thread). Swapping the
Python handler is what every thread's C handler ends up calling, whichever thread the kernel
picks. Not deferred: signals without a Python handler (a default action still terminates the
process at once), and the synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, ...), whose
handlers must run at the faulting instruction. Calls from other threads need nothing: Python
handlers never run there. Setting a handler resets `signal.siginterrupt` for that signal (as
any `signal.signal` call does).
"""
from __future__ import annotations

import _signal  # signal.getsignal/signal.signal wrap each result in an enum: ~1.5 us a call
import signal
import threading

_get_ident = threading.get_ident
_main_thread = threading.main_thread
_getsignal = _signal.getsignal
_setsignal = _signal.signal

_NEVER = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP",
                                        "SIGSYS", "SIGABRT", "SIGKILL", "SIGSTOP")
          if hasattr(signal, n)}
_CANDIDATES = tuple(sorted(int(s) for s in signal.valid_signals() if s not in _NEVER))
# (the handlers at the last scan, and the (signal, handler) pairs of the Python ones): a scan
# is one C call per signal; filtering it again is needed only when a handler changed.
_seen: list = [None, ()]


def python_handlers() -> tuple:
    """(signal number, handler) for each signal whose current handler is a Python callable."""
    handlers = tuple(map(_getsignal, _CANDIDATES))
    if handlers != _seen[0]:
        _seen[:] = handlers, tuple((s, h) for s, h in zip(_CANDIDATES, handlers)
                                   if callable(h))
    return _seen[1]


class DeferredSignals:
    """`with DeferredSignals(): ...`: Python signal handlers that would run inside the block
    run right after it (see the module docstring). An exception one of them raises propagates
    from the `with` statement (the first one, when several raise); the block's own exception,
    if any, is its `__context__`. Nesting works: an inner region defers to the outer one's
    recorder, which defers to the original handler."""

    __slots__ = ("_saved", "_received")

    def __enter__(self):
        self._saved: list = []
        self._received: list = []
        if _get_ident() != _main_thread().ident:
            return self  # handlers run in the main thread only: nothing can split this thread
        try:
            for signum, handler in python_handlers():
                # (signal() first runs the handlers of signals already pending: one that raises
                # interrupts the call here, before anything is written)
                # Saved first: a pending handler that raises inside signal() may do so after
                # the swap, and restoring one never swapped only sets it again.
                self._saved.append((signum, handler))
                _setsignal(signum, self._record)
        except BaseException:
            self._restore()
            raise
        return self

    def _record(self, signum, frame):
        self._received.append((signum, frame))

    def _restore(self):
        """Put the original handlers back; the first exception a handler raised meanwhile
        (one already put back, run by the next signal() call), or None."""
        caught, saved = None, self._saved
        while saved:
            signum, handler = saved[-1]
            try:
                _setsignal(signum, handler)
                saved.pop()
            except BaseException as e:  # a restored handler ran before this one was swapped
                if caught is None:
                    caught = e
        return caught

    def __exit__(self, *exc):
        received = self._received
        # (always: a signal may still be recorded while _restore swaps the handlers back)
        originals = dict(self._saved)
        caught = self._restore()
        for signum, frame in received:
            try:
                originals[signum](signum, frame)
            except BaseException as e:
                if caught is None:
                    caught = e
        if caught is not None:
            received.clear()
            raise caught
        return False
