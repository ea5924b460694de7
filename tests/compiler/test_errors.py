"""Bad input: every case raises the contract's error class (ARCHITECTURE.md §3), with a message
that names this file and the line of the offending call, and leaves the caller's arrays unchanged.

Lines are found by marker comments (`# <- name`), so edits above a test don't break it.
"""

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.error_lines import error_checker

pytestmark = pytest.mark.usefixtures("each_backend")

line_of, check_error = error_checker(__file__)


def compiled(fn):
    return cc.compile(fn)


def arr(*shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# -- the error classes -----------------------------------------------------------------------
@pytest.mark.parametrize("cls,builtin", [(cc.InplaceError, ValueError),
                                         (cc.ShapeError, ValueError),
                                         (cc.TraceError, TypeError)])
def test_error_classes(cls, builtin):
    assert issubclass(cls, cc.CompilerError)
    assert issubclass(cls, builtin)
    assert issubclass(cc.CompilerError, Exception)
    with pytest.raises(builtin):
        raise cls("boom")


# -- shapes at trace time ----------------------------------------------------------------------
def test_add_shapes_that_dont_broadcast():
    def fn(x, y):
        return x + y  # <- add

    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(arr(2, 3), arr(2, 2))
    check_error(e, cc.ShapeError, "add", "[2, 3]", "[2, 2]", "broadcast")


def test_inplace_add_shapes_that_dont_broadcast():
    def fn(x, y):
        x.add_(y)  # <- add_
        return x

    x = arr(2, 3)
    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(x, arr(4))
    check_error(e, cc.ShapeError, "add_")
    np.testing.assert_array_equal(x, arr(2, 3))


def test_matmul_inner_dimensions():
    def fn(x, w):
        h = x * 2.0
        return h @ w  # <- matmul

    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(arr(2, 3), arr(4, 5))
    check_error(e, cc.ShapeError, "matmul", "[2, 3]", "[4, 5]")


def test_matmul_rank_1_inner_dimensions():
    def fn(x, v):
        return x.matmul(v)  # <- matmul_vec

    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(arr(2, 3), arr(4))
    check_error(e, cc.ShapeError, "matmul_vec")


@pytest.mark.parametrize("shape", [[4, 2], [-1, 4], [-1, -1], [7]], ids=str)
def test_reshape(shape):
    def fn(x):
        return x.reshape(shape)  # <- reshape

    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(arr(2, 3))
    check_error(e, cc.ShapeError, "reshape")


@pytest.mark.parametrize("case", ["expand", "transpose", "sum_axis", "concat", "index",
                                  "setitem", "squeeze_axis", "ce_labels", "layer_norm",
                                  "conv2d"])
def test_more_shape_errors(case):
    def fn(x, y):
        if case == "expand":
            x.expand([4, 3])  # <- shape:expand
        elif case == "transpose":
            x.transpose([0, 0])  # <- shape:transpose
        elif case == "sum_axis":
            x.sum(axis=2)  # <- shape:sum_axis
        elif case == "concat":
            cc.concat([x, y], axis=0)  # <- shape:concat
        elif case == "index":
            x[0, 1, 2]  # <- shape:index
        elif case == "setitem":
            x[0] = y  # <- shape:setitem
        elif case == "squeeze_axis":
            x.squeeze(5)  # <- shape:squeeze_axis
        elif case == "ce_labels":
            F.cross_entropy(x, y.cast("int64"))  # <- shape:ce_labels
        elif case == "layer_norm":
            F.layer_norm(x, [4])  # <- shape:layer_norm
        elif case == "conv2d":
            F.conv2d(x.reshape([1, 2, 3, 1]), y.reshape([1, 1, 2, 2]))  # <- shape:conv2d
        return x

    with pytest.raises(cc.ShapeError) as e:
        compiled(fn)(arr(2, 3), arr(2, 2))
    check_error(e, cc.ShapeError, "shape:" + case)


# -- calling a compiled program with arguments that don't fit -------------------------------------
def test_program_called_with_another_shape():
    fn = compiled(lambda x, y: x + y)
    x, y = arr(2, 3), arr(3)
    prog = fn.lower(x, y)
    with pytest.raises(cc.ShapeError) as e:
        prog(arr(3, 3), y)  # <- prog_shape
    check_error(e, cc.ShapeError, "prog_shape", "'x'", "[3, 3]", "f32[2,3]")


def test_program_called_with_another_dtype():
    fn = compiled(lambda x: x.add_(1.0))
    x = arr(2, 3)
    prog = fn.lower(x)
    x64 = arr(2, 3, dtype=np.float64)
    with pytest.raises(cc.CompilerError) as e:
        prog(x64)  # <- prog_dtype
    # doesn't fit the traced signature (ShapeError) and is an argument of the wrong type
    check_error(e, cc.ShapeError, "prog_dtype", "float64", "float32")
    check_error(e, cc.TraceError, "prog_dtype")
    np.testing.assert_array_equal(x64, arr(2, 3))
    np.testing.assert_array_equal(x, arr(2, 3))


def test_program_called_with_wrong_arguments():
    prog = compiled(lambda x, s: x * s).lower(arr(2), 2.0)
    with pytest.raises(cc.TraceError) as e:
        prog(arr(2))  # <- prog_count
    check_error(e, cc.TraceError, "prog_count", "2 arguments")
    with pytest.raises(cc.TraceError) as e:
        prog(arr(2), 3.0)  # <- prog_scalar
    check_error(e, cc.TraceError, "prog_scalar", "3.0")
    with pytest.raises(cc.TraceError) as e:
        prog(2.0, 2.0)  # <- prog_array
    check_error(e, cc.TraceError, "prog_array", "'x'")


def test_compiled_function_retraces_for_a_new_signature():
    fn = compiled(lambda x: x * 2.0)
    np.testing.assert_array_equal(fn(arr(2)), arr(2) * 2)
    np.testing.assert_array_equal(fn(arr(3, dtype=np.float64)), arr(3) * 2.0)


# -- what a static graph can't express ------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, object, np.uint32, np.float128])
def test_unsupported_argument_dtypes(dtype):
    x = np.zeros(3, dtype=dtype)
    with pytest.raises(cc.TraceError) as e:
        compiled(lambda t: t)(x)  # <- bad_dtype
    check_error(e, cc.TraceError, "bad_dtype", "'t'", np.dtype(dtype).name)
    with pytest.raises(cc.TraceError) as e:
        cc.trace(lambda t: t, x)  # <- bad_dtype_trace
    check_error(e, cc.TraceError, "bad_dtype_trace")


@pytest.mark.parametrize("value", [[1.0, 2.0], (1.0, 2.0), "abc", None, {"a": 1}, 1 + 2j],
                         ids=str)
def test_unsupported_argument_types(value):
    with pytest.raises(cc.TraceError) as e:
        compiled(lambda x, v: x)(arr(2), value)  # <- bad_arg
    check_error(e, cc.TraceError, "bad_arg", "'v'")


def test_unsupported_dtypes_inside_the_trace():
    def fn(x):
        return x.cast("uint32")  # <- cast_u32

    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(arr(2))
    check_error(e, cc.TraceError, "cast_u32", "uint32")

    def fn2(x):
        return x + cc.to_tensor(np.ones(2, np.complex64))  # <- to_tensor_complex

    with pytest.raises(cc.TraceError) as e:
        compiled(fn2)(arr(2))
    check_error(e, cc.TraceError, "to_tensor_complex", "complex64")


def test_traced_value_in_control_flow():
    def fn(x):
        if x.sum() > 0:  # <- if
            return x
        return -x

    x = arr(2, 3)
    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(x)
    check_error(e, cc.TraceError, "if", "control flow")


@pytest.mark.parametrize("case", ["numpy", "item", "float", "int", "tolist", "while", "index"])
def test_data_needed_at_trace_time(case):
    def fn(x):
        if case == "numpy":
            x.numpy()  # <- data:numpy
        elif case == "item":
            x.sum().item()  # <- data:item
        elif case == "float":
            float(x.sum())  # <- data:float
        elif case == "int":
            int(x.max())  # <- data:int
        elif case == "tolist":
            x.tolist()  # <- data:tolist
        elif case == "while":
            while x.max() > 10:  # <- data:while
                x = x - 1
        elif case == "index":
            [1, 2, 3][x.sum()]  # <- data:index
        return x

    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(arr(2, 3))
    check_error(e, cc.TraceError, "data:" + case)


def test_tensor_indices_and_bad_returns():
    def gather(x):
        return x[x]  # <- gather

    # an integer tensor index gathers (issue 24); a float one is refused
    with pytest.raises(cc.TraceError) as e:
        compiled(gather)(arr(3))
    check_error(e, cc.TraceError, "gather", "integers")

    def returns_a_set(x):
        return {x}

    with pytest.raises(cc.TraceError) as e:
        compiled(returns_a_set)(arr(3))  # <- bad_return
    check_error(e, cc.TraceError, "bad_return", "set")


def test_tensors_outside_a_trace():
    with pytest.raises(cc.TraceError) as e:
        cc.zeros([2])  # <- outside
    check_error(e, cc.TraceError, "outside", "traced")


def test_int_tensor_cannot_require_grad():
    def fn(x):
        x.stop_gradient = False  # <- int_grad
        return x

    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(arr(3, dtype=np.int32))
    check_error(e, cc.TraceError, "int_grad", "int32")


def test_bool_negative_is_rejected_at_trace_time():
    def fn(x):
        return -(x > 1.0)  # <- bool_neg

    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(arr(3))
    check_error(e, cc.TraceError, "bool_neg", "bool")


def test_unknown_reduction():
    def fn(x, y):
        return F.mse_loss(x, y, reduction="max")  # <- reduction

    with pytest.raises(cc.TraceError) as e:
        compiled(fn)(arr(3), arr(3))
    check_error(e, cc.TraceError, "reduction", "'max'")


# -- illegal inplace ops ---------------------------------------------------------------------------
def test_inplace_that_would_grow_the_target():
    def fn(x, y):
        x.add_(y)  # <- grow
        return x

    x = arr(3)
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(x, arr(2, 3))
    check_error(e, cc.InplaceError, "grow", "add_", "[3]", "[2, 3]")
    np.testing.assert_array_equal(x, arr(3))


def test_inplace_that_would_change_the_dtype_class():
    def fn(x):
        x.add_(1.5)  # <- int_add_float
        return x

    x = arr(3, dtype=np.int32)
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(x)
    check_error(e, cc.InplaceError, "int_add_float", "add_", "int32")
    np.testing.assert_array_equal(x, arr(3, dtype=np.int32))


@pytest.mark.parametrize("case", ["divide_", "sqrt_", "itruediv", "multiply_"])
def test_more_dtype_class_changes(case):
    def fn(x):
        if case == "divide_":
            x.divide_(2)  # <- dtype:divide_
        elif case == "sqrt_":
            x.sqrt_()  # <- dtype:sqrt_
        elif case == "itruediv":
            x /= 2  # <- dtype:itruediv
        elif case == "multiply_":
            x.multiply_(0.5)  # <- dtype:multiply_
        return x

    x = arr(4, dtype=np.int64)
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(x)
    check_error(e, cc.InplaceError, "dtype:" + case)
    np.testing.assert_array_equal(x, arr(4, dtype=np.int64))


@pytest.mark.parametrize("case", ["add_", "fill_", "setitem", "setitem_row", "iadd",
                                  "sliced_setitem"])
def test_writes_into_an_expanded_view(case):
    def fn(x):
        e = x.expand([4, 3])
        if case == "add_":
            e.add_(1.0)  # <- expand:add_
        elif case == "fill_":
            e.fill_(0.0)  # <- expand:fill_
        elif case == "setitem":
            e[:, 0] = 1.0  # <- expand:setitem
        elif case == "setitem_row":
            e[1] = 1.0  # <- expand:setitem_row
        elif case == "iadd":
            e += 1.0  # <- expand:iadd
        elif case == "sliced_setitem":
            x[0:1].expand([2, 2, 3])[0] = 5.0  # <- expand:sliced_setitem
        return x

    x = arr(1, 3)
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(x)
    check_error(e, cc.InplaceError, "expand:" + case, "expanded")
    np.testing.assert_array_equal(x, arr(1, 3))


def test_expand_that_broadcasts_nothing_is_writable():
    def fn(x):
        x.expand([1, 2, 3]).add_(1.0)
        return x

    x = arr(2, 3)
    compiled(fn)(x)
    np.testing.assert_array_equal(x, arr(2, 3) + 1)


def test_read_only_array_that_the_function_mutates():
    def fn(x, y):
        h = x + y
        y[0] = 0.0  # <- ro_write
        return h

    x, y = arr(3), arr(3)
    y.flags.writeable = False
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(x, y)  # <- ro_call
    check_error(e, cc.InplaceError, "ro_write", "read-only", "'y'")
    check_error(e, cc.InplaceError, "ro_call")
    np.testing.assert_array_equal(y, arr(3))
    np.testing.assert_array_equal(x, arr(3))


def test_inplace_on_a_leaf_that_needs_grad():
    def fn(w, x):
        w.stop_gradient = False
        w.subtract_(x)  # <- leaf
        return w

    w = arr(2, 2)
    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(w, arr(2, 2))
    check_error(e, cc.InplaceError, "leaf",
                "leaf tensor 'w' that doesn't stop gradient can't use inplace strategy")
    np.testing.assert_array_equal(w, arr(2, 2))


@pytest.mark.parametrize("case", ["setitem", "view", "iadd", "relu_"])
def test_more_writes_to_a_leaf_that_needs_grad(case):
    def fn(w):
        w.stop_gradient = False
        if case == "setitem":
            w[0] = 1.0  # <- leaf:setitem
        elif case == "view":
            w.reshape([4])[1:].zero_()  # <- leaf:view
        elif case == "iadd":
            w += 1.0  # <- leaf:iadd
        elif case == "relu_":
            F.relu_(w)  # <- leaf:relu_
        return w

    with pytest.raises(cc.InplaceError) as e:
        compiled(fn)(arr(2, 2))
    check_error(e, cc.InplaceError, "leaf:" + case, "leaf tensor 'w' that doesn't stop gradient")


def test_inplace_on_a_leaf_is_allowed_under_no_grad():
    def fn(w, x):
        w.stop_gradient = False
        loss = (w * x).sum()
        loss.backward()
        with cc.no_grad():
            w.subtract_(0.5 * w.grad)
            w[0, 0] = 10.0
        return loss

    w, x = arr(2, 2), np.full((2, 2), 2.0, np.float32)
    loss = compiled(fn)(w, x)
    assert loss == (arr(2, 2) * 2).sum()
    want = arr(2, 2) - 0.5 * 2.0
    want[0, 0] = 10.0
    np.testing.assert_array_equal(w, want)


def test_inplace_on_an_input_that_stops_gradient_is_allowed():
    def fn(w):
        w.add_(1.0)
        return w

    w = arr(2)
    compiled(fn)(w)
    np.testing.assert_array_equal(w, arr(2) + 1)


# -- a failed call changes nothing ---------------------------------------------------------------
@pytest.mark.parametrize("failure", ["trace", "signature", "read_only"])
def test_a_failed_call_leaves_every_caller_array_unchanged(failure):
    def fn(a, b, c):
        a.add_(1.0)
        b[0] = -1.0
        if a.shape[0] == 5:
            c.reshape([2, 2])  # fails at trace time for the 5-element signature
        c.scale_(3.0)
        return a, b, c

    f = compiled(fn)
    a, b, c = arr(4), arr(4), arr(4)
    f(a, b, c)  # the first signature compiles and runs
    originals = [a.copy(), b.copy(), c.copy()]
    if failure == "trace":
        args = (arr(5), arr(5), arr(5))
        originals = [x.copy() for x in args]
        with pytest.raises(cc.ShapeError):
            f(*args)
    elif failure == "signature":
        args = (a, b, arr(4, dtype=np.float64))
        originals = [x.copy() for x in args]
        with pytest.raises(cc.CompilerError):
            f.lower(a, b, c)(*args)
    else:
        c.flags.writeable = False
        args = (a, b, c)
        with pytest.raises(cc.InplaceError):
            f(*args)
    for got, want in zip(args, originals):
        np.testing.assert_array_equal(got, want)


def test_unsqueeze_axis_out_of_range_is_a_shape_error():
    def fn(x):
        return x.unsqueeze(5)  # <- unsqueeze_range
    with pytest.raises(cc.ShapeError) as err:
        cc.trace(fn, np.ones((2, 3)))
    check_error(err, cc.ShapeError, "unsqueeze_range", "out of range")
