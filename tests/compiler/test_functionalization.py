"""Inplace ops and views at trace time (ARCHITECTURE.md §4), checked through compiled results.

The seed semantics: inplace ops share data and meta data (`y = x.scale_(2.0)` gives `y is x`);
views share data with their base, so a write through a view reaches the base and every other
view of it; a reshape that can't be a view is a copy; inputs the function mutates are written
back into the caller's arrays, exactly as in eager execution. Every test runs on each backend
(`each_backend`: numpy and cpu).
"""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

pytestmark = pytest.mark.usefixtures("each_backend")

def run(fn, *args):
    return cc.compile(fn)(*args)


def f32(*shape, start=0.0):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


# -- inplace ops return the same object --------------------------------------------------------
def test_scale_inplace_returns_the_same_object():
    def fn(x):
        y = x.scale_(2.0)
        assert y is x
        return y

    x = f32(2, 3)
    out = run(fn, x)
    np.testing.assert_array_equal(out, f32(2, 3) * 2.0)
    assert out is x  # a returned mutated input is the caller's array itself


@pytest.mark.parametrize("call", [
    lambda t: t.add_(1.0), lambda t: t.subtract_(1.0), lambda t: t.multiply_(2.0),
    lambda t: t.divide_(2.0), lambda t: t.pow_(2.0), lambda t: t.scale_(3.0, 1.0),
    lambda t: t.exp_(), lambda t: t.sin_(), lambda t: t.sqrt_(), lambda t: t.tanh_(),
    lambda t: t.relu_(), lambda t: F.relu_(t), lambda t: t.clip_(1.0, 3.0),
    lambda t: t.zero_(), lambda t: t.fill_(7.0), lambda t: t.abs_(), lambda t: t.neg_(),
    lambda t: t.transpose_([1, 0]), lambda t: t.reshape_([3, 2]), lambda t: t.flatten_(),
    lambda t: t.unsqueeze_(0), lambda t: t.greater_than_(2.0), lambda t: t.logical_not_(),
    lambda t: cc.add_(t, 1.0),
])
def test_every_inplace_form_returns_self(call):
    def fn(x):
        assert call(x) is x
        return x

    run(fn, f32(2, 3))


@pytest.mark.parametrize("call,want", [
    (lambda t: t.add_(1.0), lambda a: a + 1), (lambda t: t.subtract_(0.5), lambda a: a - 0.5),
    (lambda t: t.multiply_(3.0), lambda a: a * 3), (lambda t: t.divide_(4.0), lambda a: a / 4),
    (lambda t: t.pow_(2.0), lambda a: a ** 2), (lambda t: t.exp_(), np.exp),
    (lambda t: t.sqrt_(), np.sqrt), (lambda t: t.relu_(), lambda a: np.maximum(a, 0)),
    (lambda t: t.clip_(-1.0, 2.0), lambda a: np.clip(a, -1, 2)),
    (lambda t: t.scale_(2.0, bias=1.0, bias_after_scale=False), lambda a: (a + 1) * 2),
    (lambda t: t.fill_(2.5), lambda a: np.full_like(a, 2.5)),
    (lambda t: t.zero_(), np.zeros_like),
])
def test_inplace_values_written_back(call, want):
    x = f32(2, 3, start=-2.0)
    with np.errstate(invalid="ignore"):  # sqrt of negatives: nan on both sides
        expected = want(x.copy())
    out = run(lambda t: call(t), x)
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    assert out is x


# -- views share data with their base ----------------------------------------------------------
def test_write_through_reshape_view_reaches_base():
    def fn(x):
        b = x.reshape([6])
        b.add_(1)
        return x, b

    x = f32(2, 3)
    xo, bo = run(fn, x)
    np.testing.assert_array_equal(xo, f32(2, 3) + 1)
    np.testing.assert_array_equal(bo, np.arange(6, dtype=np.float32) + 1)
    np.testing.assert_array_equal(x, f32(2, 3) + 1)
    assert xo is x


def test_reshape_of_transpose_copies_so_write_does_not_reach_base():
    def fn(x):
        b = x.transpose([1, 0]).reshape([6])  # strides don't allow a view: a copy
        b.add_(100)
        return x, b

    x = f32(2, 3)
    xo, bo = run(fn, x)
    np.testing.assert_array_equal(xo, f32(2, 3))
    np.testing.assert_array_equal(x, f32(2, 3))  # not mutated
    np.testing.assert_array_equal(bo, f32(2, 3).T.reshape(6) + 100)
    assert xo is x  # an argument returned is the caller's array itself (as NumPy, PyTorch)


def test_flatten_of_transpose_copies_but_flatten_of_contiguous_is_a_view():
    def fn(x):
        x.t().flatten()[0] = -1.0   # a copy: lost
        x.flatten()[1] = -2.0       # a view: reaches x
        return x

    x = f32(2, 3)
    run(fn, x)
    want = f32(2, 3)
    want[0, 1] = -2.0
    np.testing.assert_array_equal(x, want)


def test_transpose_inplace_on_a_created_tensor():
    def fn():
        x = cc.arange(12).reshape([3, 4])
        x.transpose_([1, 0])
        return x

    out = run(fn)
    np.testing.assert_array_equal(out, np.arange(12).reshape(3, 4).T)
    assert out.shape == (4, 3) and out.dtype == np.int64


def test_transpose_inplace_then_write_reaches_base():
    def fn(x):
        t = x.transpose_([1, 0])  # x itself is now the transposed view
        t[0] = 9.0
        return x

    x = f32(2, 3)
    out = run(fn, x)
    want = f32(2, 3)
    want[:, 0] = 9.0
    np.testing.assert_array_equal(out, want.T)
    np.testing.assert_array_equal(x, want)  # the caller's array keeps its own layout


def test_python_alias_sees_zero():
    def fn(x):
        y = x
        x.zero_()
        return y

    x = f32(2, 3, start=1.0)
    out = run(fn, x)
    np.testing.assert_array_equal(out, np.zeros((2, 3)))
    np.testing.assert_array_equal(x, np.zeros((2, 3)))
    assert out is x


def test_setitem_int():
    def fn(x):
        x[0] = 4.0
        return x

    x = f32(2, 3)
    run(fn, x)
    np.testing.assert_array_equal(x, [[4, 4, 4], [3, 4, 5]])


def test_setitem_reads_before_it_writes():
    def fn(x):
        x[1:3] = x[0:2]
        return x

    x = np.arange(5, dtype=np.float32)
    run(fn, x)
    np.testing.assert_array_equal(x, [0, 0, 1, 3, 4])

    def rev(x):
        x[::2] = x[::-2]
        x[0:2] = x[1:3]
        return x

    y = np.arange(5, dtype=np.float64)
    run(rev, y)
    ref = np.arange(5, dtype=np.float64)
    ref[::2] = ref[::-2].copy()
    ref[0:2] = ref[1:3].copy()
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("idx", [(slice(None), 0), (Ellipsis, 1), (None, 1), (-1, slice(None,
                                                                                        None,
                                                                                        -1)),
                                 (slice(None), slice(0, 3, 2)), (slice(None, None, -1), 2)],
                         ids=str)
def test_setitem_indices_and_broadcast_values(idx):
    def fn(x, v):
        x[idx] = v
        return x

    x = f32(2, 3)
    want = f32(2, 3)
    v = np.full(np.shape(want[idx])[-1:], -7.5, np.float32)  # a value that must broadcast
    want[idx] = v
    run(fn, x, v)
    np.testing.assert_array_equal(x, want)


def test_setitem_casts_values_and_takes_tensors():
    def fn(x, y):
        x[0] = y.sum()          # a traced 0-d value
        x[1, :2] = cc.arange(2)  # int64 into float32
        x[1, 2] = True
        return x

    x = f32(2, 3)
    out = run(fn, x, np.ones(4, np.float64))
    np.testing.assert_array_equal(out, [[4, 4, 4], [0, 1, 1]])
    assert out.dtype == np.float32


def test_add_sub_alpha():
    def fn(x, y):
        a = x * 1.0
        a.add_(y, alpha=1)         # 2 + 3 = 5
        x.subtract_(y, alpha=2)    # 2 - 2 * 3 = -4, written into the caller's x
        return a, x

    x = np.full((2, 2), 2.0, np.float32)
    y = np.full((2, 2), 3.0, np.float32)
    a, xo = run(fn, x, y)
    np.testing.assert_array_equal(a, [[5, 5], [5, 5]])
    np.testing.assert_array_equal(xo, [[-4, -4], [-4, -4]])
    np.testing.assert_array_equal(x, [[-4, -4], [-4, -4]])
    np.testing.assert_array_equal(y, np.full((2, 2), 3.0))
    assert xo is x


def test_alpha_with_scalars_and_out_of_place():
    def fn(x):
        a = x.add(2.0, alpha=3)       # x + 6
        b = x.subtract(x, alpha=0.5)  # x / 2
        x.add_(1.0, alpha=-2)         # x - 2
        return a, b

    x = f32(3)
    a, b = run(fn, x)
    np.testing.assert_array_equal(a, f32(3) + 6)
    np.testing.assert_array_equal(b, f32(3) / 2)
    np.testing.assert_array_equal(x, f32(3) - 2)


def test_self_assignment_of_a_region_is_a_no_op():
    def fn(x):
        x[0] = x[0]
        v = x[1]
        v.add_(1.0)
        x[1] = v  # the tail of `x[1] += 1`: nothing left to write
        return x

    x = f32(2, 3)
    run(fn, x)
    np.testing.assert_array_equal(x, [[0, 1, 2], [4, 5, 6]])
    graph = cc.trace(fn, f32(2, 3))
    assert [n.op for n in graph.nodes].count("slice_scatter") == 1


def test_a_written_view_copied_into_another_region():
    def fn(x):
        v = x[0]
        v.add_(1.0)
        x[1] = v
        return x

    x = f32(2, 3)
    run(fn, x)
    np.testing.assert_array_equal(x, [[1, 2, 3], [1, 2, 3]])


def test_write_through_slice_of_slice():
    def fn(x):
        x[1:][0, ::-1].add_(10.0)
        x[:, 1:][::2, 0] = -1.0
        return x

    x = f32(3, 3)
    run(fn, x)
    want = f32(3, 3)
    want[1:][0, ::-1] += 10
    want[:, 1:][::2, 0] = -1
    np.testing.assert_array_equal(x, want)


def test_write_through_transpose_view():
    def fn(x):
        t = x.transpose([1, 0])
        t[0].fill_(7.0)
        t.scale_(2.0)
        return x, t

    x = f32(2, 3)
    xo, to = run(fn, x)
    want = f32(2, 3)
    want[:, 0] = 7.0
    want *= 2
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(to, want.T)


def test_write_through_unsqueeze_and_squeeze_views():
    def fn(x):
        x.unsqueeze(0).scale_(3.0)
        x.unsqueeze([0, 2])[0, :, 0, 1] = -1.0
        x.reshape([1, 2, 1, 3]).squeeze().add_(1.0)
        return x

    x = f32(2, 3)
    run(fn, x)
    want = f32(2, 3) * 3
    want[:, 1] = -1
    want += 1
    np.testing.assert_array_equal(x, want)


def test_write_through_a_chain_of_views():
    def fn(x):
        v = x.reshape([4, 6]).transpose([1, 0])[1:5:2, ::-1]  # a [2, 4] view
        v.add_(cc.arange(4).cast("float32"))
        return x

    x = f32(2, 3, 4)
    run(fn, x)
    want = f32(2, 3, 4)
    want.reshape(4, 6).T[1:5:2, ::-1] += np.arange(4)
    np.testing.assert_array_equal(x, want)


def test_other_views_see_the_write_later():
    def fn(x):
        row = x[0]
        col = x[:, 1]
        copy = x[0] * 1.0
        x.add_(10.0)
        return row, col, copy

    x = f32(2, 3)
    row, col, copy = run(fn, x)
    np.testing.assert_array_equal(row, [10, 11, 12])
    np.testing.assert_array_equal(col, [11, 14])
    np.testing.assert_array_equal(copy, [0, 1, 2])


def test_view_read_before_and_after_a_write():
    def fn(x):
        v = x[1]
        before = v.sum()
        x[1] = 0.0
        after = v.sum()
        return before, after

    before, after = run(fn, f32(2, 3))
    assert before == 12.0 and after == 0.0


def test_detach_shares_storage():
    def fn(x):
        d = x.detach()
        d.add_(1.0)
        return x

    x = f32(2, 3)
    run(fn, x)
    np.testing.assert_array_equal(x, f32(2, 3) + 1)


def test_to_tensor_copies():
    def fn(x):
        c = cc.to_tensor(x)
        c.add_(1.0)
        return x, c

    x = f32(3)
    xo, c = run(fn, x)
    np.testing.assert_array_equal(x, f32(3))
    np.testing.assert_array_equal(c, f32(3) + 1)


def test_inplace_on_intermediate_and_its_view():
    def fn(x):
        h = x * 2.0
        h[0].exp_()
        h.t()[1].zero_()
        return h

    x = f32(2, 3) / 10
    out = run(fn, x)
    want = x * 2.0
    want[0] = np.exp(want[0])
    want[:, 1] = 0
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_array_equal(x, f32(2, 3) / 10)  # the input was not written


def test_many_inplace_ops_in_a_row():
    def fn(x):
        h = x * 1.0
        for _ in range(50):
            h.add_(1.0)
        return h

    x = f32(4)
    np.testing.assert_array_equal(run(fn, x), f32(4) + 50)
    np.testing.assert_array_equal(x, f32(4))


# -- comparison and logical inplace ops keep the target's dtype --------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("name,ref", [
    ("greater_than", np.greater), ("less_than", np.less), ("equal", np.equal),
    ("not_equal", np.not_equal), ("greater_equal", np.greater_equal),
    ("less_equal", np.less_equal), ("logical_and", np.logical_and),
    ("logical_or", np.logical_or),
])
def test_inplace_comparisons_keep_dtype(name, ref, dtype):
    x = np.array([[0, 1, 2], [3, 4, 0]], dtype)
    y = np.array([1, 1, 0], dtype)
    want = ref(x, y).astype(dtype)

    def fn(a, b):
        out = getattr(a, name + "_")(b)
        assert out is a and out.dtype == np.dtype(dtype)
        return a

    out = run(fn, x, y)
    assert out is x and x.dtype == dtype
    np.testing.assert_array_equal(x, want)


def test_logical_not_inplace_keeps_dtype():
    x = np.array([0.0, 2.0, -1.0])
    run(lambda t: t.logical_not_(), x)
    np.testing.assert_array_equal(x, [1.0, 0.0, 0.0])
    assert x.dtype == np.float64


# -- augmented assignment is inplace -----------------------------------------------------------
@pytest.mark.parametrize("op,want", [("+=", lambda a: a + 2), ("-=", lambda a: a - 2),
                                     ("*=", lambda a: a * 2), ("/=", lambda a: a / 2)])
def test_augmented_assignment_is_inplace(op, want):
    def fn(x):
        alias = x
        view = x[0]
        if op == "+=":
            x += 2.0
        elif op == "-=":
            x -= 2.0
        elif op == "*=":
            x *= 2.0
        else:
            x /= 2.0
        assert x is alias
        return view

    x = f32(2, 3, start=1.0)
    view = run(fn, x)
    np.testing.assert_allclose(x, want(f32(2, 3, start=1.0)))
    np.testing.assert_allclose(view, want(f32(2, 3, start=1.0))[0])


def test_augmented_assignment_on_an_index():
    def fn(x):
        x[0] += 1.0
        x[:, 1] *= 3.0
        return x

    x = f32(2, 3)
    run(fn, x)
    want = f32(2, 3)
    want[0] += 1
    want[:, 1] *= 3
    np.testing.assert_array_equal(x, want)


# -- write-back into the caller's arrays -------------------------------------------------------
def test_mutated_input_is_written_back_every_call():
    fn = cc.compile(lambda x: x.add_(1.0))
    x = f32(3)
    assert fn(x) is x
    assert fn(x) is x
    np.testing.assert_array_equal(x, f32(3) + 2)


def test_mutation_through_a_view_of_an_input_is_written_back():
    def fn(x, y):
        x[0].add_(y)
        return y

    x, y = f32(2, 3), np.ones(3, np.float32)
    yo = run(fn, x, y)
    want = f32(2, 3)
    want[0] += 1
    np.testing.assert_array_equal(x, want)
    # y is returned unmutated: the caller's array itself, as NumPy and PyTorch return it
    assert yo is y


def test_returned_inputs_and_their_views_are_the_callers_memory():
    """Issue 16: one rule, as NumPy and PyTorch users expect: an argument, or a view of one, is
    returned as that array or that view of it (the plan counts 0 output bytes for it)."""
    def fn(x):
        return x, x[0], x.reshape([6]), x.t()

    x = f32(2, 3)
    outs = run(fn, x)
    assert outs[0] is x
    for got, want in zip(outs, (x, x[0], x.reshape(6), x.T)):
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, x) and got.strides == want.strides
    outs[1][0] = 100.0  # a write through the returned view reaches the caller's array
    assert x[0, 0] == 100.0
    assert cc.compile(fn).lower(x).plan.output_bytes == 0


def test_returned_mutated_input_in_a_structure_is_the_callers_array():
    def fn(x, y):
        x.scale_(2.0)
        return {"x": x, "both": [x, y * 1.0], "n": 3}

    x, y = f32(2), f32(2)
    out = run(fn, x, y)
    assert out["x"] is x and out["both"][0] is x and out["n"] == 3
    np.testing.assert_array_equal(x, [0, 2])


def test_a_view_of_a_mutated_input_returned_holds_the_new_values():
    def fn(x):
        y = x.reshape([6])
        y.add_(1.0)
        return y

    x = f32(2, 3)
    out = run(fn, x)
    np.testing.assert_array_equal(out, np.arange(1, 7))
    np.testing.assert_array_equal(x, f32(2, 3) + 1)


def test_second_signature_shape_error_leaves_arrays_untouched():
    def fn(x, y):
        y.add_(1.0)
        x.reshape([2, 3]).add_(1.0)  # only works for six elements
        return x

    fn_c = cc.compile(fn)
    x, y = f32(6), f32(6)
    fn_c(x, y)
    np.testing.assert_array_equal(x, f32(6) + 1)
    x2, y2 = f32(4), f32(4)
    with pytest.raises(cc.ShapeError):
        fn_c(x2, y2)
    np.testing.assert_array_equal(x2, f32(4))
    np.testing.assert_array_equal(y2, f32(4))


def test_read_only_input_error_leaves_all_arrays_untouched():
    def fn(x, y):
        x.add_(1.0)
        y.add_(1.0)
        return x

    x, y = f32(3), f32(3)
    y.flags.writeable = False
    with pytest.raises(cc.InplaceError):
        run(fn, x, y)
    np.testing.assert_array_equal(x, f32(3))
    np.testing.assert_array_equal(y, f32(3))


def test_read_only_input_that_is_not_written_is_fine():
    x = f32(3)
    x.flags.writeable = False
    out = run(lambda t: t + 1.0, x)
    np.testing.assert_array_equal(out, f32(3) + 1)


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed", "fortran"])
def test_non_contiguous_inputs(layout):
    base = f32(4, 6)
    make = {"transposed": lambda a: a.T, "strided": lambda a: a[:, ::2],
            "reversed": lambda a: a[::-1, 1:5], "fortran": np.asfortranarray}[layout]

    def fn(x):
        flat = x.reshape([-1]) * 1.0  # a view of a row-major buffer
        x[0].add_(100.0)
        return flat, x

    x = make(base)
    want_flat = np.array(x).reshape(-1)
    want_x = np.array(x)
    want_x[0] += 100
    flat, xo = run(fn, x)
    np.testing.assert_array_equal(flat, want_flat)
    np.testing.assert_array_equal(x, want_x)  # written back through the caller's strides
    assert xo is x


def test_scalar_arguments_are_compile_time_constants():
    fn = cc.compile(lambda x, s: x * s)
    x = f32(3)
    np.testing.assert_array_equal(fn(x, 2.0), x * 2)
    np.testing.assert_array_equal(fn(x, 3), x * 3)
    np.testing.assert_array_equal(fn(x, np.float32(0.5)), x * 0.5)
    assert fn(x, True).dtype == np.float32


def test_compile_as_decorator():
    @cc.compile
    def plain(x):
        return x.add_(1.0)

    @cc.compile(inplace="off")
    def configured(x):
        return x.add_(1.0)

    for fn in (plain, configured):
        x = f32(2)
        assert fn(x) is x
        np.testing.assert_array_equal(x, [1, 2])
    assert plain.__name__ == "plain"


@pytest.mark.parametrize("case", ["shifted", "transposed", "self", "reversed", "setitem_t"])
def test_inplace_reads_overlapping_operands_before_writing(case):
    def fn(x):
        if case == "shifted":
            x[1:].add_(x[:-1])
        elif case == "transposed":
            x.add_(x.t())
        elif case == "self":
            x.multiply_(x)
        elif case == "reversed":
            x[0].subtract_(x[0, ::-1])
        else:
            x[:, :] = x.t()
        return x

    x = f32(3, 3)
    want = f32(3, 3)
    if case == "shifted":
        want[1:] += want[:-1].copy()
    elif case == "transposed":
        want += want.T.copy()
    elif case == "self":
        want *= want.copy()
    elif case == "reversed":
        want[0] -= want[0, ::-1].copy()
    else:
        want[:, :] = want.T.copy()
    run(fn, x)
    np.testing.assert_array_equal(x, want)


def test_inplace_on_views_of_zero_dim_and_none_views():
    def fn(x, s):
        s[...] = 5.0
        s.add_(1.0)
        x[None][0, 1] = -1.0
        F.relu_(x[0])
        return s

    x = f32(2, 3, start=-3.0)
    s = np.array(0.0)
    out = run(fn, x, s)
    assert out is s and s == 6.0
    want = f32(2, 3, start=-3.0)
    want[1] = -1.0
    want[0] = np.maximum(want[0], 0)
    np.testing.assert_array_equal(x, want)
