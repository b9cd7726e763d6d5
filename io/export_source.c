/* The exported wrapper's C source and header. The wrapper is straight-line
 * code: one call per step of the plan, every buffer an input, an output, a
 * weight in the embedded blob or an offset in one per-call scratch block
 * (the memory plan, fixed at export), so <name>_run shares nothing mutable
 * between calls. */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "io/export.h"
#include "io/step_kinds.h"
#include "runtime/attention_step.h"
#include "runtime/check_step.h"
#include "runtime/compile.h"
#include "runtime/gemm.h"
#include "runtime/runtime.h"
#include "runtime/sort_step.h"
#include "runtime/step_kinds.h"

static int64_t align_up(int64_t v) {
  return (v + LM_EXPORT_ALIGN - 1) / LM_EXPORT_ALIGN * LM_EXPORT_ALIGN;
}

static int64_t node_bytes(const lm_node *n) {
  return lm_shape_numel(&n->shape) * (int64_t)loom_dtype_size(n->dtype);
}

/* ------------------------------------------------------------ layout */

int lm_export_output_of(const loom_program *p, int pos) {
  if (pos >= p->n || p->kind[pos] != LM_SLOT_NODE || !p->plan->published[pos]) return -1;
  for (int i = 0; i < p->nout; i++)
    if (p->out_pos[i] == pos) return i;
  return -1;
}

int64_t lm_export_step_bytes(const lm_step *s) {
  return s->outer * (int64_t)loom_dtype_size(s->dtype);
}

typedef struct block {
  int64_t off, size;
  int end; /* last step that reads it */
} block;

/* First fit: the lowest offset where size bytes fit between live blocks
 * (kept sorted by offset). */
static int64_t place(const block *live, int nlive, int64_t size) {
  int64_t at = 0;
  for (int i = 0; i < nlive; i++) {
    if (live[i].off - at >= size) return at;
    int64_t end = align_up(live[i].off + live[i].size);
    if (end > at) at = end;
  }
  return at;
}

int lm_export_freed_after(const lm_plan *plan, int pos, int def) {
  for (int i = 0; i < plan->nsteps; i++)
    for (int f = 0; f < plan->steps[i].nfree; f++)
      if (plan->steps[i].free_after[f] == pos) return i;
  return def;
}

static bool plan_arena(lm_export_layout *l) {
  const lm_plan *plan = l->p->plan;
  block *live = malloc(sizeof(block) * (size_t)(plan->nsteps + 1));
  if (!live) return false;
  int nlive = 0;
  for (int i = 0; i < plan->nsteps; i++) {
    int kept = 0; /* blocks whose last reader ran before this step are free */
    for (int b = 0; b < nlive; b++)
      if (live[b].end >= i) live[kept++] = live[b];
    nlive = kept;
    const lm_step *s = &plan->steps[i];
    if (s->out < l->p->n && l->output_of[s->out] >= 0) continue; /* written to the caller's */
    int64_t size = lm_export_step_bytes(s);
    block nb = {place(live, nlive, size), size, lm_export_freed_after(plan, s->out, i)};
    l->arena_off[s->out] = nb.off;
    if (align_up(nb.off + size) > l->arena_bytes) l->arena_bytes = align_up(nb.off + size);
    int at = nlive++;
    while (at > 0 && live[at - 1].off > nb.off) live[at] = live[at - 1], at--;
    live[at] = nb;
  }
  free(live);
  return true;
}

/* The largest packed panels tile t needs for any product (k decides a paired
 * tile's blocks). */
static int64_t pack_bytes_any(const lk_gemm *t) {
  int64_t most = 0, big = (int64_t)1 << 40;
  for (int64_t k = 1; k <= 4096; k++) {
    int64_t mc, kc, nc;
    lm_gemm_blocking(t, big, big, k, &mc, &kc, &nc);
    int64_t bytes = (int64_t)lk_gemm_pack_bytes(t, mc, kc, nc);
    if (bytes > most) most = bytes;
    if (!lk_gemm_paired(t) && k > 1024) break; /* kc stopped growing */
  }
  return most;
}

static loom_status layout_make(lm_export_layout *l, const loom_program *p, const char *name,
                               int64_t embed_limit, const lm_plan *tiles_from, bool generic) {
  memset(l, 0, sizeof *l);
  l->p = p;
  l->name = name;
  for (size_t i = 0; name[i] && i + 1 < sizeof l->upper; i++)
    l->upper[i] = (char)toupper((unsigned char)name[i]);
  int npos = p->n + p->plan->ntemps;
  l->arena_off = malloc(sizeof(int64_t) * (size_t)(npos + 1));
  l->weight_off = malloc(sizeof(int64_t) * (size_t)(p->n + 1));
  l->output_of = malloc(sizeof(int) * (size_t)(p->n + 1));
  l->symbol = calloc((size_t)p->plan->nsteps + 1, sizeof *l->symbol);
  l->tile = calloc((size_t)p->plan->nsteps + 1, sizeof *l->tile);
  l->kernel = calloc((size_t)p->plan->nsteps + 1, sizeof *l->kernel);
  if (!l->arena_off || !l->weight_off || !l->output_of || !l->symbol || !l->tile || !l->kernel)
    return lm_fail(LOOM_ERR_OOM, "loom_program_export: out of memory");
  for (int pos = 0; pos < npos; pos++) l->arena_off[pos] = -1;
  for (int pos = 0; pos < p->n; pos++) {
    l->output_of[pos] = -1;
    l->weight_off[pos] = -1;
    if (p->kind[pos] != LM_SLOT_WEIGHT) continue;
    l->weight_off[pos] = l->weight_bytes;
    l->weight_bytes = align_up(l->weight_bytes + node_bytes(p->nodes[pos]));
  }
  for (int pos = 0; pos < p->n; pos++) l->output_of[pos] = lm_export_output_of(p, pos);
  for (int i = 0; i < p->plan->nsteps; i++) {
    const lm_step *s = &p->plan->steps[i];
    const lm_export_kernel *kernel = lm_step_kind_ios[s->kind]->export_kernel;
    l->uses_kind[s->kind] = true;
    l->library_kernels |= kernel != NULL;
    l->contract |= kernel && kernel->contract;
    l->may_fail |= lm_step_kind_runtimes[s->kind]->may_fail;
    if (s->kind != LM_STEP_GEMM) continue;
    l->uses_gemm = true;
    const lm_gemm *chooser = &tiles_from->steps[i].gemm;
    lm_gemm_tile_for(s->gemm.in_dtype, chooser->M, chooser->N, &l->tile[i]);
    lm_gemm_symbol(&l->tile[i], l->symbol[i]);
    l->uses_amx |= l->tile[i].amx;
    int64_t bytes = pack_bytes_any(&l->tile[i]);
    if (!generic) { /* the products' own sizes */
      int64_t mc, kc, nc;
      lm_gemm_blocking(&l->tile[i], s->gemm.M, s->gemm.N, s->gemm.K, &mc, &kc, &nc);
      bytes = (int64_t)lk_gemm_pack_bytes(&l->tile[i], mc, kc, nc);
    }
    if (bytes > l->pack_bytes) l->pack_bytes = bytes;
  }
  l->embed = l->weight_bytes <= embed_limit;
  return LOOM_OK;
}

loom_status lm_export_layout_make(lm_export_layout *l, const loom_program *p, const char *name,
                                  int64_t embed_limit) {
  loom_status st = layout_make(l, p, name, embed_limit, p->plan, false);
  if (st != LOOM_OK) return st;
  for (int i = 0; i < p->plan->nsteps; i++)
    if (p->plan->steps[i].kind == LM_STEP_KERNEL) l->kernel[i] = p->plan->steps[i].kernel;
  if (!plan_arena(l)) return lm_fail(LOOM_ERR_OOM, "loom_program_export: out of memory");
  return LOOM_OK;
}

loom_status lm_export_layout_make_generic(lm_export_layout *l, const loom_program *p,
                                          const char *name, int64_t embed_limit,
                                          const lm_plan *tiles_from, const int *slot, int nslots) {
  loom_status st = layout_make(l, p, name, embed_limit, tiles_from, true);
  if (st != LOOM_OK) return st;
  const lm_plan *plan = p->plan;
  l->generic = true;
  l->slot = slot;
  l->nslots = nslots;
  l->sizes = calloc((size_t)plan->nsteps + 1, sizeof *l->sizes);
  l->slot_bytes = calloc((size_t)nslots + 1, sizeof *l->slot_bytes);
  if (!l->sizes || !l->slot_bytes)
    return lm_fail(LOOM_ERR_OOM, "loom_program_export: out of memory");
  for (int i = 0; i < plan->nsteps; i++) {
    const lm_step *s = &plan->steps[i];
    if (s->kind != LM_STEP_KERNEL || s->outer == 0) continue;
    for (int d = 0; d < s->kernel.ndim; d++)
      if (s->kernel.dom[d] == 0) /* generic extents are at least 1 */
        return lm_fail(LOOM_ERR_VALUE,
                       "loom_program_export: step %d sums over an empty dim; a symbolic export "
                       "cannot take it",
                       i);
    if ((st = lm_kernel_generic_all("loom_program_export", &s->kernel, &l->kernel[i],
                                    &l->sizes[i])) != LOOM_OK)
      return st;
    lm_kernel_symbol(&l->kernel[i], l->symbol[i]);
  }
  for (int i = 0; i < plan->nsteps; i++) {
    const lm_step *s = &plan->steps[i];
    int at = s->out < p->n + plan->ntemps ? slot[s->out] : -1;
    if (at >= 0 && lm_export_step_bytes(s) > l->slot_bytes[at])
      l->slot_bytes[at] = lm_export_step_bytes(s);
  }
  return LOOM_OK;
}

void lm_export_layout_free(lm_export_layout *l) {
  for (int i = 0; l->generic && l->kernel && l->sizes && i < l->p->plan->nsteps; i++) {
    free(l->kernel[i].inst);
    free(l->sizes[i]);
  }
  free(l->kernel);
  free(l->sizes);
  free(l->slot_bytes);
  free(l->arena_off);
  free(l->weight_off);
  free(l->output_of);
  free(l->symbol);
  free(l->tile);
  memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------ source */

/* The C expression of the buffer at pos inside <name>_run. */
static const char *buffer(const lm_export_layout *l, int pos, char *buf, size_t len) {
  return lm_export_buffer(l, pos, buf, len);
}

const char *lm_export_buffer(const lm_export_layout *l, int pos, char *buf, size_t len) {
  const loom_program *p = l->p;
  if (pos < p->n && p->kind[pos] == LM_SLOT_INPUT)
    snprintf(buf, len, "(void *)inputs[%d]", p->input_of[pos]);
  else if (pos < p->n && p->kind[pos] == LM_SLOT_WEIGHT)
    snprintf(buf, len, "(void *)(weights + %" PRId64 ")", l->weight_off[pos]);
  else if (pos < p->n && l->output_of[pos] >= 0)
    snprintf(buf, len, "outputs[%d]", l->output_of[pos]);
  else if (l->generic)
    snprintf(buf, len, "(void *)(scratch + off[%d])", l->slot[pos]);
  else
    snprintf(buf, len, "(void *)(scratch + %" PRId64 ")", l->arena_off[pos]);
  return buf;
}

/* Below this many element visits a kernel runs on the calling thread, and
 * below this many multiply-adds a GEMM (as in runtime/exec.c and gemm.c). */
#define EXPORT_PARALLEL_WORK 32768
#define EXPORT_GEMM_PARALLEL_WORK (1 << 21)
#define EXPORT_GEMM_MIN_ROWS 32
#define EXPORT_GEMM_MIN_COLS 64

/* One part's GEMM panels, 64-byte aligned. */
static int64_t pack_stride(const lm_export_layout *l) { return (l->pack_bytes + 63) / 64 * 64; }

void lm_kernel_write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  if (s->outer == 0) return; /* never runs */
  char b[96];
  fprintf(f, "  { /* step %d: kernel, %" PRId64 " output points */\n", i, s->outer);
  if (s->nparams > 0) { /* its float constants, bound as at run time */
    fprintf(f, "    static const double params[] = {");
    for (int q = 0; q < s->nparams; q++) fprintf(f, "%s%a", q ? ", " : "", s->params[q]);
    fprintf(f, "};\n");
  }
  const int64_t *sizes = l->generic ? l->sizes[i] : NULL;
  if (sizes) { /* the generic kernel's sizes: numbers here, expressions once fitted */
    fprintf(f, "    const int64_t sizes[] = {");
    for (int q = 0; q < l->kernel[i].nsizes; q++) fprintf(f, "%s%" PRId64, q ? ", " : "", sizes[q]);
    fprintf(f, "};\n");
  }
  fprintf(f, "    void *const args[] = {%s", buffer(l, s->out, b, sizeof b));
  for (int a = 1; a < s->kernel.nslots; a++) {
    if (s->arg_pos[a] == LM_PARAMS_SLOT)
      fprintf(f, ", (void *)params");
    else if (s->arg_key[a])
      fprintf(f, ", (void *)key_%d", s->arg_pos[a]);
    else
      fprintf(f, ", %s", buffer(l, s->arg_pos[a], b, sizeof b));
  }
  int64_t inner = 1;
  for (int d = s->kernel.nouter; d < s->kernel.ndim; d++) inner *= s->kernel.dom[d];
  fprintf(f, "%s};\n", sizes ? ", (void *)sizes" : "");
  if (s->kernel.nstats > 0) /* rows kept whole (lk_kernel_split_unit) */
    fprintf(f, "    run_kernel_rows(%s, args, %" PRId64 ", %" PRId64 ", %" PRId64 ");\n  }\n",
            l->symbol[i], s->outer, s->outer * (inner > 0 ? inner : 1),
            lk_kernel_split_unit(&s->kernel));
  else
    fprintf(f, "    run_kernel(%s, args, %" PRId64 ", %" PRId64 ");\n  }\n", l->symbol[i], s->outer,
            s->outer * (inner > 0 ? inner : 1));
}

void lm_gemm_write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  const lm_gemm *g = &s->gemm;
  const lk_gemm *t = &l->tile[i];
  char a[96], b[96], c[96];
  fprintf(f,
          "  { /* step %d: GEMM %" PRId64 " x %" PRId64 " x %" PRId64 ", %" PRId64 " batches */\n",
          i, g->M, g->N, g->K, lm_gemm_batches(g));
  const char *ct = lm_dtype_info_of(g->dtype)->c_type, *in = lm_dtype_info_of(g->in_dtype)->c_type;
  fprintf(f, "    const %s *a = %s, *b = %s;\n    %s *c = %s;\n", in,
          buffer(l, g->a_pos, a, sizeof a), buffer(l, g->b_pos, b, sizeof b), ct,
          buffer(l, s->out, c, sizeof c));
  int64_t a_row, a_col, b_row, b_col, kb, mb, nb, room;
  lm_gemm_strides(g, &a_row, &a_col, &b_row, &b_col);
  lm_gemm_block_limits(t, &kb, &mb, &nb, &room);
  fprintf(f,
          "    static const struct gemm_tile tile = {%d, %" PRId64 ", %" PRId64 ", %" PRId64
          ", %" PRId64 ", %d, %d, %d};\n",
          t->mr, kb, mb, nb, room, (int)loom_dtype_size(t->in_dtype), (int)lk_gemm_paired(t),
          (int)(t->in_dtype == t->dtype));
  fprintf(f, "    for (int64_t i = 0; i < %" PRId64 "; i++) {\n", lm_gemm_batches(g));
  fprintf(f, "      int64_t ao = %" PRId64 ", bo = %" PRId64 "%s;\n", g->a_offset, g->b_offset,
          g->nbatch > 0 ? ", at = i" : "");
  for (int d = g->nbatch - 1; d >= 0; d--) /* the batch index unravelled, last dim fastest */
    fprintf(f,
            "      ao += at %% %" PRId64 " * %" PRId64 ", bo += at %% %" PRId64 " * %" PRId64
            ", at /= %" PRId64 ";\n",
            g->batch[d], g->a_bstride[d], g->batch[d], g->b_bstride[d], g->batch[d]);
  fprintf(f,
          "      struct gemm_args args = {%" PRId64 ", %" PRId64 ", %" PRId64 ", a + ao, %" PRId64
          ", %" PRId64 ",\n"
          "        b + bo, %" PRId64 ", %" PRId64 ", c + i * %" PRId64 ", %" PRId64
          ", 0, 0, 0, 0, pack, 0, 0};\n",
          g->M, g->N, g->K, a_row, a_col, b_row, b_col, g->M * g->N, g->N);
  fprintf(f, "      gemm_blocking(&tile, &args);\n");
  fprintf(f, "      run_gemm(%s, &tile, &args, %d, %d, pack, %" PRId64 ");\n    }\n  }\n",
          l->symbol[i], (int)loom_dtype_size(g->in_dtype), (int)loom_dtype_size(g->dtype),
          pack_stride(l));
}

static void write_numbers(FILE *f, const int64_t *num, int count) {
  lm_export_write_numbers(f, num, count);
}

void lm_export_write_numbers(FILE *f, const int64_t *num, int count) {
  fprintf(f, "    const int64_t num[] = {");
  for (int x = 0; x < count; x++) fprintf(f, "%s%" PRId64, x ? ", " : "", num[x]);
  fprintf(f, "};\n");
}

/* Fused attention: runtime/attention_cpu.c's entry point over its work
 * items, its numbers written out (so a symbolic export fits them as any
 * other). */
void lm_attention_write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  const lm_attention *a = &s->attn;
  char o[96], q[96], k[96], v[96], m[96], fo[96], fg[96];
  int64_t num[LM_ATTENTION_MAX_NUMBERS];
  int count = lm_attention_numbers(a, num);
  const char *fn = a->backward ? "attention_grad_f32" : "attention_f32";
  fprintf(f, "  { /* step %d: attention%s, %" PRId64 " queries, %" PRId64 " keys%s%s%s */\n", i,
          a->backward ? "'s gradient" : "", a->tq, a->tk, a->causal ? ", causal" : "",
          a->mask ? ", mask " : "", a->mask ? lm_attention_mask_name(a->mask) : "");
  write_numbers(f, num, count);
  fprintf(f, "    static const double scale = %a;\n", a->scale);
  fprintf(f,
          "    void *const args[] = {%s, %s, %s, %s, (void *)num, (void *)&scale, %s, %s, %s};\n",
          buffer(l, s->out, o, sizeof o), buffer(l, a->pos[0], q, sizeof q),
          buffer(l, a->pos[1], k, sizeof k), buffer(l, a->pos[2], v, sizeof v),
          a->mask ? buffer(l, a->pos[3], m, sizeof m) : "NULL",
          a->backward ? buffer(l, a->pos[4], fo, sizeof fo) : "NULL",
          a->backward ? buffer(l, a->pos[5], fg, sizeof fg) : "NULL");
  fprintf(f, "    run_kernel(%s_%s, args, %s_%s_items(num), %" PRId64 ");\n  }\n", l->name, fn,
          l->name, fn, lm_attention_work(s));
}

/* A sort: runtime/sort_cpu.c's entry point over the rows, its numbers
 * written out (so a symbolic export fits them as any other). */
void lm_sort_write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  if (s->outer == 0) return;
  char o[96], x[96];
  int64_t num[LM_SORT_NUMBERS];
  lm_sort_numbers(&s->sort, num);
  fprintf(f, "  { /* step %d: sort, the first %" PRId64 " of rows of %" PRId64 " %s%s */\n", i,
          s->sort.k, s->sort.n, loom_dtype_name(s->sort.dtype),
          s->sort.descending ? ", descending" : "");
  write_numbers(f, num, LM_SORT_NUMBERS);
  fprintf(f, "    void *const args[] = {%s, %s, (void *)num};\n", buffer(l, s->out, o, sizeof o),
          buffer(l, s->sort.in_pos, x, sizeof x));
  fprintf(f, "    run_kernel(%s_sort_rows, args, %s_sort_items(num), %" PRId64 ");\n  }\n", l->name,
          l->name, lm_sort_work(&s->sort));
}

/* A check: runtime/check_cpu.c's over the source, its numbers written out (a
 * symbolic export fits a table's rows as any other size); a value it refuses
 * ends the run with <NAME>_ERR_VALUE and loom's message, kept for
 * <name>_error_detail. Then the copy into its output. */
void lm_check_write_export(const lm_export_layout *l, int i, FILE *f) {
  const lm_step *s = &l->p->plan->steps[i];
  const lm_check_step *c = &s->check;
  char o[96], x[96];
  int64_t num[LM_CHECK_NUMBERS];
  lm_check_numbers(c, num);
  fprintf(f, "  { /* step %d: check, %s's %s rule */\n", i, c->op, lm_check_rule_name(c->rule));
  write_numbers(f, num, LM_CHECK_NUMBERS);
  fprintf(f,
          "    char *detail = error_detail_buffer();\n"
          "    if (%s_check_values(%s, num, \"%s\", detail, detail ? ERROR_DETAIL_BYTES : 0)) {\n"
          "      free(scratch);\n%s"
          "      return %s_ERR_VALUE;\n    }\n",
          l->name, buffer(l, c->in_pos, x, sizeof x), c->op,
          l->pack_bytes > 0 ? "      free(pack);\n" : "", l->upper);
  if (s->outer > 0)
    fprintf(f, "    memcpy(%s, %s, %" PRId64 ");\n", buffer(l, s->out, o, sizeof o), x,
            s->outer * (int64_t)loom_dtype_size(s->dtype));
  fputs("  }\n", f);
}

/* A file of loom's (path) copied in whole, between banners. */
static void write_embedded(const char *path, const char *text, FILE *f) {
  fprintf(f, "/* ---- loom's %s ---- */\n%s\n/* ---- */\n\n", path, text);
}

/* The library steps' CPU kernels (their rows' export_kernel) themselves, each
 * once, its functions renamed into the library's prefix. */
static void write_library_sources(const lm_export_layout *l, FILE *f) {
  for (int k = 0; k < LM_STEP_KINDS; k++) {
    const lm_export_kernel *x = lm_step_kind_ios[k]->export_kernel;
    if (!x || !l->uses_kind[k]) continue;
    for (int i = 0; i < x->nfns; i++)
      fprintf(f, "#define %s %s%s\n", x->fns[i], l->name, x->fns[i] + 2);
    write_embedded(x->path, x->text, f);
    for (int i = 0; i < x->nfns; i++) fprintf(f, "#undef %s\n", x->fns[i]);
    fputs("\n", f);
  }
}

/* The fixed C of the exported libraries (the files of io/export/, generated at
 * build time). */
extern const char lm_export_thread_pool_text[], lm_export_gemm_runner_text[],
    lm_export_weights_file_text[];

/* The worker threads every call shares (io/export/thread_pool.c): its
 * numbers, then the file. */
static void write_pool(const lm_export_layout *l, FILE *f) {
  fprintf(f, "#define EXPORT_THREADS_ENV \"%s_THREADS\"\n#define EXPORT_PARALLEL_WORK %d\n",
          l->upper, EXPORT_PARALLEL_WORK);
  write_embedded("io/export/thread_pool.c", lm_export_thread_pool_text, f);
}

/* The GEMM steps' parts over the pool (io/export/gemm_runner.c: its
 * numbers, then the file), and the block functions' declarations. */
static void write_gemm_runner(const lm_export_layout *l, FILE *f) {
  static const struct {
    const char *name;
    int value;
  } numbers[] = {
      {"LK_GEMM_AMX_K", LK_GEMM_AMX_K},
      {"LK_GEMM_IN_PLACE_MAX_TILES", LK_GEMM_IN_PLACE_MAX_TILES},
      {"LK_GEMM_IN_PLACE_SHORT_KC", LK_GEMM_IN_PLACE_SHORT_KC},
      {"LK_GEMM_DOT_MAX_ROWS", LK_GEMM_DOT_MAX_ROWS},
      {"LK_GEMM_DOT_TERMS_PER_OUTPUT", LK_GEMM_DOT_TERMS_PER_OUTPUT},
      {"EXPORT_GEMM_MIN_ROWS", EXPORT_GEMM_MIN_ROWS},
      {"EXPORT_GEMM_MIN_COLS", EXPORT_GEMM_MIN_COLS},
      {"EXPORT_GEMM_PARALLEL_WORK", EXPORT_GEMM_PARALLEL_WORK},
  };
  for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++)
    fprintf(f, "#define %s %d\n", numbers[i].name, numbers[i].value);
  write_embedded("io/export/gemm_runner.c", lm_export_gemm_runner_text, f);
  fputs("/* loom's GEMM block functions (object code from its LLVM backend). */\n", f);
  const lm_plan *plan = l->p->plan;
  for (int i = 0; i < plan->nsteps; i++) {
    if (plan->steps[i].kind != LM_STEP_GEMM) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++)
      seen = plan->steps[j].kind == LM_STEP_GEMM && !strcmp(l->symbol[j], l->symbol[i]);
    if (!seen) fprintf(f, "void %s(const struct gemm_args *args);\n", l->symbol[i]);
  }
  fputs("\n", f);
}

/* The weights file beside the library (io/export/weights_file.c: its
 * name and header, then the file). */
static void write_weights_loader(const lm_export_layout *l, FILE *f) {
  fprintf(f,
          "#define EXPORT_WEIGHTS_FILE \"%s.weights\"\n#define EXPORT_WEIGHTS_HEADER %d\n"
          "#define EXPORT_WEIGHTS_MAGIC \"%s\"\n#define EXPORT_WEIGHTS_BYTES %" PRId64 "ull\n",
          l->name, LM_EXPORT_WEIGHTS_HEADER, LM_EXPORT_WEIGHTS_MAGIC, l->weight_bytes);
  write_embedded("io/export/weights_file.c", lm_export_weights_file_text, f);
}

static void write_prelude(const lm_export_layout *l, FILE *f) {
  const loom_program *p = l->p;
  fprintf(f, "/* Generated by loom %s from a compiled program: the wrapper of lib%s.so. */\n",
          LOOM_VERSION_STRING, l->name);
  fputs("#include <pthread.h>\n#include <stdatomic.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
        "#include <string.h>\n#include <sys/syscall.h>\n#include <time.h>\n#include <unistd.h>\n",
        f);
  fprintf(f, "\n#include \"%s.h\"\n\n", l->name);
  fputs("/* The kernels: object code from loom's LLVM backend, linked in. */\n", f);
  for (int i = 0; i < p->plan->nsteps; i++) {
    if (p->plan->steps[i].kind != LM_STEP_KERNEL || p->plan->steps[i].outer == 0) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = !strcmp(l->symbol[j], l->symbol[i]);
    if (!seen)
      fprintf(f, "void %s(void *const *args, int64_t begin, int64_t end);\n", l->symbol[i]);
  }
  fputs("\n", f);
  for (int pos = 0; pos < p->n; pos++)
    if (p->keys[pos]) {
      const uint32_t *k = p->keys[pos];
      fprintf(f, "static const uint32_t key_%d[2] = {%" PRIu32 "u, %" PRIu32 "u};\n", pos, k[0],
              k[1]);
    }
  write_library_sources(l, f);
  write_pool(l, f);
  if (l->uses_gemm) write_gemm_runner(l, f);
  if (l->embed)
    fprintf(f, "extern const unsigned char %s_weights_blob[]; /* weights.S */\n\n", l->name);
  else
    write_weights_loader(l, f);
}

static void write_status_string(const lm_export_layout *l, FILE *f) {
  fprintf(f,
          "const char *%s_status_string(int status) {\n"
          "  switch (status) {\n"
          "  case %s_OK: return \"ok\";\n"
          "  case %s_ERR_NULL: return \"an input or output pointer is NULL\";\n"
          "  case %s_ERR_OOM: return \"out of memory for the scratch buffer\";\n"
          "  case %s_ERR_WEIGHTS: return \"the weights file beside the library is missing or "
          "corrupt\";\n"
          "  case %s_ERR_CPU: return \"the kernel refused the CPU's AMX tiles, which this "
          "library's matrix products use (arch_prctl ARCH_REQ_XCOMP_PERM)\";\n",
          l->name, l->upper, l->upper, l->upper, l->upper, l->upper);
  if (l->generic)
    fprintf(f,
            "  case %s_ERR_DIMS: return \"a size in dims is below 1, or makes a tensor too "
            "large, or a dim that follows the sizes below 1\";\n",
            l->upper);
  if (l->may_fail)
    fprintf(f,
            "  case %s_ERR_VALUE: return \"an input holds a value its op refuses (an index "
            "outside its table, a position past the end, an invalid multinomial distribution): "
            "%s_error_detail() says which\";\n",
            l->upper, l->name);
  fputs("  default: return \"unknown status\";\n  }\n}\n\n", f);
  if (l->may_fail) /* per thread, as the calls; a pthread key, since C11's
                     thread-locals in a shared library need the dynamic loader
                     (__tls_get_addr), which the library must not depend on */
    fprintf(
        f,
        "#define ERROR_DETAIL_BYTES 512\n"
        "static pthread_key_t detail_key;\n"
        "static pthread_once_t detail_once = PTHREAD_ONCE_INIT;\n"
        "static int detail_key_made;\n"
        "static void make_detail_key(void) {\n"
        "  detail_key_made = pthread_key_create(&detail_key, free) == 0;\n}\n"
        "/* a library closed with dlclose (or at exit, where the main thread's keys\n"
        " * are not destroyed) frees this thread's buffer and leaves no destructor\n"
        " * behind */\n"
        "__attribute__((destructor)) static void drop_detail_key(void) {\n"
        "  if (!detail_key_made) return;\n"
        "  free(pthread_getspecific(detail_key));\n"
        "  pthread_key_delete(detail_key);\n}\n"
        "/* this thread's message buffer, NULL when out of memory */\n"
        "static char *error_detail_buffer(void) {\n"
        "  pthread_once(&detail_once, make_detail_key);\n"
        "  if (!detail_key_made) return NULL;\n"
        "  char *b = pthread_getspecific(detail_key);\n"
        "  if (!b && (b = calloc(1, ERROR_DETAIL_BYTES)) && pthread_setspecific(detail_key, b)) {\n"
        "    free(b);\n    b = NULL;\n  }\n  return b;\n}\n\n"
        "const char *%s_error_detail(void) {\n"
        "  const char *b = error_detail_buffer();\n  return b ? b : \"\";\n}\n\n",
        l->name);
  if (l->uses_amx) /* Linux hands the tiles' large state only to processes that ask */
    fputs(
        "static int amx_granted;\nstatic pthread_once_t amx_once = PTHREAD_ONCE_INIT;\n"
        "static void ask_amx(void) { amx_granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0; }\n\n",
        f);
}

/* ------------------------------------------------------------ symbolic sizes */

/* Writes line unless it is among the n lines of seen, which keeps it. */
static void put_once(char **seen, int *n, int cap, const char *line, FILE *f) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(seen[i], line)) return;
  if (*n < cap && (seen[*n] = strdup(line))) ++*n;
  fputs(line, f);
}

/* Each symbol's and each node dim's bound, and each node's bytes, checked in
 * double before any size is computed in int64_t. Written from the program's
 * expressions, the same in every sample. */
static void write_dims_check(const lm_export_layout *l, FILE *f) {
  const loom_program *p = l->p;
  char as_double[LM_SYM_MAX_SYMBOLS][32], e[1024], line[LOOM_MAX_DIMS * (sizeof e + 8) + 64];
  const char *names[LM_SYM_MAX_SYMBOLS];
  for (int s = 0; s < p->nsym; s++) {
    snprintf(as_double[s], sizeof as_double[s], "(double)dims[%d]", s);
    names[s] = as_double[s];
  }
  fprintf(f,
          "/* Whether dims are sizes this library takes: each symbol from 1 to %d, every\n"
          " * dim that follows them at least 1, every tensor under 2^46 bytes. */\n"
          "static int dims_ok(const int64_t *dims) {\n"
          "  for (int i = 0; i < %d; i++)\n"
          "    if (dims[i] < 1 || dims[i] > %d) return 0;\n",
          INT32_MAX, p->nsym, INT32_MAX);
  enum { SEEN = 4096 };
  char **seen = calloc(SEEN, sizeof *seen);
  int nseen = 0;
  for (int pos = 0; pos < p->n; pos++) {
    const lm_node *n = p->nodes[pos];
    int used = snprintf(line, sizeof line, "  if (!(%d.0", (int)loom_dtype_size(n->dtype));
    bool symbolic = false;
    for (int d = 0; d < n->shape.ndim; d++) {
      const lm_sym_expr *x = &p->dims[pos * LOOM_MAX_DIMS + d];
      if (lm_sym_is_const(x)) continue;
      symbolic = true;
      lm_sym_str(x, names, e, sizeof e);
      used += snprintf(line + used, sizeof line - (size_t)used, " * (%s)", e);
      if (x->nterms > 1) { /* a lone symbol's bound is checked above */
        char positive[sizeof e + 40];
        snprintf(positive, sizeof positive, "  if (!(%s >= 1)) return 0;\n", e);
        put_once(seen, &nseen, seen ? SEEN : 0, positive, f);
      }
    }
    snprintf(line + used, sizeof line - (size_t)used, " < 70368744177664.0)) return 0;\n");
    if (symbolic) put_once(seen, &nseen, seen ? SEEN : 0, line, f);
  }
  for (int i = 0; i < nseen; i++) free(seen[i]);
  free(seen);
  fputs("  return 1;\n}\n\n", f);
}

/* The scratch slots' offsets at these sizes (off[nslots]), and their total. */
static void write_scratch_layout(const lm_export_layout *l, FILE *f) {
  fputs("static int64_t scratch_layout(const int64_t *dims, int64_t *off) {\n"
        "  (void)dims;\n  int64_t at = 0;\n",
        f);
  for (int i = 0; i < l->nslots; i++)
    fprintf(f, "  off[%d] = at;\n  at += (%" PRId64 " + %d) / %d * %d;\n", i, l->slot_bytes[i],
            LM_EXPORT_ALIGN - 1, LM_EXPORT_ALIGN, LM_EXPORT_ALIGN);
  fputs("  return at;\n}\n\n", f);
}

static void write_shape_cases(FILE *f, int i, const loom_shape *shape) {
  fprintf(f, "  case %d:", i);
  for (int d = 0; d < shape->ndim; d++) fprintf(f, " shape[%d] = %" PRId64 ";", d, shape->dim[d]);
  fprintf(f, " return %d;\n", shape->ndim);
}

static void write_shape_functions(const lm_export_layout *l, FILE *f) {
  const loom_program *p = l->p;
  for (int io = 0; io < 2; io++) {
    fprintf(f,
            "int %s_%s_shape(int i, const int64_t *dims, int64_t *shape) {\n"
            "  if (!dims || !shape || !dims_ok(dims)) return -1;\n  switch (i) {\n",
            l->name, io ? "output" : "input");
    for (int i = 0; i < (io ? p->nout : p->nin); i++)
      write_shape_cases(f, i, io ? &p->nodes[p->out_pos[i]]->shape : &p->in_nodes[i]->shape);
    fputs("  default: return -1;\n  }\n}\n\n", f);
  }
  fprintf(f,
          "size_t %s_scratch_bytes(const int64_t *dims) {\n"
          "  int64_t off[%d];\n"
          "  return dims && dims_ok(dims) ? (size_t)scratch_layout(dims, off) : 0;\n}\n\n",
          l->name, l->nslots + 1);
}

void lm_export_write_source(const lm_export_layout *l, FILE *f) {
  const loom_program *p = l->p;
  char b[96];
  write_prelude(l, f);
  write_status_string(l, f);
  if (l->generic) {
    write_dims_check(l, f);
    write_scratch_layout(l, f);
    write_shape_functions(l, f);
    fprintf(f,
            "int %s_run_dims(const int64_t *dims, const void *const *inputs, void *const "
            "*outputs) {\n"
            "  if (!dims) return %s_ERR_NULL;\n"
            "  if (!dims_ok(dims)) return %s_ERR_DIMS;\n",
            l->name, l->upper, l->upper);
  } else {
    fprintf(f, "int %s_run(const void *const *inputs, void *const *outputs) {\n", l->name);
  }
  if (p->nin > 0) {
    fprintf(f, "  if (!inputs) return %s_ERR_NULL;\n", l->upper);
    fprintf(f, "  for (int i = 0; i < %d; i++)\n    if (!inputs[i]) return %s_ERR_NULL;\n", p->nin,
            l->upper);
  } else {
    fputs("  (void)inputs;\n", f);
  }
  fprintf(f, "  if (!outputs) return %s_ERR_NULL;\n", l->upper);
  fprintf(f, "  for (int i = 0; i < %d; i++)\n    if (!outputs[i]) return %s_ERR_NULL;\n", p->nout,
          l->upper);
  if (l->embed) {
    fprintf(f, "  const unsigned char *weights = %s_weights_blob;\n", l->name);
  } else {
    fprintf(f,
            "  pthread_once(&weights_once, map_weights);\n"
            "  const unsigned char *weights = weights_mapped;\n"
            "  if (!weights) return %s_ERR_WEIGHTS;\n",
            l->upper);
  }
  fprintf(f, "  (void)weights;\n  pthread_once(&pool_once, start_pool);\n");
  if (l->uses_amx)
    fprintf(f, "  pthread_once(&amx_once, ask_amx);\n  if (!amx_granted) return %s_ERR_CPU;\n",
            l->upper);
  if (l->generic) {
    fprintf(f,
            "  int64_t off[%d];\n"
            "  unsigned char *scratch = malloc((size_t)scratch_layout(dims, off) + 1); /* the "
            "memory plan */\n"
            "  if (!scratch) return %s_ERR_OOM;\n",
            l->nslots + 1, l->upper);
  } else if (l->arena_bytes > 0) {
    fprintf(f, "  unsigned char *scratch = malloc(%" PRId64 "); /* the memory plan */\n",
            l->arena_bytes);
    fprintf(f, "  if (!scratch) return %s_ERR_OOM;\n", l->upper);
  } else {
    fputs("  unsigned char *scratch = NULL; /* the memory plan: nothing between steps */\n", f);
  }
  if (l->pack_bytes > 0) { /* GEMM panels, one set per part */
    fprintf(f,
            "  unsigned char *pack = aligned_alloc(64, (size_t)%" PRId64
            " * (size_t)pool.threads);\n"
            "  if (!pack) {\n    free(scratch);\n    return %s_ERR_OOM;\n  }\n",
            pack_stride(l), l->upper);
  }
  for (int i = 0; i < p->plan->nsteps; i++) {
    const lm_step *s = &p->plan->steps[i];
    lm_step_kind_ios[s->kind]->write_export(l, i, f);
  }
  for (int i = 0; i < p->nout; i++) { /* outputs that repeat another or are leaves */
    int pos = p->out_pos[i];
    if (pos < p->n && l->output_of[pos] == i) continue;
    int64_t bytes = node_bytes(p->nodes[pos]);
    if (bytes > 0)
      fprintf(f, "  memcpy(outputs[%d], %s, %" PRId64 ");\n", i, buffer(l, pos, b, sizeof b),
              bytes);
  }
  fprintf(f, "%s  free(scratch);\n  return 0;\n}\n", l->pack_bytes > 0 ? "  free(pack);\n" : "");
}

/* ------------------------------------------------------------ header */

static const char *c_type(loom_dtype dt) {
  return dt == LOOM_BOOL ? "uint8_t (bool: 0 or 1)" : lm_dtype_info_of(dt)->c_type;
}

static void write_tensor_macros(const lm_export_layout *l, FILE *f, const char *kind, int i,
                                const char *name, const lm_node *n) {
  char shape[128];
  lm_shape_str(&n->shape, shape, sizeof shape);
  fprintf(f, "/* %s %d: %s, %s %s (C type %s), row-major */\n", kind, i, name,
          loom_dtype_name(n->dtype), shape, c_type(n->dtype));
  fprintf(f, "#define %s_%s%d_NAME \"%s\"\n", l->upper, kind, i, name);
  fprintf(f, "#define %s_%s%d_DTYPE \"%s\"\n", l->upper, kind, i, loom_dtype_name(n->dtype));
  fprintf(f, "#define %s_%s%d_NDIM %d\n", l->upper, kind, i, n->shape.ndim);
  if (l->generic) { /* the sizes come from <name>_input_shape / _output_shape */
    fputs("\n", f);
    return;
  }
  fprintf(f, "#define %s_%s%d_SHAPE {", l->upper, kind, i);
  for (int d = 0; d < n->shape.ndim; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", n->shape.dim[d]);
  fprintf(f, "%s}\n", n->shape.ndim ? "" : "1");
  fprintf(f, "#define %s_%s%d_NUMEL %" PRId64 "\n", l->upper, kind, i, lm_shape_numel(&n->shape));
  fprintf(f, "#define %s_%s%d_BYTES %" PRId64 "\n\n", l->upper, kind, i, node_bytes(n));
}

static void write_header_intro(const lm_export_layout *l, FILE *f) {
  const char *u = l->upper, *n = l->name;
  fprintf(f, "/* %s.h: a model exported by loom %s as lib%s.so.\n *\n", n, LOOM_VERSION_STRING, n);
  if (l->generic)
    fprintf(f,
            " *   int %s_run_dims(const int64_t *dims, const void *const *inputs,\n"
            " *   %*s               void *const *outputs);\n *\n"
            " * dims[s] is the size of symbol s (%s_SYMBOL<s>_NAME), at least 1; the\n"
            " * inputs' and outputs' shapes follow from them (in the comments below, and\n"
            " * from %s_input_shape / %s_output_shape). inputs[i] points to input i's\n"
            " * data and outputs[i] to room for output i: contiguous, row-major, of the\n"
            " * dtypes below (%s_INPUT<i>_*, %s_OUTPUT<i>_*). Returns %s_OK (0) or a\n"
            " * %s_ERR_* status (%s_ERR_DIMS: sizes it does not take); %s_status_string\n"
            " * says what it means.\n *\n"
            " * Threads: %s_run_dims keeps no state between calls (its scratch memory,\n"
            " * %s_scratch_bytes(dims), is allocated per call), so several threads may\n"
            " * call it at once.",
            n, (int)strlen(n), "", u, n, n, u, u, u, u, u, n, n, n);
  else
    fprintf(f,
            " *   int %s_run(const void *const *inputs, void *const *outputs);\n *\n"
            " * inputs[i] points to input i's data and outputs[i] to room for output i:\n"
            " * contiguous, row-major, of the dtypes and shapes below (%s_INPUT<i>_*,\n"
            " * %s_OUTPUT<i>_*). Returns %s_OK (0) or a %s_ERR_* status;\n"
            " * %s_status_string says what it means.\n *\n"
            " * Threads: %s_run keeps no state between calls (its scratch memory, "
            "%s_SCRATCH_BYTES,\n"
            " * is allocated per call), so several threads may call it at once.",
            n, u, u, u, u, n, n, u);
  fprintf(f,
          " Its steps run\n"
          " * on %s_THREADS threads (the environment variable, read at the first call;\n"
          " * default: the CPUs online), started at the first call and kept; a call made\n"
          " * while another one uses them runs on its own thread. The results do not\n"
          " * depend on the number of threads.\n *\n"
          " * Weights: %s.\n *\n"
          " * The kernels are native code for the CPU that exported them (%s); the library\n"
          " * needs libc, libm, pthreads, not loom.\n */\n",
          u,
          l->embed ? "embedded in the library (read-only data)"
                   : "in the file named by WEIGHTS_FILE below, beside the library, mapped at the\n"
                     " * first call and checked (length and checksum)",
          loom_target_id());
}

void lm_export_write_header(const lm_export_layout *l, FILE *f) {
  const loom_program *p = l->p;
  const char *u = l->upper, *n = l->name;
  write_header_intro(l, f);
  fprintf(f, "#ifndef %s_H\n#define %s_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n", u, u);
  fprintf(f, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(f,
          "#define %s_OK 0\n#define %s_ERR_NULL 1\n#define %s_ERR_OOM 2\n#define %s_ERR_WEIGHTS 3\n"
          "#define %s_ERR_CPU 4\n",
          u, u, u, u, u);
  if (l->generic) fprintf(f, "#define %s_ERR_DIMS 5\n", u);
  if (l->may_fail)
    fprintf(f,
            "/* an input holds a value an op refuses: an index outside its table, a\n"
            " * position past the end of a cache, an invalid multinomial distribution\n"
            " * (loom's run fails alike); %s_error_detail() names the op and the value.\n"
            " * The outputs then hold no result. */\n"
            "#define %s_ERR_VALUE 6\n",
            n, u);
  fprintf(f, "\n#define %s_NUM_INPUTS %d\n#define %s_NUM_OUTPUTS %d\n", u, p->nin, u, p->nout);
  if (l->generic) {
    fprintf(f, "#define %s_NUM_SYMBOLS %d\n", u, p->nsym);
    for (int s = 0; s < p->nsym; s++) {
      fprintf(f, "#define %s_SYMBOL%d_NAME \"%s\" /* dims[%d]; input dims:", u, s, p->sym_names[s],
              s);
      for (int i = 0; i < p->nin; i++)
        for (int d = 0; d < LOOM_MAX_DIMS; d++)
          if (p->in_sym[i * LOOM_MAX_DIMS + d] == s) fprintf(f, " %d.%d", i, d);
      fputs(" (input.axis) */\n", f);
    }
  } else {
    fprintf(f, "#define %s_SCRATCH_BYTES %" PRId64 "\n", u, l->arena_bytes);
  }
  if (l->embed)
    fprintf(f, "#define %s_WEIGHTS_EMBEDDED 1\n\n", u);
  else
    fprintf(f, "#define %s_WEIGHTS_EMBEDDED 0\n#define %s_WEIGHTS_FILE \"%s.weights\"\n\n", u, u,
            n);
  for (int i = 0; i < p->nin; i++)
    write_tensor_macros(l, f, "INPUT", i, p->in_nodes[i]->label, p->in_nodes[i]);
  for (int i = 0; i < p->nout; i++)
    write_tensor_macros(l, f, "OUTPUT", i, p->out_names[i], p->nodes[p->out_pos[i]]);
  if (l->generic)
    fprintf(f,
            "int %s_run_dims(const int64_t *dims, const void *const *inputs, void *const "
            "*outputs);\n"
            "/* The scratch memory a call at dims allocates; 0 when it does not take dims. */\n"
            "size_t %s_scratch_bytes(const int64_t *dims);\n"
            "/* Input or output i's shape at dims into shape[]; returns its number of dims,\n"
            " * or -1 (no such input or output, a NULL pointer, dims not taken). */\n"
            "int %s_input_shape(int i, const int64_t *dims, int64_t *shape);\n"
            "int %s_output_shape(int i, const int64_t *dims, int64_t *shape);\n",
            n, n, n, n);
  else
    fprintf(f, "int %s_run(const void *const *inputs, void *const *outputs);\n", n);
  fprintf(f, "const char *%s_status_string(int status);\n", n);
  if (l->may_fail)
    fprintf(f,
            "/* After a call on this thread returned %s_ERR_VALUE: the op and the value\n"
            " * it refused, as loom says it (\"loom_embedding_f: index 7 at position 0 is\n"
            " * outside [0, 5)\"). */\n"
            "const char *%s_error_detail(void);\n",
            u, n);
  fprintf(f, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s_H */\n", u);
}

void lm_export_write_version_script(const lm_export_layout *l, FILE *f) {
  const char *n = l->name;
  if (l->generic)
    fprintf(f, "{\n  global: %s_run_dims; %s_scratch_bytes; %s_input_shape; %s_output_shape; ", n,
            n, n, n);
  else
    fprintf(f, "{\n  global: %s_run; ", n);
  if (l->may_fail) fprintf(f, "%s_error_detail; ", n);
  fprintf(f, "%s_status_string;\n  local: *;\n};\n", n);
}
