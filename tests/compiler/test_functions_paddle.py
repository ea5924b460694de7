"""Issue 24 item 2, the functions: `cc.eye`, `cc.linspace`, `cc.einsum`, `F.one_hot`, `F.pad`,
`F.avg_pool2d`, `F.batch_norm`, `F.binary_cross_entropy_with_logits`, `F.nll_loss`,
`F.softplus`, as a Paddle user relies on them. Their values over every dtype and edge shape are
the op database's (tests/opdb/samples.py, "issue 24" section); here: Paddle's rules where
libraries differ, what is written in place, what the lowering is made of, the errors, and the
gpu backend's CUDA C on the host fiber harness.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.backends import AVAILABLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ops(graph):
    return [n.op for n in graph.nodes]


# -- creation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_eye_and_linspace_follow_paddle(backend):
    eye, rect, lin, ints, one = cc.compile(lambda: (
        cc.eye(3), cc.eye(2, 3, dtype="int64"), cc.linspace(0.1, 0.7, 7, dtype="float64"),
        cc.linspace(0, 10, 4, dtype="int32"), cc.linspace(5, 9, 1)), backend=backend)()
    assert eye.dtype == np.float32 and lin.dtype == np.float64 and one.dtype == np.float32
    np.testing.assert_array_equal(eye, np.eye(3, dtype=np.float32), strict=True)
    np.testing.assert_array_equal(rect, [[1, 0, 0], [0, 1, 0]])
    # Paddle's kernel: both ends exact, the first half counted up from start, the second down
    # from stop (np.linspace counts everything from start: its 5th value differs in the last bit)
    step = (0.7 - 0.1) / 6
    want = [0.1, 0.1 + step, 0.1 + 2 * step, 0.7 - 3 * step, 0.7 - 2 * step, 0.7 - step, 0.7]
    np.testing.assert_array_equal(lin, want, strict=True)
    assert lin[-1] == 0.7 and lin[0] == 0.1
    np.testing.assert_array_equal(ints, np.array([0, 3, 6, 10], np.int32), strict=True)
    np.testing.assert_array_equal(one, np.array([5.0], np.float32), strict=True)


def test_linspace_with_tensor_ends_does_not_retrace():
    fn = cc.compile(lambda a, b: cc.linspace(a, b, 5), backend="numpy")
    np.testing.assert_array_equal(fn(np.array(0.0), np.array(1.0)), [0, .25, .5, .75, 1])
    np.testing.assert_array_equal(fn(np.array(-4.0), np.array(4.0)), [-4, -2, 0, 2, 4])
    assert fn.cache_info().misses == 1


# -- einsum ----------------------------------------------------------------------------------------
def test_einsum_is_one_matmul_and_views_no_einsum_op():
    q, k = np.ones((2, 3, 4, 5), np.float32), np.ones((2, 3, 6, 5), np.float32)
    graph = cc.trace(lambda a, b: cc.einsum("bhqd,bhkd->bhqk", a, b), q, k)
    ops = _ops(graph)
    assert ops.count("matmul") == 1, ops
    assert not {"einsum", "multiply", "sum"} & set(ops), ops
    # a label only one operand has is summed there first, then the one matmul
    graph = cc.trace(lambda a, b: cc.einsum("ijx,jk->ik", a, b), np.ones((2, 3, 4)),
                     np.ones((3, 5)))
    assert _ops(graph).count("matmul") == 1 and _ops(graph).count("sum") == 1


@pytest.mark.parametrize("backend", AVAILABLE)
def test_einsum_gradients_are_those_of_its_ops(backend):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 2, 5))

    def step(x, y):
        x.stop_gradient = False
        y.stop_gradient = False
        out = cc.einsum("bij,jbk->bki", x, y)
        (out * out).sum().backward()
        return out, x.grad, y.grad
    out, ga, gb = cc.compile(step, backend=backend)(a, b)
    want = np.einsum("bij,jbk->bki", a, b)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    np.testing.assert_allclose(ga, np.einsum("bki,jbk->bij", 2 * want, b), rtol=1e-12)
    np.testing.assert_allclose(gb, np.einsum("bki,bij->jbk", 2 * want, a), rtol=1e-12)


def test_einsum_refusals_name_the_users_line():
    def repeated_output(x):
        return cc.einsum("ij->ii", x)
    with pytest.raises(cc.TraceError) as info:
        cc.compile(repeated_output, backend="numpy")(np.ones((3, 3)))
    line = repeated_output.__code__.co_firstlineno + 1
    assert f"test_functions_paddle.py:{line}" in str(info.value)
    assert "output label 'i' repeats" in str(info.value)

    def sizes(x, y):
        return cc.einsum("ij,jk", x, y)
    with pytest.raises(cc.ShapeError) as info:
        cc.compile(sizes, backend="numpy")(np.ones((2, 3)), np.ones((4, 2)))
    assert f"test_functions_paddle.py:{sizes.__code__.co_firstlineno + 1}" in str(info.value)
    assert "label 'j' has size 3" in str(info.value)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_einsum_diagonals_are_one_exact_gather(backend):
    a = np.array([[-0.0, 1.0, np.inf], [2.0, 3.5, np.nan], [4.0, 5.0, 1e300]])
    graph = cc.trace(lambda x: cc.einsum("ii->i", x), a)
    assert "index_select" in _ops(graph) and "matmul" not in _ops(graph)

    def step(x):
        x.stop_gradient = False
        d = cc.einsum("ii->i", x)
        (d * cc.to_tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
        return d, cc.einsum("ii", x * 0.5), x.grad
    d, trace, grad = cc.compile(step, backend=backend)(a)
    # copied, not multiplied by a mask: -0.0 stays, and the inf/NaN off the diagonal stay out
    np.testing.assert_array_equal(d, [-0.0, 3.5, 1e300])
    assert np.signbit(d[0])
    assert trace == 0.5 * 3.5 + 0.5 * 1e300
    np.testing.assert_array_equal(grad, np.diag([1.0, 2.0, 3.0]))


def test_importing_the_einsum_module_keeps_cc_einsum_the_function():
    import compiler.einsum_lowering  # noqa: F401
    assert callable(cc.einsum) and cc.einsum.__name__ == "einsum"


# -- F.one_hot, F.nll_loss: labels are data --------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_one_hot_of_a_computed_bad_label_fails_before_any_write(backend):
    def step(labels, buf):
        buf.add_(1.0)
        return F.one_hot(labels + 1, 3)
    buf = np.zeros(2, np.float32)
    with pytest.raises(cc.DataError) as info:
        cc.compile(step, backend=backend)(np.array([0, 2]), buf)
    assert "one_hot" in str(info.value) and "class label 3" in str(info.value)
    assert f"test_functions_paddle.py:{step.__code__.co_firstlineno + 2}" in str(info.value)
    np.testing.assert_array_equal(buf, 0)
    out = cc.compile(step, backend=backend)(np.array([0, 1]), buf)
    assert out.dtype == np.float32   # Paddle: float32 whatever the labels' dtype
    np.testing.assert_array_equal(out, [[0, 1, 0], [0, 0, 1]])
    np.testing.assert_array_equal(buf, 1)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_nll_loss_ignores_minus_inf_at_other_classes_and_ignored_rows(backend):
    with np.errstate(divide="ignore"):
        x = np.log(np.array([[0.5, 0.5, 0], [0, 0.25, 0.75], [1, 0, 0]], np.float32))
    w = np.array([1.0, 2.0, 4.0], np.float32)

    def step(inp, lab, wt):
        inp.stop_gradient = False
        loss = F.nll_loss(inp, lab, wt, ignore_index=1)
        loss.backward()
        return loss, inp.grad
    loss, grad = cc.compile(step, backend=backend)(x, np.array([0, 2, 1]), w)
    # rows 0 and 1 count, with weights 1 and 4: -(log .5 * 1 + log .75 * 4) / 5
    want = np.float32(-(np.log(np.float32(0.5)) + np.log(np.float32(0.75)) * np.float32(4)))
    assert loss.dtype == np.float32
    np.testing.assert_allclose(loss, want / np.float32(5), rtol=1e-6)
    assert np.isfinite(grad).all()
    none = cc.compile(lambda a, b: F.nll_loss(a, b, ignore_index=1, reduction="none"),
                      backend=backend)(x, np.array([0, 2, 1]))
    assert none[2] == 0 and not np.signbit(none[2])   # an ignored row: +0.0
    np.testing.assert_array_equal(grad, np.array([[-0.2, 0, 0], [0, 0, -0.8], [0, 0, 0]],
                                                 np.float32))


# -- F.batch_norm: Paddle's running statistics, in place ----------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_batch_norm_training_updates_the_callers_running_arrays_in_place(backend):
    # per channel: values 0 and 2 (mean 1, biased variance 1, unbiased 2), all exact
    x = np.array([[0.0, 4.0], [2.0, 8.0]], np.float32)
    mean, var = np.array([0.5, 1.0], np.float32), np.array([2.0, 4.0], np.float32)

    def step(t, m, v):
        return F.batch_norm(t, m, v, training=True, momentum=0.75)
    fn = cc.compile(step, backend=backend)
    y = fn(x, mean, var)
    # Paddle: running * momentum + batch * (1 - momentum), with the BIASED batch variance
    np.testing.assert_array_equal(mean, np.array([0.5 * 0.75 + 1 * 0.25, 0.75 + 6 * 0.25],
                                                 np.float32), strict=True)
    np.testing.assert_array_equal(var, np.array([2 * 0.75 + 1 * 0.25, 4 * 0.75 + 4 * 0.25],
                                                np.float32), strict=True)
    want = (x - [1, 6]) / np.sqrt(np.float32([1, 4]) + np.float32(1e-5))
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # the plan writes the two arguments: the graph's mutations, not a copy handed back
    graph = fn.lower(x, mean, var).graph
    assert sorted(graph.mutations) == [1, 2]
    # evaluation uses the running statistics and leaves them alone
    before = mean.copy(), var.copy()
    y = cc.compile(lambda t, m, v: F.batch_norm(t, m, v), backend=backend)(x, mean, var)
    np.testing.assert_array_equal(mean, before[0])
    np.testing.assert_array_equal(var, before[1])
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + np.float32(1e-5)), rtol=1e-6)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_batch_norm_gradient_goes_through_the_batch_statistics(backend):
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((4, 3, 2)), rng.standard_normal(3), rng.standard_normal(3)

    def step(t, m, v, ww, bb):
        t.stop_gradient = False
        y = F.batch_norm(t, m, v, ww, bb, training=True, data_format="NCL")
        (y * y * y).sum().backward()
        return t.grad
    grad = cc.compile(step, backend=backend)(x, np.zeros(3), np.ones(3), w, b)
    # the analytic gradient of batch normalisation (statistics over axes 0 and 2)
    mu = x.mean(axis=(0, 2), keepdims=True)
    rstd = 1 / np.sqrt(x.var(axis=(0, 2), keepdims=True) + 1e-5)
    xhat = (x - mu) * rstd
    y = xhat * w[:, None] + b[:, None]
    g = 3 * y * y * w[:, None]
    want = rstd * (g - g.mean(axis=(0, 2), keepdims=True)
                   - xhat * (g * xhat).mean(axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(grad, want, rtol=1e-9, atol=1e-12)


# -- losses and softplus: stable values, gradients at the kinks ------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_bce_with_logits_is_stable_and_its_gradient_at_zero_is_sigmoid(backend):
    x = np.array([0.0, -0.0, 1000.0, -1000.0, 30.0], np.float64)
    y = np.array([1.0, 0.25, 0.0, 1.0, 1.0])

    def step(logit, label):
        logit.stop_gradient = False
        loss = F.binary_cross_entropy_with_logits(logit, label, reduction="sum")
        loss.backward()
        return F.binary_cross_entropy_with_logits(logit, label, reduction="none"), logit.grad
    loss, grad = cc.compile(step, backend=backend)(x, y)
    np.testing.assert_allclose(loss, [np.log(2), np.log(2), 1000.0, 1000.0,
                                      np.log1p(np.exp(-30.0))], rtol=1e-15)
    # d/dx = sigmoid(x) - y, exactly 1/2 - y at 0 (abs and relu kinks would give -y)
    np.testing.assert_array_equal(grad[:4], [-0.5, 0.25, 1.0, -1.0])
    np.testing.assert_allclose(grad[4], -np.exp(-30.0) / (1 + np.exp(-30.0)), rtol=1e-12)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_softplus_threshold_and_its_gradient_never_nan(backend):
    x = np.array([-1000.0, 0.0, 5.0, 10.5, 1e4], np.float64)

    def step(t):
        t.stop_gradient = False
        out = F.softplus(t, beta=2, threshold=20)
        out.sum().backward()
        return out, t.grad
    out, grad = cc.compile(step, backend=backend)(x)
    # beta * x > threshold: x itself (10.5 and 1e4); else log1p(exp(beta x)) / beta
    np.testing.assert_array_equal(out[3:], x[3:])
    np.testing.assert_allclose(out[:3], np.log1p(np.exp(2 * x[:3])) / 2, rtol=1e-15)
    np.testing.assert_array_equal(grad[[0, 1, 3, 4]], [0.0, 0.5, 1.0, 1.0])


# -- F.pad and F.avg_pool2d: Paddle's orders and divisors ------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_pad_takes_paddles_list_order(backend):
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    spatial, full, last = cc.compile(lambda t: (
        F.pad(t, [1, 0, 0, 2], value=-1.0),            # NCHW: [left, right, top, bottom]
        F.pad(t.reshape([2, 3]), [1, 0, 0, 2]),         # 2N: axis 0 first
        F.pad(t.reshape([2, 3]), [1, 0, 0, 2], pad_from_left_axis=False)), backend=backend)(x)
    np.testing.assert_array_equal(spatial[0, 0], np.pad(x[0, 0], [(0, 2), (1, 0)],
                                                        constant_values=-1))
    np.testing.assert_array_equal(full, np.pad(x[0, 0], [(1, 0), (0, 2)]))
    np.testing.assert_array_equal(last, np.pad(x[0, 0], [(0, 2), (1, 0)]))


@pytest.mark.parametrize("backend", AVAILABLE)
def test_reflect_pad_gradient_adds_back_into_the_source(backend):
    x = np.arange(4.0).reshape(1, 1, 4)

    def step(t):
        t.stop_gradient = False
        F.pad(t, [2, 1], mode="reflect").sum().backward()
        return t.grad
    # [x2 x1 | x0 x1 x2 x3 | x2]: the edge isn't repeated; x1 is read twice, x2 three times
    np.testing.assert_array_equal(cc.compile(step, backend=backend)(x), [[[1, 2, 3, 1]]])


@pytest.mark.parametrize("backend", AVAILABLE)
def test_avg_pool2d_exclusive_does_not_count_padding(backend):
    x = np.ones((1, 1, 3, 3), np.float32)
    excl, incl, div = cc.compile(lambda t: (
        F.avg_pool2d(t, 3, 1, 1), F.avg_pool2d(t, 3, 1, 1, exclusive=False),
        F.avg_pool2d(t, 3, 1, 1, divisor_override=2)), backend=backend)(x)
    np.testing.assert_array_equal(excl, np.ones((1, 1, 3, 3), np.float32))
    corner, edge = np.float32(4) / np.float32(9), np.float32(6) / np.float32(9)
    np.testing.assert_array_equal(incl[0, 0], [[corner, edge, corner], [edge, 1, edge],
                                               [corner, edge, corner]])
    np.testing.assert_array_equal(div[0, 0], [[2, 3, 2], [3, 4.5, 3], [2, 3, 2]])


def test_the_new_functions_are_paddle_spelled_refusals():
    def bad_pad(t):
        return F.pad(t, [1, 1], mode="symmetric")
    with pytest.raises(cc.TraceError) as info:
        cc.compile(bad_pad, backend="numpy")(np.ones((1, 1, 3)))
    assert f"test_functions_paddle.py:{bad_pad.__code__.co_firstlineno + 1}" in str(info.value)
    assert "constant, reflect, replicate, circular" in str(info.value)


# -- the gpu backend's CUDA C, run on the host by the fiber harness --------------------------------
def _gpu_programs():
    for sub in (os.path.join("tests", "opdb"), os.path.join("tests", "passes")):
        if os.path.join(ROOT, sub) not in sys.path:
            sys.path.insert(0, os.path.join(ROOT, sub))
    import test_opdb as opdb
    from gradcheck import grad_program
    wanted = ("cc.eye", "cc.linspace", "cc.einsum", "F.one_hot", "F.pad", "F.avg_pool2d",
              "F.batch_norm", "F.binary_cross_entropy_with_logits", "F.nll_loss", "F.softplus")
    out, seen = [], set()
    for s in opdb.db.SAMPLES:
        key = (s.api, s.grad)
        if s.api not in wanted or key in seen or (s.grad and not s.args):
            continue
        seen.add(key)
        if s.grad:
            arrays = [np.asarray(a) for a in s.args]
            body = grad_program(opdb._grad_body(s), opdb._wrt(s, arrays))
            out.append((s, True, body, arrays))
        else:
            out.append((s, False, opdb._traced(s, {}), s.args))
    return opdb, out


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _flat(item)]
    return [tree]


def test_the_gpu_code_of_the_new_functions_matches_the_numpy_backend():
    """One program per function (its first sample) and, for the differentiable ones, its
    gradient program: CUDA C compiled by NVRTC where it is installed, then run on the host by
    the fiber harness, against the numpy backend."""
    pytest.importorskip("runtime.gpu.executable")
    from tests.gpu import harness
    if not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    opdb, cases = _gpu_programs()
    assert len(cases) == 17   # each API once, and the 7 differentiable ones backward too
    progs = [cc.compile(body, backend="gpu").lower(*opdb._copies(args))
             for _, _, body, args in cases]
    from runtime.gpu import nvrtc
    if nvrtc.available():   # the CUDA C compiles for the device, as the emitter wrote it
        for prog in progs:   # (raises with NVRTC's log on an error)
            nvrtc.compile_ptx(prog.source, "issue24.cu")
    harness.prebuild([p._exec.module for p in progs])
    failures = []
    for (sample, is_grad, body, args), prog in zip(cases, progs):
        want = cc.compile(body, backend="numpy")(*opdb._copies(args))
        got = harness.on_host(prog, "forward")(*opdb._copies(args))
        try:
            got, want = _flat(got), _flat(want)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6, equal_nan=True)
        except AssertionError as e:
            failures.append(f"{sample.id} (grad={is_grad}): {str(e)[:300]}")
    assert not failures, "\n".join(failures)


# -- against PaddlePaddle itself (an optional dependency: skipped without it) ---------------------
@pytest.fixture(scope="module")
def paddle():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = pytest.importorskip("paddle")
    module.set_device("cpu")
    return module


def _np(f, *args):
    return cc.compile(f, backend="numpy")(*args)


def test_creation_and_pad_equal_paddles_bit_for_bit(paddle):
    PF = paddle.nn.functional
    for args in [(0.1, 0.7, 7, "float64"), (0, 1, 5, "float32"), (3, -3, 8, "int64"),
                 (-5, 5, 11, "float32"), (1e-3, 1e3, 6, "float64"), (0, 10, 4, "int32")]:
        want = paddle.linspace(*args).numpy()
        np.testing.assert_array_equal(_np(lambda a=args: cc.linspace(*a)), want, strict=True)
    for dtype in (None, "float64", "int32", "int64"):
        np.testing.assert_array_equal(_np(lambda d=dtype: cc.eye(3, 2, dtype=d)),
                                      paddle.eye(3, 2, dtype=dtype).numpy(), strict=True)
    labels = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(_np(lambda t: F.one_hot(t, 4), labels),
                                  PF.one_hot(paddle.to_tensor(labels), 4).numpy(), strict=True)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for pad, mode, kw in [([1, 2, 0, 1], "constant", {}),
                          ([1, 2, 0, 1, 1, 0, 2, 2], "constant", {}),
                          ([1, 2, 0, 1, 1, 0, 2, 2], "constant", {"pad_from_left_axis": False}),
                          ([1, 2], "constant", {"value": 3.0}), ([1], "constant", {}),
                          ([2, 1, 1, 2], "reflect", {}), ([2, 1, 1, 2], "replicate", {}),
                          ([2, 1, 1, 2], "circular", {}),
                          ([2, 1, 1, 2], "replicate", {"data_format": "NHWC"})]:
        want = PF.pad(paddle.to_tensor(x), pad, mode=mode, **kw).numpy()
        got = _np(lambda t, p=pad, m=mode, k=kw: F.pad(t, p, mode=m, **k), x)
        np.testing.assert_array_equal(got, want, strict=True, err_msg=f"{pad} {mode} {kw}")


def test_avg_pool2d_equals_paddles_over_its_options(paddle):
    rng = np.random.default_rng(0)
    PF = paddle.nn.functional
    for h, w in [(4, 5), (7, 6)]:
        x = rng.standard_normal((1, 2, h, w)).astype(np.float32)
        for k, s, p, ceil, excl in [(2, 1, 0, False, True), (3, 2, 1, False, False),
                                    (3, 2, 1, True, False), ((2, 3), 2, [0, 1, 1, 0], True, False),
                                    ((2, 3), 2, [0, 1, 1, 0], True, True),
                                    (3, 3, [1, 0], True, True),
                                    (2, 3, [1, 0, 0, 1], True, False), (3, 2, 0, True, False)]:
            want = PF.avg_pool2d(paddle.to_tensor(x), k, s, p, ceil_mode=ceil,
                                 exclusive=excl).numpy()
            got = _np(lambda t, a=(k, s, p, ceil, excl): F.avg_pool2d(
                t, a[0], a[1], a[2], ceil_mode=a[3], exclusive=a[4]), x)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True,
                                       err_msg=f"{(h, w)} {k} {s} {p} ceil={ceil} excl={excl}")


def test_losses_and_batch_norm_equal_paddles(paddle):
    rng = np.random.default_rng(1)
    PF, T = paddle.nn.functional, paddle.to_tensor
    x = (rng.standard_normal((4, 3, 5, 2)) * 2 + 1).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(.5, 2, 3).astype(np.float32)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    for training, use_global in [(True, None), (False, None), (True, True), (False, False)]:
        p_rm, p_rv = T(rm.copy()), T(rv.copy())
        want = PF.batch_norm(T(x), p_rm, p_rv, T(w), T(b), training=training, momentum=0.8,
                             use_global_stats=use_global).numpy()
        m_rm, m_rv = rm.copy(), rv.copy()
        got = _np(lambda t, a, c, ww, bb, tr=training, g=use_global: F.batch_norm(
            t, a, c, ww, bb, training=tr, momentum=0.8, use_global_stats=g), x, m_rm, m_rv, w, b)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m_rm, p_rm.numpy(), rtol=1e-6)
        np.testing.assert_allclose(m_rv, p_rv.numpy(), rtol=1e-6)
    logit = np.concatenate([rng.uniform(-5, 5, 10), [0, 40, -40, 200, -200, 1e4]]).astype(
        np.float32).reshape(4, 4)
    label = rng.uniform(0, 1, (4, 4)).astype(np.float32)
    weight, pos = rng.uniform(0, 2, 4).astype(np.float32), rng.uniform(.5, 3, 4).astype(np.float32)
    logp = np.log(rng.dirichlet(np.ones(4), 5)).astype(np.float32)
    x3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    l3 = np.array([[0, 2, 0, 1], [1, 1, 0, 2]])
    w3 = rng.uniform(.5, 2, 3).astype(np.float32)
    for red in ("mean", "sum", "none"):
        pairs = [
            (PF.binary_cross_entropy_with_logits(T(logit), T(label), T(weight), red, T(pos)),
             _np(lambda a, c, d, e, r=red: F.binary_cross_entropy_with_logits(a, c, d, r, e),
                 logit, label, weight, pos)),
            (PF.nll_loss(T(logp), T(np.array([0, 3, 1, 1, 2])), ignore_index=1, reduction=red),
             _np(lambda a, c, r=red: F.nll_loss(a, c, ignore_index=1, reduction=r), logp,
                 np.array([0, 3, 1, 1, 2]))),
            (PF.nll_loss(T(x3), T(l3), T(w3), ignore_index=2, reduction=red),
             _np(lambda a, c, d, r=red: F.nll_loss(a, c, d, 2, r), x3, l3, w3)),
        ]
        for want, got in pairs:
            np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-7)
    # an all-ignored batch: Paddle's mean is 0, as here
    assert PF.nll_loss(T(logp), T(np.zeros(5, np.int64)), ignore_index=0).numpy() == 0
    z = np.array([-30, -1, 0, 1, 9.5, 10.5, 19, 21, 1000, -1000], np.float32)
    for beta, th in [(1, 20), (2, 20)]:
        got = _np(lambda t, bt=beta, tt=th: F.softplus(t, bt, tt), z)
        np.testing.assert_allclose(got, PF.softplus(T(z), beta, th).numpy(), rtol=2e-6, atol=1e-6)
        # Paddle's kernel takes log(1 + exp(x)): 0 at x = -30; log1p keeps the 9.4e-14
        assert got[0] == np.float32(np.log1p(np.exp(-30.0 * beta)) / beta) > 0
    for eq, shapes in [("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ii", [(3, 3)]),
                       ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
                       ("ij,kj", [(3, 4), (5, 4)])]:
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        want = paddle.einsum(eq, *[T(a) for a in xs]).numpy()
        got = cc.compile(_einsum_fn(eq, len(xs)), backend="numpy")(*xs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=eq)


def _einsum_fn(eq, n):
    if n == 1:
        return lambda a: cc.einsum(eq, a)
    return lambda a, b: cc.einsum(eq, a, b)


def test_gradients_equal_paddles(paddle):
    """d(sum(out^2))/dx in float64, Paddle's autograd against ours (Paddle's pooling backward
    differs from exact arithmetic by ~1e-8, hence the tolerance)."""
    PF, T = paddle.nn.functional, paddle.to_tensor
    rng = np.random.default_rng(2)
    cases = [
        (lambda t: PF.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
         lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True), rng.standard_normal((1, 2, 5, 6))),
        (lambda t: PF.avg_pool2d(t, 3, 2, 1, exclusive=False),
         lambda t: F.avg_pool2d(t, 3, 2, 1, exclusive=False), rng.standard_normal((1, 2, 5, 6))),
        (lambda t: PF.pad(t, [2, 1, 1, 0], mode="circular"),
         lambda t: F.pad(t, [2, 1, 1, 0], mode="circular"), rng.standard_normal((1, 2, 3, 4))),
        (lambda t: PF.pad(t, [2, 1], mode="reflect"),
         lambda t: F.pad(t, [2, 1], mode="reflect"), rng.standard_normal((1, 2, 4))),
        (lambda t: PF.softplus(t, 2, 5), lambda t: F.softplus(t, 2, 5),
         np.array([-3.0, 0, 1, 2.4, 2.6, 10])),
        (lambda t: PF.binary_cross_entropy_with_logits(t, T(np.array([1, .3, 0, .5])),
                                                       pos_weight=T(np.array([2., .5, 1, 3]))),
         lambda t: F.binary_cross_entropy_with_logits(t, np.array([1, .3, 0, .5]),
                                                      pos_weight=np.array([2., .5, 1, 3])),
         np.array([0.0, 1.5, -2, 30])),
        (lambda t: PF.nll_loss(t, T(np.array([0, 2, 1])), T(np.array([1., 2, 3])),
                               ignore_index=1),
         lambda t: F.nll_loss(t, np.array([0, 2, 1]), np.array([1., 2, 3]), ignore_index=1),
         rng.standard_normal((3, 3))),
        (lambda t: paddle.einsum("bij,jk->bki", t, T(np.arange(10.0).reshape(2, 5))),
         lambda t: cc.einsum("bij,jk->bki", t, np.arange(10.0).reshape(2, 5)),
         rng.standard_normal((3, 4, 2))),
    ]
    for k, (theirs, ours, x) in enumerate(cases):
        t = T(x, stop_gradient=False)
        out = theirs(t)
        (out * out).sum().backward()

        def step(a, f=ours):
            a.stop_gradient = False
            o = f(a)
            (o * o).sum().backward()
            return a.grad
        np.testing.assert_allclose(_np(step, x), t.grad.numpy(), rtol=1e-6, atol=1e-9,
                                   err_msg=f"case {k}")
