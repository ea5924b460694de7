"""A Paddle training script ported by changing its imports: a LeNet (Conv2D, ReLU, MaxPool2D,
Linear) and a 2-layer transformer encoder classifier (Embedding, TransformerEncoder, LayerNorm,
Linear), each trained with AdamW, a warmup-then-cosine learning-rate schedule stepped every
iteration and global-norm gradient clipping, as Paddle's documentation writes them.

Below the three imports, this file is Paddle code: `tests/examples/test_paddle_port.py` runs the
same source with `import paddle` in their place against PaddlePaddle itself (and a PyTorch
translation), from the same initial weights, and compares losses and parameters. The one
difference in use: a compiled step takes NumPy arrays, where a Paddle script passes
`paddle.to_tensor(...)` batches (here tensors exist only inside a traced function), so the
batches are made outside the ported code. Run: `python examples/paddle_port.py [--backend numpy]`.
"""
import numpy as np

import compiler as paddle
import compiler.nn as nn
import compiler.nn.functional as F


class LeNet(nn.Layer):
    # paddle.vision.models.LeNet, as Paddle writes it
    def __init__(self, num_classes=10):
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2D(1, 6, 3, stride=1, padding=1),
            nn.ReLU(),
            nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 5, stride=1, padding=0),
            nn.ReLU(),
            nn.MaxPool2D(2, 2),
        )
        if num_classes > 0:
            self.fc = nn.Sequential(
                nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, num_classes)
            )

    def forward(self, inputs):
        x = self.features(inputs)
        if self.num_classes > 0:
            x = paddle.flatten(x, 1)
            x = self.fc(x)
        return x


class TransformerClassifier(nn.Layer):
    def __init__(self, vocab_size, num_classes, d_model=32, nhead=4, dim_feedforward=64,
                 num_layers=2, max_len=16, dropout=0.1):
        super().__init__()
        self.word_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_layers)
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, src):
        pos = paddle.arange(src.shape[1]).unsqueeze(0)
        x = self.word_embedding(src) + self.pos_embedding(pos)
        x = self.encoder(x)
        x = self.norm(x).mean(axis=1)
        return self.classifier(x)


def train(model, batches, learning_rate=1e-3, warmup_steps=10, total_steps=100, backend=None,
          log=None):
    """Trains `model` on `batches` ((input, label) pairs); the losses, one a step. `backend`:
    to_static's (None: the default)."""
    scheduler = paddle.optimizer.lr.LinearWarmup(
        learning_rate=paddle.optimizer.lr.CosineAnnealingDecay(learning_rate, T_max=total_steps),
        warmup_steps=warmup_steps, start_lr=learning_rate / 10, end_lr=learning_rate)
    opt = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=model.parameters(),
                                 grad_clip=nn.ClipGradByGlobalNorm(1.0))

    @paddle.jit.to_static(backend=backend)
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    model.train()
    losses = []
    for step, (x, y) in enumerate(batches):
        loss = train_step(x, y)
        scheduler.step()
        losses.append(float(loss))
        if log and step % 20 == 0:
            log(f"step {step:4d}: loss {losses[-1]:.4f}, lr {scheduler.last_lr:.2e}")
    return losses
# -- end of the Paddle code ---------------------------------------------------------------------


def image_batches(steps, batch=32, num_classes=10, seed=0):
    """[batch, 1, 28, 28] float32 images (a class's fixed random pattern plus noise) and their
    int64 labels."""
    protos = np.random.default_rng(1234).standard_normal((num_classes, 1, 28, 28))
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        y = rng.integers(0, num_classes, size=batch)
        x = protos[y] * 0.5 + rng.standard_normal((batch, 1, 28, 28))
        yield x.astype(np.float32), y.astype(np.int64)


def token_batches(steps, batch=32, seq_len=16, vocab_size=50, num_classes=4, seed=0):
    """[batch, seq_len] int64 token ids; the label is the class whose tokens (ids
    c, c + num_classes, ...) occur most often."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.integers(0, vocab_size, size=(batch, seq_len))
        counts = np.stack([(x % num_classes == c).sum(1) for c in range(num_classes)], 1)
        yield x.astype(np.int64), counts.argmax(1).astype(np.int64)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Train a LeNet and a transformer, Paddle's way.")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    args = ap.parse_args()
    nn.initializer.seed(0)
    for name, model, batches in (
            ("LeNet", LeNet(), image_batches(args.steps)),
            ("transformer", TransformerClassifier(50, 4), token_batches(args.steps))):
        print(f"{name}:")
        losses = train(model, batches, total_steps=args.steps, backend=args.backend, log=print)
        print(f"  first loss {losses[0]:.4f}, last {losses[-1]:.4f}")
