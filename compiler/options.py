"""The compile options as one record: what `cc.compile`, `lower`, the pipeline and its passes
read, validated once where the user passes them.

`Options.make(...)` takes the user's keyword arguments (strings, None for "the backend's
default") and raises the same ValueErrors, in the same order, that each option raised where it
was checked before; the record it returns holds the `Backend` object (runtime.backends) and the
fusion switch resolved against it, so no later stage compares backend names or re-validates.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from passes.budget import parse_budget
from runtime.backends import Backend, backend_named
from runtime.cpu.pool import available_cores

INPLACE_MODES = ("auto", "off", "strict")
SCHEDULE_MODES = ("auto", "off")
RECOMPUTE_MODES = ("auto", "off")


@dataclass(frozen=True)
class Options:
    backend: Backend
    inplace: str = "auto"
    donate: tuple = ()          # the user's positions or parameter names (the pipeline resolves
                                # them to graph inputs per signature)
    sanitize: bool | None = None  # None: the COMPILER_SANITIZE variable decides, per build
    schedule: str = "auto"
    fuse: bool = False          # resolved: fuse=None became the backend's default
    recompute: str = "auto"
    distributed: object = None  # an MpiConfig (compiler.distributed) or None
    threads: int = 1            # resolved: threads=None became COMPILER_THREADS or the cores
                                # this process may use (the cpu backend's pool; others ignore it)
    memory_budget: int | None = None  # bytes beyond the caller's arrays (passes.budget)

    @classmethod
    def make(cls, backend="cpu", inplace="auto", donate=(), sanitize=None, schedule="auto",
             distributed=None, fuse=None, recompute="auto", threads=None,
             memory_budget=None) -> Options:
        """The validated record of the user's options (ValueError names the bad one)."""
        backend = backend_named(backend)
        if inplace not in INPLACE_MODES:
            raise ValueError(f"unknown inplace mode {inplace!r}: choose one of {INPLACE_MODES}")
        if schedule not in SCHEDULE_MODES:
            raise ValueError(f"unknown schedule mode {schedule!r}: choose one of "
                             f"{SCHEDULE_MODES}")
        if recompute not in RECOMPUTE_MODES:
            raise ValueError(f"unknown recompute mode {recompute!r}: choose one of "
                             f"{RECOMPUTE_MODES}")
        if fuse is None:
            fuse = backend.fuses_by_default
        elif not isinstance(fuse, bool):
            raise ValueError(f"fuse must be True, False or None (the backend's default), not "
                             f"{fuse!r}")
        if distributed is not None and not hasattr(distributed, "comm"):
            raise ValueError("distributed= takes cc.distributed.mpi(...)")
        if distributed is not None and backend.distributed_refusal is not None:
            raise ValueError(backend.distributed_refusal)
        threads = resolve_threads(threads)
        donate = tuple(donate) if isinstance(donate, (list, tuple)) else (donate,)
        memory_budget = parse_budget(memory_budget)
        return cls(backend, inplace, donate, sanitize, schedule, fuse, recompute, distributed,
                   threads, memory_budget)


THREADS_VARIABLE = "COMPILER_THREADS"


def resolve_threads(threads) -> int:
    """threads=None: the COMPILER_THREADS environment variable, else the cores this process
    may use (`os.sched_getaffinity`); otherwise a whole number >= 1 (ValueError)."""
    where = "threads"
    if threads is None:
        env = os.environ.get(THREADS_VARIABLE, "").strip()
        if not env:
            return available_cores()
        where, threads = THREADS_VARIABLE, env
        try:
            threads = int(env)
        except ValueError:
            pass
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{where} must be a whole number of threads >= 1 (or None: the "
                         f"cores this process may use), not {threads!r}")
    return threads
