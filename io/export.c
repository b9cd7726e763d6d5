/* loom_program_export: a compiled program as lib<name>.so + <name>.h.
 *
 * The kernels are the objects loom's JIT runs (from the disk cache, or
 * emitted now), the wrapper is generated C (export_source.c), the weights a
 * blob the assembler includes (or a file beside the library), and the
 * system's C compiler links them. Everything is built in a temporary folder
 * inside `dir` and renamed into place only when the link succeeded, so a
 * failed export leaves an earlier library untouched. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/export.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

extern char **environ;

#define OP "loom_program_export"

typedef struct job {
  const lm_export_layout *l;
  const char *dir;
  char work[4096];
  char **files; /* what the link command takes after the wrapper (owned) */
  int nfiles, cap;
  char *argv[64]; /* the link command's fixed part (owned) */
  int argc;
} job;

static char *path_in(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, file);
  return p;
}

static loom_status write_file(const char *path, const void *a, size_t alen, const void *b,
                              size_t blen) {
  FILE *f = fopen(path, "wb");
  if (!f) return lm_fail(LOOM_ERR_IO, OP ": cannot write %s: %s", path, strerror(errno));
  bool ok = (!alen || fwrite(a, 1, alen, f) == alen) && (!blen || fwrite(b, 1, blen, f) == blen);
  ok &= fclose(f) == 0;
  return ok ? LOOM_OK : lm_fail(LOOM_ERR_IO, OP ": writing %s failed: %s", path, strerror(errno));
}

static bool add_arg(job *j, const char *s) {
  if (j->argc + 1 >= (int)(sizeof j->argv / sizeof *j->argv)) return false;
  char *copy = strdup(s);
  if (!copy) return false;
  j->argv[j->argc++] = copy;
  j->argv[j->argc] = NULL;
  return true;
}

static bool add_path(job *j, const char *file) {
  char *p = path_in(j->work, file);
  bool ok = p && add_arg(j, p);
  free(p);
  return ok;
}

/* An input file of the link (path copied). */
static bool add_file(job *j, const char *path) {
  if (j->nfiles == j->cap) {
    int ncap = j->cap ? j->cap * 2 : 16;
    char **grown = realloc(j->files, sizeof(char *) * (size_t)ncap);
    if (!grown) return false;
    j->files = grown, j->cap = ncap;
  }
  return (j->files[j->nfiles] = strdup(path)) && ++j->nfiles;
}

/* ------------------------------------------------------------ pieces */

static loom_status write_kernels(job *j) {
  const lm_plan *plan = j->l->p->plan;
  for (int i = 0; i < plan->nsteps; i++) {
    void *obj = NULL;
    size_t len = 0;
    const lm_step *s = &plan->steps[i];
    if ((s->kind != LM_STEP_KERNEL && s->kind != LM_STEP_GEMM) ||
        (s->kind == LM_STEP_KERNEL && s->outer == 0))
      continue; /* library steps are C in the wrapper; an empty kernel never runs */
    loom_status st = s->kind == LM_STEP_KERNEL
                         ? lm_kernel_object(&j->l->kernel[i], j->l->symbol[i], &obj, &len)
                         : lm_gemm_object(&j->l->tile[i], j->l->symbol[i], &obj, &len);
    if (st != LOOM_OK) return st;
    char file[48];
    snprintf(file, sizeof file, "%s.o", j->l->symbol[i]);
    char *path = path_in(j->work, file);
    struct stat sb;
    bool seen = path && stat(path, &sb) == 0; /* the same kernel in another step */
    if (!path)
      st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    else if (!seen && (st = write_file(path, obj, len, NULL, 0)) == LOOM_OK && !add_file(j, path))
      st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    free(path);
    free(obj);
    if (st != LOOM_OK) return st;
  }
  return LOOM_OK;
}

/* path as the inside of an assembler string: '\\' and '"' escaped. */
static void assembler_string(const char *path, char *out, size_t cap) {
  size_t n = 0;
  for (const char *c = path; *c && n + 3 < cap; c++) {
    if (*c == '\\' || *c == '"') out[n++] = '\\';
    out[n++] = *c;
  }
  out[n] = 0;
}

/* The weights, each at its layout offset, in one blob. */
static unsigned char *weights_blob(const lm_export_layout *l) {
  unsigned char *blob = calloc((size_t)l->weight_bytes + 1, 1);
  if (!blob) return NULL;
  for (int pos = 0; pos < l->p->n; pos++) {
    const lm_node *n = l->p->nodes[pos];
    size_t bytes = (size_t)lm_shape_numel(&n->shape) * loom_dtype_size(n->dtype);
    if (l->weight_off[pos] >= 0 && bytes) memcpy(blob + l->weight_off[pos], n->data, bytes);
  }
  return blob;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static loom_status write_weights(job *j) {
  const lm_export_layout *l = j->l;
  unsigned char *blob = weights_blob(l);
  if (!blob)
    return lm_fail(LOOM_ERR_OOM, OP ": out of memory for %lld bytes of weights",
                   (long long)l->weight_bytes);
  loom_status st;
  if (l->embed) {
    char *bin = path_in(j->work, "weights.bin"), *asm_path = path_in(j->work, "weights.S");
    char text[4600], quoted[2 * 4200];
    if (bin) assembler_string(bin, quoted, sizeof quoted);
    int n = bin ? snprintf(text, sizeof text,
                           "/* lib%s.so's weights, generated by loom. */\n"
                           "  .section .rodata.%s_weights,\"a\",@progbits\n"
                           "  .balign %d\n  .globl %s_weights_blob\n  .hidden %s_weights_blob\n"
                           "%s_weights_blob:\n  .incbin \"%s\"\n  .byte 0\n"
                           "  .section .note.GNU-stack,\"\",@progbits\n",
                           l->name, l->name, LM_EXPORT_ALIGN, l->name, l->name, l->name, quoted)
                : -1;
    if (!bin || !asm_path || n < 0 || (size_t)n >= sizeof text)
      st = lm_fail(LOOM_ERR_IO, OP ": cannot name the weights' files in %s", j->work);
    else if ((st = write_file(bin, blob, (size_t)l->weight_bytes, NULL, 0)) == LOOM_OK &&
             (st = write_file(asm_path, text, (size_t)n, NULL, 0)) == LOOM_OK &&
             !add_file(j, asm_path))
      st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    free(bin);
    free(asm_path);
  } else {
    unsigned char head[LM_EXPORT_WEIGHTS_HEADER] = {0};
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64: the wrapper checks it without a library */
    for (int64_t i = 0; i < l->weight_bytes; i++) h = (h ^ blob[i]) * 1099511628211ull;
    memcpy(head, LM_EXPORT_WEIGHTS_MAGIC, 8);
    put_u64(head + 8, (uint64_t)l->weight_bytes);
    put_u64(head + 16, h);
    char file[80];
    snprintf(file, sizeof file, "%s.weights", l->name);
    char *path = path_in(j->work, file);
    st = path ? write_file(path, head, sizeof head, blob, (size_t)l->weight_bytes)
              : lm_fail(LOOM_ERR_OOM, OP ": out of memory");
    free(path);
  }
  free(blob);
  return st;
}

/* file from text when given, else from writer. */
static loom_status write_text(job *j, const char *file,
                              void (*writer)(const lm_export_layout *, FILE *), const char *text) {
  char *path = path_in(j->work, file);
  FILE *f = path ? fopen(path, "w") : NULL;
  loom_status st = LOOM_OK;
  if (!f) {
    st = lm_fail(LOOM_ERR_IO, OP ": cannot write %s/%s", j->work, file);
  } else {
    if (text)
      fputs(text, f);
    else
      writer(j->l, f);
    if (ferror(f) | (fclose(f) != 0)) st = lm_fail(LOOM_ERR_IO, OP ": writing %s failed", path);
  }
  free(path);
  return st;
}

/* ------------------------------------------------------------ toolchain */

/* $CC split at spaces ("ccache gcc"), or cc. */
static bool add_compiler(job *j) {
  const char *cc = getenv("CC");
  if (!cc || !*cc) return add_arg(j, "cc");
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", cc);
  bool ok = true;
  for (char *save = NULL, *t = strtok_r(buf, " \t", &save); t && ok;
       t = strtok_r(NULL, " \t", &save))
    ok = add_arg(j, t);
  return ok && j->argc > 0;
}

/* The first lines of the compiler's output, for the error message. */
static void read_log(const char *path, char *out, size_t len) {
  out[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(out, 1, len - 1, f);
  out[n] = 0;
  fclose(f);
}

/* Runs argv (NULL-terminated) with its output in <work>/cc.log. */
static loom_status run_compiler(job *j, char **argv) {
  char *log = path_in(j->work, "cc.log");
  if (!log) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  loom_status st = LOOM_OK;
  int status = 0;
  if (rc != 0) {
    st = lm_fail(LOOM_ERR_IO, OP ": no C compiler to link with: '%s': %s (install gcc, or set CC)",
                 argv[0], strerror(rc));
  } else if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char out[1024];
    read_log(log, out, sizeof out);
    st = lm_fail(LOOM_ERR_COMPILE, OP ": '%s' failed (status %d) linking lib%s.so: %s", argv[0],
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, j->l->name, out);
  }
  free(log);
  return st;
}

static loom_status link_library(job *j) {
  const lm_export_layout *l = j->l;
  char lib[96], src[80], soname[128], script[4200];
  snprintf(lib, sizeof lib, "lib%s.so", l->name);
  snprintf(src, sizeof src, "%s_model.c", l->name);
  /* -Xlinker passes each argument whole: a ',' in a path would split -Wl's */
  snprintf(soname, sizeof soname, "-soname=%s", lib);
  snprintf(script, sizeof script, "--version-script=%s/exports.map", j->work);
  /* the fused attention kernel's loops need -O3's unrolling and
   * vectorization: at -O2 its backward runs 1.25x slower (sort's key loops,
   * scan's and check's are compiled at -O3 in libloom too); and libloom compiles it with
   * -ffp-contract=fast (CMakeLists.txt), which clang and ISO C modes do not
   * default to: without it, an export's attention rounds otherwise */
  bool ok = add_compiler(j) && add_arg(j, "-shared") && add_arg(j, "-fPIC") &&
            add_arg(j, l->library_kernels ? "-O3" : "-O2") &&
            (!l->contract || add_arg(j, "-ffp-contract=fast")) && add_arg(j, "-D_GNU_SOURCE") &&
            add_arg(j, "-I") && add_arg(j, j->work) && add_arg(j, "-o") && add_path(j, lib) &&
            add_path(j, src);
  int head = j->argc;
  ok = ok && add_arg(j, "-Xlinker") && add_arg(j, script) && add_arg(j, "-Xlinker") &&
       add_arg(j, soname) && add_arg(j, "-Wl,-z,noexecstack") && add_arg(j, "-lm") &&
       add_arg(j, "-lpthread") && (l->embed || add_arg(j, "-ldl"));
  char **argv = ok ? malloc(sizeof(char *) * (size_t)(j->argc + j->nfiles + 1)) : NULL;
  if (!argv) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  int n = 0; /* compiler and flags, the wrapper, the objects, the libraries */
  for (int i = 0; i < head; i++) argv[n++] = j->argv[i];
  for (int i = 0; i < j->nfiles; i++) argv[n++] = j->files[i];
  for (int i = head; i < j->argc; i++) argv[n++] = j->argv[i];
  argv[n] = NULL;
  loom_status st = run_compiler(j, argv);
  free(argv);
  return st;
}

/* The linked library defines what it must (a compiler that took a path for
 * an option once made one without <name>_run and reported success). */
static loom_status check_library(job *j, const char *lib) {
  char *path = path_in(j->work, lib);
  if (!path) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  loom_status st = LOOM_OK;
  if (!h) {
    const char *why = dlerror();
    st = lm_fail(LOOM_ERR_COMPILE, OP ": the linked %s does not load: %s", lib, why ? why : "");
  }
  const char *names[2] = {j->l->generic ? "_run_dims" : "_run", "_status_string"};
  for (int i = 0; i < 2 && h && st == LOOM_OK; i++) {
    char sym[96];
    snprintf(sym, sizeof sym, "%s%s", j->l->name, names[i]);
    if (!dlsym(h, sym))
      st = lm_fail(LOOM_ERR_COMPILE, OP ": the linked %s does not define %s", lib, sym);
  }
  if (h) dlclose(h);
  free(path);
  return st;
}

/* ------------------------------------------------------------ files */

static loom_status move_into_place(job *j, const char *file) {
  char *from = path_in(j->work, file), *to = path_in(j->dir, file);
  loom_status st = LOOM_OK;
  if (!from || !to)
    st = lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  else if (rename(from, to) != 0)
    st = lm_fail(LOOM_ERR_IO, OP ": cannot move %s to %s: %s", from, to, strerror(errno));
  free(from);
  free(to);
  return st;
}

static void remove_work(job *j) {
  if (lm_env_flag("LOOM_EXPORT_KEEP")) {
    fprintf(stderr, "loom: export files kept in %s\n", j->work);
    return;
  }
  DIR *d = opendir(j->work);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char *p = path_in(j->work, e->d_name);
        if (p) unlink(p);
        free(p);
      }
    closedir(d);
  }
  rmdir(j->work);
}

static loom_status check_args(const loom_program *p, const char *dir, const char *name) {
  if (!p || !dir || !name) return lm_fail(LOOM_ERR_NULL, OP ": program, dir or name is NULL");
  if (p->device.type != LOOM_DEVICE_CPU)
    return lm_fail(LOOM_ERR_DEVICE,
                   OP ": the program runs on cuda:%d; an export is CPU code: compile the program "
                      "from CPU tensors to export it",
                   p->device.index);
  if (!lm_is_name(name, strlen(name)))
    return lm_fail(LOOM_ERR_VALUE,
                   OP ": name '%.80s' is not a C identifier of 1-64 letters, digits and '_'", name);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return lm_fail(LOOM_ERR_IO, OP ": %s is not a directory", dir);
  if (strlen(dir) > 3000) return lm_fail(LOOM_ERR_VALUE, OP ": directory path too long");
  return LOOM_OK;
}

static int64_t embed_limit(void) {
  const char *v = getenv("LOOM_EXPORT_EMBED_LIMIT");
  char *end;
  long long n = v ? strtoll(v, &end, 10) : -1;
  return v && *v && !*end && n >= 0 ? (int64_t)n : LM_EXPORT_EMBED_LIMIT;
}

static loom_status build(job *j, const char *header_text, const char *source_text) {
  const lm_export_layout *l = j->l;
  char header[80], src[80], lib[96], weights[80];
  snprintf(header, sizeof header, "%s.h", l->name);
  snprintf(src, sizeof src, "%s_model.c", l->name);
  snprintf(lib, sizeof lib, "lib%s.so", l->name);
  snprintf(weights, sizeof weights, "%s.weights", l->name);
  loom_status st;
  if ((st = write_kernels(j)) != LOOM_OK || (st = write_weights(j)) != LOOM_OK ||
      (st = write_text(j, header, lm_export_write_header, header_text)) != LOOM_OK ||
      (st = write_text(j, src, lm_export_write_source, source_text)) != LOOM_OK ||
      (st = write_text(j, "exports.map", lm_export_write_version_script, NULL)) != LOOM_OK ||
      (st = link_library(j)) != LOOM_OK || (st = check_library(j, lib)) != LOOM_OK)
    return st;
  if (!l->embed && (st = move_into_place(j, weights)) != LOOM_OK) return st;
  if ((st = move_into_place(j, header)) != LOOM_OK) return st;
  return move_into_place(j, lib);
}

loom_status lm_export_build(const lm_export_layout *l, const char *dir, const char *header_text,
                            const char *source_text) {
  job *j = calloc(1, sizeof *j);
  if (!j) return lm_fail(LOOM_ERR_OOM, OP ": out of memory");
  j->l = l;
  /* every path handed to the compiler is absolute, so none starts with '-' */
  char *absolute = realpath(dir, NULL);
  j->dir = absolute;
  snprintf(j->work, sizeof j->work, "%s/.loom-export-XXXXXX", absolute ? absolute : dir);
  loom_status st;
  if (!absolute) {
    st = lm_fail(LOOM_ERR_IO, OP ": cannot resolve %s: %s", dir, strerror(errno));
  } else if (!mkdtemp(j->work)) {
    st = lm_fail(LOOM_ERR_IO, OP ": cannot create a folder in %s: %s", dir, strerror(errno));
  } else {
    st = build(j, header_text, source_text);
    remove_work(j);
  }
  for (int i = 0; i < j->argc; i++) free(j->argv[i]);
  for (int i = 0; i < j->nfiles; i++) free(j->files[i]);
  free(j->files);
  free(j);
  free(absolute);
  return st;
}

loom_status loom_program_export(const loom_program *p, const char *dir, const char *name) {
  loom_status st = check_args(p, dir, name);
  if (st != LOOM_OK) return st;
  for (int i = 0; i < p->plan->nsteps; i++)
    if (p->plan->steps[i].kind == LM_STEP_COLLECTIVE)
      return lm_fail(LOOM_ERR_VALUE,
                     OP ": the program runs %s (step %d); an exported library does not run "
                        "collectives across processes",
                     lm_op_name(p->plan->steps[i].coll.op), i);
  if (p->nsym > 0) return lm_export_symbolic(p, dir, name, embed_limit());
  lm_export_layout layout;
  if ((st = lm_export_layout_make(&layout, p, name, embed_limit())) == LOOM_OK)
    st = lm_export_build(&layout, dir, NULL, NULL);
  lm_export_layout_free(&layout);
  return st;
}
