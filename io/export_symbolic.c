/* loom_program_export of a symbolic program: one library that takes the
 * symbols' sizes at run time (<name>_run_dims).
 *
 * The wrapper is written by export_source.c as for a fixed-size program, but
 * with every kernel generalized over all of its sizes (lm_kernel_generic_all)
 * and the scratch memory in slots whose offsets are computed per call. It is
 * written once per *sample*: the program planned at 3 values of each symbol
 * (its traced size and the next two: a grid of 3^k plans) and at two more
 * points to check. Where the samples' wrappers differ, they may differ only
 * in decimal numbers (sizes, strides, counts, bytes); each such number is
 * fitted, over the grid, as the polynomial with at most the square of each
 * symbol through it, which must have integer coefficients and give the
 * numbers at the check points, and is written as that expression of dims[].
 * Anything else that differs (another kernel, another tile, another number
 * of steps) means the plan depends on the sizes beyond what one library can
 * hold: the export is refused, naming the first difference.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/export.h"
#include "runtime/runtime.h"

#define OP "loom_program_export"
/* 3^4 = 81 plans and 2 more: enough for a batch, a sequence and two more */
#define EXPORT_MAX_SYMBOLS LM_SYM_FIT_MAX_SYMBOLS
#define GRID_VALUES LM_SYM_FIT_GRID
#define CHECKS 2

typedef struct sample {
  int64_t values[LM_SYM_MAX_SYMBOLS];
  lm_binding *b;
  lm_node **in_nodes;
  loom_program view; /* the program with this sample's plan and nodes */
  lm_export_layout layout;
  char *text[2]; /* header, source */
  size_t len[2];
} sample;

typedef struct exporter {
  const loom_program *p;
  int k, ngrid, nsamples;
  sample *s; /* [nsamples]: the grid (index digits in base 3, symbol 0 first), then checks */
  int *slot; /* [n + ntemps] of the traced plan */
  int nslots;
} exporter;

/* ------------------------------------------------------------ tokens */

/* The wrapper's text as alternating spans: decimal numbers (the part that may
 * differ between samples) and everything else (identifiers with their
 * digits, other numbers such as hex floats, strings, punctuation). */
typedef struct token {
  size_t at, len;
  bool number;  /* all decimal digits */
  bool comment; /* inside a comment: written with the symbols' names */
} token;

typedef struct tokens {
  token *t;
  int n, cap;
} tokens;

static bool push(tokens *ts, size_t at, size_t len, bool number, bool comment) {
  if (len == 0) return true;
  if (!number && ts->n > 0 && !ts->t[ts->n - 1].number) { /* extend the span */
    ts->t[ts->n - 1].len = at + len - ts->t[ts->n - 1].at;
    return true;
  }
  if (ts->n == ts->cap) {
    int ncap = ts->cap ? ts->cap * 2 : 1024;
    token *grown = realloc(ts->t, sizeof *grown * (size_t)ncap);
    if (!grown) return false;
    ts->t = grown, ts->cap = ncap;
  }
  ts->t[ts->n++] = (token){at, len, number, comment};
  return true;
}

static bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool tokenize(const char *s, size_t len, tokens *ts) {
  bool comment = false;
  size_t i = 0;
  while (i < len) {
    size_t start = i;
    char c = s[i];
    if (comment && c == '*' && i + 1 < len && s[i + 1] == '/') {
      i += 2, comment = false;
    } else if (!comment && c == '/' && i + 1 < len && s[i + 1] == '*') {
      i += 2, comment = true;
    } else if (!comment && (c == '"' || c == '\'')) {
      for (i++; i < len && s[i] != c; i++)
        if (s[i] == '\\') i++;
      i++;
    } else if (c >= '0' && c <= '9') { /* a preprocessing number */
      bool digits = true;
      for (i++; i < len; i++) {
        bool exp_sign = (s[i] == '+' || s[i] == '-') && strchr("eEpP", s[i - 1]) && !digits;
        if (!is_ident(s[i]) && s[i] != '.' && !exp_sign) break;
        digits &= s[i] >= '0' && s[i] <= '9';
      }
      if (!push(ts, start, i - start, digits, comment)) return false;
      continue;
    } else if (is_ident(c)) {
      while (i < len && is_ident(s[i])) i++;
    } else {
      i++;
    }
    if (i > len) i = len;
    if (!push(ts, start, i - start, false, comment)) return false;
  }
  return true;
}

/* ------------------------------------------------------------ merging */

static void line_at(const char *s, size_t at, char *out, size_t len, int *line) {
  size_t b = at, e = at;
  *line = 1;
  for (size_t i = 0; i < at; i++) *line += s[i] == '\n';
  while (b > 0 && s[b - 1] != '\n') b--;
  while (s[e] && s[e] != '\n') e++;
  while (b < e && (s[b] == ' ')) b++;
  snprintf(out, len, "%.*s", (int)(e - b), s + b);
}

static loom_status differ(const exporter *x, int which, int other, size_t at0, size_t at1) {
  const loom_program *p = x->p;
  char v0[256], v1[256], l0[160], l1[160];
  int line0, line1;
  line_at(x->s[0].text[which], at0, l0, sizeof l0, &line0);
  line_at(x->s[other].text[which], at1, l1, sizeof l1, &line1);
  return lm_fail(LOOM_ERR_VALUE,
                 OP ": the program's plan at %s differs from its plan at %s beyond sizes (%s "
                    "line %d: '%s', against '%s'): one library cannot hold both; trace the "
                    "program at other sizes, or export it at one size (loom_compile)",
                 lm_program_values_str(p, x->s[other].values, v1, sizeof v1),
                 lm_program_values_str(p, x->s[0].values, v0, sizeof v0),
                 which ? "wrapper" : "header", line0, l0, l1);
}

/* The text every sample writes, its differing numbers as expressions. */
static loom_status merge(const exporter *x, int which, char **out) {
  const loom_program *p = x->p;
  tokens *ts = calloc((size_t)x->nsamples, sizeof *ts);
  int64_t *vals = malloc(sizeof *vals * (size_t)x->nsamples);
  char *text = NULL;
  size_t text_len = 0;
  FILE *f = open_memstream(&text, &text_len);
  loom_status st = LOOM_OK;
  if (!ts || !vals || !f) {
    st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    goto done;
  }
  for (int i = 0; i < x->nsamples && st == LOOM_OK; i++)
    if (!tokenize(x->s[i].text[which], x->s[i].len[which], &ts[i]))
      st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  char code_names[LM_SYM_MAX_SYMBOLS][24];
  const char *in_code[LM_SYM_MAX_SYMBOLS];
  for (int s = 0; s < p->nsym; s++) {
    snprintf(code_names[s], sizeof code_names[s], "dims[%d]", s);
    in_code[s] = code_names[s];
  }
  for (int i = 1; i < x->nsamples && st == LOOM_OK; i++) {
    int n = ts[0].n < ts[i].n ? ts[0].n : ts[i].n;
    int t = 0;
    while (t < n && ts[0].t[t].number == ts[i].t[t].number &&
           (ts[0].t[t].number || (ts[0].t[t].len == ts[i].t[t].len &&
                                  !memcmp(x->s[0].text[which] + ts[0].t[t].at,
                                          x->s[i].text[which] + ts[i].t[t].at, ts[0].t[t].len))))
      t++;
    if (t < n || ts[0].n != ts[i].n) {
      size_t a0 = t < ts[0].n ? ts[0].t[t].at : x->s[0].len[which];
      size_t a1 = t < ts[i].n ? ts[i].t[t].at : x->s[i].len[which];
      st = differ(x, which, i, a0, a1);
    }
  }
  for (int t = 0; st == LOOM_OK && t < ts[0].n; t++) {
    const token *tk = &ts[0].t[t];
    const char *at = x->s[0].text[which] + tk->at;
    bool same = true;
    for (int i = 0; i < x->nsamples && tk->number; i++) {
      const token *ti = &ts[i].t[t];
      vals[i] = strtoll(x->s[i].text[which] + ti->at, NULL, 10);
      same &= vals[i] == vals[0];
    }
    if (same) {
      fwrite(at, 1, tk->len, f);
      continue;
    }
    lm_sym_expr e;
    bool ok = lm_sym_fit(x->k, p->sym_example, vals, &e);
    for (int i = x->ngrid; ok && i < x->nsamples; i++)
      ok = lm_sym_eval(&e, x->s[i].values) == vals[i];
    if (!ok) {
      char v0[256], l0[160];
      int line;
      line_at(x->s[0].text[which], tk->at, l0, sizeof l0, &line);
      st =
          lm_fail(LOOM_ERR_VALUE,
                  OP ": a size in the plan (%" PRId64 " at %s, %" PRId64 " at %s, %s line %d: "
                     "'%s') is no polynomial of the symbols with integer coefficients: one library "
                     "cannot compute it; trace the program at other sizes, or export it at one "
                     "size (loom_compile)",
                  vals[0], lm_program_values_str(p, x->s[0].values, v0, sizeof v0),
                  vals[x->nsamples - 1], "the last sample", which ? "wrapper" : "header", line, l0);
      break;
    }
    char e_str[512];
    if (tk->comment)
      fputs(lm_sym_str(&e, (const char *const *)p->sym_names, e_str, sizeof e_str), f);
    else
      fprintf(f, "(%s)", lm_sym_str(&e, in_code, e_str, sizeof e_str));
  }
done:
  if (f && fclose(f) != 0 && st == LOOM_OK) st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  for (int i = 0; ts && i < x->nsamples; i++) free(ts[i].t);
  free(ts);
  free(vals);
  if (st != LOOM_OK) {
    free(text);
    text = NULL;
  }
  *out = text;
  return st;
}

/* ------------------------------------------------------------ samples */

static loom_status plan_sample(exporter *x, sample *sm) {
  const loom_program *p = x->p;
  loom_status st = lm_program_plan_at(OP, p, sm->values, &sm->b);
  if (st != LOOM_OK) return st;
  if (!(sm->in_nodes = malloc(sizeof *sm->in_nodes * (size_t)(p->nin + 1))))
    return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  for (int i = 0; i < p->nin; i++)
    sm->in_nodes[i] = p->in_pos[i] >= 0 ? sm->b->nodes[p->in_pos[i]] : p->in_nodes[i];
  sm->view = *p;
  sm->view.plan = sm->b->plan;
  sm->view.nodes = sm->b->nodes;
  sm->view.in_nodes = sm->in_nodes;
  const lm_plan *mine = sm->b->plan, *traced = x->s[0].b ? x->s[0].b->plan : mine;
  if (mine->nsteps != traced->nsteps || mine->ntemps != traced->ntemps) {
    char v0[256], v1[256];
    return lm_fail(LOOM_ERR_VALUE,
                   OP ": the program's plan at %s has %d steps, at %s %d: one library cannot "
                      "hold both; trace the program at other sizes, or export it at one size "
                      "(loom_compile)",
                   lm_program_values_str(p, sm->values, v1, sizeof v1), mine->nsteps,
                   lm_program_values_str(p, x->s[0].values, v0, sizeof v0), traced->nsteps);
  }
  return LOOM_OK;
}

/* Scratch slots for the traced plan's buffers, by liveness as the fixed-size
 * layout, but reusing a free slot only where its bytes (fitted over the
 * samples) are at least the new buffer's at every size, or growing one whose
 * bytes are at most them. */
static loom_status assign_slots(exporter *x) {
  const loom_program *p = &x->s[0].view;
  const lm_plan *plan = p->plan;
  int npos = p->n + plan->ntemps;
  x->slot = malloc(sizeof *x->slot * (size_t)(npos + 1));
  lm_sym_expr *bytes = malloc(sizeof *bytes * (size_t)(plan->nsteps + 1));
  int *end = malloc(sizeof *end * (size_t)(plan->nsteps + 1));
  int64_t *vals = malloc(sizeof *vals * (size_t)x->nsamples);
  loom_status st = LOOM_OK;
  if (!x->slot || !bytes || !end || !vals) {
    st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    goto done;
  }
  for (int pos = 0; pos < npos; pos++) x->slot[pos] = -1;
  for (int i = 0; i < plan->nsteps && st == LOOM_OK; i++) {
    const lm_step *s = &plan->steps[i];
    if (lm_export_output_of(p, s->out) >= 0 || x->slot[s->out] >= 0) continue;
    for (int j = 0; j < x->nsamples; j++)
      vals[j] = lm_export_step_bytes(&x->s[j].b->plan->steps[i]);
    lm_sym_expr need;
    bool ok = lm_sym_fit(x->k, p->sym_example, vals, &need);
    for (int j = x->ngrid; ok && j < x->nsamples; j++)
      ok = lm_sym_eval(&need, x->s[j].values) == vals[j];
    if (!ok) {
      st = lm_fail(LOOM_ERR_VALUE,
                   OP ": step %d's output (%" PRId64 " bytes at the traced sizes) is no "
                      "polynomial of the symbols with integer coefficients",
                   i, vals[0]);
      break;
    }
    int at = -1;
    for (int q = 0; q < x->nslots && at < 0; q++) /* a free slot large enough */
      if (end[q] < i && lm_sym_dominates(&bytes[q], &need)) at = q;
    for (int q = 0; q < x->nslots && at < 0; q++) /* a free slot to grow */
      if (end[q] < i && lm_sym_dominates(&need, &bytes[q])) at = q, bytes[q] = need;
    if (at < 0) at = x->nslots++, bytes[at] = need;
    end[at] = lm_export_freed_after(plan, s->out, i);
    x->slot[s->out] = at;
  }
done:
  free(bytes);
  free(end);
  free(vals);
  return st;
}

static loom_status write_sample(exporter *x, sample *sm, const char *name, int64_t embed_limit) {
  loom_status st = lm_export_layout_make_generic(&sm->layout, &sm->view, name, embed_limit,
                                                 x->s[0].b->plan, x->slot, x->nslots);
  if (st != LOOM_OK) return st;
  for (int w = 0; w < 2; w++) {
    FILE *f = open_memstream(&sm->text[w], &sm->len[w]);
    if (!f) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    if (w)
      lm_export_write_source(&sm->layout, f);
    else
      lm_export_write_header(&sm->layout, f);
    if (fclose(f) != 0) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  }
  return LOOM_OK;
}

/* The fit's grid points, then the checks. */
static void sample_values(exporter *x, int i, int64_t *values) {
  const int64_t *e = x->p->sym_example;
  if (i < x->ngrid) {
    lm_sym_fit_point(x->k, e, i, values);
    return;
  }
  for (int j = 0; j < x->k; j++) values[j] = e[j] + 3 + j + (int64_t)(i - x->ngrid) * (4 + 3 * j);
}

loom_status lm_export_symbolic(const loom_program *p, const char *dir, const char *name,
                               int64_t embed_limit) {
  if (p->nsym > EXPORT_MAX_SYMBOLS)
    return lm_fail(LOOM_ERR_VALUE,
                   OP ": the program has %d symbols; an export takes at most %d (it plans the "
                      "program at 3^k sizes)",
                   p->nsym, EXPORT_MAX_SYMBOLS);
  exporter x = {.p = p, .k = p->nsym, .ngrid = 1};
  for (int j = 0; j < x.k; j++) x.ngrid *= GRID_VALUES;
  x.nsamples = x.ngrid + CHECKS;
  x.s = calloc((size_t)x.nsamples, sizeof *x.s);
  if (!x.s) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  loom_status st = LOOM_OK;
  for (int i = 0; i < x.nsamples && st == LOOM_OK; i++) {
    sample_values(&x, i, x.s[i].values);
    st = plan_sample(&x, &x.s[i]);
  }
  if (st == LOOM_OK) st = assign_slots(&x);
  for (int i = 0; i < x.nsamples && st == LOOM_OK; i++)
    st = write_sample(&x, &x.s[i], name, embed_limit);
  char *texts[2] = {NULL, NULL};
  for (int w = 0; w < 2 && st == LOOM_OK; w++) st = merge(&x, w, &texts[w]);
  if (st == LOOM_OK) st = lm_export_build(&x.s[0].layout, dir, texts[0], texts[1]);
  free(texts[0]);
  free(texts[1]);
  for (int i = 0; i < x.nsamples; i++) {
    sample *sm = &x.s[i];
    if (sm->layout.p) lm_export_layout_free(&sm->layout);
    free(sm->text[0]);
    free(sm->text[1]);
    free(sm->in_nodes);
    if (sm->b) lm_program_binding_free(p, sm->b);
  }
  free(x.s);
  free(x.slot);
  return st;
}
