"""loom's workloads in PyTorch (same sizes, F32, CPU; autograd only in the
training steps). Run by `loom bench --peers`: with Debian's PyTorch 1.13 (peer
"torch"), as installed and, with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 and
OMP_WAIT_POLICY=PASSIVE in the environment, "tuned"; and with PyTorch 2 from
.venv-peers (peer "torch2", bench/peers/setup.sh; the huge-page malloc only):
eager, and each workload's function under torch.compile (--compile default or
max-autotune: Inductor)."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def add_arguments(parser):
    parser.add_argument("--peer", default="torch", help="the name in the table")
    parser.add_argument("--compile", choices=["default", "max-autotune"],
                        help="torch.compile's mode (PyTorch 2): Inductor, freezing on")


args = common.parse_args("torch", add_arguments)
try:
    import torch
    import torch.nn.functional as F
except ImportError as error:
    common.skipped(args.peer, common.missing(error))
if args.compile and not hasattr(torch, "compile"):
    common.skipped(args.peer, f"torch.compile needs PyTorch 2, this is {torch.__version__}")

torch.set_num_threads(args.threads)
torch.set_grad_enabled(False)
torch.manual_seed(0)

EW_N = 16 * 1024 * 1024
ROWS, COLS = 4096, 1024


def uniform(*shape):
    return torch.rand(*shape, dtype=torch.float32) * 2 - 1


def ew_chain_eager():
    x, y = uniform(EW_N), uniform(EW_N)
    return lambda: torch.relu(x * 1.5 + y) * torch.sigmoid(x) - torch.tanh(y) * 0.5


def ew_chain_out():
    x, y = uniform(EW_N), uniform(EW_N)
    t1, t2, out = (torch.empty(EW_N) for _ in range(3))

    def call():
        torch.mul(x, 1.5, out=t1)
        torch.add(t1, y, out=t1)
        torch.relu_(t1)
        torch.sigmoid(x, out=t2)
        torch.mul(t1, t2, out=t1)
        torch.tanh(y, out=t2)
        torch.mul(t2, 0.5, out=t2)
        torch.sub(t1, t2, out=out)
    return call


def softmax():
    x = uniform(ROWS, COLS)
    return lambda: torch.softmax(x, -1)


def sort_vocab():
    x = uniform(1, 50257)
    return lambda: torch.sort(x, stable=True, dim=-1, descending=True)


def topk_vocab():
    x = uniform(1, 50257)
    return lambda: torch.topk(x, 40, -1)


def cumsum(rows, cols):
    x = uniform(rows, cols)
    return lambda: torch.cumsum(x, -1)


def attention_causal():
    q, k, v = (uniform(1, 12, 1024, 64) for _ in range(3))
    hidden = torch.ones(1024, 1024, dtype=torch.bool).triu(1)

    def call():  # torch 1.13 has no F.scaled_dot_product_attention
        scores = (q @ k.transpose(-2, -1)) * 0.125
        return scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v
    return call


def attention_causal_train():
    q, k, v = (uniform(1, 12, 1024, 64).requires_grad_(True) for _ in range(3))
    w = uniform(1, 12, 1024, 64)
    hidden = torch.ones(1024, 1024, dtype=torch.bool).triu(1)

    def call():  # the forward and the gradients to q, k, v (loom's workload)
        with torch.enable_grad():
            scores = (q @ k.transpose(-2, -1)) * 0.125
            out = scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v
            return torch.autograd.grad((out * w).sum(), (q, k, v))
    return call


def layernorm_primitives():
    x, w, b = uniform(ROWS, COLS), uniform(COLS), uniform(COLS)

    def call():
        d = x - x.mean(-1, keepdim=True)
        v = torch.square(d).mean(-1, keepdim=True)
        return d * torch.rsqrt(v + 1e-5) * w + b
    return call


def layernorm_op():
    x, w, b = uniform(ROWS, COLS), uniform(COLS), uniform(COLS)
    return lambda: F.layer_norm(x, (COLS,), w, b, 1e-5)


def sum_all():
    x = uniform(EW_N)
    return lambda: x.sum()


def matmul():
    a, b = uniform(1024, 1024), uniform(1024, 1024)
    return lambda: a @ b


def linear():
    x, w, b = uniform(4096, 1024), uniform(1024, 1024), uniform(1024)
    return lambda: torch.relu(F.linear(x, w, b))


def dispatch_small():
    x, y = uniform(1024), uniform(1024)

    def call():
        t = ((x * 2 + y) - 1) * x
        t = torch.abs(-torch.relu(t)) + y
        return torch.clamp_max(t, 4.0) * 0.5
    return call


def labels(n):
    return torch.tensor([(i * 7) % 10 for i in range(n)], dtype=torch.int64)


def train_step(model, opt, x, y):
    def call():
        with torch.enable_grad():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()
    return call


def mlp_train_step():
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return train_step(model, opt, torch.rand(256, 784), labels(256))


def cnn_train_step():
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return train_step(model, opt, torch.rand(64, 1, 28, 28), labels(64))


def gpt_train_step(layers, heads, c, v, positions, b, t, autocast=False):
    """bench/train.c's GPT-2s: one AdamW step on b x t tokens (autocast: the forward
    under torch.autocast to BF16, F32 weights and optimizer, as loom's mixed precision)."""
    def p(*shape, std=0.02):
        return (torch.randn(*shape) * std).requires_grad_(True)
    def zeros(n):
        return torch.zeros(n, requires_grad=True)
    def ones(n):
        return torch.ones(n, requires_grad=True)
    w = {"wte": p(v, c), "wpe": p(positions, c, std=0.01), "lnf.w": ones(c), "lnf.b": zeros(c)}
    for i in range(layers):
        for name, (n_in, n_out) in {"attn": (c, 3 * c), "proj": (c, c), "fc": (c, 4 * c),
                                    "mproj": (4 * c, c)}.items():
            w["%d.%s.w" % (i, name)], w["%d.%s.b" % (i, name)] = p(n_in, n_out), zeros(n_out)
        for name in ("ln1", "ln2"):
            w["%d.%s.w" % (i, name)], w["%d.%s.b" % (i, name)] = ones(c), zeros(c)
    tokens = (torch.arange(b * t + 1) * 37 + 11) % v
    x, y = tokens[:-1].view(b, t), tokens[1:]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    def forward():
        h = w["wte"][x] + w["wpe"][:t]
        for i in range(layers):
            a = F.layer_norm(h, (c,), w["%d.ln1.w" % i], w["%d.ln1.b" % i])
            q, k, val = (a @ w["%d.attn.w" % i] + w["%d.attn.b" % i]).split(c, -1)
            q, k, val = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, val))
            att = ((q @ k.transpose(-2, -1)) / (c // heads) ** 0.5).masked_fill(causal, -inf)
            o = (att.softmax(-1) @ val).transpose(1, 2).reshape(b, t, c)
            h = h + o @ w["%d.proj.w" % i] + w["%d.proj.b" % i]
            a = F.layer_norm(h, (c,), w["%d.ln2.w" % i], w["%d.ln2.b" % i])
            m = F.gelu(a @ w["%d.fc.w" % i] + w["%d.fc.b" % i], approximate="tanh")
            h = h + m @ w["%d.mproj.w" % i] + w["%d.mproj.b" % i]
        h = F.layer_norm(h, (c,), w["lnf.w"], w["lnf.b"])
        return F.cross_entropy((h @ w["wte"].t()).view(-1, v), y)
    opt = torch.optim.AdamW(w.values())
    def call():
        with torch.enable_grad():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = forward()
            loss.backward()
            opt.step()
        return loss.item()
    return call


def gpt2_decode(length):
    """GPT-2 124M, batch 1: one token after length - 1 in a Hugging Face-style KV cache
    (keys and values concatenated per layer, attention over all of them)."""
    layers, heads, c, v = 12, 12, 768, 50257
    d = c // heads
    g = torch.Generator().manual_seed(0)
    def p(*shape):
        return torch.randn(*shape, generator=g) * 0.02
    w = {"wte": p(v, c), "wpe": p(1024, c), "lnf.w": torch.ones(c), "lnf.b": torch.zeros(c)}
    for i in range(layers):
        for name, (n_in, n_out) in {"attn": (c, 3 * c), "proj": (c, c), "fc": (c, 4 * c),
                                    "mproj": (4 * c, c)}.items():
            w["%d.%s.w" % (i, name)], w["%d.%s.b" % (i, name)] = p(n_in, n_out), torch.zeros(n_out)
        for name in ("ln1", "ln2"):
            w["%d.%s.w" % (i, name)], w["%d.%s.b" % (i, name)] = torch.ones(c), torch.zeros(c)
    past = [(torch.randn(1, heads, length - 1, d), torch.randn(1, heads, length - 1, d))
            for _ in range(layers)]
    token = torch.tensor([[11]])
    def call():
        with torch.no_grad():
            h = w["wte"][token] + w["wpe"][length - 1]
            for i in range(layers):
                a = F.layer_norm(h, (c,), w["%d.ln1.w" % i], w["%d.ln1.b" % i])
                q, k, val = (a @ w["%d.attn.w" % i] + w["%d.attn.b" % i]).split(c, -1)
                q, k, val = (z.view(1, 1, heads, d).transpose(1, 2) for z in (q, k, val))
                k = torch.cat([past[i][0], k], 2)  # as HF's cache: a new tensor per token
                val = torch.cat([past[i][1], val], 2)
                att = ((q @ k.transpose(-2, -1)) / d ** 0.5).softmax(-1)
                o = (att @ val).transpose(1, 2).reshape(1, 1, c)
                h = h + o @ w["%d.proj.w" % i] + w["%d.proj.b" % i]
                a = F.layer_norm(h, (c,), w["%d.ln2.w" % i], w["%d.ln2.b" % i])
                m = F.gelu(a @ w["%d.fc.w" % i] + w["%d.fc.b" % i], approximate="tanh")
                h = h + m @ w["%d.mproj.w" % i] + w["%d.mproj.b" % i]
            h = F.layer_norm(h, (c,), w["lnf.w"], w["lnf.b"])
            return (h @ w["wte"].t())[0, 0, 0].item()
    return call


def gpt_small_train_step():
    return gpt_train_step(4, 4, 256, 256, 64, 8, 64)


def gpt_small_v50257_train_step():
    return gpt_train_step(4, 4, 256, 50257, 1024, 4, 64)


def gpt2_124m_train_step():
    return gpt_train_step(12, 12, 768, 50257, 1024, 4, 64)


def gpt2_124m_train_step_bf16():
    return gpt_train_step(12, 12, 768, 50257, 1024, 4, 64, autocast=True)


def matmul_bf16():
    a, b = uniform(1024, 1024).bfloat16(), uniform(1024, 1024).bfloat16()
    return lambda: a @ b


# The models are built from their configs here: Hugging Face's hub is never asked.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def model_tokens(batch, sequence=128):
    """ort_bench.py's token ids and mask of ones, [batch, sequence]."""
    ids = (torch.arange(batch * sequence, dtype=torch.int64) * 7919 % 1000).view(batch, sequence)
    return ids, torch.ones(batch, sequence, dtype=torch.int64)


def vision(name, batch):
    """torchvision's model `name`, the architecture of onnx_<name>_*'s file,
    with random weights (the time does not depend on them)."""
    import torchvision
    model = getattr(torchvision.models, name)().eval()
    x = uniform(batch, 3, 224, 224)
    return lambda: model(x)


def bert(batch):
    """BERT-base from its config as tests/onnx_models/export_hf.py makes it:
    the last hidden state (the export drops the pooler, unused)."""
    import transformers
    model = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False).eval()
    ids, mask = model_tokens(batch)
    return lambda: model(input_ids=ids, attention_mask=mask)[0]


def gpt2_prefill():
    """GPT-2 124M's logits for 128 tokens, no cache, as the export."""
    import transformers
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)).eval()
    ids, mask = model_tokens(1)
    return lambda: model(input_ids=ids, attention_mask=mask)[0]


def compiled(make_call):
    """make_call's function under torch.compile, called three times before the
    timing: the first compiles; a training step compiles again on the second
    (the optimizer's state exists from the first step on). Each workload starts
    from an empty dynamo cache, so none counts against another's recompiles."""
    def make():
        torch._dynamo.reset()
        call = torch.compile(make_call(), mode=args.compile)
        for _ in range(3):
            call()
        return call
    return make


def compile_form(workloads):
    """The workloads under torch.compile: a variant named after the mode (and
    after the eager variant when there are several); out= is eager's own form,
    left out."""
    mode = "inductor" if args.compile == "default" else "inductor " + args.compile
    forms = {}
    for name, variants in workloads.items():
        kept = [(variant, make) for variant, make in variants if variant != "out="]
        forms[name] = [(mode if len(kept) == 1 else f"{mode}, {variant}", compiled(make))
                       for variant, make in kept]
    return forms


inf = float("inf")

WORKLOADS = {
    "ew_chain_16M": [("eager", ew_chain_eager), ("out=", ew_chain_out)],
    "softmax_4096x1024": [("torch.softmax", softmax)],
    "sort_1x50257": [("torch.sort", sort_vocab)],
    "topk_1x50257_k40": [("torch.topk", topk_vocab)],
    "cumsum_1x50257": [("torch.cumsum", lambda: cumsum(1, 50257))],
    "cumsum_64x1000": [("torch.cumsum", lambda: cumsum(64, 1000))],
    "cumsum_4096x4096": [("torch.cumsum", lambda: cumsum(4096, 4096))],
    "attention_causal_1x12x1024x64": [("matmul, softmax", attention_causal)],
    "attention_causal_train_1x12x1024x64": [("matmul, softmax, autograd",
                                             attention_causal_train)],
    "layernorm_4096x1024": [("primitives", layernorm_primitives),
                            ("F.layer_norm", layernorm_op)],
    "sum_16M": [("sum", sum_all)],
    "matmul_1024": [("matmul", matmul)],
    "matmul_1024_bf16": [("matmul", matmul_bf16)],
    "linear_bias_relu_4096x1024x1024": [("relu(F.linear)", linear)],
    "dispatch_small": [("eager", dispatch_small)],
    "mlp_train_step": [("eager", mlp_train_step)],
    "cnn_train_step": [("eager", cnn_train_step)],
    "gpt_small_train_step": [("eager", gpt_small_train_step)],
    "gpt_small_v50257_train_step": [("eager", gpt_small_v50257_train_step)],
    "gpt2_124m_train_step": [("eager", gpt2_124m_train_step)],
    "gpt2_124m_train_step_bf16": [("eager, autocast", gpt2_124m_train_step_bf16)],
    "gpt2_decode_ctx128": [("eager, KV cache", lambda: gpt2_decode(128))],
    "gpt2_decode_ctx512": [("eager, KV cache", lambda: gpt2_decode(512))],
    "gpt2_decode_ctx1024": [("eager, KV cache", lambda: gpt2_decode(1024))],
    "onnx_resnet50_b1": [("eager", lambda: vision("resnet50", 1))],
    "onnx_resnet50_b8": [("eager", lambda: vision("resnet50", 8))],
    "onnx_mobilenet_v2_b1": [("eager", lambda: vision("mobilenet_v2", 1))],
    "onnx_efficientnet_b0_b1": [("eager", lambda: vision("efficientnet_b0", 1))],
    "onnx_bert_base_s128_b1": [("eager", lambda: bert(1))],
    "onnx_bert_base_s128_b8": [("eager", lambda: bert(8))],
    "onnx_gpt2_prefill_128": [("eager", gpt2_prefill)],
}

if args.compile:
    import logging

    import torch._inductor.config
    # Freezing (weights as constants: folded batch norms, oneDNN's packed
    # weights) is PyTorch's advice for inference on the CPU; it leaves the
    # training graphs alone.
    torch._inductor.config.freezing = True
    # Quiet on loom's terminal: the training steps' loss.item() is a graph
    # break by design, and max-autotune's table of choices runs to pages.
    torch._logging.set_logs(dynamo=logging.ERROR)
    # PyPI's torch is a CUDA build: Inductor's C++ toolchain notes the missing runtime
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    torch._inductor.config.max_autotune_report_choices_stats = False
    WORKLOADS = compile_form(WORKLOADS)
common.run(args.peer, WORKLOADS, args)
