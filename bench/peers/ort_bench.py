"""loom's model workloads (bench/models.c) in ONNX Runtime, on the same ONNX
files (tests/onnx_models/run.sh makes them; $LOOM_BENCH_MODELS_DIR). Run by
`loom bench --peers` with the project's .venv (tools/requirements.txt pins
onnxruntime): the CPU execution provider with every graph optimization,
intra-op threads = loom's, one inter-op thread, sequential execution; the
batch and sequence fixed by the inputs' shapes as loom's are at import."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args("ort")
try:
    import numpy as np
    import onnxruntime as ort
except ImportError as error:
    common.skipped("ort", str(error))

MODELS = os.environ.get("LOOM_BENCH_MODELS_DIR", "build/onnx_models")


def session(model):
    path = os.path.join(MODELS, model, "model.onnx")
    if not os.path.exists(path):
        common.skipped("ort", f"{path} is missing: tests/onnx_models/run.sh makes it")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def image(model, batch):
    def make():
        s = session(model)
        x = np.random.default_rng(7).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
        feed = {s.get_inputs()[0].name: x}
        return lambda: s.run(None, feed)
    return make


def tokens(model, batch, sequence=128):
    def make():
        s = session(model)
        ids = (np.arange(batch * sequence, dtype=np.int64) * 7919 % 1000).reshape(batch, sequence)
        names = [i.name for i in s.get_inputs()]
        feed = dict(zip(names, [ids, np.ones((batch, sequence), np.int64)]))
        return lambda: s.run(None, feed)
    return make


variant = f"cpu ep {ort.__version__}"
common.run("ort", {
    "onnx_resnet50_b1": [(variant, image("resnet50", 1))],
    "onnx_resnet50_b8": [(variant, image("resnet50", 8))],
    "onnx_mobilenet_v2_b1": [(variant, image("mobilenet_v2", 1))],
    "onnx_efficientnet_b0_b1": [(variant, image("efficientnet_b0", 1))],
    "onnx_bert_base_s128_b1": [(variant, tokens("bert", 1))],
    "onnx_bert_base_s128_b8": [(variant, tokens("bert", 8))],
    "onnx_gpt2_prefill_128": [(variant, tokens("gpt2", 1))],
}, args)
