"""loom's model workloads (bench/models.c) in OpenVINO's CPU plugin, on the same
ONNX files ($LOOM_BENCH_MODELS_DIR; tests/onnx_models/run.sh makes them). Run
by `loom bench --peers` with .venv-peers (bench/peers/setup.sh), glibc's
huge-page malloc as the other compilers (no change measured). The inputs'
batch and sequence are fixed before compiling (model.reshape), as loom fixes
them at import. Both performance hints, with INFERENCE_NUM_THREADS = loom's
threads and INFERENCE_PRECISION_HINT f32 (on CPUs with AVX-512 BF16 or AMX
OpenVINO would otherwise compute in BF16; loom computes in F32):
  latency     one synchronous request after another: the time of one call;
  throughput  the plugin's streams, its OPTIMAL_NUMBER_OF_INFER_REQUESTS
              requests in flight at once: the time per request over all of
              them (a throughput, not one call's latency)."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args("openvino")
try:
    import numpy as np
    import openvino as ov
except ImportError as error:
    common.skipped("openvino", common.missing(error))

MODELS = os.environ.get("LOOM_BENCH_MODELS_DIR", "build/onnx_models")
CORE = ov.Core()


def compile_model(model, feed, hint):
    path = os.path.join(MODELS, model, "model.onnx")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: tests/onnx_models/run.sh makes it")
    m = CORE.read_model(path)
    m.reshape({i: list(value.shape) for i, value in feed.items()})
    return CORE.compile_model(m, "CPU", {"PERFORMANCE_HINT": hint,
                                         "INFERENCE_NUM_THREADS": args.threads,
                                         "INFERENCE_PRECISION_HINT": "f32"})


def latency(model, feed):
    def make():
        request = compile_model(model, feed, "LATENCY").create_infer_request()
        return lambda: request.infer(feed, share_inputs=True)
    return make


def throughput(model, feed):
    def make():
        compiled = compile_model(model, feed, "THROUGHPUT")
        n = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
        queue = ov.AsyncInferQueue(compiled, n)

        def call():
            for _ in range(n):
                queue.start_async(feed, share_inputs=True)
            queue.wait_all()
        return call, n
    return make


def image(batch):
    x = np.random.default_rng(7).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    return {0: x}  # by position: the inputs' names are the exporter's


def tokens(batch, sequence=128):
    """ort_bench.py's ids and mask."""
    ids = (np.arange(batch * sequence, dtype=np.int64) * 7919 % 1000).reshape(batch, sequence)
    return {0: ids, 1: np.ones((batch, sequence), np.int64)}


def both(model, feed):
    return [(f"latency f32 {ov.__version__.split('-')[0]}", latency(model, feed)),
            ("throughput f32, per request", throughput(model, feed))]


common.run("openvino", {
    "onnx_resnet50_b1": both("resnet50", image(1)),
    "onnx_resnet50_b8": both("resnet50", image(8)),
    "onnx_mobilenet_v2_b1": both("mobilenet_v2", image(1)),
    "onnx_efficientnet_b0_b1": both("efficientnet_b0", image(1)),
    "onnx_bert_base_s128_b1": both("bert", tokens(1)),
    "onnx_bert_base_s128_b8": both("bert", tokens(8)),
    "onnx_gpt2_prefill_128": both("gpt2", tokens(1)),
}, args)
