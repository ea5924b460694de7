"""Issue 16, items 12-14: small wrong results and raw runtime errors, each reproduced as the
issue reported it. Shapes and dtypes are static, so what they decide fails at trace time,
naming the user's line."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as cc

pytestmark = pytest.mark.usefixtures("each_backend")


def _line(fn) -> str:
    return f"test_static_checks.py:{fn.__code__.co_firstlineno}"


def test_scale_keeps_int64_and_every_digit():
    x = np.array([2**53 + 1, -(2**53) - 1], np.int64)
    out = cc.compile(lambda t: t.scale(2))(x)
    assert out.dtype == np.int64
    assert out.tolist() == [2**54 + 2, -(2**54) - 2]  # float32 would have lost the +2


def test_scale_inplace_on_integers_writes_the_callers_array():
    x = np.array([1, -2, 3], np.int32)
    cc.compile(lambda t: t.scale_(3, bias=1))(x)
    assert x.dtype == np.int32 and x.tolist() == [4, -5, 10]


def test_scale_of_an_integer_by_a_fraction_is_a_trace_error():
    fn = lambda t: t.scale(2.5)  # noqa: E731
    with pytest.raises(cc.TraceError, match=_line(fn)):
        cc.compile(fn)(np.arange(3))


def test_python_int_too_big_for_the_tensor_dtype():
    fn = lambda t: t + 2**40  # noqa: E731
    with pytest.raises(cc.TraceError, match="doesn't fit the int32") as info:
        cc.compile(fn)(np.arange(3, dtype=np.int32))
    assert _line(fn) in str(info.value)
    # The same int fits int64: no error, exact result.
    assert cc.compile(fn)(np.arange(3)).tolist() == [2**40, 2**40 + 1, 2**40 + 2]


def test_max_of_a_zero_size_tensor_is_a_trace_error():
    fn = lambda t: t.max()  # noqa: E731
    with pytest.raises(cc.ShapeError, match=_line(fn)):
        cc.compile(fn)(np.ones((0, 3), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_where_needs_a_bool_condition(dtype):
    fn = lambda c, a, b: cc.where(c, a, b)  # noqa: E731
    with pytest.raises(cc.TraceError, match=_line(fn)) as info:
        cc.compile(fn)(np.ones(3, dtype), np.ones(3), np.zeros(3))
    assert "bool" in str(info.value)
