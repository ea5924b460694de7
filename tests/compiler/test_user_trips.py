"""Issue 13: what a new user trips over. Each test reproduces a case from the issue and asserts
the behaviour a user relies on: the value, or the error class and the line it names.

Lines are found by marker comments (`# <- name`), as in test_errors.py.
"""
import os

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.error_lines import error_checker

pytestmark = pytest.mark.usefixtures("each_backend")

line_of, check_error = error_checker(__file__)
_THIS = os.path.basename(__file__)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


# -- 1. numpy on a traced tensor ------------------------------------------------------------
NUMPY_CALLS = {
    "ufunc": (lambda t: np.exp(t), "np.exp(tensor)"),  # <- np:ufunc
    "function": (lambda t: np.sum(t), "np.sum(tensor)"),  # <- np:function
    "asarray": (lambda t: np.asarray(t), "np.asarray(tensor)"),  # <- np:asarray
    "list": (lambda t: np.array([t, t]), "np.asarray(tensor)"),  # <- np:list
    "float": (lambda t: float(t.sum()), "float(tensor)"),  # <- np:float
    "numpy": (lambda t: t.numpy(), ".numpy()"),  # <- np:numpy
    "to_tensor": (lambda t: cc.to_tensor([t, t]), "cc.concat"),  # <- np:to_tensor
    "reduce": (lambda t: np.add.reduce(t), "np.add.reduce(tensor)"),  # <- np:reduce
    "ufunc_out": (lambda t: np.add(X, t, out=np.empty_like(X)), "out="),  # <- np:ufunc_out
    "negative": (lambda t: np.negative(t), "np.negative(tensor)"),  # <- np:negative
}


@pytest.mark.parametrize("case", sorted(NUMPY_CALLS))
def test_numpy_on_a_traced_tensor_raises_trace_error_naming_the_line(case):
    fn, what = NUMPY_CALLS[case]
    with pytest.raises(cc.TraceError) as e:
        cc.compile(fn)(X)
    same = () if case == "to_tensor" else ("needs the tensor's data, which doesn't exist",)
    check_error(e, cc.TraceError, f"np:{case}", what, *same)


def test_ndarray_operators_with_a_tensor_still_trace():
    """numpy routes `ndarray + tensor` through np.add once Tensor defines __array_ufunc__: the
    operator ufuncs trace as the operator, with the array as a constant."""
    a = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)

    def f(t):
        return (a + t, a - t, a * t, a / t, a ** (t * 0.0 + 2.0), a @ t.t(), a < t, a >= t,
                a == t, np.float32(3.0) * t, t - a)

    got = cc.compile(f)(X)
    want = (a + X, a - X, a * X, a / X, a ** 2, a @ X.T, a < X, a >= X, a == X, 3 * X, X - a)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_inplace_ndarray_op_with_a_tensor_raises():
    def f(t):
        b = np.ones((2, 3), np.float32)
        b += t  # <- np:iadd
        return t

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X)
    check_error(e, cc.TraceError, "np:iadd", "np.add(..., out=...)")


# -- 2. cross_entropy: Paddle's signature and semantics; labels are data -------------------------
def paddle_cross_entropy(logits, label, weight=None, ignore_index=-100, reduction="mean",
                         soft_label=False, axis=-1, label_smoothing=0.0):
    """Paddle's documented formulas, row by row in float64 (the oracle)."""
    x = np.moveaxis(np.asarray(logits, np.float64), axis, -1)
    c = x.shape[-1]
    rows = x.reshape(-1, c)
    logp = rows - rows.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    if soft_label:
        targets = np.moveaxis(np.asarray(label, np.float64), axis, -1).reshape(-1, c)
        counted = [True] * len(rows)
    else:
        labels = np.asarray(label).reshape(-1)
        counted = [int(lab) != ignore_index for lab in labels]
        targets = np.zeros_like(rows)
        for j, lab in enumerate(labels):
            if counted[j]:
                targets[j, lab] = 1.0
    losses, weights = [], []
    for j in range(len(rows)):
        if not counted[j]:
            losses.append(0.0)
            weights.append(0.0)
            continue
        t = (1 - label_smoothing) * targets[j] + label_smoothing / c
        w = 1.0 if weight is None else float(np.dot(t, weight))  # weight[label] if hard
        losses.append(-float(np.dot(t, logp[j])) * w)
        weights.append(w)
    losses = np.array(losses)
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        total = sum(weights)
        return losses.sum() / (total if total != 0 else 1.0)
    return losses.reshape(x.shape[:-1])


LOGITS = np.random.default_rng(3).standard_normal((5, 4))
LABELS = np.array([0, 3, -100, 1, 3])
WEIGHT = np.array([0.5, 2.0, 1.0, 3.0])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_weight_ignore_index_smoothing(reduction, weighted, smoothing):
    weight = WEIGHT if weighted else None

    def f(x, y, w):
        return F.cross_entropy(x, y, weight=w if weighted else None, reduction=reduction,
                               label_smoothing=smoothing)

    got = cc.compile(f)(LOGITS, LABELS, WEIGHT)
    want = paddle_cross_entropy(LOGITS, LABELS, weight, reduction=reduction,
                                label_smoothing=smoothing)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_cross_entropy_ignore_index_drops_rows_from_the_mean():
    """The issue's case: ignored rows are left out of the mean, not counted as zero loss."""
    got = cc.compile(lambda x, y: F.cross_entropy(x, y))(LOGITS, LABELS)
    kept = [0, 1, 3, 4]
    logp = LOGITS - np.log(np.exp(LOGITS).sum(-1, keepdims=True))
    want = -logp[kept, LABELS[kept]].mean()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # Weighted mean: divided by the sum of the weights of the rows not ignored (Paddle).
    got = cc.compile(lambda x, y, w: F.cross_entropy(x, y, weight=w))(LOGITS, LABELS, WEIGHT)
    w = WEIGHT[LABELS[kept]]
    np.testing.assert_allclose(got, (-logp[kept, LABELS[kept]] * w).sum() / w.sum(),
                               rtol=1e-12)
    # Every row ignored: Paddle divides by 1 instead of 0.
    none = np.full(5, 2)
    got = cc.compile(lambda x, y: F.cross_entropy(x, y, ignore_index=2))(LOGITS, none)
    assert got == 0.0


def test_cross_entropy_axis_soft_labels_and_none_shapes():
    x = np.random.default_rng(4).standard_normal((2, 4, 3))  # classes on axis 1
    hard = np.array([[0, 3, 1], [2, 2, 0]])
    got = cc.compile(lambda x, y: F.cross_entropy(x, y, axis=1, reduction="none"))(x, hard)
    np.testing.assert_allclose(got, paddle_cross_entropy(x, hard, axis=1, reduction="none"),
                               rtol=1e-12)
    soft = np.random.default_rng(5).random((2, 4, 3))
    soft /= soft.sum(1, keepdims=True)

    def f(x, p, w):
        return (F.cross_entropy(x, p, soft_label=True, axis=1, reduction="none"),
                F.cross_entropy(x, p, w, soft_label=True, axis=1))

    none, mean = cc.compile(f)(x, soft, WEIGHT)
    assert none.shape == (2, 1, 3)  # Paddle keeps the class axis for soft labels
    np.testing.assert_allclose(none[:, 0], paddle_cross_entropy(x, soft, soft_label=True,
                                                                axis=1, reduction="none"),
                               rtol=1e-12)
    np.testing.assert_allclose(mean, paddle_cross_entropy(x, soft, WEIGHT, soft_label=True,
                                                          axis=1), rtol=1e-12)
    got = cc.compile(lambda x, p: F.cross_entropy(x, p, soft_label=True, axis=1,
                                                  label_smoothing=0.3, reduction="sum"))(x, soft)
    np.testing.assert_allclose(got, paddle_cross_entropy(x, soft, soft_label=True, axis=1,
                                                         label_smoothing=0.3, reduction="sum"),
                               rtol=1e-12)
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    got = cc.compile(lambda p, y: F.cross_entropy(p, y, use_softmax=False))(probs, LABELS)
    np.testing.assert_allclose(got, paddle_cross_entropy(LOGITS, LABELS), rtol=1e-12)


def test_cross_entropy_gradient_with_weight_ignore_and_smoothing():
    import sys
    passes_tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "passes")
    if passes_tests not in sys.path:
        sys.path.append(passes_tests)  # the finite-difference oracle of the autodiff tests
    from gradcheck import check_grads
    check_grads(lambda x, w: F.cross_entropy(x, cc.to_tensor(LABELS), weight=w,
                                             label_smoothing=0.1, reduction="none"),
                LOGITS, WEIGHT)


@pytest.mark.parametrize("bad,pos", [(7, 1), (-1, 2)])
def test_out_of_range_label_argument_raises_before_anything_runs(bad, pos):
    labels = np.array([0, 3, 1, 1])
    labels[pos] = bad

    def f(x, y, b):
        b.add_(1.0)
        return F.cross_entropy(x, y)  # <- ce:argument

    b = np.zeros(3)
    with pytest.raises(cc.DataError) as e:
        cc.compile(f)(LOGITS[:4], labels, b)
    check_error(e, cc.DataError, "ce:argument", f"class label {bad} at position [{pos}]",
                "argument 'y'", "4 classes", "ignore_index=-100")
    assert isinstance(e.value, ValueError)
    np.testing.assert_array_equal(b, 0.0)  # nothing half-written


def test_out_of_range_label_through_a_view_of_an_argument():
    def f(x, y):
        return F.cross_entropy(x, y[:, 1])  # <- ce:view

    y = np.array([[9, 0], [0, 1], [1, 5]])
    with pytest.raises(cc.DataError) as e:
        cc.compile(f)(LOGITS[:3], y)
    check_error(e, cc.DataError, "ce:view", "class label 5 at position [2]")
    y = np.array([[7, 7, 0, 7], [0, 7, 1, 7], [1, 7, 9, 7]])[:, ::2]  # not contiguous
    with pytest.raises(cc.DataError) as e:
        cc.compile(f)(LOGITS[:3], y)
    check_error(e, cc.DataError, "ce:view", "class label 9 at position [2]")


def test_out_of_range_computed_label_leaves_the_callers_arrays_untouched():
    def f(x, y, b):
        b.add_(1.0)
        return F.cross_entropy(x, y + 1)  # <- ce:computed

    fn = cc.compile(f)
    b = np.zeros(3)
    fn(LOGITS[:4], np.array([0, 2, 1, 1]), b)
    np.testing.assert_array_equal(b, 1.0)
    prog = fn.lower(LOGITS[:4], np.array([0, 2, 1, 1]), b)
    [d] = [d for d in prog.plan.decisions if d.op == "add_"]
    assert d.inplace  # the plan writes b in place: the check has to guard it
    with pytest.raises(cc.DataError) as e:
        fn(LOGITS[:4], np.array([0, 3, 1, 1]), b)
    check_error(e, cc.DataError, "ce:computed", "class label 4 at position [1]")
    np.testing.assert_array_equal(b, 1.0)


def test_out_of_range_constant_label_raises_at_trace_time():
    def f(x):
        return F.cross_entropy(x, cc.to_tensor(np.array([0, 1, 4, 3, 0])))  # <- ce:constant

    with pytest.raises(cc.DataError) as e:
        cc.trace(f, LOGITS)
    check_error(e, cc.DataError, "ce:constant", "class label 4 at position [2]")


# -- 3. a tensor kept from an earlier trace --------------------------------------------------
def test_tensor_from_an_earlier_trace_names_the_tensor_and_where_it_was_made():
    leak = []

    def f(a):
        t = a * 3  # <- leak:made
        leak.append(t)
        return t

    def g(b):
        return b + leak[0]  # <- leak:used

    cc.compile(f)(X)
    with pytest.raises(cc.TraceError) as e:
        cc.compile(g)(X)
    check_error(e, cc.TraceError, "leak:used", f"tensor '{leak[0].name}'",
                f"made at {_THIS}:{line_of('leak:made')}", "trace of 'f'", "while tracing 'g'")


def test_leaked_tensor_used_outside_any_trace():
    leak = []
    cc.compile(lambda a: leak.append(a) or a)(X)
    with pytest.raises(cc.TraceError) as e:
        leak[0].sin()  # <- leak:outside
    check_error(e, cc.TraceError, "leak:outside", "argument", "outside any trace")


# -- 6. boolean-mask set-item ------------------------------------------------------------------
@pytest.mark.backends("numpy")  # pins the unfused plan's decision
def test_mask_setitem_scalar_is_a_where_in_place_on_the_argument():
    def f(x):
        x[x > 0] = 0
        return x

    fn = cc.compile(f)
    a = X.copy()
    out = fn(a)
    np.testing.assert_array_equal(a, np.where(X > 0, 0, X))
    assert out is a  # the caller's array, mutated as in eager Paddle
    prog = fn.lower(a)
    [d] = [d for d in prog.plan.decisions if d.op == "where"]
    assert d.requested and d.inplace, d.reason
    assert "argument 'x'" in d.reason


def test_mask_setitem_broadcast_value_and_leading_dims_mask():
    def f(x, y, rows):
        h = x * 2.0
        h[h < 0] = y          # y [3] broadcasts to [2, 3]
        x[rows] = -7.0        # a mask over the leading dimension selects whole rows
        return h

    y = np.array([10.0, 20.0, 30.0], np.float32)
    a = X.copy()
    h = cc.compile(f)(a, y, np.array([True, False]))
    np.testing.assert_array_equal(h, np.where(2 * X < 0, y, 2 * X))
    np.testing.assert_array_equal(a, np.where([[True], [False]], -7.0, X))


def test_mask_setitem_gradient():
    def f(x, w):
        w.stop_gradient = False
        h = x * w
        h[x > 0] = 0.5 * w   # x > 0: d/dw = 0.5, else x
        h.sum().backward()
        return w.grad

    w = np.full((2, 3), 3.0, np.float32)
    np.testing.assert_allclose(cc.compile(f)(X, w), np.where(X > 0, 0.5, X))


def test_mask_setitem_one_value_per_true_element_is_data_dependent():
    def f(x):
        x[x > 0] = cc.ones([2])  # <- mask:per_element
        return x

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X)
    check_error(e, cc.TraceError, "mask:per_element", "data-dependent shape", "[2]")


def test_mask_getitem_is_data_dependent():
    with pytest.raises(cc.TraceError) as e:
        cc.compile(lambda x: x[x > 0])(X)  # <- mask:getitem
    check_error(e, cc.TraceError, "mask:getitem", "data-dependent shape", "cc.where")


# -- 7. backward() twice -----------------------------------------------------------------------
def test_second_backward_through_released_graph_names_both_lines():
    def f(x, w):
        w.stop_gradient = False
        loss = (x * w).sin().sum()
        loss.backward()  # <- bw:first
        loss.backward()  # <- bw:second
        return w.grad

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X, X.copy())
    check_error(e, cc.TraceError, "bw:second", f"{_THIS}:{line_of('bw:first')}",
                "retain_graph=True")


def test_retain_graph_accumulates_and_separate_forwards_accumulate():
    def f(x, w):
        w.stop_gradient = False
        loss = (x * w).sum()
        loss.backward(retain_graph=True)
        loss.backward()               # through the retained graph: accumulates
        (w * w).sum().backward()      # a separate forward computation: accumulates
        return w.grad

    np.testing.assert_allclose(cc.compile(f)(X, X.copy()), 2 * X + 2 * X)


# -- 8. view-changing inplace ops on a leaf that needs a gradient -------------------------------
VIEW_INPLACE = {
    "squeeze_": lambda w: w.squeeze_(0),  # <- leaf:squeeze_
    "unsqueeze_": lambda w: w.unsqueeze_(0),  # <- leaf:unsqueeze_
    "reshape_": lambda w: w.reshape_([3, 1]),  # <- leaf:reshape_
    "flatten_": lambda w: w.flatten_(),  # <- leaf:flatten_
    "transpose_": lambda w: w.transpose_([1, 0]),  # <- leaf:transpose_
    "t_": lambda w: w.t_(),  # <- leaf:t_
}


@pytest.mark.parametrize("op", sorted(VIEW_INPLACE))
def test_view_changing_inplace_on_a_leaf_raises(op):
    def f(w):
        w.stop_gradient = False
        return VIEW_INPLACE[op](w)

    with pytest.raises(cc.InplaceError) as e:
        cc.compile(f)(np.ones((1, 3), np.float32))
    check_error(e, cc.InplaceError, f"leaf:{op}", "leaf tensor 'w'", op)


@pytest.mark.parametrize("op", sorted(VIEW_INPLACE))
def test_view_changing_inplace_on_a_leaf_is_fine_under_no_grad_or_without_grad(op):
    def f(w, v):
        w.stop_gradient = False
        with cc.no_grad():
            a = VIEW_INPLACE[op](w)
        return a, VIEW_INPLACE[op](v)

    a, b = cc.compile(f)(np.ones((1, 3), np.float32), np.ones((1, 3), np.float32))
    assert a.shape == b.shape and a.size == 3


# -- 5. captured values and retracing ----------------------------------------------------------
def test_changed_captured_array_retraces():
    table = np.array([1.0, 2.0, 3.0])

    def f(x):
        return x * table  # `table` is captured: a trace-time constant

    fn = cc.compile(f)
    x = np.ones(3)
    np.testing.assert_array_equal(fn(x), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(fn(x), [1.0, 2.0, 3.0])
    assert fn.traces == 1
    table[1] = 20.0  # mutated between calls: the program is traced again
    np.testing.assert_array_equal(fn(x), [1.0, 20.0, 3.0])
    assert fn.traces == 2
    fn(x)
    assert fn.traces == 2


def test_retracing_more_than_8_times_warns_once_with_the_count_and_the_argument():
    fn = cc.compile(lambda x, lr: x * lr)
    x = np.ones(2)
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(12):
            fn(x, 0.1 * (step + 1))  # <- retrace:call
    found = [w for w in caught if issubclass(w.category, cc.RetraceWarning)]
    assert len(found) == 1, [str(w.message) for w in found]
    msg = str(found[0].message)
    assert "traced 10 times (9 retraces, more than 8)" in msg, msg
    assert "argument 'lr'" in msg and "0.9" in msg and "1.0" in msg, msg
    assert found[0].filename == __file__ and found[0].lineno == line_of("retrace:call")
    assert fn.traces == 12


# -- 6. keyword arguments -------------------------------------------------------------------
def test_keyword_arguments_bind_like_a_python_call_and_share_the_cache():
    def step(x, w, b=None, *, scale=1.0):
        out = x @ w
        return out * scale if b is None else (out + b) * scale

    fn = cc.compile(step)
    x, w, b = np.ones((2, 3)), np.arange(12.0).reshape(3, 4), np.ones(4)
    want = x @ w
    np.testing.assert_array_equal(fn(x, w), want)
    np.testing.assert_array_equal(fn(x, w=w), want)
    np.testing.assert_array_equal(fn(w=w, x=x), want)
    assert fn.traces == 1  # fn(x, w), fn(x, w=w) and fn(w=w, x=x) are one program
    np.testing.assert_array_equal(fn(x, w, b=b), want + 1)
    np.testing.assert_array_equal(fn(x, b=b, w=w, scale=2.0), (want + 1) * 2)
    assert fn.traces == 3
    prog = fn.lower(x=x, w=w, b=b, scale=2.0)
    assert [v.name for v in prog.graph.inputs] == ["x", "w", "b"]
    np.testing.assert_array_equal(prog(x, w, b=b, scale=2.0), (want + 1) * 2)


def test_keyword_arguments_that_dont_bind_raise_trace_error():
    fn = cc.compile(lambda x, w: x * w)
    with pytest.raises(cc.TraceError) as e:
        fn(np.ones(2), w=np.ones(2), v=np.ones(2))  # <- kw:bad
    check_error(e, cc.TraceError, "kw:bad", "unexpected keyword argument 'v'")


def test_mask_setitem_through_views_matches_numpy():
    def f(x):
        v = x[:, 1:]
        v[v > 0] = 100.0
        x.t()[0][x[:, 0] < -2] = -50.0
        return x

    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    want = a.copy()
    v = want[:, 1:]
    v[v > 0] = 100.0
    want.T[0][want[:, 0] < -2] = -50.0
    cc.compile(f)(a)
    np.testing.assert_array_equal(a, want)
