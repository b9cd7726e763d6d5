"""Exports torchvision's models to ONNX for tests/test_onnx_models.c.

Run with Debian's python3 (python3-torch 1.13, python3-torchvision 0.14):
    python3 tests/onnx_models/export_torchvision.py OUT [NAME...]
Each model goes to OUT/<name>/model.onnx (TorchScript exporter, opset 17, a
dynamic batch axis), with inputs at batch 1 and 3 (b1_in0.npy, b3_in0.npy).
Weights are torchvision's random initialization from a fixed seed, with the
batch norms' statistics and affine terms and ViT's zero-initialized head made
random too, so the outputs are not degenerate. A model already there is kept.
"""
import os

import numpy as np
import torch
import torchvision

import exporting

MODELS = ["resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny",
          "vit_b_16"]


def randomized(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.1, generator=g)
                m.running_mean.normal_(0, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
        if name.startswith("vit"):
            model.heads.head.weight.normal_(0, 0.02, generator=g)
    return model


def export(out, name):
    folder = exporting.new_model_folder(out, name)
    if folder is None:
        return
    rng = np.random.default_rng(3)
    for batch in (1, 3):
        np.save(os.path.join(folder, f"b{batch}_in0.npy"),
                rng.standard_normal((batch, 3, 224, 224)).astype(np.float32))
    # torch.export specializes a size of 1: the dynamo exporter traces batch 2
    x = torch.randn(2 if exporting.DYNAMO else 1, 3, 224, 224,
                    generator=torch.Generator().manual_seed(2))
    exporting.export_onnx(randomized(name), x, folder, ["input"], ["logits"],
                          {"input": {0: "batch"}, "logits": {0: "batch"}})


if __name__ == "__main__":
    exporting.main(MODELS, export)
