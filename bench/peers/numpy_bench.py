"""loom's workloads in NumPy (same sizes, F32). Run by `loom bench --peers`."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args("numpy")
try:
    import numpy as np
except ImportError as error:
    common.skipped("numpy", str(error))

EW_N = 16 * 1024 * 1024
ROWS, COLS = 4096, 1024
rng = np.random.default_rng(0)


def uniform(*shape):
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


def ew_chain_eager():
    x, y = uniform(EW_N), uniform(EW_N)
    return lambda: np.maximum(x * 1.5 + y, 0) * (1 / (1 + np.exp(-x))) - np.tanh(y) * 0.5


def ew_chain_out():
    x, y = uniform(EW_N), uniform(EW_N)
    t1, t2, out = (np.empty(EW_N, np.float32) for _ in range(3))

    def call():
        np.multiply(x, 1.5, out=t1)
        np.add(t1, y, out=t1)
        np.maximum(t1, 0, out=t1)
        np.negative(x, out=t2)
        np.exp(t2, out=t2)
        np.add(t2, 1, out=t2)
        np.reciprocal(t2, out=t2)
        np.multiply(t1, t2, out=t1)
        np.tanh(y, out=t2)
        np.multiply(t2, 0.5, out=t2)
        np.subtract(t1, t2, out=out)
    return call


def softmax():
    x = uniform(ROWS, COLS)

    def call():
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return call


def layernorm():
    x, w, b = uniform(ROWS, COLS), uniform(COLS), uniform(COLS)

    def call():
        d = x - x.mean(-1, keepdims=True)
        v = np.square(d).mean(-1, keepdims=True)
        return d * (1 / np.sqrt(v + 1e-5)) * w + b
    return call


def sum_all():
    x = uniform(EW_N)
    return lambda: x.sum()


def matmul():
    a, b = uniform(1024, 1024), uniform(1024, 1024)
    return lambda: a @ b


def linear():
    x, w, b = uniform(4096, 1024), uniform(1024, 1024), uniform(1024)
    return lambda: np.maximum(x @ w.T + b, 0)


def dispatch_small():
    x, y = uniform(1024), uniform(1024)

    def call():
        t = ((x * 2 + y) - 1) * x
        t = np.abs(-np.maximum(t, 0)) + y
        return np.minimum(t, 4.0) * 0.5
    return call


common.run("numpy", {
    "ew_chain_16M": [("eager", ew_chain_eager), ("out=", ew_chain_out)],
    "softmax_4096x1024": [("primitives", softmax)],
    "layernorm_4096x1024": [("primitives", layernorm)],
    "sum_16M": [("sum", sum_all)],
    "matmul_1024": [("matmul", matmul)],
    "linear_bias_relu_4096x1024x1024": [("primitives", linear)],
    "dispatch_small": [("eager", dispatch_small)],
}, args)
