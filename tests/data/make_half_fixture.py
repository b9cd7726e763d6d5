"""Writes tests/data/half_ops.safetensors: inputs and PyTorch 1.13's results of
ops in BF16 and F16 on the CPU, for tests/test_half.c.

For each dtype d (bf16, f16) and op: "<d>.<op>" is torch's result computed on
the inputs "<d>.x" [6, 40], "<d>.y" [6, 40] (y > 0), "<d>.w" [40], "<d>.b" [40],
"<d>.m" [40, 24] and "<d>.labels" [6] (I64). Gradients: "<d>.grad_x" and
"<d>.grad_w" of sum(gelu(x * w)). BF16 results are torch's own BF16 kernels;
torch 1.13 has few F16 kernels on the CPU, so F16 results are each op computed
in F32 on the F16 inputs and rounded once (what its CUDA F16 kernels do). Run
with Debian's python3-torch:
    /usr/bin/python3 tests/data/make_half_fixture.py
"""
import os

import torch
import torch.nn.functional as F

from safetensors_write import write

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(7)

out = {}
x32 = torch.randn(6, 40) * 3
y32 = torch.rand(6, 40) * 4 + 0.25
w32 = torch.randn(40)
b32 = torch.randn(40)
m32 = torch.randn(40, 24) / 6
labels = torch.randint(0, 40, (6,))
for prefix, d in (("bf16", torch.bfloat16), ("f16", torch.float16)):
    x, y, w, b, m = (t.to(d) for t in (x32, y32, w32, b32, m32))
    out.update({prefix + ".x": x, prefix + ".y": y, prefix + ".w": w, prefix + ".b": b,
                prefix + ".m": m, prefix + ".labels": labels})
    if d == torch.float16:  # each op in F32 on the F16 values, then rounded
        x, y, w, b, m = (t.float() for t in (x, y, w, b, m))
    res = {
        "add": x + y, "mul": x * y, "div": x / y, "sub_w": x - w,
        "exp": torch.exp(x / 4), "log": torch.log(y), "sqrt": torch.sqrt(y),
        "tanh": torch.tanh(x), "sigmoid": torch.sigmoid(x), "relu": torch.relu(x),
        "gelu": F.gelu(x), "gelu_tanh": F.gelu(x, approximate="tanh"), "silu": F.silu(x),
        "softmax": torch.softmax(x, -1), "log_softmax": torch.log_softmax(x, -1),
        "layer_norm": F.layer_norm(x, (40,), w, b, 1e-5),
        "sum": x.sum(-1), "mean": x.mean(-1), "max": x.amax(-1),
        "add_f32": x + y32,  # promotes to F32
        "cast_from_f32": x32.to(d),
        "cross_entropy": F.cross_entropy(x, labels),
    }
    res["matmul"] = x @ m
    if d == torch.float16:
        res["add_f32"] = x + y32
        res["cast_from_f32"] = x32.to(d)
    for k, v in res.items():
        out[prefix + "." + k] = v if k == "add_f32" else v.to(d)  # add_f32 promotes to F32
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    F.gelu(xg * wg).sum().backward()
    out[prefix + ".grad_x"] = xg.grad.to(d)
    out[prefix + ".grad_w"] = wg.grad.to(d)
out["f32.x"] = x32
out["f32.y"] = y32
write(os.path.join(HERE, "half_ops.safetensors"), out)
print("wrote half_ops.safetensors: %d tensors" % len(out))
