"""cc.amp: Paddle's auto_cast (casts by the op lists, decided at trace time, ordinary cast nodes,
float32 gradients for float32 parameters) and the GradScaler whose scale, found-inf check and
skipped update are in the graph (an overflowing step leaves every weight and moment's bits)."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.tensor import state_tensor
from tests.backends import AVAILABLE

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)


def _data(seed=0, n=6, d=8, h=16, c=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, c, n)
    w1 = (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32)
    w2 = (rng.standard_normal((h, c)) / np.sqrt(h)).astype(np.float32)
    return x, y, w1, w2


def _dtypes(graph):
    return {n.op: n.out.dtype for n in graph.nodes}


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_o1_casts_by_the_lists_and_matches_explicit_casts_bit_for_bit(half):
    x, y, w1, w2 = _data()
    h = np.dtype(ml_dtypes.bfloat16 if half == "bfloat16" else np.float16)

    def amp(x, y, w1, w2):
        w1.stop_gradient = False
        w2.stop_gradient = False
        with cc.amp.auto_cast(dtype=half):
            z = F.gelu(x @ w1)                      # white, then gray (stays 16-bit)
            p = F.softmax(z @ w2, axis=-1)          # white, then black (float32)
            loss = (p * p).mean()                   # gray on float32, black
        loss.backward()
        return loss, z, p, w1.grad, w2.grad

    def explicit(x, y, w1, w2):
        w1.stop_gradient = False
        w2.stop_gradient = False
        z = F.gelu(x.cast(h) @ w1.cast(h))
        p = F.softmax((z @ w2.cast(h)).cast("float32"), axis=-1)
        loss = (p * p).mean()
        loss.backward()
        return loss, z, p, w1.grad, w2.grad

    got = cc.compile(amp, backend="numpy")(x, y, w1, w2)
    want = cc.compile(explicit, backend="numpy")(x, y, w1, w2)
    assert [a.dtype for a in got] == [F32, h, F32, F32, F32]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # the 16-bit result differs from float32's: the casts did happen
    assert not np.array_equal(got[2], cc.compile(lambda x, y, w1, w2: F.softmax(
        F.gelu(x @ w1) @ w2, axis=-1), backend="numpy")(x, y, w1, w2))


def test_casts_are_cast_nodes_on_the_forward_ops_only():
    x, y, w1, w2 = _data()

    def step(x, y, w1, w2):
        w1.stop_gradient = False
        with cc.amp.auto_cast(dtype="bfloat16"):
            loss = F.cross_entropy(x @ w1 @ w2, y)
        loss.backward()
        with cc.no_grad():
            w1.subtract_(0.1 * w1.grad)
        return loss
    w = w1.copy()
    prog = cc.compile(step, backend="numpy").lower(x, y, w, w2)
    casts = [n for n in prog.graph.nodes if n.op == "cast"]
    forward = [n for n in casts if n.phase == "forward"]
    # x, w1, w2 down for the matmuls; the logits up for log_softmax
    assert sorted(n.inputs[0].name for n in forward if n.out.dtype == BF16) == \
        ["w1", "w2", "x"]
    (ls,) = [n for n in prog.graph.nodes if n.op == "log_softmax"]
    up = ls.inputs[0].producer
    assert up.op == "cast" and up.inputs[0].producer.op == "matmul"
    assert all(n.loc.line and "amp" in n.loc.file for n in casts)
    mm = [n for n in prog.graph.nodes if n.op == "matmul"]
    assert {n.out.dtype for n in mm} == {BF16}
    # the update is float32 throughout, with the parameter's gradient cast back to float32
    assert all(n.out.dtype == F32 for n in prog.graph.nodes if n.phase == "update"
               and n.op not in ("full",))
    before = w.copy()
    cc.compile(step, backend="numpy")(x, y, w, w2)
    assert not np.array_equal(w, before) and w.dtype == F32


def test_o2_runs_gray_ops_in_16_bits_and_the_black_list_in_float32():
    x, _, w1, _ = _data()
    table = np.random.default_rng(3).standard_normal((10, 8)).astype(np.float32)

    def f(x, ids, w1, table):
        with cc.amp.auto_cast(dtype="bfloat16", level="O2"):
            e = F.embedding(ids, table)         # lookup_table: O2's black list, float32
            a = (x + 1.0).exp()                 # exp is gray in O2: 16 bits
            s = F.softmax(a, axis=-1)           # also gray in O2
            return e, a, s, (x @ w1) > 0        # comparisons are not cast
    e, a, s, m = cc.compile(f, backend="numpy")(x, np.array([1, 2, 9]), w1, table)
    assert (e.dtype, a.dtype, s.dtype, m.dtype) == (F32, BF16, BF16, np.bool_)
    np.testing.assert_array_equal(e, table[[1, 2, 9]])
    xb = x.astype(BF16).astype(F32)
    np.testing.assert_array_equal(a, np.exp((xb + 1).astype(BF16).astype(F32)).astype(BF16))


def test_custom_lists_and_enable_false():
    x, _, w1, _ = _data()

    def f(x, w1):
        with cc.amp.auto_cast(dtype="float16", custom_white_list={"elementwise_add"},
                              custom_black_list=["matmul_v2"]):
            a = x + x
            b = x @ w1
        with cc.amp.auto_cast(enable=False):
            c = x @ w1
        with cc.amp.auto_cast(level="O0"):
            d = x @ w1
        return a, b, c, d
    a, b, c, d = cc.compile(f, backend="numpy")(x, w1)
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (F16, F32, F32, F32)
    np.testing.assert_array_equal(a, (x.astype(F16).astype(F32) * 2).astype(F16))
    np.testing.assert_array_equal(b, x @ w1)


@pytest.mark.parametrize("kwargs,message", [
    ({"custom_white_list": ["matmul"], "custom_black_list": ["matmul"]}, "both name"),
    ({"custom_black_list": ["softmaks"]}, "'softmaks'"),
    ({"level": "O3"}, "level should be"),
    ({"dtype": "float32"}, "dtype should be"),
])
def test_bad_auto_cast_arguments_name_the_line(kwargs, message):
    def f(x):
        with cc.amp.auto_cast(**kwargs):  # the line
            return x * 2
    with pytest.raises(cc.TraceError, match=message) as e:
        cc.compile(f, backend="numpy")(np.ones(2, np.float32))
    assert "with cc.amp.auto_cast(**kwargs):  # the line" in str(e.value)


def test_auto_cast_outside_a_trace_is_refused():
    with pytest.raises(cc.TraceError, match="inside the compiled function"), \
            cc.amp.auto_cast():
        pass


def test_optimizer_step_inside_auto_cast_updates_in_float32():
    x, y, w1, _ = _data()
    a, b = w1.copy(), w1.copy()
    opt_a = cc.optimizer.Adam(0.01, parameters=[a])
    opt_b = cc.optimizer.Adam(0.01, parameters=[b])

    def make(opt, arr, inside):
        def step(x, y):
            w = state_tensor(arr, "w", trainable=True)
            with cc.amp.auto_cast(dtype="bfloat16", level="O2"):
                loss = F.cross_entropy(x @ w, y)
                loss.backward()
                if inside:
                    opt.step()
            if not inside:
                opt.step()
            return loss
        return cc.compile(step, backend="numpy")
    la = make(opt_a, a, True)(x, y)
    lb = make(opt_b, b, False)(x, y)
    assert la == lb
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(opt_a.state_dict()["param_0_moment2_0"],
                                  opt_b.state_dict()["param_0_moment2_0"])


def test_decorate_keeps_the_float32_masters():
    net = cc.nn.Linear(4, 3)
    opt = cc.optimizer.SGD(0.1, parameters=net.parameters())
    m, o = cc.amp.decorate(net, opt, level="O2", dtype="bfloat16")
    assert m is net and o is opt and net.weight.dtype == F32
    assert cc.amp.decorate(net, level="O1") is net
    with pytest.raises(cc.TraceError, match="master_weight=False"):
        cc.amp.decorate(net, opt, level="O2", master_weight=False)
    with pytest.raises(cc.TraceError, match="level should be O1 or O2"):
        cc.amp.decorate(net, opt, level="O3")


# -- the loss scaler --------------------------------------------------------------------------
OPTIMIZERS = {
    "SGD": lambda ps: cc.optimizer.SGD(0.05, parameters=ps),
    "Momentum": lambda ps: cc.optimizer.Momentum(0.05, momentum=0.9, parameters=ps,
                                                 use_nesterov=True, weight_decay=0.01),
    "Adam": lambda ps: cc.optimizer.Adam(0.01, parameters=ps),
    "AdamW": lambda ps: cc.optimizer.AdamW(0.01, parameters=ps, weight_decay=0.1,
                                           grad_clip=cc.nn.ClipGradByGlobalNorm(1.0)),
}


def _train_step(ws, opt, scaler, amp=None, use_minimize=True):
    def step(x, y):
        w1 = state_tensor(ws[0], "w1", trainable=True)
        w2 = state_tensor(ws[1], "w2", trainable=True)
        if amp:
            with cc.amp.auto_cast(dtype=amp):
                loss = F.cross_entropy(F.relu(x @ w1) @ w2, y)
        else:
            loss = F.cross_entropy(F.relu(x @ w1) @ w2, y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            if use_minimize:
                scaler.minimize(opt, loss)
            else:
                scaler.step(opt)
                scaler.update()
        opt.clear_grad()
        return loss
    return step


def _state(opt, ws):
    return [w.copy() for w in ws] + [v.copy() for v in opt.state_dict().values()
                                     if isinstance(v, np.ndarray)]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_scaled_float32_training_is_bit_identical_to_unscaled(name):
    # Scaling by a power of two and unscaling by its reciprocal is exact in float32: the
    # scaler changes no value of a float32 program's weights or moments beyond rounding.
    # (Not bit for bit: passes/gemm_accumulate folds the unscaled step's SGD update into its
    # GEMM, w + (-lr * a) @ b, a different rounding; the scaled step's update is a select.)
    x, y, w1, w2 = _data()
    ws_a, ws_b = [w1.copy(), w2.copy()], [w1.copy(), w2.copy()]
    opt_a, opt_b = OPTIMIZERS[name](ws_a), OPTIMIZERS[name](ws_b)
    scaler = cc.amp.GradScaler(init_loss_scaling=2.0 ** 10, incr_every_n_steps=2)
    fa = cc.compile(_train_step(ws_a, opt_a, None), backend="numpy")
    fb = cc.compile(_train_step(ws_b, opt_b, scaler, use_minimize=name != "SGD"),
                    backend="numpy")
    for _ in range(4):
        np.testing.assert_allclose(fa(x, y), fb(x, y), rtol=1e-6)
    for a, b in zip(_state(opt_a, ws_a), _state(opt_b, ws_b)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert scaler.get_loss_scaling() == 2.0 ** 12     # two raises after 2 good steps each


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_an_overflowing_step_keeps_every_weight_and_moment_and_lowers_the_scale(name):
    x, y, w1, w2 = _data()
    ws = [w1.copy(), w2.copy()]
    opt = OPTIMIZERS[name](ws)
    scaler = cc.amp.GradScaler(init_loss_scaling=2.0 ** 10)
    fn = cc.compile(_train_step(ws, opt, scaler, amp="float16"), backend="numpy")
    fn(x, y)
    fn(x, y)  # moments are non-zero now
    before = _state(opt, ws)
    huge = x.copy()
    huge[0] = 6e4                    # float16 holds it; its activations don't
    assert not np.isfinite(fn(huge, y))
    after = _state(opt, ws)
    assert len(before) == len(after) >= 2
    for a, b in zip(before, after):
        assert a.tobytes() == b.tobytes()
    assert scaler.get_loss_scaling() == 2.0 ** 9
    fn(x, y)                         # training goes on
    assert not np.array_equal(ws[0], before[0]) and np.isfinite(ws[0]).all()


def test_too_large_a_scale_is_lowered_until_float16_gradients_are_finite():
    x, y, w1, w2 = _data()
    ws = [w1.copy(), w2.copy()]
    opt = cc.optimizer.SGD(0.1, parameters=ws)
    scaler = cc.amp.GradScaler(init_loss_scaling=2.0 ** 40)   # float16 overflows: ~2**16
    fn = cc.compile(_train_step(ws, opt, scaler, amp="float16"), backend="numpy")
    start = ws[0].copy()
    scales = []
    for _ in range(40):
        fn(x, y)
        scales.append(scaler.get_loss_scaling())
        if not np.array_equal(ws[0], start):
            break
    assert np.isfinite(ws[0]).all()
    k = len(scales)
    assert 10 < k < 40 and scales == [2.0 ** (40 - i) for i in range(1, k)] + [scales[-2]]


def _paddle_scale_sequence(pattern, init, incr_every, decr_every):
    paddle = pytest.importorskip("paddle")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = paddle.amp.GradScaler()           # (on CPU Paddle disables it: its rule is Python)
    s._enable, s._use_dynamic_loss_scaling = True, True
    s._incr_ratio, s._decr_ratio = 2.0, 0.5
    s._incr_every_n_steps, s._decr_every_n_nan_or_inf = incr_every, decr_every
    s._incr_count = s._decr_count = 0
    s._scale = paddle.to_tensor(np.array(init, np.float32))  # (0-d: its print needs it)
    out = []
    import contextlib
    import io
    for bad in pattern:
        s._cache_found_inf = bad
        with contextlib.redirect_stdout(io.StringIO()):
            s._update()
        out.append(float(s._scale.numpy().reshape(())))
    return out


@pytest.mark.parametrize("backend", [b for b in AVAILABLE if b != "gpu"])
def test_the_scale_sequence_follows_paddles_rule(backend):
    F_, T_ = False, True
    # raises after 3 good steps, lowers after 2 bad ones in a row; a good step between bad
    # ones resets the bad count, and a bad one the good count
    pattern = [F_, F_, F_, T_, T_, T_, T_, F_, F_, F_, F_, F_, F_, T_, F_, T_, F_, F_, T_, F_,
               F_, F_]
    want = _paddle_scale_sequence(pattern, 2.0 ** 8, incr_every=3, decr_every=2)
    x, y, w1, w2 = _data()
    ws = [w1.copy(), w2.copy()]
    opt = cc.optimizer.SGD(0.01, parameters=ws)
    scaler = cc.amp.GradScaler(init_loss_scaling=2.0 ** 8, incr_every_n_steps=3,
                               decr_every_n_nan_or_inf=2)
    fn = cc.compile(_train_step(ws, opt, scaler, use_minimize=False), backend=backend)
    bad_x = x.copy()
    bad_x[0, 0] = np.inf
    got = []
    for bad in pattern:
        before = ws[1].copy()
        fn(bad_x if bad else x, y)
        got.append(scaler.get_loss_scaling())
        assert np.array_equal(before, ws[1]) == bad      # skipped exactly on the bad steps
    assert got == want
    assert got == [256, 256, 512, 512, 256, 256, 128, 128, 128, 256, 256, 256, 512, 512, 512,
                   512, 512, 512, 512, 512, 512, 1024]


def test_scaler_errors():
    x, y, w1, w2 = _data()
    ws = [w1.copy(), w2.copy()]
    opt = cc.optimizer.SGD(0.01, parameters=ws)
    scaler = cc.amp.GradScaler()

    def twice(x, y):
        w = state_tensor(ws[0], "w", trainable=True)
        scaler.scale((x @ w).sum()).backward()
        scaler.step(opt)
        scaler.step(opt)  # the second step
    with pytest.raises(cc.TraceError, match="already been called") as e:
        cc.compile(twice, backend="numpy")(x, y)
    assert "scaler.step(opt)  # the second step" in str(e.value)
    with pytest.raises(cc.TraceError, match="inside the compiled step"):
        scaler.scale(1.0)
    with pytest.raises(cc.TraceError, match="incr_ratio must be > 1.0"):
        cc.amp.GradScaler(incr_ratio=1.0)
    # Paddle 3.3.1's defaults
    d = cc.amp.GradScaler()
    assert (d.get_init_loss_scaling(), d.get_incr_every_n_steps(),
            d.get_decr_every_n_nan_or_inf(), d.get_incr_ratio(), d.get_decr_ratio()) == \
        (2.0 ** 16, 2000, 1, 2.0, 0.5)


def test_scaler_state_dict_round_trip():
    x, y, w1, w2 = _data()
    ws = [w1.copy(), w2.copy()]
    opt = cc.optimizer.SGD(0.01, parameters=ws)
    scaler = cc.amp.GradScaler(init_loss_scaling=64.0, incr_every_n_steps=5)
    fn = cc.compile(_train_step(ws, opt, scaler), backend="numpy")
    fn(x, y)
    fn(x, y)
    sd = scaler.state_dict()
    assert (float(sd["scale"]), sd["incr_count"], sd["decr_count"]) == (64.0, 2, 0)
    other = cc.amp.GradScaler()
    other.load_state_dict(sd)
    assert other.get_loss_scaling() == 64.0 and other.state_dict()["incr_count"] == 2
