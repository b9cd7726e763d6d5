/* Model workloads: ONNX exports of real models (tests/onnx_models/run.sh makes
 * them into the models folder: $LOOM_BENCH_MODELS_DIR, else the build's
 * onnx_models/) imported with loom_onnx_load, their dims fixed at import, and
 * one loom_program_run timed. Their peer is ONNX Runtime on the same file
 * (bench/peers/ort_bench.py). The work counted is 2 flops per multiply-add of
 * the convolutions and matrix products. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

typedef struct onnx_bench {
  const char *model;       /* its folder in the models folder */
  int64_t batch, sequence; /* sequence 0: an image model, 3x224x224 */
} onnx_bench;

typedef struct onnx_state {
  loom_program *p;
  loom_tensor *in[2];
  int nin;
} onnx_state;

const char *bench_models_dir(void) {
  const char *dir = getenv("LOOM_BENCH_MODELS_DIR");
  return dir && dir[0] ? dir : LOOM_BENCH_MODELS_DIR;
}

bool bench_model_present(const char *model) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/model.onnx", bench_models_dir(), model);
  return access(path, R_OK) == 0;
}

static void onnx_teardown(void *state) {
  onnx_state *s = state;
  loom_program_free(s->p);
  bench_free_all(s->in, s->nin);
  free(s);
}

/* Token ids in [0, 1000) and a mask of ones, [batch, sequence], I64. */
static loom_status token_inputs(const onnx_bench *b, onnx_state *s) {
  int64_t n = b->batch * b->sequence;
  int64_t *ids = malloc((size_t)n * sizeof *ids), *mask = malloc((size_t)n * sizeof *mask);
  loom_status st = ids && mask ? LOOM_OK : LOOM_ERR_OOM;
  for (int64_t i = 0; st == LOOM_OK && i < n; i++) ids[i] = (i * 7919) % 1000, mask[i] = 1;
  loom_shape shape = LOOM_SHAPE(b->batch, b->sequence);
  if (st == LOOM_OK) {
    s->in[0] = loom_from_data(ids, shape, LOOM_I64, loom_default_device());
    s->in[1] = loom_from_data(mask, shape, LOOM_I64, loom_default_device());
    s->nin = 2;
    st = bench_first_error(bench_realize(s->in[0]), bench_realize(s->in[1]));
  }
  free(ids), free(mask);
  return st;
}

static loom_status onnx_setup(const onnx_bench *b, void **state) {
  onnx_state *s = calloc(1, sizeof *s);
  if (!s) return LOOM_ERR_OOM;
  *state = s;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/model.onnx", bench_models_dir(), b->model);
  if (access(path, R_OK) != 0)
    fprintf(stderr,
            "bench: %s is missing: tests/onnx_models/run.sh makes it (ctest -R onnx_models)\n",
            path);
  loom_onnx_dim dims[2] = {{"batch", b->batch}, {"sequence", b->sequence}};
  s->p = loom_onnx_load(path, &(loom_onnx_opts){.dims = dims,
                                                .ndims = b->sequence ? 2 : 1,
                                                .device = loom_default_device()});
  if (!s->p) return loom_last_status();
  if (b->sequence) return token_inputs(b, s);
  s->nin = 1;
  return bench_uniform_input(7, LOOM_SHAPE(b->batch, 3, 224, 224), -1, 1, &s->in[0]);
}

static loom_status onnx_run(void *state, bench_call_report *report) {
  (void)report;
  onnx_state *s = state;
  loom_tensor *out = NULL;
  loom_status st = loom_program_run(s->p, s->in, &out);
  if (st == LOOM_OK) st = bench_realize(out);
  loom_free(out);
  return st;
}

#define ONNX_WORKLOAD(fn, model_, batch_, sequence_)                                               \
  static loom_status fn##_setup(void **state) {                                                    \
    static const onnx_bench b = {model_, batch_, sequence_};                                       \
    return onnx_setup(&b, state);                                                                  \
  }
ONNX_WORKLOAD(resnet50_b1, "resnet50", 1, 0)
ONNX_WORKLOAD(resnet50_b8, "resnet50", 8, 0)
ONNX_WORKLOAD(mobilenet_v2_b1, "mobilenet_v2", 1, 0)
ONNX_WORKLOAD(efficientnet_b0_b1, "efficientnet_b0", 1, 0)
ONNX_WORKLOAD(bert_s128_b1, "bert", 1, 128)
ONNX_WORKLOAD(bert_s128_b8, "bert", 8, 128)
ONNX_WORKLOAD(gpt2_prefill, "gpt2", 1, 128)

/* Multiply-adds: ResNet-50 at 224x224, 4.09 G an image (torchvision's count);
 * a 12-layer, 768-wide transformer over 128 tokens: 7.08 M a token in its
 * products (QKV, projection, the 3072-wide MLP) and 2 x 128 x 768 a token in
 * attention, 11.17 G; GPT-2's head adds 768 x 50257 a token. */
#define RESNET50_MACS 4.09e9
#define MOBILENET_V2_MACS 0.30e9    /* torchvision's count */
#define EFFICIENTNET_B0_MACS 0.39e9 /* torchvision's count */
#define LAYERS_S128_MACS (12.0 * 128 * (4.0 * 768 * 768 + 2.0 * 768 * 3072 + 2.0 * 128 * 768))
#define GPT2_HEAD_S128_MACS (128.0 * 768 * 50257)

const bench_workload bench_model_workloads[] = {
    {.name = "onnx_resnet50_b1",
     .what = "torchvision ResNet-50 (ONNX export), 1x3x224x224",
     .metric = BENCH_FLOPS,
     .work = 2 * RESNET50_MACS,
     .setup = resnet50_b1_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "resnet50"},
    {.name = "onnx_resnet50_b8",
     .what = "torchvision ResNet-50 (ONNX export), 8x3x224x224",
     .metric = BENCH_FLOPS,
     .work = 2 * 8 * RESNET50_MACS,
     .setup = resnet50_b8_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "resnet50"},
    {.name = "onnx_mobilenet_v2_b1",
     .what = "torchvision MobileNetV2 (ONNX export), 1x3x224x224",
     .metric = BENCH_FLOPS,
     .work = 2 * MOBILENET_V2_MACS,
     .setup = mobilenet_v2_b1_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "mobilenet_v2"},
    {.name = "onnx_efficientnet_b0_b1",
     .what = "torchvision EfficientNet-B0 (ONNX export), 1x3x224x224",
     .metric = BENCH_FLOPS,
     .work = 2 * EFFICIENTNET_B0_MACS,
     .setup = efficientnet_b0_b1_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "efficientnet_b0"},
    {.name = "onnx_bert_base_s128_b1",
     .what = "Hugging Face BERT-base (ONNX export), 1 x 128 tokens",
     .metric = BENCH_FLOPS,
     .work = 2 * LAYERS_S128_MACS,
     .setup = bert_s128_b1_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "bert"},
    {.name = "onnx_bert_base_s128_b8",
     .what = "Hugging Face BERT-base (ONNX export), 8 x 128 tokens",
     .metric = BENCH_FLOPS,
     .work = 2 * 8 * LAYERS_S128_MACS,
     .setup = bert_s128_b8_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "bert"},
    {.name = "onnx_gpt2_prefill_128",
     .what = "Hugging Face GPT-2 124M (ONNX export), logits of 128 tokens",
     .metric = BENCH_FLOPS,
     .work = 2 * (LAYERS_S128_MACS + GPT2_HEAD_S128_MACS),
     .setup = gpt2_prefill_setup,
     .run = onnx_run,
     .teardown = onnx_teardown,
     .onnx_model = "gpt2"},
};
const int bench_model_count = sizeof bench_model_workloads / sizeof bench_model_workloads[0];
