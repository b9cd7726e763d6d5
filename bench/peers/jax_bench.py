"""loom's training steps, matmul, GPT-2 decoding and GPT-2's prefill in JAX,
each one jax.jit'd function on the CPU (F32, the same sizes, models and
optimizers as torch_bench.py and bench/train.c). Run by `loom bench --peers`
with .venv-peers (bench/peers/setup.sh) and GLIBC_TUNABLES=glibc.malloc.hugetlb=1
(the CNN step 1.7x faster on the 2-vCPU EPYC). XLA's CPU threads: XLA_FLAGS gets
--xla_cpu_multi_thread_eigen=true and intra_op_parallelism_threads=loom's.
The training steps donate their parameters and optimizer state to the step
(updated in place, as PyTorch's optimizers do), and every call ends with the
result on the host (float(loss), as torch's loss.item()). ResNet-50 and BERT
have no JAX peer: JAX has no model zoo of its own (they would need Flax)."""
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args("jax")
# XLA reads its flags when its CPU client starts, so they go in before jax.
os.environ["XLA_FLAGS"] = " ".join(filter(None, [
    os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=true",
    f"intra_op_parallelism_threads={args.threads}"]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no probing for accelerators
try:
    import jax
    import jax.numpy as jnp
except ImportError as error:
    common.skipped("jax", common.missing(error))

KEY = jax.random.PRNGKey(0)


def normal(key, shape, std):
    return jax.random.normal(key, shape, jnp.float32) * std


def uniform(key, *shape):
    return jax.random.uniform(key, shape, jnp.float32, -1, 1)


def matmul():
    a, b = uniform(jax.random.fold_in(KEY, 1), 1024, 1024), uniform(KEY, 1024, 1024)
    product = jax.jit(jnp.matmul)
    return lambda: product(a, b).block_until_ready()


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))


def labels(n):
    return jnp.array([(i * 7) % 10 for i in range(n)], jnp.int32)


def sgd_momentum(lr=0.01, momentum=0.9):
    """torch.optim.SGD(lr, momentum): buf = momentum * buf + g; p -= lr * buf."""
    def init(params):
        return jax.tree_util.tree_map(jnp.zeros_like, params)

    def update(params, buf, grads, step):
        buf = jax.tree_util.tree_map(lambda b, g: momentum * b + g, buf, grads)
        return jax.tree_util.tree_map(lambda p, b: p - lr * b, params, buf), buf
    return init, update


def adam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
    """torch.optim.Adam (weight_decay 0) and AdamW (decoupled decay)'s arithmetic."""
    def init(params):
        # two trees, not one twice: each buffer is donated to the step once
        return tuple(jax.tree_util.tree_map(jnp.zeros_like, params) for _ in range(2))

    def update(params, state, grads, step):
        m, v = state
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        size = lr / (1 - b1 ** step)
        root = jnp.sqrt(1 - b2 ** step)

        def one(p, m, v):
            p = p * (1 - lr * weight_decay)
            return p - size * m / (jnp.sqrt(v) / root + eps)
        return jax.tree_util.tree_map(one, params, m, v), (m, v)
    return init, update


def train_step(loss_fn, params, optimizer, x, y):
    """One jit'd step (gradients and the optimizer's update); the parameters and
    the optimizer's state are donated, so XLA updates them in place."""
    init, update = optimizer

    def step(params, state, count, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params, state = update(params, state, grads, count)
        return params, state, loss
    step = jax.jit(step, donate_argnums=(0, 1))
    held = {"params": params, "state": init(params), "count": 0}

    def call():
        held["count"] += 1  # a traced argument: no recompiling as it changes
        held["params"], held["state"], loss = step(held["params"], held["state"],
                                                   jnp.float32(held["count"]), x, y)
        return float(loss)
    return call


def linear_params(key, sizes):
    keys = jax.random.split(key, len(sizes))
    return [(normal(k, (n_in, n_out), 1 / math.sqrt(n_in)), jnp.zeros(n_out))
            for k, (n_in, n_out) in zip(keys, sizes)]


def mlp_train_step():
    def loss_fn(p, x, y):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return cross_entropy(h, y)
    params = linear_params(KEY, [(784, 512), (512, 256), (256, 10)])
    x = jax.random.uniform(KEY, (256, 784))
    return train_step(loss_fn, params, adam(), x, labels(256))


def cnn_train_step():
    """torch_bench.py's CNN in NHWC, XLA's layout for CPU convolutions."""
    k = jax.random.split(KEY, 3)
    params = {"c1": normal(k[0], (3, 3, 1, 16), 1 / 3), "b1": jnp.zeros(16),
              "c2": normal(k[1], (3, 3, 16, 32), 1 / 12), "b2": jnp.zeros(32),
              "w": normal(k[2], (32 * 7 * 7, 10), 1 / 40), "b": jnp.zeros(10)}

    def conv_relu_pool(h, w, b):
        h = jax.lax.conv_general_dilated(h, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + b)
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                     "VALID")

    def loss_fn(p, x, y):
        h = conv_relu_pool(x, p["c1"], p["b1"])
        h = conv_relu_pool(h, p["c2"], p["b2"])
        return cross_entropy(h.reshape(h.shape[0], -1) @ p["w"] + p["b"], y)
    x = jax.random.uniform(KEY, (64, 28, 28, 1))
    return train_step(loss_fn, params, sgd_momentum(), x, labels(64))


def gpt_weights(layers, c, v, positions):
    """torch_bench.py's GPT-2 weights: [in, out] matrices, a tied head."""
    keys = iter(jax.random.split(KEY, 2 + 4 * layers))
    w = {"wte": normal(next(keys), (v, c), 0.02),
         "wpe": normal(next(keys), (positions, c), 0.01),
         "lnf.w": jnp.ones(c), "lnf.b": jnp.zeros(c)}
    for i in range(layers):
        for name, (n_in, n_out) in {"attn": (c, 3 * c), "proj": (c, c), "fc": (c, 4 * c),
                                    "mproj": (4 * c, c)}.items():
            w[f"{i}.{name}.w"] = normal(next(keys), (n_in, n_out), 0.02)
            w[f"{i}.{name}.b"] = jnp.zeros(n_out)
        for name in ("ln1", "ln2"):
            w[f"{i}.{name}.w"], w[f"{i}.{name}.b"] = jnp.ones(c), jnp.zeros(c)
    return w


def layer_norm(h, weight, bias):
    mean = h.mean(-1, keepdims=True)
    var = jnp.square(h - mean).mean(-1, keepdims=True)
    return (h - mean) * jax.lax.rsqrt(var + 1e-5) * weight + bias


def gpt_block(w, i, h, heads, attend):
    """One GPT-2 block; attend(q, k, v) -> the heads' outputs, [b, heads, t, d]."""
    b, t, c = h.shape
    a = layer_norm(h, w[f"{i}.ln1.w"], w[f"{i}.ln1.b"])
    q, k, val = jnp.split(a @ w[f"{i}.attn.w"] + w[f"{i}.attn.b"], 3, -1)
    q, k, val = (z.reshape(b, t, heads, c // heads).transpose(0, 2, 1, 3) for z in (q, k, val))
    o = attend(i, q, k, val).transpose(0, 2, 1, 3).reshape(b, t, c)
    h = h + o @ w[f"{i}.proj.w"] + w[f"{i}.proj.b"]
    a = layer_norm(h, w[f"{i}.ln2.w"], w[f"{i}.ln2.b"])
    m = jax.nn.gelu(a @ w[f"{i}.fc.w"] + w[f"{i}.fc.b"], approximate=True)
    return h + m @ w[f"{i}.mproj.w"] + w[f"{i}.mproj.b"]


def gpt_logits(w, x, layers, heads):
    t = x.shape[1]
    d = w["wte"].shape[1] // heads
    causal = jnp.triu(jnp.ones((t, t), bool), 1)

    def attend(i, q, k, v):
        scores = jnp.where(causal, -jnp.inf, (q @ k.swapaxes(-2, -1)) / math.sqrt(d))
        return jax.nn.softmax(scores, -1) @ v
    h = w["wte"][x] + w["wpe"][:t]
    for i in range(layers):
        h = gpt_block(w, i, h, heads, attend)
    return layer_norm(h, w["lnf.w"], w["lnf.b"]) @ w["wte"].T


def gpt_train_step(layers, heads, c, v, positions, b, t):
    """bench/train.c's GPT-2s: one AdamW step (torch's defaults) on b x t tokens."""
    def loss_fn(w, x, y):
        return cross_entropy(gpt_logits(w, x, layers, heads).reshape(-1, v), y)
    tokens = (jnp.arange(b * t + 1) * 37 + 11) % v
    x, y = tokens[:-1].reshape(b, t), tokens[1:]
    return train_step(loss_fn, gpt_weights(layers, c, v, positions), adam(weight_decay=1e-2),
                      x, y)


def gpt2_prefill():
    """GPT-2 124M's logits for 128 tokens, no cache (onnx_gpt2_prefill_128's
    computation, written here as above rather than read from the file)."""
    w = gpt_weights(12, 768, 50257, 1024)
    ids = (jnp.arange(128) * 7919 % 1000).reshape(1, 128)
    logits = jax.jit(lambda w, x: gpt_logits(w, x, 12, 12))
    return lambda: logits(w, ids).block_until_ready()


def gpt2_decode(length):
    """GPT-2 124M, batch 1: one token after length - 1 in a KV cache, the new
    key and value concatenated to it, as torch_bench.py's."""
    layers, heads, c = 12, 12, 768
    d = c // heads
    w = gpt_weights(layers, c, 50257, 1024)
    keys = jax.random.split(KEY, 2 * layers)
    past = [(jax.random.normal(keys[2 * i], (1, heads, length - 1, d)),
             jax.random.normal(keys[2 * i + 1], (1, heads, length - 1, d)))
            for i in range(layers)]

    def decode(w, past, token):
        def attend(i, q, k, v):
            k = jnp.concatenate([past[i][0], k], 2)
            v = jnp.concatenate([past[i][1], v], 2)
            return jax.nn.softmax((q @ k.swapaxes(-2, -1)) / math.sqrt(d), -1) @ v
        h = w["wte"][token] + w["wpe"][length - 1]
        for i in range(layers):
            h = gpt_block(w, i, h, heads, attend)
        return (layer_norm(h, w["lnf.w"], w["lnf.b"]) @ w["wte"].T)[0, 0, 0]
    decode = jax.jit(decode)
    token = jnp.array([[11]])
    return lambda: float(decode(w, past, token))


common.run("jax", {
    "matmul_1024": [("jit", matmul)],
    "mlp_train_step": [("jit", mlp_train_step)],
    "cnn_train_step": [("jit, NHWC", cnn_train_step)],
    "gpt_small_train_step": [("jit", lambda: gpt_train_step(4, 4, 256, 256, 64, 8, 64))],
    "gpt_small_v50257_train_step": [("jit", lambda: gpt_train_step(4, 4, 256, 50257, 1024, 4,
                                                                   64))],
    "gpt2_124m_train_step": [("jit", lambda: gpt_train_step(12, 12, 768, 50257, 1024, 4, 64))],
    "gpt2_decode_ctx128": [("jit, KV cache", lambda: gpt2_decode(128))],
    "gpt2_decode_ctx512": [("jit, KV cache", lambda: gpt2_decode(512))],
    "gpt2_decode_ctx1024": [("jit, KV cache", lambda: gpt2_decode(1024))],
    "onnx_gpt2_prefill_128": [("jit", gpt2_prefill)],
}, args)
