"""Writes tests/data/onnx/rnn: RNN, GRU, LSTM and Det cases in the layout of
ONNX's backend node tests (<case>/model.onnx, <case>/test_data_set_N/{input,output}_K.pb),
run by `test_onnx_node --floor 100 tests/data/onnx/rnn` (ctest onnx_rnn).

ONNX's own cases cover one direction, default activations and no sequence_lens,
and its reference implementation computes nothing else, so the expected outputs
here come from onnxruntime (pip install onnxruntime onnx numpy, in a venv of
your own): both directions, per-batch sequence lengths (given at run time and
known at import), clip, every activation with its alpha and beta, layout 1,
initial states, peepholes, input_forget, linear_before_reset, subsets of the
outputs, and a batch dim that is a dim_param (two data sets at two batch sizes).
onnxruntime computes layout 0 only: a layout-1 case's expected values are the
layout-0 model's, transposed. Det's expected values are numpy's.
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "onnx", "rnn")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def run_ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def write_case(name, model, datasets):
    onnx.checker.check_model(model)
    folder = os.path.join(OUT, name)
    os.makedirs(folder)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for k, (ins, outs) in enumerate(datasets):
        d = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(d)
        for i, (n, v) in enumerate(ins):
            with open(os.path.join(d, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for i, (n, v) in enumerate(outs):
            with open(os.path.join(d, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())


def recurrent_case(name, op, seq, batches, inp, hidden, attrs, given, runtime, outputs,
                   lens=None, symbolic_batch=False, seed=0):
    """given: which optional inputs exist; runtime: which of them (and X) are graph
    inputs rather than initializers; outputs: names of Y, Y_h, Y_c or '' to omit."""
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    gh = GATES[op] * hidden
    layout = attrs.get("layout", 0)
    datasets = []
    model = None
    for bi, batch in enumerate(batches):
        values = {
            "X": rng.uniform(-1, 1, (seq, batch, inp)).astype(np.float32),
            "W": rng.uniform(-1, 1, (dirs, gh, inp)).astype(np.float32),
            "R": rng.uniform(-1, 1, (dirs, gh, hidden)).astype(np.float32),
            "B": rng.uniform(-0.5, 0.5, (dirs, 2 * gh)).astype(np.float32),
            "sequence_lens": np.array(lens[bi] if lens else [seq] * batch, np.int32),
            "initial_h": rng.uniform(-1, 1, (dirs, batch, hidden)).astype(np.float32),
            "initial_c": rng.uniform(-1, 1, (dirs, batch, hidden)).astype(np.float32),
            "P": rng.uniform(-1, 1, (dirs, 3 * hidden)).astype(np.float32),
        }
        if bi:  # the weights are the model's: the first data set's
            for k in ("W", "R", "B", "P"):
                values[k] = first[k]
        else:
            first = values
        names = [n if n in given or n in ("X", "W", "R") else "" for n in INPUTS[: {"LSTM": 8}.get(op, 6)]]
        while names and not names[-1]:
            names.pop()
        ort_attrs = dict(attrs, layout=0, hidden_size=hidden)
        outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
        ref_graph = helper.make_graph(
            [helper.make_node(op, names, outs, **ort_attrs)],
            name,
            [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT,
                                           values[n].shape) for n in names if n],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs],
        )
        ref = helper.make_model(ref_graph, opset_imports=[helper.make_opsetid("", 14)])
        ref.ir_version = 8
        got = dict(zip(outs, run_ort(ref, {n: values[n] for n in names if n})))
        model_values = dict(values)
        if layout:
            got["Y"] = got["Y"].transpose(2, 0, 1, 3)
            for k in ("Y_h", "Y_c"):
                if k in got:
                    got[k] = got[k].transpose(1, 0, 2)
            model_values["X"] = values["X"].transpose(1, 0, 2)
            for k in ("initial_h", "initial_c"):
                model_values[k] = values[k].transpose(1, 0, 2)
        if model is None:
            def info(n):
                shape = list(model_values[n].shape)
                if symbolic_batch:
                    batch_axes = {"X": 1 - layout, "sequence_lens": 0, "initial_h": 1 - layout,
                                  "initial_c": 1 - layout}
                    if n in batch_axes:
                        shape[batch_axes[n]] = "batch"
                dtype = TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT
                return helper.make_tensor_value_info(n, dtype, shape)

            def out_info(o):
                shape = list(got[o].shape)
                if symbolic_batch:
                    shape[(2 if o == "Y" else 1) if layout == 0 else 0] = "batch"
                return helper.make_tensor_value_info(o, TensorProto.FLOAT, shape)

            graph_inputs = [info(n) for n in names if n and n in runtime]
            inits = [numpy_helper.from_array(model_values[n], n) for n in names if n and n not in runtime]
            kept = [o for o in outputs if o]
            graph = helper.make_graph(
                [helper.make_node(op, names, outputs, name=name, **dict(attrs, hidden_size=hidden))],
                name, graph_inputs,
                [out_info(o) for o in kept], inits)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
            model.ir_version = 8
        datasets.append(([(n, model_values[n]) for n in names if n and n in runtime],
                         [(o, got[o]) for o in outputs if o]))
    write_case(name, model, datasets)


def det_case(name, x):
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name=name)], name,
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape[:-2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    want = np.array(np.linalg.det(x)).astype(x.dtype)
    write_case(name, model, [([("x", x)], [("y", want)])])


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    everything = ["B", "sequence_lens", "initial_h", "initial_c", "P"]
    recurrent_case("test_lstm_bidirectional_lengths", "LSTM", 4, [3, 2], 2, 3,
                   {"direction": "bidirectional"}, everything,
                   ["X", "sequence_lens", "initial_h", "initial_c"], ["Y", "Y_h", "Y_c"],
                   lens=[[4, 2, 1], [3, 4]], symbolic_batch=True, seed=1)
    recurrent_case("test_lstm_reverse_layout1_forget_clip", "LSTM", 3, [2], 3, 2,
                   {"direction": "reverse", "layout": 1, "clip": 0.7, "input_forget": 1,
                    "activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                    "activation_alpha": [0.3, 0.2], "activation_beta": [0.45]},
                   ["B", "initial_h", "initial_c", "P"], ["X"], ["", "Y_h", "Y_c"], seed=2)
    recurrent_case("test_lstm_forward_known_lengths", "LSTM", 3, [3], 2, 2,
                   {"activations": ["Sigmoid", "Softplus", "ScaledTanh"],
                    "activation_alpha": [1.5], "activation_beta": [0.7]},
                   ["B", "sequence_lens"], ["X"], ["Y", "", "Y_c"], lens=[[1, 3, 0]], seed=3)
    recurrent_case("test_gru_bidirectional_linear_before_reset", "GRU", 3, [2], 2, 3,
                   {"direction": "bidirectional", "linear_before_reset": 1}, ["B", "initial_h", "sequence_lens"],
                   ["X", "initial_h"], ["Y", "Y_h"], lens=[[2, 3]], seed=4)
    recurrent_case("test_gru_reverse_activations_layout1", "GRU", 4, [2], 3, 2,
                   {"direction": "reverse", "layout": 1, "clip": 1.5,
                    "activations": ["HardSigmoid", "ScaledTanh"],
                    "activation_alpha": [0.3, 1.5], "activation_beta": [0.4, 0.7]},
                   ["B", "sequence_lens"], ["X", "sequence_lens"], ["Y", "Y_h"], lens=[[4, 2]], seed=5)
    recurrent_case("test_rnn_bidirectional_relu_lengths", "RNN", 3, [3], 2, 2,
                   {"direction": "bidirectional", "clip": 2.0,
                    "activations": ["Relu", "ThresholdedRelu"], "activation_alpha": [0.1]},
                   ["B", "sequence_lens", "initial_h"], ["X", "sequence_lens", "initial_h"], ["Y", "Y_h"],
                   lens=[[3, 1, 2]], seed=6)
    recurrent_case("test_rnn_reverse_elu_layout1", "RNN", 3, [2], 2, 3,
                   {"direction": "reverse", "layout": 1, "activations": ["Elu"], "activation_alpha": [0.5]},
                   ["initial_h"], ["X", "initial_h"], ["Y", "Y_h"], seed=7)
    recurrent_case("test_rnn_affine_sigmoid", "RNN", 2, [2, 5], 2, 2,
                   {"direction": "bidirectional", "activations": ["Affine", "Sigmoid"],
                    "activation_alpha": [0.8], "activation_beta": [0.1]},
                   ["B"], ["X"], ["Y", ""], symbolic_batch=True, seed=8)
    rng = np.random.default_rng(9)
    mats = rng.uniform(-2, 2, (6, 4, 4)).astype(np.float32)
    mats[1, 0, 0] = 0  # a pivot must be swapped in
    mats[2] = np.eye(4, dtype=np.float32)[[2, 0, 3, 1]]  # a permutation: det -1 or 1
    mats[3, 2] = 2 * mats[3, 0]  # singular
    mats[4, :, 1] = 0  # a zero column
    det_case("test_det_pivots_f32", mats)
    det_case("test_det_f64_7x7", rng.uniform(-1, 1, (2, 3, 7, 7)))
    det_case("test_det_1x1", np.array([[[3.5]], [[-2.0]]], np.float32))


if __name__ == "__main__":
    main()
