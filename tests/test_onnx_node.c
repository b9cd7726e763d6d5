/* ONNX's backend node tests through loom_onnx_load (docs/onnx.md,
 * "Conformance"): every case folder (model.onnx and test_data_set_N/
 * {input,output}_*.pb) of the onnx package's backend/test/data/node, each run
 * in a process of its own (so that a crash is counted, not fatal), compared
 * with ONNX's tolerances (rtol 1e-3, atol 1e-7; integers and bools exactly).
 *
 *   test_onnx_node [--floor PCT] [--report FILE.md] [--jobs N] [--sample K] [DIR]
 *   test_onnx_node --case NAME DIR        one case, a line on stdout
 *
 * DIR defaults to LOOM_ONNX_NODE_DIR (the project venv's onnx, tools/setup.sh).
 * --sample K runs every K-th case (the sanitizer builds). Fails when a case
 * crashes, hangs or trips a sanitizer, or fewer than PCT percent of the in-scope
 * cases pass. Out of scope (the words): strings, sequences and
 * optionals, training-only ops, and domains other than ai.onnx. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/onnx/onnx.h"
#include "loom.h"
#include "test_device.h"

extern char **environ;

#define CASE_SECONDS 120

/* Ops out of scope: training-only, sequences, optionals, strings. */
static const char *const out_of_scope_ops[] = {
    "Adagrad",
    "Adam",
    "Momentum",
    "Gradient",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
    "ConcatFromSequence",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "StringConcat",
    "StringNormalizer",
    "StringSplit",
    "RegexFullMatch",
    "TfIdfVectorizer",
    "LabelEncoder",
    "ImageDecoder",
};

static bool type_in_scope(const Onnx__TypeProto *t) {
  if (!t) return true;
  if (t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return false;
  return t->tensor_type->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__STRING;
}

static bool graph_in_scope(const Onnx__GraphProto *g, const char **why);

static bool node_in_scope(const Onnx__NodeProto *p, const char **why) {
  if (p->domain && p->domain[0] && strcmp(p->domain, "ai.onnx")) {
    *why = "a domain other than ai.onnx";
    return false;
  }
  for (size_t i = 0; i < sizeof out_of_scope_ops / sizeof *out_of_scope_ops; i++)
    if (p->op_type && strcmp(p->op_type, out_of_scope_ops[i]) == 0) {
      *why = "a training, sequence, optional or string op";
      return false;
    }
  for (size_t a = 0; a < p->n_attribute; a++) {
    if (p->attribute[a]->g && !graph_in_scope(p->attribute[a]->g, why)) return false;
    if (p->attribute[a]->t &&
        p->attribute[a]->t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING) {
      *why = "strings";
      return false;
    }
  }
  return true;
}

static bool graph_in_scope(const Onnx__GraphProto *g, const char **why) {
  for (size_t i = 0; i < g->n_input; i++)
    if (!type_in_scope(g->input[i]->type)) {
      *why = "a string, sequence, map or optional value";
      return false;
    }
  for (size_t i = 0; i < g->n_output; i++)
    if (!type_in_scope(g->output[i]->type)) {
      *why = "a string, sequence, map or optional value";
      return false;
    }
  for (size_t i = 0; i < g->n_initializer; i++)
    if (g->initializer[i]->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING) {
      *why = "strings";
      return false;
    }
  for (size_t i = 0; i < g->n_node; i++)
    if (!node_in_scope(g->node[i], why)) return false;
  return true;
}

/* ------------------------------------------------------------ one case */

static loom_tensor *read_tensor(const char *path, char *why, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, len, "cannot open %s", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *bytes = malloc(size > 0 ? (size_t)size : 1);
  if (!bytes || fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(bytes);
    snprintf(why, len, "cannot read %s", path);
    return NULL;
  }
  fclose(f);
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, (size_t)size, bytes);
  free(bytes);
  if (!tp) {
    snprintf(why, len, "%s is not a TensorProto (a sequence or optional?)", path);
    return NULL;
  }
  loom_tensor *t = onnx_tensor_from_proto(tp, NULL, why, len);
  onnx__tensor_proto__free_unpacked(tp, NULL);
  if (t && test_device().type != LOOM_DEVICE_CPU) { /* LOOM_TEST_DEVICE=cuda */
    loom_tensor *on = loom_to(t, test_device());
    loom_free(t);
    t = on;
  }
  return t;
}

/* Whether got matches want (ONNX's assert_allclose), else why not. */
static bool same(loom_tensor *got, loom_tensor *want, char *why, size_t len) {
  loom_shape a = loom_shape_of(got), b = loom_shape_of(want);
  bool shape_ok = a.ndim == b.ndim;
  for (int d = 0; shape_ok && d < a.ndim; d++) shape_ok = a.dim[d] == b.dim[d];
  if (!shape_ok) {
    char sa[128] = "", sb[128] = "";
    for (int d = 0; d < a.ndim; d++)
      snprintf(sa + strlen(sa), sizeof sa - strlen(sa), "%s%lld", d ? "," : "",
               (long long)a.dim[d]);
    for (int d = 0; d < b.ndim; d++)
      snprintf(sb + strlen(sb), sizeof sb - strlen(sb), "%s%lld", d ? "," : "",
               (long long)b.dim[d]);
    snprintf(why, len, "shape [%s], expected [%s]", sa, sb);
    return false;
  }
  if (loom_dtype_of(got) != loom_dtype_of(want)) {
    snprintf(why, len, "dtype %s, expected %s", loom_dtype_name(loom_dtype_of(got)),
             loom_dtype_name(loom_dtype_of(want)));
    return false;
  }
  int64_t n = loom_numel(want);
  double *x = malloc((size_t)(n ? n : 1) * sizeof *x), *y = malloc((size_t)(n ? n : 1) * sizeof *y);
  loom_tensor *gx = loom_cast(got, LOOM_F64), *wy = loom_cast(want, LOOM_F64);
  bool ok = x && y && !loom_copy_to_host(gx, x, (size_t)n * sizeof *x) &&
            !loom_copy_to_host(wy, y, (size_t)n * sizeof *y);
  if (!ok) snprintf(why, len, "the result could not be read: %s", loom_last_error());
  loom_dtype dt = loom_dtype_of(want);
  bool exact = !loom_dtype_is_float(dt); /* every integer dtype, and BOOL */
  for (int64_t i = 0; ok && i < n; i++) {
    if (isnan(x[i]) && isnan(y[i])) continue;
    bool close =
        exact ? x[i] == y[i] : x[i] == y[i] || fabs(x[i] - y[i]) <= 1e-7 + 1e-3 * fabs(y[i]);
    if (!close) {
      snprintf(why, len, "element %lld is %.9g, expected %.9g", (long long)i, x[i], y[i]);
      ok = false;
    }
  }
  loom_free(gx), loom_free(wy);
  free(x), free(y);
  return ok;
}

static int count_files(const char *dir, const char *prefix) {
  int n = 0;
  for (;; n++) {
    char path[4500];
    snprintf(path, sizeof path, "%s/%s_%d.pb", dir, prefix, n);
    if (access(path, R_OK)) return n;
  }
}

/* The model's protobuf whatever its opset, or NULL. */
static Onnx__ModelProto *read_model(const char *path) {
  Onnx__ModelProto *mp = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *bytes = malloc(size > 0 ? (size_t)size : 1);
  if (bytes && fread(bytes, 1, (size_t)size, f) == (size_t)size)
    mp = onnx__model_proto__unpack(NULL, (size_t)size, bytes);
  free(bytes);
  fclose(f);
  return mp;
}

/* The graph inputs a run feeds (those that are not initializers), in order. */
static int model_inputs(const Onnx__GraphProto *g, const char **names, int cap) {
  int n = 0;
  for (size_t i = 0; i < g->n_input && n < cap; i++) {
    bool init = false;
    for (size_t k = 0; k < g->n_initializer && !init; k++)
      init = g->initializer[k]->name && g->input[i]->name &&
             strcmp(g->initializer[k]->name, g->input[i]->name) == 0;
    if (!init) names[n++] = g->input[i]->name;
  }
  return n;
}

#define NEEDS_VALUES "needs its values when it imports"

/* Prints "PASS", "FAIL reason" or "SKIP reason" for one case. An integer input
 * that sizes things (a Reshape's shape fed by the test) is given at import
 * (loom_onnx_opts.inputs), per test data set: loom compiles shapes. */
static int run_case(const char *root, const char *name) {
  char dir[4096], model[4200], why[1024];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  /* parsed here too, for its scope and input names, whatever its opset */
  Onnx__ModelProto *mp = read_model(model);
  const char *names[64];
  int nnames = 0;
  if (mp && mp->graph) {
    const char *scope_why = NULL;
    bool in = graph_in_scope(mp->graph, &scope_why);
    for (size_t i = 0; i < mp->n_opset_import; i++)
      if (mp->opset_import[i]->domain && mp->opset_import[i]->domain[0] &&
          strcmp(mp->opset_import[i]->domain, "ai.onnx")) {
        in = false;
        scope_why = "a domain other than ai.onnx";
      }
    if (!in) {
      onnx__model_proto__free_unpacked(mp, NULL);
      printf("SKIP %s\n", scope_why);
      return 0;
    }
    nnames = model_inputs(mp->graph, names, 64);
  }
  loom_clear_error();
  loom_program *p = loom_onnx_load(model, &(loom_onnx_opts){.device = test_device()});
  bool fix_ints = !p && strstr(loom_last_error() ? loom_last_error() : "", NEEDS_VALUES);
  if (!p && !fix_ints) {
    printf("FAIL import: %s\n", loom_last_error());
    if (mp) onnx__model_proto__free_unpacked(mp, NULL);
    return 0;
  }
  bool ok = true;
  for (int sets = 0; ok; sets++) {
    char set[4300];
    snprintf(set, sizeof set, "%s/test_data_set_%d", dir, sets);
    struct stat st;
    if (stat(set, &st)) break;
    int nin = count_files(set, "input"), nout = count_files(set, "output");
    loom_tensor *ins[64] = {0}, *outs[64] = {0}, *fed[64] = {0};
    for (int i = 0; i < nin && i < 64 && ok; i++) {
      char path[4400];
      snprintf(path, sizeof path, "%s/input_%d.pb", set, i);
      ins[i] = read_tensor(path, why, sizeof why);
      if (!ins[i]) {
        printf("FAIL input %d: %s\n", i, why);
        ok = false;
      }
    }
    int nfed = 0;
    if (ok && fix_ints) {
      /* give the inputs the import names, one by one, else the small ones */
      bool given_mask[64] = {0};
      for (int attempt = 0; attempt <= nin; attempt++) {
        loom_onnx_input given[64];
        int ngiven = 0;
        nfed = 0;
        for (int i = 0; i < nin && i < nnames; i++) {
          if (given_mask[i])
            given[ngiven++] = (loom_onnx_input){names[i], ins[i]};
          else
            fed[nfed++] = ins[i];
        }
        loom_program_free(p);
        loom_clear_error();
        p = loom_onnx_load(
            model, &(loom_onnx_opts){.inputs = given, .ninputs = ngiven, .device = test_device()});
        if (p) break;
        const char *msg = loom_last_error() ? loom_last_error() : "";
        if (!strstr(msg, NEEDS_VALUES)) break;
        bool named = false;
        for (int i = 0; i < nin && i < nnames; i++) {
          char quoted[300];
          snprintf(quoted, sizeof quoted, "('%s') is computed", names[i]);
          if (!given_mask[i] && strstr(msg, quoted)) given_mask[i] = named = true;
        }
        for (int i = 0; !named && i < nin && i < nnames; i++)
          if (!given_mask[i] && loom_numel(ins[i]) <= 64) given_mask[i] = named = true;
        if (!named) break;
      }
      if (!p) {
        printf("FAIL import (inputs that size things given): %s\n", loom_last_error());
        ok = false;
      }
    } else {
      for (int i = 0; i < nin; i++) fed[nfed++] = ins[i];
    }
    if (ok && (nfed != loom_program_num_inputs(p) || nout != loom_program_num_outputs(p))) {
      printf("FAIL the program takes %d inputs and gives %d outputs; the case has %d and %d\n",
             loom_program_num_inputs(p), loom_program_num_outputs(p), nfed, nout);
      ok = false;
    }
    if (ok) {
      loom_clear_error();
      loom_status s = loom_program_run(p, fed, outs);
      if (s) {
        printf("FAIL run: %s\n", loom_last_error());
        ok = false;
      }
    }
    for (int o = 0; o < nout && ok; o++) {
      char path[4400];
      snprintf(path, sizeof path, "%s/output_%d.pb", set, o);
      loom_tensor *want = read_tensor(path, why, sizeof why);
      if (!want) {
        printf("FAIL expected output %d: %s\n", o, why);
        ok = false;
        break;
      }
      if (!same(outs[o], want, why, sizeof why)) {
        printf("FAIL output %d: %s\n", o, why);
        ok = false;
      }
      loom_free(want);
    }
    for (int i = 0; i < 64; i++) loom_free(ins[i]), loom_free(outs[i]);
  }
  loom_program_free(p);
  if (mp) onnx__model_proto__free_unpacked(mp, NULL);
  if (ok) printf("PASS\n");
  return 0;
}

/* ------------------------------------------------------------ all cases */

typedef struct result {
  char name[256];
  char op[64];
  char line[1024]; /* PASS, FAIL ..., SKIP ..., CRASH ... */
} result;

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The op a case tests: of its model's op types, the one whose snake_case
 * name the case's name starts with (test_<op>_...), longest first. */
static void case_op(const char *root, const char *name, char *op, size_t len) {
  char model[4200];
  snprintf(model, sizeof model, "%s/%s/model.onnx", root, name);
  snprintf(op, len, "?");
  Onnx__ModelProto *mp = read_model(model);
  if (!mp || !mp->graph) {
    if (mp) onnx__model_proto__free_unpacked(mp, NULL);
    return;
  }
  size_t best = 0;
  const Onnx__GraphProto *g = mp->graph;
  for (size_t i = 0; i < g->n_node; i++) {
    const char *t = g->node[i]->op_type ? g->node[i]->op_type : "";
    char snake[128] = "test_";
    size_t k = 5;
    for (const char *c = t; *c && k + 2 < sizeof snake; c++) {
      bool upper = *c >= 'A' && *c <= 'Z';
      bool prev_lower = c > t && ((c[-1] >= 'a' && c[-1] <= 'z') || (c[-1] >= '0' && c[-1] <= '9'));
      bool next_lower =
          upper && c[1] >= 'a' && c[1] <= 'z' && c > t && c[-1] >= 'A' && c[-1] <= 'Z';
      if (upper && (prev_lower || next_lower)) snake[k++] = '_';
      snake[k++] = upper ? (char)(*c - 'A' + 'a') : *c;
    }
    snake[k] = 0;
    size_t sl = strlen(snake);
    if (strncmp(name, snake, sl) == 0 && (name[sl] == '_' || !name[sl]) && sl > best) {
      best = sl;
      snprintf(op, len, "%s", t);
    }
  }
  if (!best && g->n_node) snprintf(op, len, "%s", g->node[g->n_node - 1]->op_type);
  onnx__model_proto__free_unpacked(mp, NULL);
}

static pid_t start_case(const char *self, const char *root, const char *name, int fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  char *argv[] = {(char *)self, "--case", (char *)name, (char *)root, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, self, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc ? -1 : pid;
}

static void write_report(const char *path, result *rs, int n, int pass, int in_scope) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    return;
  }
  fprintf(f,
          "# ONNX conformance\n\n"
          "Generated by `build/test_onnx_node --report docs/ONNX.md` (tests/test_onnx_node.c)\n"
          "from the onnx package's backend node tests (tools/requirements.txt pins it). A case\n"
          "passes when every test data set's outputs match with ONNX's tolerances (rtol 1e-3,\n"
          "atol 1e-7; integers and bools exactly). Out of scope: strings, sequences, optionals,\n"
          "training-only ops and other domains.\n\n");
  fprintf(f, "**%d of %d in-scope cases pass (%.1f%%).** %d cases are out of scope.\n\n", pass,
          in_scope, in_scope ? 100.0 * pass / in_scope : 0.0, n - in_scope);
  fprintf(f, "| op | pass | fail | out of scope |\n| --- | --- | --- | --- |\n");
  for (int i = 0; i < n;) {
    int j = i, p = 0, fl = 0, sk = 0;
    for (; j < n && strcmp(rs[j].op, rs[i].op) == 0; j++) {
      if (strncmp(rs[j].line, "PASS", 4) == 0)
        p++;
      else if (strncmp(rs[j].line, "SKIP", 4) == 0)
        sk++;
      else
        fl++;
    }
    fprintf(f, "| %s | %d | %d | %d |\n", rs[i].op, p, fl, sk);
    i = j;
  }
  fprintf(f, "\n## Failures\n\n");
  for (int i = 0; i < n; i++) {
    if (strncmp(rs[i].line, "PASS", 4) == 0 || strncmp(rs[i].line, "SKIP", 4) == 0) continue;
    char clean[1024];
    size_t k = 0;
    const char *from = rs[i].line + 5, *model = strstr(from, "/model.onnx': ");
    char head[64] = "";
    if (model) { /* "import: loom_onnx_load: '<path>': why" is "import: why" */
      snprintf(head, sizeof head, "%.*s", (int)(strchr(from, ':') - from + 1), from);
      from = model + strlen("/model.onnx': ");
    }
    k = (size_t)snprintf(clean, sizeof clean, "%s%s", head, head[0] ? " " : "");
    for (const char *c = from; *c && k + 1 < sizeof clean; c++)
      clean[k++] = *c == '|' ? '/' : *c == '\n' ? ' ' : *c;
    clean[k] = 0;
    fprintf(f, "- `%s` (%s): %s\n", rs[i].name, rs[i].op, clean);
  }
  fclose(f);
}

static int by_op(const void *a, const void *b) {
  const result *x = a, *y = b;
  int c = strcmp(x->op, y->op);
  return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
  const char *root = NULL, *report = NULL, *only = NULL;
  double floor_pct = 0;
  int jobs = 2, sample = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--floor") == 0 && i + 1 < argc)
      floor_pct = atof(argv[++i]);
    else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc)
      report = argv[++i];
    else if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc)
      jobs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--sample") == 0 && i + 1 < argc)
      sample = atoi(argv[++i]);
    else
      root = argv[i];
  }
#ifdef LOOM_ONNX_NODE_DIR
  if (!root)
    root = getenv("LOOM_ONNX_NODE_TESTS") ? getenv("LOOM_ONNX_NODE_TESTS") : LOOM_ONNX_NODE_DIR;
#endif
  if (!root) {
    fprintf(stderr, "no node test folder: pass DIR or set LOOM_ONNX_NODE_TESTS\n");
    return 1;
  }
  if (only) {
    alarm(CASE_SECONDS);
    return run_case(root, only);
  }
  DIR *d = opendir(root);
  if (!d) {
    fprintf(stderr,
            "cannot open %s (%s): run tools/setup.sh, which installs the onnx package "
            "holding ONNX's node tests into .venv\n",
            root, strerror(errno));
    return 1;
  }
  char **names = NULL;
  int n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, "test_", 5)) continue;
    if (n == cap) names = realloc(names, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (!n) {
    fprintf(stderr, "%s holds no test_* cases\n", root);
    return 1;
  }
  qsort(names, (size_t)n, sizeof *names, by_name);
  if (sample > 1) {
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (i % sample == 0)
        names[k++] = names[i];
      else
        free(names[i]);
    }
    n = k;
  }
  result *rs = calloc((size_t)n, sizeof *rs);
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = 0;
  char tmpl[] = "/tmp/loom_onnx_node_XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  struct running {
    pid_t pid;
    int index;
  } run[16];
  int nrun = 0, next = 0;
  if (jobs < 1) jobs = 1;
  if (jobs > 16) jobs = 16;
  time_t started = time(NULL);
  while (next < n || nrun) {
    while (nrun < jobs && next < n) {
      char out[4200];
      snprintf(out, sizeof out, "%s/%d.txt", tmpl, next);
      FILE *o = fopen(out, "w");
      if (!o) return 1;
      pid_t pid = start_case(self, root, names[next], fileno(o));
      fclose(o);
      snprintf(rs[next].name, sizeof rs[next].name, "%s", names[next]);
      case_op(root, names[next], rs[next].op, sizeof rs[next].op);
      if (pid < 0) {
        snprintf(rs[next].line, sizeof rs[next].line, "CRASH could not start");
        next++;
        continue;
      }
      run[nrun++] = (struct running){pid, next++};
    }
    int status;
    pid_t done = wait(&status);
    if (done < 0) break;
    for (int r = 0; r < nrun; r++) {
      if (run[r].pid != done) continue;
      int i = run[r].index;
      run[r] = run[--nrun];
      char out[4200];
      snprintf(out, sizeof out, "%s/%d.txt", tmpl, i);
      FILE *o = fopen(out, "r");
      char line[1024] = "";
      /* the case's verdict is its last PASS/FAIL/SKIP line */
      for (char buf[1024]; o && fgets(buf, sizeof buf, o);)
        if (!strncmp(buf, "PASS", 4) || !strncmp(buf, "FAIL", 4) || !strncmp(buf, "SKIP", 4))
          snprintf(line, sizeof line, "%s", buf);
      if (o) fclose(o);
      unlink(out);
      line[strcspn(line, "\n")] = 0;
      if (WIFSIGNALED(status))
        snprintf(rs[i].line, sizeof rs[i].line, "CRASH signal %d%s", WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? " (over "
                                               "120 s)"
                                             : "");
      else if (!line[0] || WEXITSTATUS(status))
        snprintf(rs[i].line, sizeof rs[i].line, "CRASH exit %d without a verdict",
                 WEXITSTATUS(status));
      else
        snprintf(rs[i].line, sizeof rs[i].line, "%s", line);
      printf("%-60s %s\n", rs[i].name, rs[i].line);
      fflush(stdout);
    }
  }
  rmdir(tmpl);
  int pass = 0, skip = 0, crash = 0;
  for (int i = 0; i < n; i++) {
    if (!strncmp(rs[i].line, "PASS", 4))
      pass++;
    else if (!strncmp(rs[i].line, "SKIP", 4))
      skip++;
    else if (!strncmp(rs[i].line, "CRASH", 5))
      crash++;
  }
  int in_scope = n - skip;
  double pct = in_scope ? 100.0 * pass / in_scope : 0;
  printf("\n%d cases: %d in scope, %d pass (%.1f%%), %d fail, %d crash; %d out of scope; %lds\n", n,
         in_scope, pass, pct, in_scope - pass - crash, crash, skip, (long)(time(NULL) - started));
  if (report) {
    qsort(rs, (size_t)n, sizeof *rs, by_op);
    write_report(report, rs, n, pass, in_scope);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  free(rs);
  if (crash) {
    printf("FAILED: %d cases crashed or hung\n", crash);
    return 1;
  }
  if (pct < floor_pct) {
    printf("FAILED: %.1f%% of the in-scope cases pass; the floor is %.1f%%\n", pct, floor_pct);
    return 1;
  }
  return 0;
}
