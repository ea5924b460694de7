"""`cc.jit`: Paddle's decorator for compiled functions, so that a ported script keeps its line.

    import compiler as paddle

    @paddle.jit.to_static
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

`to_static` is `cc.compile`: the function is traced once per argument signature (shapes,
dtypes, Python scalars) into one program, its backward included, and run on the compiler's
backends. Paddle's own arguments keep their defaults' meaning where there is one here:
`backend` "CINN" or None (Paddle's compilers) means this compiler's default backend, "cpu";
"cpu", "numpy" or "gpu" pick one. `full_graph` is accepted with either value: a traced function
is always one whole graph (Paddle's `full_graph=False` falls back to Python around what it
cannot capture; here what cannot be traced is a `TraceError` naming its line). Paddle's
`input_spec` and `build_strategy` have no counterpart (the signature comes from each call's
arrays; the pipeline is set by `cc.compile`'s options), so a value other than None is a
`TypeError`. Any other keyword is `cc.compile`'s (`inplace=`, `donate=`, `schedule=`, ...).
"""
from .api import compile as _compile

__all__ = ["to_static"]

_PADDLE_BACKENDS = ("CINN", None)


def to_static(function=None, input_spec=None, build_strategy=None, backend=None,
              full_graph=False, **compile_options):
    """Paddle's `paddle.jit.to_static`, here `cc.compile` (see the module's docstring): usable
    as `@to_static`, `@to_static(backend="numpy", ...)` or `to_static(fn)`."""
    for name, value in (("input_spec", input_spec), ("build_strategy", build_strategy)):
        if value is not None:
            raise TypeError(f"to_static() got {name}={value!r}: there is no {name} here (a "
                            f"compiled function is traced once per argument signature); "
                            f"leave it out")
    if backend in _PADDLE_BACKENDS:
        backend = "cpu"
    if function is None:
        return lambda f: _compile(f, backend=backend, **compile_options)
    return _compile(function, backend=backend, **compile_options)
