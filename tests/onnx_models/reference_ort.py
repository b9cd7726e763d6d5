"""ONNX Runtime's outputs for the models tests/test_onnx_models.c checks.

Run with the project's .venv (tools/requirements.txt pins onnxruntime):
    .venv/bin/python tests/onnx_models/reference_ort.py OUT
For every OUT/<name>/model.onnx and its inputs b<N>_in<k>.npy (k in the
model's input order), writes b<N>_ort.npy, the first output: the CPU
execution provider with all graph optimizations.
"""
import glob
import os
import re
import sys

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: reference_ort.py OUT")
    for model in sorted(glob.glob(os.path.join(sys.argv[1], "*", "model.onnx"))):
        folder = os.path.dirname(model)
        batches = sorted({int(re.match(r"b(\d+)_in", os.path.basename(f)).group(1))
                          for f in glob.glob(os.path.join(folder, "b*_in0.npy"))})
        todo = [b for b in batches if not os.path.exists(os.path.join(folder, f"b{b}_ort.npy"))]
        if not todo:
            continue
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for b in todo:
            feed = {n: np.load(os.path.join(folder, f"b{b}_in{k}.npy")) for k, n in enumerate(names)}
            np.save(os.path.join(folder, f"b{b}_ort.npy"), session.run(None, feed)[0])
        print(f"ONNX Runtime {ort.__version__}: {os.path.basename(folder)}")


if __name__ == "__main__":
    main()
