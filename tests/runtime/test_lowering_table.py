"""The lowering table (runtime/lowering/families.py): every registry op has a kernel family, and
every backend either lowers an op natively, calls back into the reference for it, or has the
driver refuse it first. Which ops a backend lowers is a property of its `Backend` object."""
import dataclasses
import importlib

import numpy as np
import pytest

import compiler as cc
from compiler.ops import OTHER, REGISTRY
from runtime import backends
from runtime.backends import BACKENDS, CPU, GPU, NUMPY
from runtime.lowering import families as F


def test_every_registry_op_has_a_kernel_family():
    missing = sorted(op for op in REGISTRY if F.family_of(op) is None)
    assert not missing, f"ops with no kernel family (add them to families.EXPLICIT): {missing}"
    assert set(F.EXPLICIT) <= set(REGISTRY), set(F.EXPLICIT) - set(REGISTRY)
    assert set(F.EXPLICIT.values()) | set(F.BY_KIND.values()) == set(F.FAMILIES)
    assert F.family_of("fused") == F.ELEMENTWISE_FAMILY


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_backend_lowers_falls_back_on_or_refuses_every_op(name):
    backend = BACKENDS[name]
    low = backend.lowering
    refused = F.ops_of(*low.refused)
    assert not backend.native_ops & backend.fallback_ops
    assert not (backend.native_ops | backend.fallback_ops) & refused
    gap = set(REGISTRY) - backend.native_ops - backend.fallback_ops - refused
    assert not gap, f"{name} neither lowers, falls back on nor refuses: {sorted(gap)}"


def test_todays_facts_per_backend():
    comm = {"bucket_pack", "allreduce_start", "allreduce_wait"}
    assert F.ops_of(F.COMMUNICATION) == comm
    assert NUMPY.native_ops == set(REGISTRY) and not NUMPY.fallback_ops
    assert CPU.native_ops == set(REGISTRY) - comm and CPU.fallback_ops == comm
    assert GPU.native_ops == set(REGISTRY) - comm and not GPU.fallback_ops
    assert GPU.lowering.refused == {F.COMMUNICATION}


class _Mpi:
    comm = None  # what Options.make asks of distributed= before the backend's refusal


def test_a_refused_family_is_refused_by_the_driver():
    # the gpu never sees communication ops: distributed= is refused before lowering
    assert GPU.distributed_refusal is not None
    with pytest.raises(ValueError, match="gpu backend has no host staging"):
        cc.compile(lambda x: x * 2.0, backend="gpu", distributed=_Mpi())


def test_a_new_op_lowers_by_its_kind_or_has_no_family(monkeypatch):
    # an elementwise op is native on every backend from its registry entry alone; an op of
    # kind "other" has no family until the table says how it lowers
    sq = dataclasses.replace(REGISTRY["square"], name="square_again")
    monkeypatch.setitem(REGISTRY, "square_again", sq)
    for b in BACKENDS.values():
        assert "square_again" in b.native_ops
    odd = dataclasses.replace(REGISTRY["cumsum"], name="odd_scan", kind=OTHER)
    monkeypatch.setitem(REGISTRY, "odd_scan", odd)
    assert F.family_of("odd_scan") is None
    assert "odd_scan" not in CPU.native_ops | GPU.native_ops
    monkeypatch.setitem(F.EXPLICIT, "odd_scan", F.ROW)
    assert {"odd_scan"} <= CPU.native_ops & GPU.native_ops


def test_a_backend_is_its_lowering():
    # a backend with another lowering answers native_ops from it (the driver asks the object)
    only_elementwise = F.Lowering(frozenset({F.ELEMENTWISE_FAMILY, F.VIEW_FAMILY}))
    b = dataclasses.replace(backends.CPU, lowering=only_elementwise)
    assert "exp" in b.native_ops and "matmul" not in b.native_ops and "reshape" in b.native_ops
    assert not b.fallback_ops


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_each_renderer_dispatches_by_family_and_declares_what_it_dispatches(name, monkeypatch):
    emitter = importlib.import_module(f"runtime.{name}.emitter")
    assert BACKENDS[name].lowering is emitter.LOWERING
    assert emitter.LOWERING.families == set(emitter.LOWER_BY_FAMILY) | {F.VIEW_FAMILY}
    # the node goes to its family's method: without the row family, softmax has no kernel
    rows = {k: v for k, v in emitter.LOWER_BY_FAMILY.items() if k != F.ROW}
    monkeypatch.setattr(emitter, "LOWER_BY_FAMILY", rows)
    fn = cc.compile(lambda x: cc.nn.functional.softmax(x * 2.0, axis=-1), backend=name)
    with pytest.raises(NotImplementedError, match=f"no {name} kernel for softmax"):
        fn.lower(np.ones((2, 3), np.float32))
