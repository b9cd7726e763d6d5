"""Writes the small ONNX models tests/test_loom_command.c runs through `loom run`,
`loom inspect` and `loom export` (run with the project's .venv: .venv/bin/python).

  mlp.onnx         y = relu(x @ W + b), x [batch, 3] (batch a dim_param), W [3, 2]
                   = [[1, -1], [2, 0.5], [-1, 1]], b = [0.5, -0.5]
  unsupported.onnx x -> Relu -> NoSuchOp -> AlsoMissing(domain example.com) -> y
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))

w = numpy_helper.from_array(np.array([[1, -1], [2, 0.5], [-1, 1]], np.float32), "W")
b = numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "b")
graph = helper.make_graph(
    [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["pre"], name="add"),
        helper.make_node("Relu", ["pre"], ["y"], name="relu"),
    ],
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
    [w, b],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, os.path.join(HERE, "onnx", "mlp.onnx"))

graph = helper.make_graph(
    [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NoSuchOp", ["r"], ["s"], name="first_missing"),
        helper.make_node("AlsoMissing", ["s"], ["y"], name="second_missing", domain="example.com"),
    ],
    "unsupported",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
)
model = helper.make_model(
    graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.com", 1)]
)
model.ir_version = 8
onnx.save(model, os.path.join(HERE, "onnx", "unsupported.onnx"))
