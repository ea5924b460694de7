"""examples/gpt.py in mixed precision (short runs on the numpy backend, the reference every
backend matches): bfloat16 AMP follows float32's loss curve, and float16 with the GradScaler
skips an overflowing step (every weight and AdamW moment kept bit for bit) and trains on."""
import numpy as np
import pytest

from compiler.cli import load_example

STEPS = 16
# The stated tolerance: per step, the bfloat16 AMP loss within 0.02 nats of float32's (the
# matmuls round their operands to 8 significant bits; softmax, layer_norm and the loss stay
# float32). Measured: at most 0.0003 nats per step over 40 steps (numpy backend).
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def gpt():
    return load_example("gpt")


def test_bfloat16_amp_follows_the_float32_loss_curve(gpt, tmp_path):
    path = str(tmp_path / "curve.txt")
    ref, mixed, gap = gpt.loss_curves(STEPS, "numpy", "bfloat16", path, window=4)
    ref, mixed = np.array(ref), np.array(mixed)
    assert ref[-4:].mean() < ref[:4].mean() - 0.3          # it does train
    assert np.max(np.abs(ref - mixed)) <= TOLERANCE
    assert not np.array_equal(ref, mixed)                   # and the casts did happen
    assert gap <= TOLERANCE
    with open(path) as f:
        rows = f.read().splitlines()
    assert rows[0] == "step\tfloat32\tbfloat16" and len(rows) == STEPS + 1


def test_float16_with_the_scaler_survives_an_overflowing_step(gpt):
    seen = {}

    def on_step(i, model, opt, scaler):
        state = [p.copy() for p in model.parameters()] + [
            v.copy() for v in opt.state_dict().values() if isinstance(v, np.ndarray)]
        seen[i] = (state, scaler.found_inf(), scaler.get_loss_scaling())

    at = 2
    _, losses = gpt.train(STEPS // 2 + 2, "numpy", log=None, amp="float16", overflow_at=at,
                          on_step=on_step)
    before, after = seen[at - 1][0], seen[at][0]
    assert seen[at][1] and seen[at][2] == 2.0 ** 23       # skipped; the scale halved
    assert len(before) > 3 * gpt.N_PARAMS   # parameters, moments, beta powers
    for a, b in zip(before, after):
        assert a.tobytes() == b.tobytes()
    assert not seen[at - 1][1]
    # the scale comes down until float16 holds the gradients, then training goes on
    last = max(seen)
    assert not seen[last][1] and np.isfinite(losses).all()
    assert any(not np.array_equal(a, b)
               for a, b in zip(after[:gpt.N_PARAMS], seen[last][0][:gpt.N_PARAMS]))
    assert all(np.isfinite(p).all() for p in seen[last][0])
