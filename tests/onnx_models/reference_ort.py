"""ONNX Runtime's outputs for the models tests/test_onnx_models.c checks.

Run with the project's .venv (tools/requirements.txt pins onnxruntime):
    .venv/bin/python tests/onnx_models/reference_ort.py OUT
For every OUT/<name>/model.onnx and input_b<N>.npy beside it, writes
ort_b<N>.npy: the CPU execution provider, all graph optimizations.
"""
import glob
import os
import sys

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: reference_ort.py OUT")
    for model in sorted(glob.glob(os.path.join(sys.argv[1], "*", "model.onnx"))):
        folder = os.path.dirname(model)
        inputs = sorted(glob.glob(os.path.join(folder, "input_b*.npy")))
        todo = [f for f in inputs if not os.path.exists(f.replace("input_b", "ort_b"))]
        if not todo:
            continue
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for f in todo:
            y = session.run(None, {name: np.load(f)})[0]
            np.save(f.replace("input_b", "ort_b"), y)
        print(f"ONNX Runtime {ort.__version__}: {os.path.basename(folder)}")


if __name__ == "__main__":
    main()
