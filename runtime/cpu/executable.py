"""The "cpu" backend's runnable program: the JIT'd entry, the arena, and per-call outputs.

`run(inputs)` passes the caller's (C-contiguous) arrays, a freshly allocated buffer for each
returned buffer of the plan and the arena to the native `run` in ONE ctypes call, then wraps
the results as numpy views of those buffers (the layouts come from
`runtime/lowering/places.py`). The arena is allocated at the first call and reused (64-byte
aligned, the plan's alignment; from 2 MiB on 2 MiB aligned and on transparent huge pages, as
the outputs: `runtime.arena.empty_aligned`), so lowering a program bigger than the machine
works, and a call that can't get its memory raises `InsufficientMemoryError` before anything
runs (`check_memory`, as the numpy executor).
Calls may run at once from several threads (the ctypes call releases the GIL): each takes an
arena, with its own pointer tables, from the program's pool (`runtime.arena.POOL_LIMIT`).

A call whose layout was seen before takes a shorter path (`fast_runner`, driven by
`compiler.api._FastCall`): one native trampoline (`_trampoline`, compiled once per process)
reads the arguments' data pointers and writeable flags straight from the argument tuple's
ndarray objects, checks that no two inputs overlap, fills the pointer tables, aligns the fresh
outputs and calls the entry; it returns -1 without running anything when a check fails (the
driver then takes the general path, which raises the error or traces the aliasing). A program
returning one small fresh array (`FastRunner.single`, the common small call) is called through
`fast_one` instead, a Python builtin compiled with the trampoline that does the whole of
`FastRunner.one` (the arena from the pool, the fresh buffer and the returned view made through
CPython's and NumPy's C API, the entry run with the GIL released) without a Python frame:
~0.4 us of the call's ~2 us, where `one` took ~3 us.

Fallback nodes (`emitter.FALLBACK_OPS`) call back into Python: the callback rebuilds the
operands as numpy views from the buffer pointers it gets (nothing of the call is kept on the
executable: calls in other threads run the same callback), runs the op's reference and writes
the result into the planned place; the communication ops of data-parallel training run their
`into` instead (the all-reduce is posted on, and completed in, the bucket's arena memory, so the
native entry runs the whole step in one crossing, with a callback per communication node). An
exception there is kept (per thread) and re-raised after the native call returns (ctypes would
otherwise print and swallow it); the callback then returns 1 and the native entry stops at that
node, so a failed all-reduce is the last thing the step does (no update runs with a gradient
that was never reduced).

Data out of range (an index, a computed class label): the native entry returns `t + 1` when
node `t` found some, before that node wrote anything (`index_kernels.py`); the driver then runs
that node's reference on its operands, still as they were, which raises the numpy backend's
own `DataError`, naming the user's line. Nothing was written into a caller's array: the driver
runs programs with such checks on private copies (`compiler.api.Program.__call__`).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

import numpy as np
from llvmlite import binding as llvm

from compiler.errors import InsufficientMemoryError
from compiler.ops import COMM_OPS
from runtime.arena import HUGE_PAGE, POOL_LIMIT, REFUSED, ArenaPool, compute, empty_aligned
from runtime.lowering.places import contiguous_strides
from runtime.reference import run_node

from . import jit, pool
from .emitter import ModuleEmitter

_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_int64)
_FALLBACK = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
ALIGN = 64


def _aligned(nbytes: int) -> np.ndarray:
    # 2 MiB aligned and advised for huge pages from 2 MiB on (runtime.arena.empty_aligned)
    return empty_aligned(nbytes, ALIGN)


def _with_room(nbytes: int) -> np.ndarray:
    """A fresh output's memory on the fast path: room to align its start (the trampoline
    does), so that no address is read in Python."""
    return np.empty(nbytes + ALIGN - 1, np.uint8)


def _view(storage: np.ndarray, place) -> np.ndarray:
    """The ndarray for `place` over a uint8 buffer."""
    item = place.dtype.itemsize
    # A zero-size view reads nothing: its offset may lie past its (zero-byte) buffer's end
    # (`x[:, -3]` of a [0, 4] value), which np.ndarray refuses.
    offset = 0 if 0 in place.shape else place.offset * item
    return np.ndarray(place.shape, place.dtype, buffer=storage, offset=offset,
                      strides=tuple(s * item for s in place.strides))


def _buffer_at(address: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(address))


class _ArenaState:
    """One arena of a program and the pointer tables of the calls that use it (filled in
    place: building ctypes arrays per call costs more)."""
    __slots__ = ("arena", "arena_ptr", "in_ptrs", "out_ptrs", "in_addr", "out_addr", "offs",
                 "block", "block_addr")

    def __init__(self, arena, n_in, n_out):
        self.arena, self.arena_ptr = arena, arena.ctypes.data
        self.in_ptrs = (ctypes.c_void_p * max(n_in, 1))()
        self.out_ptrs = (ctypes.c_void_p * max(n_out, 1))()
        self.in_addr = ctypes.addressof(self.in_ptrs)
        self.out_addr = ctypes.addressof(self.out_ptrs)
        # The trampoline's view of this arena: where its tables are, and where it puts each
        # fresh output's alignment offset.
        self.offs = (ctypes.c_int64 * max(n_out, 1))()
        self.block = (ctypes.c_int64 * 4)(self.arena_ptr, self.in_addr, self.out_addr,
                                          ctypes.addressof(self.offs))
        self.block_addr = ctypes.addressof(self.block)


# -- the fast path's trampoline -------------------------------------------------------------
# CPython's and NumPy's object layouts (PyTupleObject's items, PyArrayObject's `data` and
# `flags`), verified on live objects before the trampoline is used; where they don't hold, a
# call takes the general path.
_WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE
_FAST_CALL = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p)
_trampoline_cache: list = []
_trampoline_lock = threading.Lock()


def _layout():
    """(tuple item offset, ndarray data offset, ndarray flags offset), or None when reading
    them from live objects doesn't give what Python says."""
    head = object.__basicsize__
    item, data, flags = tuple.__basicsize__, head, head + 48
    ptr = ctypes.c_void_p.from_address
    try:
        w = np.ones(3, np.float32)
        r = np.ones(2, np.int8)
        r.flags.writeable = False
        t = (w, r)
        ok = (ptr(id(t) + item).value == id(w) and ptr(id(t) + item + 8).value == id(r)
              and ptr(id(w) + data).value == w.ctypes.data
              and ptr(id(r) + data).value == r.ctypes.data
              and ctypes.c_int32.from_address(id(w) + flags).value & _WRITEABLE
              and not ctypes.c_int32.from_address(id(r) + flags).value & _WRITEABLE
              and ctypes.sizeof(ctypes.c_void_p) == 8)
    except Exception:  # noqa: BLE001 - any surprise: no fast path
        return None
    return (item, data, flags) if ok else None


def _layout_ok():
    """The verified layout (once per process), or None."""
    if not _layout_cache:
        _layout_cache.append(_layout())
    return _layout_cache[0]


_layout_cache: list = []


def _trampoline_ir(item: int, data: int, flags: int, api: dict | None) -> str:
    """`fast_call(runner, state, args, outs)`. runner (i64 fields): 0 entry, 1 fallback
    callback, 2 &threads, 3 n_dyn (inputs taken from `args`), 4 their positions in `args`, 5
    n_states, 6 the state arrays' object addresses, 7 every input's byte size, 8 every input's
    must-be-writeable flag, 9 n_out; state: 0 arena, 1 input table, 2 output table, 3 output
    alignment offsets. Returns -1 (nothing run) for a read-only input the program writes or
    two inputs that overlap, else the entry's status. With `api` (`_native_api`), also
    `fast_one`: the whole short call of a `FastRunner.single` program as a Python builtin
    (`_fast_one_ir`)."""
    return f"""
define internal i64 @fill(ptr %rb, ptr %sb, ptr %items, ptr %oitems) {{
entry:
  %f3 = getelementptr i64, ptr %rb, i64 3
  %ndyn = load i64, ptr %f3
  %f4 = getelementptr i64, ptr %rb, i64 4
  %pos = load ptr, ptr %f4
  %f5 = getelementptr i64, ptr %rb, i64 5
  %nst = load i64, ptr %f5
  %f6 = getelementptr i64, ptr %rb, i64 6
  %sobj = load ptr, ptr %f6
  %f7 = getelementptr i64, ptr %rb, i64 7
  %sizes = load ptr, ptr %f7
  %f8 = getelementptr i64, ptr %rb, i64 8
  %wr = load ptr, ptr %f8
  %f9 = getelementptr i64, ptr %rb, i64 9
  %nout = load i64, ptr %f9
  %s1 = getelementptr i64, ptr %sb, i64 1
  %intab = load ptr, ptr %s1
  %s2 = getelementptr i64, ptr %sb, i64 2
  %outtab = load ptr, ptr %s2
  %s3 = getelementptr i64, ptr %sb, i64 3
  %offs = load ptr, ptr %s3
  %nin = add i64 %ndyn, %nst
  br label %in.head

in.head:
  %i = phi i64 [0, %entry], [%i.next, %in.store]
  %in.more = icmp slt i64 %i, %nin
  br i1 %in.more, label %in.body, label %ov.head

in.body:
  %is.dyn = icmp slt i64 %i, %ndyn
  br i1 %is.dyn, label %in.dyn, label %in.state

in.dyn:
  %pp = getelementptr i64, ptr %pos, i64 %i
  %p = load i64, ptr %pp
  %ip = getelementptr ptr, ptr %items, i64 %p
  %obj.d = load ptr, ptr %ip
  br label %in.obj

in.state:
  %si = sub i64 %i, %ndyn
  %sp = getelementptr ptr, ptr %sobj, i64 %si
  %obj.s = load ptr, ptr %sp
  br label %in.obj

in.obj:
  %obj = phi ptr [%obj.d, %in.dyn], [%obj.s, %in.state]
  %wp = getelementptr i64, ptr %wr, i64 %i
  %w = load i64, ptr %wp
  %need.w = icmp ne i64 %w, 0
  br i1 %need.w, label %in.flags, label %in.store

in.flags:
  %flp = getelementptr i8, ptr %obj, i64 {flags}
  %fl = load i32, ptr %flp
  %wbit = and i32 %fl, {_WRITEABLE}
  %ro = icmp eq i32 %wbit, 0
  br i1 %ro, label %refuse, label %in.store

in.store:
  %dp = getelementptr i8, ptr %obj, i64 {data}
  %d = load ptr, ptr %dp
  %tp = getelementptr ptr, ptr %intab, i64 %i
  store ptr %d, ptr %tp
  %i.next = add i64 %i, 1
  br label %in.head

ov.head:
  %a = phi i64 [0, %in.head], [%a.next, %ov.next]
  %ov.more = icmp slt i64 %a, %ndyn
  br i1 %ov.more, label %ov.body, label %out.head

ov.body:
  %azp = getelementptr i64, ptr %sizes, i64 %a
  %az = load i64, ptr %azp
  %apt = getelementptr ptr, ptr %intab, i64 %a
  %ap = load ptr, ptr %apt
  %alo = ptrtoint ptr %ap to i64
  %ahi = add i64 %alo, %az
  %a.next = add i64 %a, 1
  %a.empty = icmp eq i64 %az, 0
  br i1 %a.empty, label %ov.next, label %ov.inner

ov.inner:
  %b = phi i64 [%a.next, %ov.body], [%b.next, %ov.inner.next]
  %b.more = icmp slt i64 %b, %nin
  br i1 %b.more, label %ov.pair, label %ov.next

ov.pair:
  %bzp = getelementptr i64, ptr %sizes, i64 %b
  %bz = load i64, ptr %bzp
  %bpt = getelementptr ptr, ptr %intab, i64 %b
  %bp = load ptr, ptr %bpt
  %blo = ptrtoint ptr %bp to i64
  %bhi = add i64 %blo, %bz
  %c1 = icmp ult i64 %alo, %bhi
  %c2 = icmp ult i64 %blo, %ahi
  %c3 = icmp ne i64 %bz, 0
  %c12 = and i1 %c1, %c2
  %hit = and i1 %c12, %c3
  br i1 %hit, label %refuse, label %ov.inner.next

ov.inner.next:
  %b.next = add i64 %b, 1
  br label %ov.inner

ov.next:
  br label %ov.head

out.head:
  %j = phi i64 [0, %ov.head], [%j.next, %out.body]
  %out.more = icmp slt i64 %j, %nout
  br i1 %out.more, label %out.body, label %done

out.body:
  %ojp = getelementptr ptr, ptr %oitems, i64 %j
  %oobj = load ptr, ptr %ojp
  %odp = getelementptr i8, ptr %oobj, i64 {data}
  %od = load ptr, ptr %odp
  %oaddr = ptrtoint ptr %od to i64
  %oup = add i64 %oaddr, {ALIGN - 1}
  %oal = and i64 %oup, {-ALIGN}
  %ooff = sub i64 %oal, %oaddr
  %oalp = inttoptr i64 %oal to ptr
  %otp = getelementptr ptr, ptr %outtab, i64 %j
  store ptr %oalp, ptr %otp
  %ofp = getelementptr i64, ptr %offs, i64 %j
  store i64 %ooff, ptr %ofp
  %j.next = add i64 %j, 1
  br label %out.head

done:
  ret i64 0

refuse:
  ret i64 -1
}}

define internal i64 @enter(ptr %rb, ptr %sb) {{
  %entry.p = load ptr, ptr %rb
  %f1 = getelementptr i64, ptr %rb, i64 1
  %cb = load ptr, ptr %f1
  %f2 = getelementptr i64, ptr %rb, i64 2
  %thp = load ptr, ptr %f2
  %th = load i64, ptr %thp
  %arena = load ptr, ptr %sb
  %s1 = getelementptr i64, ptr %sb, i64 1
  %intab = load ptr, ptr %s1
  %s2 = getelementptr i64, ptr %sb, i64 2
  %outtab = load ptr, ptr %s2
  %r = call i64 %entry.p(ptr %arena, ptr %intab, ptr %outtab, ptr %cb, i64 %th)
  ret i64 %r
}}

define i64 @fast_call(ptr %rb, ptr %sb, ptr %args, ptr %outs) {{
  %items = getelementptr i8, ptr %args, i64 {item}
  %oitems = getelementptr i8, ptr %outs, i64 {item}
  %ok = call i64 @fill(ptr %rb, ptr %sb, ptr %items, ptr %oitems)
  %refused = icmp slt i64 %ok, 0
  br i1 %refused, label %refuse, label %call

call:
  %r = call i64 @enter(ptr %rb, ptr %sb)
  ret i64 %r

refuse:
  ret i64 -1
}}
""" + (_fast_one_ir(item, data, api) if api is not None else "")


# The C API functions `fast_one` calls (CPython's, and NumPy's from its `_ARRAY_API` table), by
# the names its IR uses.
_CPYTHON_API = {"GetAttr": "PyObject_GetAttr", "AsVoidPtr": "PyLong_AsVoidPtr",
                "IncRef": "Py_IncRef", "DecRef": "Py_DecRef", "ListSize": "PyList_Size",
                "ListGetItem": "PyList_GetItem", "ListSetSlice": "PyList_SetSlice",
                "ListAppend": "PyList_Append", "DictSize": "PyDict_Size",
                "ErrClear": "PyErr_Clear", "CallObject": "PyObject_CallObject",
                "SaveThread": "PyEval_SaveThread", "RestoreThread": "PyEval_RestoreThread"}
# Slots of NumPy's C API table: stable ABI since NumPy 1.7 (numpy/__multiarray_api.h).
_NUMPY_SLOTS = {"ArrayType": 2, "NewFromDescr": 94, "SetBase": 282}
# Objects whose addresses `fast_one` holds (alive as long as the module).
_U8 = np.dtype(np.uint8)
_ATTRS = {"S_addr": sys.intern("_addr"), "S_free": sys.intern("_free"),
          "S_block": sys.intern("block_addr")}


def _native_api() -> dict | None:
    """The addresses `fast_one` calls and reads, or None (no such table, or a trial call of
    NumPy's functions doesn't give what Python says): then no call takes it."""
    try:
        capi = ctypes.pythonapi
        api = {k: ctypes.cast(getattr(capi, name), ctypes.c_void_p).value
               for k, name in _CPYTHON_API.items()}
        try:
            from numpy._core import _multiarray_umath as umath  # lazy: NumPy 2's name
        except ImportError:  # (NumPy 1.x)
            from numpy.core import _multiarray_umath as umath  # lazy: NumPy 1's name
        # (function objects of our own: ctypes.pythonapi's are shared with other libraries)
        get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", capi))
        table = get(umath._ARRAY_API, None)
        api.update({k: ctypes.c_void_p.from_address(table + 8 * i).value
                    for k, i in _NUMPY_SLOTS.items()})
        if api["ArrayType"] != id(np.ndarray):
            return None
        new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object,
                                ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)(
                                    api["NewFromDescr"])
        set_base = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.py_object)(
            api["SetBase"])
        incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", capi))
        dims, strides = (ctypes.c_int64 * 1)(8), (ctypes.c_int64 * 1)(4)
        incref(_U8)  # (both steal a reference to the descriptor, and SetBase to the base)
        raw = new(id(np.ndarray), _U8, 1, ctypes.addressof(dims), None, None, 0, None)
        f4 = np.dtype(np.float32)
        incref(f4)
        dims[0] = 2
        view = new(id(np.ndarray), f4, 1, ctypes.addressof(dims), ctypes.addressof(strides),
                   raw.ctypes.data, _WRITEABLE, None)
        incref(raw)
        ok = (type(raw) is np.ndarray and raw.shape == (8,) and raw.dtype == _U8
              and type(view) is np.ndarray and view.shape == (2,) and view.dtype == f4
              and view.strides == (4,) and view.flags.writeable and view.flags.c_contiguous
              and set_base(view, raw) == 0 and view.base is raw
              and view.ctypes.data == raw.ctypes.data)
    except Exception:  # noqa: BLE001 - any surprise: the Python short call
        return None
    if not ok:
        return None
    api.update({k: id(v) for k, v in _ATTRS.items()})
    api.update(U8=id(_U8), REFUSED=id(REFUSED))
    return api


def _fast_one_ir(item: int, data: int, api: dict) -> str:
    """`fast_one(runner, args)`, a METH_O builtin bound to a `FastRunner` (`runner._addr`: its
    block, fields as `fast_call`'s and 10 the executable, 11 the fresh buffer's bytes with room
    to align, 12 the output's dtype, 13 its ndim, 14 its dims, 15 its byte strides, 16 its byte
    offset, 17 the executable's `_errors`, 18 its `_new_state`, 19 and 20 `pool.blas_enter`
    and `blas_exit` for a program that calls BLAS, else 0, 21 the executable's
    `_wake_cell`: the pool's pre-wake, else 0): `FastRunner.one` without a
    Python frame. It takes an arena from the executable's pool (`_free`, a new one where none
    is idle: as `ArenaPool._take`), allocates the fresh
    buffer, fills the tables and refuses as `fast_call` does (the GIL held while the
    arguments' objects are read), runs the entry with the GIL released (inside BLAS's
    bracket where it calls BLAS), and wraps the output
    as a view of the buffer. It returns REFUSED, with nothing of its own left behind, where the
    Python path decides: no arena to be had, a refused input, a nonzero status (data out of range),
    a fallback's exception, or an allocation that failed."""
    consts = "\n".join(f"  %{k} = inttoptr i64 {v} to ptr" for k, v in api.items())
    return f"""
define internal void @put_back(ptr %free, ptr %st) {{
entry:
{consts}
  %n = call i64 %ListSize(ptr %free)
  %room = icmp slt i64 %n, {POOL_LIMIT}
  br i1 %room, label %append, label %done

append:
  %ar = call i32 %ListAppend(ptr %free, ptr %st)
  %af = icmp ne i32 %ar, 0
  br i1 %af, label %clear, label %done

clear:
  call void %ErrClear()
  br label %done

done:
  call void %DecRef(ptr %st)
  call void %DecRef(ptr %free)
  ret void
}}

define ptr @fast_one(ptr %self, ptr %args) {{
entry:
{consts}
  %ao = call ptr %GetAttr(ptr %self, ptr %S_addr)
  %ao.null = icmp eq ptr %ao, null
  br i1 %ao.null, label %clear.slow, label %have.rb

have.rb:
  %rb = call ptr %AsVoidPtr(ptr %ao)
  call void %DecRef(ptr %ao)
  %f21 = getelementptr i64, ptr %rb, i64 21
  %wcell = load ptr, ptr %f21
  %wake = load ptr, ptr %wcell
  %wakes = icmp ne ptr %wake, null
  br i1 %wakes, label %wake.pool, label %woken

wake.pool:
  %f2 = getelementptr i64, ptr %rb, i64 2
  %thp = load ptr, ptr %f2
  %th = load i64, ptr %thp
  call void %wake(i64 %th)
  br label %woken

woken:
  %f10 = getelementptr i64, ptr %rb, i64 10
  %exe = load ptr, ptr %f10
  %free = call ptr %GetAttr(ptr %exe, ptr %S_free)
  %free.null = icmp eq ptr %free, null
  br i1 %free.null, label %clear.slow, label %have.free

have.free:
  %n = call i64 %ListSize(ptr %free)
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %new.state, label %take

new.state:
  %f18 = getelementptr i64, ptr %rb, i64 18
  %make = load ptr, ptr %f18
  %st.new = call ptr %CallObject(ptr %make, ptr null)
  %st.null = icmp eq ptr %st.new, null
  br i1 %st.null, label %drop.free.clear, label %have.st

take:
  %last = sub i64 %n, 1
  %st.idle = call ptr %ListGetItem(ptr %free, i64 %last)
  call void %IncRef(ptr %st.idle)
  %cut = call i32 %ListSetSlice(ptr %free, i64 %last, i64 %n, ptr null)
  br label %have.st

have.st:
  %st = phi ptr [%st.new, %new.state], [%st.idle, %take]
  %bo = call ptr %GetAttr(ptr %st, ptr %S_block)
  %bo.null = icmp eq ptr %bo, null
  br i1 %bo.null, label %back.clear, label %have.sb

have.sb:
  %sb = call ptr %AsVoidPtr(ptr %bo)
  call void %DecRef(ptr %bo)
  %f11 = getelementptr i64, ptr %rb, i64 11
  %room = load i64, ptr %f11
  %roomp = alloca i64
  store i64 %room, ptr %roomp
  call void %IncRef(ptr %U8)
  %raw = call ptr %NewFromDescr(ptr %ArrayType, ptr %U8, i32 1, ptr %roomp, ptr null,
                                ptr null, i32 0, ptr null)
  %raw.null = icmp eq ptr %raw, null
  br i1 %raw.null, label %back.clear, label %have.raw

have.raw:
  %oitems = alloca ptr
  store ptr %raw, ptr %oitems
  %items = getelementptr i8, ptr %args, i64 {item}
  %ok = call i64 @fill(ptr %rb, ptr %sb, ptr %items, ptr %oitems)
  %refused = icmp slt i64 %ok, 0
  br i1 %refused, label %drop.raw, label %run

run:
  %f19 = getelementptr i64, ptr %rb, i64 19
  %be = load ptr, ptr %f19
  %blas = icmp ne ptr %be, null
  br i1 %blas, label %blas.in, label %run.go

blas.in:
  %bi = call ptr %CallObject(ptr %be, ptr null)
  %bi.null = icmp eq ptr %bi, null
  br i1 %bi.null, label %drop.raw.clear, label %blas.in.ok

blas.in.ok:
  call void %DecRef(ptr %bi)
  br label %run.go

run.go:
  %ts = call ptr %SaveThread()
  %r = call i64 @enter(ptr %rb, ptr %sb)
  call void %RestoreThread(ptr %ts)
  br i1 %blas, label %blas.out, label %ran

blas.out:
  %f20 = getelementptr i64, ptr %rb, i64 20
  %bx = load ptr, ptr %f20
  %bo2 = call ptr %CallObject(ptr %bx, ptr null)
  %bo2.null = icmp eq ptr %bo2, null
  br i1 %bo2.null, label %drop.raw.clear, label %blas.out.ok

blas.out.ok:
  call void %DecRef(ptr %bo2)
  br label %ran

ran:
  %f17 = getelementptr i64, ptr %rb, i64 17
  %errs = load ptr, ptr %f17
  %ne = call i64 %DictSize(ptr %errs)
  %bad = or i64 %r, %ne
  %isbad = icmp ne i64 %bad, 0
  br i1 %isbad, label %drop.raw, label %wrap

wrap:
  %s3 = getelementptr i64, ptr %sb, i64 3
  %offs = load ptr, ptr %s3
  %off0 = load i64, ptr %offs
  %f16 = getelementptr i64, ptr %rb, i64 16
  %voff = load i64, ptr %f16
  %rdp = getelementptr i8, ptr %raw, i64 {data}
  %rd = load ptr, ptr %rdp
  %toff = add i64 %off0, %voff
  %vp = getelementptr i8, ptr %rd, i64 %toff
  %f12 = getelementptr i64, ptr %rb, i64 12
  %descr = load ptr, ptr %f12
  %f13 = getelementptr i64, ptr %rb, i64 13
  %nd64 = load i64, ptr %f13
  %nd = trunc i64 %nd64 to i32
  %f14 = getelementptr i64, ptr %rb, i64 14
  %dims = load ptr, ptr %f14
  %f15 = getelementptr i64, ptr %rb, i64 15
  %strides = load ptr, ptr %f15
  call void %IncRef(ptr %descr)
  %res = call ptr %NewFromDescr(ptr %ArrayType, ptr %descr, i32 %nd, ptr %dims,
                                ptr %strides, ptr %vp, i32 {_WRITEABLE}, ptr null)
  %res.null = icmp eq ptr %res, null
  br i1 %res.null, label %drop.raw.clear, label %set.base

set.base:
  %sbr = call i32 %SetBase(ptr %res, ptr %raw)
  %sb.bad = icmp ne i32 %sbr, 0
  br i1 %sb.bad, label %drop.res, label %done

done:
  call void @put_back(ptr %free, ptr %st)
  ret ptr %res

drop.res:
  call void %DecRef(ptr %res)
  call void %ErrClear()
  br label %back

drop.raw.clear:
  call void %ErrClear()
  br label %drop.raw

drop.raw:
  call void %DecRef(ptr %raw)
  br label %back

back.clear:
  call void %ErrClear()
  br label %back

back:
  call void @put_back(ptr %free, ptr %st)
  br label %slow

drop.free.clear:
  call void %DecRef(ptr %free)
  call void %ErrClear()
  br label %slow

clear.slow:
  call void %ErrClear()
  br label %slow

slow:
  call void %IncRef(ptr %REFUSED)
  ret ptr %REFUSED
}}
"""


def _trampoline():
    """The compiled `fast_call` as a ctypes function, or None (layouts not as expected).
    Compiled once per process, at the first call that takes a short path, by an LLVM JIT of
    its own: the trampoline is no program's code, so it stays out of the JIT's statistics
    and its disk cache (a process whose functions run once compiles nothing more)."""
    with _trampoline_lock:
        if not _trampoline_cache:
            layout = _layout_ok()
            fn = one = None
            if layout is not None:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                llvm.initialize_native_asmparser()
                machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
                lljit = llvm.create_lljit_compiler(machine)
                api = _native_api()
                builder = llvm.JITLibraryBuilder().add_ir(_trampoline_ir(*layout, api))
                builder.export_symbol("fast_call")
                if api is not None:
                    builder.export_symbol("fast_one")
                tracker = builder.link(lljit, "inplace_fast_call")
                fn = _FAST_CALL(tracker["fast_call"])
                if api is not None:  # (a PyMethodDef, alive as long as the process)
                    one = _MethodDef(b"fast_one", tracker["fast_one"], _METH_O, None)
                _trampoline_cache.append((lljit, tracker, one))  # (keeps the code alive)
            _trampoline_cache.insert(0, fn)
            _fast_one_def.append(one)
        return _trampoline_cache[0]


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_METH_O = 0x0008
_fast_one_def: list = []  # the PyMethodDef of `fast_one` (None: not available), once built
_new_builtin = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object,
                                 ctypes.c_void_p)(("PyCFunction_NewEx", ctypes.pythonapi))
# False: FastRunner.native() gives None, so that the short path stays in Python (`one`): for
# comparing the two in benchmarks/call_overhead.py.
NATIVE_CALLS = True


class _Refused(Exception):
    pass


class FastRunner:
    """One program's native call for a layout seen before: the arguments at `positions` of
    the call's tuple (C-contiguous ndarrays of the traced shapes and dtypes: the caller's key
    says so) and the state arrays are its inputs. `__call__(args)` gives the graph outputs at
    `wanted` (fresh buffers), or REFUSED when nothing ran (read-only or overlapping
    inputs)."""

    def __init__(self, exe, positions, states, written, wanted):
        graph = exe.graph
        self.exe = exe
        # The trampoline once compiled, else `_first` compiles it (building a runner
        # compiles nothing: a function called once never needs it).
        self._tramp = _trampoline_cache[0] if _trampoline_cache else self._first
        written = set(written)
        n_dyn = len(positions)
        sizes = [v.size * v.dtype.itemsize for v in graph.inputs]
        self._positions = list(positions)
        # (`states` may be ndarray subclasses, as Parameters: their own flags are read)
        self._states = [a if type(a) is np.ndarray else np.asarray(a) for a in states]
        self._keep = keep = [
            (ctypes.c_int64 * max(n_dyn, 1))(*positions),
            (ctypes.c_int64 * max(len(states), 1))(*(id(a) for a in states)),
            (ctypes.c_int64 * max(len(sizes), 1))(*sizes),
            (ctypes.c_int64 * max(len(sizes), 1))(*(int(k in written)
                                                   for k in range(len(sizes)))),
            states]  # (the state arrays stay alive while their addresses are used)
        self._block = (ctypes.c_int64 * 22)(
            exe._entry_address, exe._cb_address, ctypes.addressof(exe._threads_cell), n_dyn,
            ctypes.addressof(keep[0]), len(states), ctypes.addressof(keep[1]),
            ctypes.addressof(keep[2]), ctypes.addressof(keep[3]), len(exe._out_sizes))
        self._block[21] = ctypes.addressof(exe._wake_cell)
        self._addr = ctypes.addressof(self._block)
        # Fresh outputs: plain np.empty with room to align (the trampoline aligns), or from
        # 2 MiB on the aligned, huge-page-advised memory of the general path.
        self._out_sizes = [(n, n >= HUGE_PAGE) for n in exe._out_sizes]
        self._views = []
        for v in wanted:
            place = exe.places[id(v)]
            item = place.dtype.itemsize
            # (a zero-size view at offset 0: its own may lie past its zero-byte buffer, _view)
            self._views.append((place.slot[1], place.shape, place.dtype,
                                0 if 0 in place.shape else place.offset * item,
                                tuple(s * item for s in place.strides)))
        self._blas = exe._blas
        # One small fresh output buffer holding the one wanted output: `one` applies.
        self.single = (len(self._out_sizes) == 1 and not self._out_sizes[0][1]
                       and len(self._views) == 1)
        self._one = self._out_sizes[0][0] if self.single else None
        self._view = self._views[0][1:] if self.single else None
        if self.single:  # (fast_one's fields: the one output, as `one` makes it)
            shape, dtype, offset, strides = self._view
            keep += [(ctypes.c_int64 * max(len(shape), 1))(*shape),
                     (ctypes.c_int64 * max(len(shape), 1))(*strides), dtype, exe._errors,
                     exe._new_state, pool.blas_enter, pool.blas_exit]
            self._block[10:21] = [id(exe), self._one + ALIGN - 1, id(dtype), len(shape),
                                  ctypes.addressof(keep[-7]), ctypes.addressof(keep[-6]),
                                  offset, id(exe._errors), id(keep[-3]),
                                  id(keep[-2]) if exe._blas else 0,
                                  id(keep[-1]) if exe._blas else 0]

    def _first(self, *args):
        self._tramp = _trampoline()
        if self._tramp is None:  # (a runner exists only where the layouts were verified)
            raise RuntimeError("the fast-call trampoline could not be built")
        return self._tramp(*args)

    def __call__(self, args):
        """The graph outputs at `wanted`, or REFUSED (nothing ran)."""
        exe = self.exe
        if exe._wake is not None:  # (first: the workers' wake-up overlaps what follows)
            exe._wake(exe.threads)
        try:
            outs = tuple(_aligned(n) if huge else _with_room(n) for n, huge in self._out_sizes)
        except MemoryError:
            raise InsufficientMemoryError(f"{exe.graph.name}: can't allocate its outputs "
                                          f"({exe.plan.output_bytes} bytes)") from None
        free = exe._free  # (ArenaPool._take and put_back, inlined)
        try:
            state = free.pop()
        except IndexError:
            state = exe._new_state()
        try:
            self._native(state, args, outs)
            offs = state.offs
            return [np.ndarray(shape, dtype, outs[j], offs[j] + offset, strides)
                    for j, shape, dtype, offset, strides in self._views]
        except _Refused:
            return REFUSED
        finally:
            if len(free) < POOL_LIMIT:
                free.append(state)

    def one(self, args):
        """`self(args)[0]` where the program returns one array, in one small fresh buffer
        (`self.single`): the common small call, in fewer steps."""
        if self.exe._wake is not None:
            self.exe._wake(self.exe.threads)
        try:
            out = _with_room(self._one)
        except MemoryError:
            raise InsufficientMemoryError(f"{self.exe.graph.name}: can't allocate its outputs "
                                          f"({self.exe.plan.output_bytes} bytes)") from None
        free = self.exe._free
        try:
            state = free.pop()
        except IndexError:
            state = self.exe._new_state()
        try:
            outs = (out,)
            status = self._tramp(self._addr, state.block_addr, id(args), id(outs)) \
                if not self._blas else None
            if status != 0 or self.exe._errors:
                self._check(status, state, args, outs)
            shape, dtype, offset, strides = self._view
            return np.ndarray(shape, dtype, out, state.offs[0] + offset, strides)
        except _Refused:
            return REFUSED
        finally:
            if len(free) < POOL_LIMIT:
                free.append(state)

    def native(self):
        """`one` as a native builtin (`fast_one`: no Python frame; REFUSED where `one` would
        need Python, and then the general path takes the call), or None: not a `single`
        program, the trampoline not built yet or not available."""
        if (not NATIVE_CALLS or not self.single or not _fast_one_def
                or _fast_one_def[0] is None):
            return None
        return _new_builtin(ctypes.addressof(_fast_one_def[0]), self, None)

    def _native(self, state, args, outs):
        status = self._tramp(self._addr, state.block_addr, id(args), id(outs)) \
            if not self._blas else None
        if status != 0 or self.exe._errors:
            self._check(status, state, args, outs)

    def _check(self, status, state, args, outs):
        """After the trampoline: run it inside BLAS's bracket if the program calls BLAS
        (status None: not run yet), then raise a fallback's exception, REFUSED's signal or the
        data error of the node that found one."""
        exe = self.exe
        if status is None:
            pool.blas_enter()
            try:
                status = self._tramp(self._addr, state.block_addr, id(args), id(outs))
            finally:
                pool.blas_exit()
        if exe._errors:  # (some thread's callback failed: this one's?)
            error = exe._errors.pop(threading.get_ident(), None)
            if error is not None:
                raise error
        if status < 0:
            raise _Refused
        if status:
            self._data_error(status, state, args, outs)

    def _data_error(self, status, state, args, outs):
        exe = self.exe
        inputs = [args[p] for p in self._positions] + self._states
        flat = [a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
                for a in inputs]
        outputs = [o[k:k + n] for o, k, (n, _) in zip(outs, state.offs, self._out_sizes)]
        exe._raise_data_error(exe.graph.nodes[status - 1], state.arena, flat, outputs)


class CpuExecutable(ArenaPool):
    """A planned graph compiled to native code through llvmlite."""

    def __init__(self, graph, plan, sanitize: bool = False, opt: int = 3,
                 profile: bool = False):
        self.graph, self.plan, self.sanitize = graph, plan, sanitize
        emitter = ModuleEmitter(graph, plan, sanitize, name=graph.name, profile=profile)
        self._ticks = [] if profile else None
        self.source = emitter.ir_text          # the LLVM IR as emitted (readable)
        self.places = emitter.places
        self.fallback_nodes = emitter.fallback_nodes
        self._const_data = {k: np.frombuffer(bytes(d), np.uint8)
                             for k, d in emitter.const_data.items()}
        self._output_buffers = emitter.output_buffers
        # Threads a call may use (`set_threads`; the driver passes the `threads=` option);
        # the pool is compiled before a module that calls it is linked.
        self.parallel, self.threads = emitter.parallel, 1
        if self.parallel:
            pool.ensure(1)
        self._blas = any(name in emitter.module.globals for name in jit.BLAS_GEMM.values())
        self._compiled = jit.compile_ir(self.source, ["run"], opt=opt)
        self._entry_address = self._compiled.address("run")
        self._entry = _ENTRY(self._entry_address)
        self._threads_cell = ctypes.c_int64(1)  # (the trampoline reads `threads` here)
        # A parallel program called with threads > 1 wakes the pool's workers first thing in
        # a call (`pool.waker`); None: it never needs them.
        self._wake = None
        self._wake_cell = ctypes.c_void_p(0)  # (its address, for fast_one)
        self._cb = _FALLBACK(self._fallback)
        self._cb_address = ctypes.cast(self._cb, ctypes.c_void_p).value
        self._out_sizes = [max(b.size, 1) for b in self._output_buffers]
        self._init_pool()
        self._sizes = self._buffer_sizes()
        self._errors: dict[int, BaseException] = {}  # a fallback's exception, per thread
        if "llvm-opt" in os.environ.get("COMPILER_DUMP", "").split(","):
            print(self.optimized_ir)  # (COMPILER_DUMP=llvm, in the pipeline, prints `source`)

    def set_threads(self, threads: int):
        """Run this program's parallel kernels on up to `threads` threads (1: all on the
        calling thread); results are the same for any value."""
        self.threads = self._threads_cell.value = int(threads)
        if self.parallel and self.threads > 1:
            pool.ensure(self.threads)
        self._wake = pool.waker() if self.parallel and self.threads > 1 else None
        self._wake_cell.value = pool.wake_address() if self._wake is not None else 0

    @property
    def optimized_ir(self) -> str:
        """The LLVM IR after -O3 (for a disk-cache hit, optimised again when asked)."""
        return self._compiled.optimized_ir

    # -- the arena pool (ArenaPool): an aligned arena and its pointer tables ------------------
    def _make_arena(self):
        try:
            return _aligned(self.plan.arena_bytes)
        except MemoryError:
            raise InsufficientMemoryError(f"{self.graph.name}: can't allocate its arena of "
                                          f"{self.plan.arena_bytes} bytes") from None

    def _state(self, arena) -> _ArenaState:
        return _ArenaState(arena, len(self.graph.inputs), len(self._output_buffers))

    def _buffer_sizes(self) -> dict:
        sizes = {}
        for b in self.plan.buffers:
            if b.kind == "arena":
                sizes[("arena", b.id)] = b.size
        for j, b in enumerate(self._output_buffers):
            sizes[("output", j)] = b.size
        return sizes

    # -- the fallback callback (temporary gap: see emitter.FALLBACK_OPS) ----------------------
    def _fallback(self, t, ptrs):
        if t < 0:  # a profiling tick after node -1 - t
            self._ticks.append((-1 - t, self.profile_clock()))
            return 0
        try:
            node = self.fallback_nodes[t]
            values = list(node.inputs) + [node.out]
            arrays = []
            for k, v in enumerate(values):
                place = self.places[id(v)]
                arrays.append(_view(self._storage_at(place.slot, ptrs[k]), place))
            if node.op in COMM_OPS:  # posts / completes the request on the planned memory
                compute(node, arrays[-1], arrays[:-1])
            else:
                np.copyto(arrays[-1], run_node(node, arrays[:-1]))
        except BaseException as e:  # re-raised by run() (the callback runs in its thread);
            self._errors.setdefault(threading.get_ident(), e)  # the entry stops at this node
            return 1
        return 0

    def _storage_at(self, slot, address):
        """The memory at `address`, the start of `slot` in this call (an arena buffer's start:
        the view may reach to the arena's end, as `arena[offset:]`)."""
        kind, k = slot
        if kind == "input":
            v = self.graph.inputs[k]
            return _buffer_at(address, v.size * v.dtype.itemsize)
        if kind == "arena":
            return _buffer_at(address, self.plan.arena_bytes - self._arena_offset(k))
        return _buffer_at(address, self._sizes[slot])

    def _arena_offset(self, buffer_id):
        return self.plan.buffers[buffer_id].offset

    # The clock of `profile`'s ticks (ns): wall time; a subclass may count the calling
    # thread's CPU time instead (benchmarks/transformer_profile.py).
    profile_clock = staticmethod(time.perf_counter_ns)

    def profile(self, inputs, repeat: int = 5) -> list[tuple[object, float]]:
        """(node, median seconds) per node that runs code, measured between the ticks a
        `profile=True` build makes after each node (a callback costs ~1 us: fine for spotting
        the expensive kernels, not for timing tiny ones)."""
        assert self._ticks is not None, "build with profile=True"
        runs = []
        for _ in range(repeat):
            self._ticks = []
            start = self.profile_clock()
            self.run(inputs)
            prev, times = start, {}
            for t, ns in self._ticks:
                times[t] = (ns - prev) * 1e-9
                prev = ns
            runs.append(times)
        return [(self.graph.nodes[t], float(np.median([r[t] for r in runs])))
                for t in sorted(runs[0])]

    def _raise_data_error(self, node, arena, flat, outputs):
        """`node` found data out of range and stopped before writing: its reference, run on
        the same operands, raises the numpy backend's `DataError` (with the node's line)."""
        storage = {"input": flat, "output": outputs}
        arrays = []
        for v in node.inputs:
            place = self.places[id(v)]
            kind, k = place.slot
            if kind == "arena":
                buf = arena[self._arena_offset(k):]
            elif kind == "const":
                buf = self._const_data[k]
            else:
                buf = storage[kind][k]
            arrays.append(_view(buf, place))
        run_node(node, arrays)
        raise AssertionError(f"the native {node.op} at {node.loc} reported data out of range, "
                             "but its reference accepts it")

    # -- a call --------------------------------------------------------------------------------
    def fast_runner(self, positions, states, written, wanted) -> FastRunner | None:
        """A `FastRunner` for calls whose inputs are the arguments at `positions` then
        `states` (those at `written` must be writeable), returning the graph outputs `wanted`;
        None where a call needs more than one
        native call: an output outside the fresh buffers, a mutation whose final value isn't
        in its caller's array (copied back), a fallback node beside mutations (the driver
        defers signals around those), or no trampoline on this Python/NumPy."""
        graph = self.graph
        if any(self.places[id(v)].slot[0] != "output" for v in wanted):
            return None
        if graph.mutations and self.fallback_nodes:
            return None
        for k, v in graph.mutations.items():
            place, inp = self.places[id(v)], graph.inputs[k]
            if (place.slot != ("input", k) or place.offset or place.shape != inp.shape
                    or place.dtype != inp.dtype
                    or any(d > 1 and s != t for d, s, t in
                           zip(place.shape, place.strides, contiguous_strides(place.shape)))):
                return None
        if _layout_ok() is None:
            return None
        return FastRunner(self, positions, states, written, wanted)

    def run_held(self, inputs):
        """(outputs, mutations, held): a mutation's final value may lie in the call's arena,
        which no other call uses until `put_back(held)` (the driver copies it out first)."""
        graph = self.graph
        if self._wake is not None:
            self._wake(self.threads)
        flat = []
        for v, a in zip(graph.inputs, inputs):
            assert a.flags.c_contiguous and a.dtype == v.dtype and a.shape == v.shape
            flat.append(a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8))
        held = _, state = self._take()
        try:
            outs, muts = self._run_on(state, inputs, flat)
        except BaseException:
            self.put_back(held)
            raise
        return outs, muts, held

    def _run_on(self, state, inputs, flat):
        graph = self.graph
        try:
            outputs = [_aligned(n) for n in self._out_sizes]
        except MemoryError:
            raise InsufficientMemoryError(f"{graph.name}: can't allocate its outputs "
                                          f"({self.plan.output_bytes} bytes)") from None
        in_ptrs, out_ptrs = state.in_ptrs, state.out_ptrs
        for k, a in enumerate(inputs):
            in_ptrs[k] = a.ctypes.data
        for k, o in enumerate(outputs):
            out_ptrs[k] = o.ctypes.data
        if self._blas:
            pool.blas_enter()
            try:
                status = self._entry(state.arena_ptr, state.in_addr, state.out_addr,
                                     self._cb_address, self.threads)
            finally:
                pool.blas_exit()
        else:
            status = self._entry(state.arena_ptr, state.in_addr, state.out_addr,
                                 self._cb_address, self.threads)
        if self._errors:  # (some thread's callback failed: this one's?)
            error = self._errors.pop(threading.get_ident(), None)
            if error is not None:
                raise error
        arena = state.arena
        if status:
            self._raise_data_error(graph.nodes[status - 1], arena, flat, outputs)

        def array_of(v):
            place = self.places[id(v)]
            kind, k = place.slot
            if kind == "input":
                storage = flat[k]
            elif kind == "output":
                storage = outputs[k]
            else:
                storage = arena[self._arena_offset(k):]
            return _view(storage, place)
        outs = [array_of(v) for v in graph.outputs]
        muts = {k: array_of(v) for k, v in graph.mutations.items()}
        return outs, muts
