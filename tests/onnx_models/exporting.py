"""What the export scripts share: the command line, the model's folder, and
torch.onnx.export (TorchScript exporter, opset 17) into it, atomically."""
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


def export_onnx(module, args, folder, input_names, output_names, dynamic_axes):
    """folder/model.onnx, written last, so that a folder holding one is complete."""
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(module, args, path + ".tmp", input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      opset_version=17, do_constant_folding=True)
    os.replace(path + ".tmp", path)
    print(f"exported {os.path.basename(folder)}")


def main(models, export):
    """SCRIPT OUT [NAME...]: export(OUT, name) for the names given that are
    among models (all of them when none is given)."""
    if len(sys.argv) < 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} OUT [NAME...]")
    for name in [n for n in sys.argv[2:] if n in models] if len(sys.argv) > 2 else models:
        export(sys.argv[1], name)
