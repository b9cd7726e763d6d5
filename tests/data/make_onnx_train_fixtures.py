"""Writes the models tests/test_onnx.c trains through loom_onnx_forward, exported by
PyTorch (Debian's /usr/bin/python3: torch 1.13), with PyTorch's outputs and gradients:

  tests/data/onnx/train/<model>/model.onnx     torch.onnx.export, opset 17, eval mode
  tests/data/onnx/train/<model>/x.npy          the input
  tests/data/onnx/train/<model>/r.npy          the loss is sum(out * r)
  tests/data/onnx/train/<model>/out.npy        PyTorch's output
  tests/data/onnx/train/<model>/grad.<param>.npy  d loss / d param, for every parameter

cnn: two convolutions (3x3, padding, stride 2), ReLU, max pooling, global average pooling,
a linear layer. transformer: a pre-norm encoder block (layer norm, two-head attention from
linear projections, GELU MLP, residuals), mean over the sequence, a linear head.
recurrent: a bidirectional LSTM, a GRU over its outputs, a linear head on the GRU's state.
"""
import math
import os

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx", "train")


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(x.mean(dim=(2, 3)))


class Block(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        hd = d // self.heads
        q = q.reshape(b, t, self.heads, hd).transpose(1, 2)
        k = k.reshape(b, t, self.heads, hd).transpose(1, 2)
        v = v.reshape(b, t, self.heads, hd).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


def write(name, model, x):
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    model.eval()
    torch.onnx.export(model, x, os.path.join(folder, "model.onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"], do_constant_folding=False)
    out = model(x)
    r = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * r).sum().backward()
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    np.save(os.path.join(folder, "r.npy"), r.numpy())
    np.save(os.path.join(folder, "out.npy"), out.detach().numpy())
    for pname, p in model.named_parameters():
        np.save(os.path.join(folder, "grad." + pname + ".npy"), p.grad.numpy())


torch.manual_seed(0)
write("cnn", Cnn(), torch.randn(2, 3, 8, 8))
block = Block()
# Layer norms start at ones and zeros, and the exporter shares equal initializers
# (ln2.weight = Identity(ln1.weight)): distinct values keep every parameter its own.
with torch.no_grad():
    for ln in (block.ln1, block.ln2):
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.1, 0.1)
write("transformer", block, torch.randn(2, 5, 16))


class Recurrent(nn.Module):
    """A bidirectional LSTM, a GRU over its outputs, the GRU's last state through a linear
    layer: the exporter writes ONNX LSTM and GRU (linear_before_reset) nodes whose
    weights are slices of the parameters, reordered to ONNX's gate order."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, bidirectional=True)
        self.gru = nn.GRU(8, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        y, _ = self.lstm(x)
        _, h = self.gru(y)
        return self.head(h[0])


torch.manual_seed(1)
write("recurrent", Recurrent(), torch.randn(6, 2, 3))
