/* Processes working together (loom_dist_*): MPI through the plugin
 * libloom_mpi.so (runtime/mpi/loom_mpi.h), opened at run time, and the
 * collective steps of realized graphs and programs.
 *
 * State (docs/global-state.md lists it): `dist`, guarded by dist_lock; a
 * program holds coll_lock from its first collective until its last one
 * completes (lm_dist_begin/end), so that the collectives of two threads of
 * one process never interleave (every rank must issue them in one order). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda.h"
#include "runtime/dist.h"
#include "runtime/mpi/loom_mpi.h"
#include "runtime/runtime.h"

#define DEFAULT_TIMEOUT_S 60.0

static pthread_mutex_t dist_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t coll_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool opened; /* the plugin was looked for: api or why_not is set */
  void *lib;
  const lm_mpi_api *api;
  char path[4096];
  char why_not[512];
  char about[512]; /* the MPI library's version and the plugin's path */
  bool initialized, finalized;
  char broken[512]; /* a collective failed: why (later ones are refused) */
  int rank, size;
  double timeout_s; /* loom_dist_set_timeout's, else set by loom_dist_init */
} dist = {.size = 1};

/* ------------------------------------------------------------ the plugin */

static bool try_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(dist.why_not, sizeof dist.why_not, "%s", why ? why : "dlopen failed");
    return false;
  }
  lm_mpi_api_fn get = (lm_mpi_api_fn)(uintptr_t)dlsym(h, LM_MPI_API_SYMBOL);
  const lm_mpi_api *api = get ? get() : NULL;
  if (!api || api->abi != LM_MPI_ABI) {
    snprintf(dist.why_not, sizeof dist.why_not, "%s is not a loom MPI plugin of ABI %d", path,
             LM_MPI_ABI);
    dlclose(h);
    return false;
  }
  dist.lib = h, dist.api = api;
  snprintf(dist.path, sizeof dist.path, "%s", path);
  return true;
}

/* $LOOM_MPI_PLUGIN, else libloom_mpi.so beside the object holding loom (the
 * shared library, or a program linking it statically), else the loader's
 * search path. Under dist_lock. */
static void open_plugin(void) {
  if (dist.opened) return;
  dist.opened = true;
  const char *env = getenv("LOOM_MPI_PLUGIN");
  if (env && *env) {
    if (!try_open(env)) {
      char why[sizeof dist.why_not];
      snprintf(why, sizeof why, "%s", dist.why_not);
      snprintf(dist.why_not, sizeof dist.why_not, "LOOM_MPI_PLUGIN=%.200s: %.280s", env, why);
    }
    return;
  }
  Dl_info info;
  if (dladdr((void *)&loom_dist_init, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    char path[4096];
    int dirlen = slash ? (int)(slash - info.dli_fname + 1) : 0;
    snprintf(path, sizeof path, "%.*slibloom_mpi.so", dirlen, info.dli_fname);
    if (try_open(path)) return;
  }
  if (try_open("libloom_mpi.so")) return;
  char why[sizeof dist.why_not];
  snprintf(why, sizeof why, "%s", dist.why_not);
  snprintf(dist.why_not, sizeof dist.why_not,
           "no libloom_mpi.so (loom built without MPI, or it is not beside libloom; "
           "LOOM_MPI_PLUGIN names it): %.380s",
           why);
}

bool loom_dist_available(const char **about) {
  pthread_mutex_lock(&dist_lock);
  open_plugin();
  bool ok = dist.api != NULL;
  if (ok && !dist.about[0])
    snprintf(dist.about, sizeof dist.about, "%.200s (%.300s)", dist.api->version(), dist.path);
  pthread_mutex_unlock(&dist_lock);
  if (about) *about = ok ? dist.about : dist.why_not; /* fixed once written */
  return ok;
}

/* ------------------------------------------------------------ the world */

/* $LOOM_DIST_TIMEOUT, else the default: read once, by loom_dist_init. */
static double env_timeout_s(void) {
  const char *env = getenv("LOOM_DIST_TIMEOUT");
  char *end;
  double v = env ? strtod(env, &end) : 0;
  return env && *env && !*end && v > 0 && v <= 1e9 ? v : DEFAULT_TIMEOUT_S;
}

loom_status loom_dist_init(int *argc, char ***argv) {
  const char *op = "loom_dist_init";
  pthread_mutex_lock(&dist_lock);
  loom_status st = LOOM_OK;
  char err[512] = "";
  open_plugin();
  if (dist.initialized) {
    st = lm_fail(LOOM_ERR_DIST, "%s: already called (rank %d of %d)", op, dist.rank, dist.size);
  } else if (dist.finalized) {
    st = lm_fail(LOOM_ERR_DIST, "%s: MPI was finalized; it cannot start again", op);
  } else if (!dist.api) {
    st = lm_fail(LOOM_ERR_DIST, "%s: %s", op, dist.why_not);
  } else if (dist.api->init(argc, argv, &dist.rank, &dist.size, err, sizeof err) != LM_MPI_OK) {
    st = lm_fail(LOOM_ERR_DIST, "%s: %s", op, err);
  } else {
    dist.initialized = true;
    if (!(dist.timeout_s > 0)) dist.timeout_s = env_timeout_s(); /* loom_dist_set_timeout's wins */
  }
  pthread_mutex_unlock(&dist_lock);
  return st;
}

loom_status loom_dist_finalize(void) {
  pthread_mutex_lock(&dist_lock);
  loom_status st = LOOM_OK;
  char err[512] = "";
  if (!dist.initialized) {
    st = lm_fail(LOOM_ERR_DIST, "loom_dist_finalize: loom_dist_init was not called");
  } else {
    pthread_mutex_lock(&coll_lock); /* no collective is running */
    if (dist.api->finalize(err, sizeof err) != LM_MPI_OK)
      st = lm_fail(LOOM_ERR_DIST, "loom_dist_finalize: %s", err);
    dist.initialized = false;
    dist.finalized = true;
    dist.rank = 0, dist.size = 1;
    pthread_mutex_unlock(&coll_lock);
  }
  pthread_mutex_unlock(&dist_lock);
  return st;
}

int loom_dist_rank(void) {
  pthread_mutex_lock(&dist_lock);
  int r = dist.rank;
  pthread_mutex_unlock(&dist_lock);
  return r;
}

bool loom_dist_initialized(void) {
  pthread_mutex_lock(&dist_lock);
  bool on = dist.initialized;
  pthread_mutex_unlock(&dist_lock);
  return on;
}

int loom_dist_size(void) {
  pthread_mutex_lock(&dist_lock);
  int n = dist.size;
  pthread_mutex_unlock(&dist_lock);
  return n;
}

loom_status loom_dist_set_timeout(double seconds) {
  if (!(seconds > 0) || seconds > 1e9)
    return lm_fail(LOOM_ERR_VALUE, "loom_dist_set_timeout: %g seconds is not in (0, 1e9]", seconds);
  pthread_mutex_lock(&dist_lock);
  dist.timeout_s = seconds;
  pthread_mutex_unlock(&dist_lock);
  return LOOM_OK;
}

loom_status lm_dist_world(const char *op, int *world) {
  pthread_mutex_lock(&dist_lock);
  loom_status st = LOOM_OK;
  if (!dist.initialized)
    st = lm_fail(LOOM_ERR_DIST,
                 "%s: call loom_dist_init first (a process started alone is a world of one)", op);
  *world = dist.size;
  pthread_mutex_unlock(&dist_lock);
  return st;
}

/* ------------------------------------------------------------ collectives */

/* Whether collective op (of a world of `world` ranks, or -1: not checked) may
 * run now: MPI started and no collective failed. The timeout and this rank. */
static loom_status ready(lm_op op, int world, double *timeout, int *rank) {
  const char *name = lm_op_name(op);
  pthread_mutex_lock(&dist_lock);
  loom_status st = LOOM_OK;
  if (!dist.initialized)
    st = lm_fail(LOOM_ERR_DIST, "loom_%s: MPI is not initialized (loom_dist_finalize was called?)",
                 name);
  else if (dist.broken[0])
    st = lm_fail(LOOM_ERR_DIST, "loom_%s: an earlier collective failed (%s)", name, dist.broken);
  else if (world >= 0 && dist.size != world)
    st = lm_fail(LOOM_ERR_DIST, "loom_%s: recorded for %d ranks, the world has %d", name, world,
                 dist.size);
  *timeout = dist.timeout_s;
  *rank = dist.rank;
  pthread_mutex_unlock(&dist_lock);
  return st;
}

/* Collective op failed on this rank: later ones are refused (MPI cannot take
 * a started collective back). */
static void break_world(lm_op op, int rank, const char *err) {
  pthread_mutex_lock(&dist_lock);
  snprintf(dist.broken, sizeof dist.broken, "loom_%s on rank %d: %.400s", lm_op_name(op), rank,
           err);
  pthread_mutex_unlock(&dist_lock);
}

static uint64_t fnv(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)((uint64_t)v >> (8 * i))) * 1099511628211ull;
  return h;
}

loom_status lm_dist_check_plan(const lm_plan *p, lm_op op, int path) {
  uint64_t sig = fnv(14695981039346656037ull, path);
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const lm_collective *c = &p->steps[i].coll;
    if (p->steps[i].kind != LM_STEP_COLLECTIVE) continue;
    n++;
    const int64_t fields[] = {c->op,   c->dtype, c->count, c->reduce,
                              c->root, c->world, c->nin,   c->outer};
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) sig = fnv(sig, fields[k]);
  }
  double timeout;
  int rank;
  loom_status st = ready(op, -1, &timeout, &rank);
  if (st != LOOM_OK) return st;
  /* the largest of the signatures and of their complements: both are this
   * rank's own exactly when every rank's is the same */
  int64_t mine[2] = {(int64_t)sig, (int64_t)~sig}, most[2];
  char err[512] = "";
  lm_mpi_request *q;
  int rc = dist.api->all_reduce_start(mine, most, 2, LOOM_I64, LM_MPI_MAX, &q, err, sizeof err);
  if (rc == LM_MPI_OK) rc = dist.api->wait(q, timeout, err, sizeof err);
  if (rc == LM_MPI_OK && most[0] == mine[0] && most[1] == mine[1]) return LOOM_OK;
  if (rc == LM_MPI_OK)
    snprintf(err, sizeof err,
             "the ranks run different collectives: this rank's program makes %d (signature "
             "%016llx, %s), another rank's differ in op, dtype, size, reduction or root, or "
             "run them otherwise (on the CPU, through NCCL or through the host); every rank "
             "must run the same graph with the same shapes, on the same kind of device",
             n, (unsigned long long)sig,
             path == LM_DIST_NCCL   ? "through NCCL"
             : path == LM_DIST_HOST ? "device tensors through the host"
                                    : "on the CPU");
  break_world(op, rank, err);
  return lm_fail(LOOM_ERR_DIST, "loom_%s on rank %d: %s", lm_op_name(op), rank, err);
}

/* Every rank's [outer, inner] into out's [outer, world * inner]. */
static int gather(const lm_collective *c, const void *in, void *out, double timeout, char *err,
                  size_t len) {
  size_t es = loom_dtype_size(c->dtype);
  int64_t bytes = c->count * (int64_t)es;
  if (c->outer == 1) return dist.api->all_gather(in, out, bytes, timeout, err, len);
  char *all = malloc((size_t)(bytes * c->world) + 1);
  if (!all) {
    snprintf(err, len, "out of memory for %lld gathered bytes", (long long)(bytes * c->world));
    return LM_MPI_FAILED;
  }
  int st = dist.api->all_gather(in, all, bytes, timeout, err, len);
  size_t row = (size_t)c->inner * es;
  for (int64_t o = 0; st == LM_MPI_OK && o < c->outer; o++)
    for (int r = 0; r < c->world; r++)
      memcpy((char *)out + ((size_t)o * (size_t)c->world + (size_t)r) * row,
             all + (size_t)r * (size_t)bytes + (size_t)o * row, row);
  free(all);
  return st;
}

/* "loom_all_reduce on rank 1 of 2 (collective 2 of 3 of its program, 1024 f32
 * values): why", and later collectives refused. */
static loom_status failed(const lm_collective *c, int rank, const char *err) {
  break_world(c->op, rank, err);
  return lm_fail(
      LOOM_ERR_DIST,
      "loom_%s on rank %d of %d (collective %d of %d of its program, %lld %s values): %s",
      lm_op_name(c->op), rank, c->world, c->number, c->of, (long long)c->count,
      loom_dtype_name(c->dtype), err);
}

void lm_dist_begin(void) { pthread_mutex_lock(&coll_lock); }

void lm_dist_end(void) { pthread_mutex_unlock(&coll_lock); }

loom_status lm_dist_start(const lm_collective *c, const void *const *bufs, void *out,
                          lm_dist_pending *q) {
  memset(q, 0, sizeof *q);
  q->c = c, q->out = out;
  loom_status st = ready(c->op, c->world, &q->timeout, &q->rank);
  if (st != LOOM_OK) return st;
  const void *in = bufs[c->in_pos[0]];
  if (c->nin > 1) { /* joined into the output, reduced in place */
    size_t es = loom_dtype_size(c->dtype), at = 0;
    for (int k = 0; k < c->nin; k++) {
      size_t bytes = (size_t)c->in_count[k] * es;
      if (bytes) memcpy((char *)out + at, bufs[c->in_pos[k]], bytes);
      at += bytes;
    }
    in = out;
  }
  void *into = out;
  loom_dtype dtype = c->dtype;
  if (lm_dtype_is_half(dtype)) { /* BF16, F16: widened, combined in F32, rounded back */
    q->wide = malloc(sizeof(float) * (size_t)(c->count ? c->count : 1));
    if (!q->wide)
      return lm_fail(LOOM_ERR_OOM, "loom_%s: out of memory widening %lld values", lm_op_name(c->op),
                     (long long)c->count);
    for (int64_t i = 0; i < c->count; i++)
      q->wide[i] = (float)lm_dtype_load_double(dtype, (const uint16_t *)in + i);
    in = into = q->wide, dtype = LOOM_F32;
  }
  lm_mpi_op op = c->reduce == LOOM_REDUCE_MAX   ? LM_MPI_MAX
                 : c->reduce == LOOM_REDUCE_MIN ? LM_MPI_MIN
                                                : LM_MPI_SUM;
  char err[512] = "";
  if (dist.api->all_reduce_start(in, into, c->count, dtype, op, &q->request, err, sizeof err) ==
      LM_MPI_OK)
    return LOOM_OK;
  free(q->wide);
  q->wide = NULL;
  return failed(c, q->rank, err);
}

loom_status lm_dist_poll(lm_dist_pending *q) {
  if (!q->request) return LOOM_OK;
  char err[512] = "";
  int done = 0;
  if (dist.api->test(q->request, &done, err, sizeof err) != LM_MPI_OK) {
    q->request = NULL;
    free(q->wide);
    q->wide = NULL;
    q->broken = true;
    return failed(q->c, q->rank, err);
  }
  if (done) q->request = NULL;
  return LOOM_OK;
}

loom_status lm_dist_finish(lm_dist_pending *q) {
  const lm_collective *c = q->c;
  char err[512] = "";
  loom_status st = LOOM_OK;
  pthread_mutex_lock(&dist_lock);
  bool broken = dist.broken[0] != 0;
  pthread_mutex_unlock(&dist_lock);
  if (q->broken) {
    st = LOOM_ERR_DIST;              /* reported by lm_dist_poll */
  } else if (broken && q->request) { /* reported by the collective that failed: not waited for */
    dist.api->wait(q->request, 0, err, sizeof err);
    st = LOOM_ERR_DIST;
  } else if (q->request && dist.api->wait(q->request, q->timeout, err, sizeof err) != LM_MPI_OK) {
    st = failed(c, q->rank, err);
  } else if (q->wide) {
    float scale = c->reduce == LOOM_REDUCE_MEAN ? 1.0f / (float)c->world : 1.0f;
    for (int64_t i = 0; i < c->count; i++)
      lm_dtype_store_double(c->dtype, (uint16_t *)q->out + i, q->wide[i] * scale);
  } else if (c->reduce == LOOM_REDUCE_MEAN && c->dtype == LOOM_F64) { /* floats (ir/verify.c) */
    for (int64_t i = 0; i < c->count; i++) ((double *)q->out)[i] /= c->world;
  } else if (c->reduce == LOOM_REDUCE_MEAN) {
    for (int64_t i = 0; i < c->count; i++) ((float *)q->out)[i] /= (float)c->world;
  }
  q->request = NULL;
  free(q->wide);
  q->wide = NULL;
  return st;
}

bool loom_dist_nccl_available(const char **about) { return lm_nccl_available(about); }

int lm_dist_device_path(void) { return lm_nccl_available(NULL) ? LM_DIST_NCCL : LM_DIST_HOST; }

loom_status lm_dist_run_nccl(const lm_collective *c, int dev, const void *const *bufs, void *out) {
  double timeout;
  int rank;
  loom_status st = ready(c->op, c->world, &timeout, &rank);
  if (st != LOOM_OK) return st;
  char err[512] = "";
  bool ok = true;
  if (!lm_nccl_has_comm(dev, c->world)) { /* rank 0's id, over MPI */
    unsigned char id[LM_NCCL_ID_BYTES] = {0};
    if (rank == 0) ok = lm_nccl_make_id(id, err, sizeof err);
    /* (rank 0 sends zeros when it failed: the others then fail to join, as it does) */
    int rc = dist.api->broadcast(id, LM_NCCL_ID_BYTES, 0, timeout, err, sizeof err);
    ok = ok && rc == LM_MPI_OK && lm_nccl_join(dev, rank, c->world, id, err, sizeof err);
  }
  if (ok) ok = lm_nccl_run(dev, c, bufs, out, timeout, err, sizeof err);
  return ok ? LOOM_OK : failed(c, rank, err);
}

loom_status lm_dist_run(const lm_collective *c, const void *const *bufs, void *out) {
  if (c->op == LM_ALL_REDUCE) {
    lm_dist_pending q;
    loom_status st = lm_dist_start(c, bufs, out, &q);
    return st == LOOM_OK ? lm_dist_finish(&q) : st;
  }
  double timeout;
  int rank;
  loom_status st = ready(c->op, c->world, &timeout, &rank);
  if (st != LOOM_OK) return st;
  char err[512] = "";
  int rc;
  const void *in = bufs[c->in_pos[0]];
  if (c->op == LM_BROADCAST) {
    int64_t bytes = c->count * (int64_t)loom_dtype_size(c->dtype);
    if (bytes) memcpy(out, in, (size_t)bytes);
    rc = dist.api->broadcast(out, bytes, c->root, timeout, err, sizeof err);
  } else {
    rc = gather(c, in, out, timeout, err, sizeof err);
  }
  return rc == LM_MPI_OK ? LOOM_OK : failed(c, rank, err);
}
