"""One options record and one backend object (compiler/options.py, runtime/backends.py): the
record's validation raises what `cc.compile` raised, each backend property drives what it
names (a backend that is not one of the three, built by `dataclasses.replace`, shows it is the
property and not the name that decides), and no product module compares backend names."""
import dataclasses
import pathlib
import re

import numpy as np
import pytest

import compiler as cc
from compiler.options import Options
from compiler.signals import DeferredSignals
from runtime.backends import CPU, GPU, NUMPY, backend_named

ROOT = pathlib.Path(__file__).resolve().parents[2]


class _Comm:  # what Options checks of an MpiConfig: it has a communicator
    comm = None


BAD = [  # (keyword arguments, the message cc.compile has always raised)
    (dict(backend="tpu"), "unknown backend 'tpu': choose one of ('numpy', 'cpu', 'gpu')"),
    (dict(inplace="always"),
     "unknown inplace mode 'always': choose one of ('auto', 'off', 'strict')"),
    (dict(schedule="fast"), "unknown schedule mode 'fast': choose one of ('auto', 'off')"),
    (dict(recompute="on"), "unknown recompute mode 'on': choose one of ('auto', 'off')"),
    (dict(fuse="yes"), "fuse must be True, False or None (the backend's default), not 'yes'"),
    (dict(distributed=object()), "distributed= takes cc.distributed.mpi(...)"),
    (dict(backend="gpu", distributed=_Comm()),
     "distributed= runs on the numpy and cpu backends; the gpu backend has no host staging "
     "of its buckets yet"),
    # the first bad option is the one named, in the order compile always checked them
    (dict(backend="tpu", inplace="always"),
     "unknown backend 'tpu': choose one of ('numpy', 'cpu', 'gpu')"),
    (dict(inplace="always", schedule="fast"),
     "unknown inplace mode 'always': choose one of ('auto', 'off', 'strict')"),
]


@pytest.mark.parametrize("kwargs,message", BAD)
def test_options_make_raises_what_compile_raises(kwargs, message):
    with pytest.raises(ValueError) as made:
        Options.make(**kwargs)
    assert str(made.value) == message
    with pytest.raises(ValueError) as compiled:
        cc.compile(lambda x: x + 1, **kwargs)
    assert str(compiled.value) == message


def test_options_resolve_the_backend_and_its_fusion_default():
    assert Options.make("numpy").backend is NUMPY and Options.make("numpy").fuse is False
    assert Options.make("cpu").fuse is True and Options.make("gpu").fuse is True
    assert Options.make("cpu", fuse=False).fuse is False
    assert Options.make("numpy", donate="w").donate == ("w",)
    assert backend_named("gpu") is GPU and backend_named(CPU) is CPU
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options.make().inplace = "off"


def _step(x, w):
    return (x * w).exp() + w


ARGS = (np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6),
        np.full((4, 6), 0.5, np.float32))


def test_the_plan_takes_the_backends_alignment():
    wide = dataclasses.replace(NUMPY, name="numpy-wide", alignment=512)
    prog = cc.compile(_step, backend=wide, inplace="off").lower(*ARGS)
    assert prog.backend == "numpy-wide" and prog.plan.alignment == 512
    offsets = [b.offset for b in prog.plan.buffers if b.offset]
    assert offsets and all(o % 512 == 0 for o in offsets)
    assert cc.compile(_step, backend="numpy", inplace="off").lower(*ARGS).plan.alignment == 64
    assert cc.compile(_step, backend="gpu", inplace="off").lower(*ARGS).plan.alignment == 256
    want = cc.compile(_step, backend="numpy")(*ARGS)
    assert np.array_equal(prog(*ARGS), want)


def test_fusion_follows_the_backends_default():
    fusing = dataclasses.replace(NUMPY, name="numpy-fusing", fuses_by_default=True)
    ops = [n.op for n in cc.compile(_step, backend=fusing).lower(*ARGS).graph.nodes]
    assert "fused" in ops
    ops = [n.op for n in cc.compile(_step, backend="numpy").lower(*ARGS).graph.nodes]
    assert "fused" not in ops
    assert np.array_equal(cc.compile(_step, backend=fusing)(*ARGS),
                          cc.compile(_step, backend="numpy")(*ARGS))


def test_distributed_refusal_is_the_backends():
    refusing = dataclasses.replace(NUMPY, name="numpy-alone", distributed_refusal="no ranks")
    with pytest.raises(ValueError, match="^no ranks$"):
        cc.compile(_step, backend=refusing, distributed=_Comm())


def _bump(x):
    x.add_(1.0)
    return x.sum()


def test_the_signal_region_is_skipped_only_where_one_native_call_writes_in_place():
    x = np.zeros(8, np.float32)
    region = {}
    for backend in (CPU, dataclasses.replace(CPU, name="cpu-deferring",
                                             native_call_writes_in_place=False)):
        prog = cc.compile(_bump, backend=backend).lower(x)
        prog(x)  # (the first call shows whether the mutation was copied back)
        region[backend.name] = prog._all_or_nothing([x], [x])
    assert not isinstance(region["cpu"], DeferredSignals)
    assert isinstance(region["cpu-deferring"], DeferredSignals)
    assert x.tolist() == [2.0] * 8


# A backend name compared as a string: `backend == "gpu"`, `self.backend != x`,
# `backend in NATIVE_BACKENDS`, `"cpu" == b`, `b in ("numpy", "cpu")`.
_COMPARISON = re.compile(r"""\bbackend\w*\s*(==|!=)|\bbackend\w*\s+(not\s+)?in\s+[(\[A-Z]"""
                         r"""|(==|!=)\s*["'](numpy|cpu|gpu)["']|["'](numpy|cpu|gpu)["']\s*(==|!=)"""
                         r"""|\bin\s*\(\s*["'](numpy|cpu|gpu)["']""")


def test_no_backend_name_comparisons_outside_the_backend_objects():
    found = []
    for package in ("compiler", "passes", "runtime"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "runtime" / "backends.py":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if _COMPARISON.search(code) and not code.lstrip().startswith("for "):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "decide through runtime.backends' Backend properties:\n" + \
        "\n".join(found)
