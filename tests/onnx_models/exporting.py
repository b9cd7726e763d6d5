"""What the export scripts share: the command line, the model's folder, and
torch.onnx.export into it, atomically: the TorchScript exporter at opset 17, or
with --dynamo (PyTorch 2) the dynamo exporter at opset 18."""
import os
import sys

import torch


def new_model_folder(out, name):
    """OUT/<name>, made; None when its model.onnx is already there."""
    folder = os.path.join(out, name)
    if os.path.exists(os.path.join(folder, "model.onnx")):
        return None
    os.makedirs(folder, exist_ok=True)
    return folder


DYNAMO = "--dynamo" in sys.argv


def export_onnx(module, args, folder, input_names, output_names, dynamic_axes):
    """folder/model.onnx, written last, so that a folder holding one is complete."""
    path = os.path.join(folder, "model.onnx")
    extra = {"dynamo": True, "external_data": False} if DYNAMO else {"do_constant_folding": True}
    torch.onnx.export(module, args, path + ".tmp", input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      opset_version=18 if DYNAMO else 17, **extra)
    os.replace(path + ".tmp", path)
    print(f"exported {os.path.basename(folder)}")


def main(models, export):
    """SCRIPT OUT [NAME...] [--dynamo]: export(OUT, name) for the names given
    that are among models (all of them when none is given)."""
    argv = [a for a in sys.argv[1:] if a != "--dynamo"]
    if not argv:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} OUT [NAME...] [--dynamo]")
    for name in [n for n in argv[1:] if n in models] if len(argv) > 1 else models:
        export(argv[0], name)
