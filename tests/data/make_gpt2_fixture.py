#!/usr/bin/env python3
"""Writes tests/data/gpt2_tiny.safetensors (a GPT-2 in the Hugging Face layout:
wte, wpe, h.<i>.ln_1, h.<i>.attn.c_attn (Conv1D, weights [in, out]),
h.<i>.attn.c_proj, h.<i>.ln_2, h.<i>.mlp.c_fc, h.<i>.mlp.c_proj, ln_f; the
head tied to wte) with seeded random weights, and
tests/data/gpt2_tiny_expected.safetensors: PyTorch 1.13's logits, loss and
every gradient (F64) for a fixed batch, and the losses of 5 AdamW steps.
Read by tests/test_gpt2.c.  Run:  python3 tests/data/make_gpt2_fixture.py"""
import math
import os

import torch
import torch.nn.functional as F

from safetensors_write import write

torch.manual_seed(0)
L, H, C, V, T, B = 2, 4, 32, 64, 16, 2
HERE = os.path.dirname(os.path.abspath(__file__))


def rn(*shape, std=0.02):
    return (torch.randn(*shape, dtype=torch.float64) * std).float()


params = {"wte.weight": rn(V, C), "wpe.weight": rn(T, C, std=0.01)}
for i in range(L):
    p = "h.%d." % i
    params[p + "ln_1.weight"] = 1 + rn(C, std=0.1)
    params[p + "ln_1.bias"] = rn(C, std=0.1)
    params[p + "attn.c_attn.weight"] = rn(C, 3 * C, std=0.2)
    params[p + "attn.c_attn.bias"] = rn(3 * C, std=0.1)
    params[p + "attn.c_proj.weight"] = rn(C, C, std=0.2)
    params[p + "attn.c_proj.bias"] = rn(C, std=0.1)
    params[p + "ln_2.weight"] = 1 + rn(C, std=0.1)
    params[p + "ln_2.bias"] = rn(C, std=0.1)
    params[p + "mlp.c_fc.weight"] = rn(C, 4 * C, std=0.2)
    params[p + "mlp.c_fc.bias"] = rn(4 * C, std=0.1)
    params[p + "mlp.c_proj.weight"] = rn(4 * C, C, std=0.2)
    params[p + "mlp.c_proj.bias"] = rn(C, std=0.1)
params["ln_f.weight"] = 1 + rn(C, std=0.1)
params["ln_f.bias"] = rn(C, std=0.1)
tokens = torch.randint(0, V, (B, T + 1))


def forward(w, idx):
    b, t = idx.shape
    x = w["wte.weight"][idx] + w["wpe.weight"][:t]
    for i in range(L):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        y = (torch.softmax(att, -1) @ v).transpose(1, 2).reshape(b, t, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    return x @ w["wte.weight"].t()


# the reference in F64 (the fixture's weights are F32 values)
w = {k: v.double().clone().requires_grad_(True) for k, v in params.items()}
logits = forward(w, tokens[:, :-1])
loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
loss.backward()
expected = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
for k, v in w.items():
    expected["grad." + k] = v.grad.clone()  # zero_grad below zeroes .grad in place
opt = torch.optim.AdamW(list(w.values()), lr=1e-2, weight_decay=0.1)
losses = []
for step in range(5):
    opt.zero_grad()
    out = forward(w, tokens[:, :-1])
    l = F.cross_entropy(out.reshape(-1, V), tokens[:, 1:].reshape(-1))
    l.backward()
    opt.step()
    losses.append(l.item())
expected["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)

# greedy decoding from the first 4 tokens, 8 new ones, with the trained weights
with torch.no_grad():
    seq = tokens[:1, :4].clone()
    for _ in range(8):
        nxt = forward(w, seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
expected["greedy"] = seq.reshape(-1)


write(os.path.join(HERE, "gpt2_tiny.safetensors"), params)
write(os.path.join(HERE, "gpt2_tiny_expected.safetensors"),
      dict(expected, tokens=tokens))
print("wrote gpt2_tiny.safetensors and gpt2_tiny_expected.safetensors; loss %.6f" % loss.item())
