/* In-memory datasets, batch loaders with deterministic shuffling, and the
 * running mean of losses (TorchLean's trainCycle / meanLoss helpers). */
#include <stdlib.h>
#include <string.h>

#include "base/philox.h"
#include "frontend/frontend.h"

typedef struct host_array {
  void *data;
  loom_shape shape;
  loom_dtype dtype;
  loom_device device; /* where the tensor was: batches go back there */
  size_t row_bytes;
} host_array;

struct loom_dataset {
  host_array x, y;
  int64_t n;
};

struct loom_loader {
  const loom_dataset *d;
  int64_t batch, next, epoch;
  bool shuffle, drop_last;
  loom_key key;
  int64_t *order; /* this epoch's rows: count of them (room for the padded epoch) */
  int64_t count;
  int rank, ranks; /* loom_loader_shard: every ranks-th row from rank */
};

static loom_status to_host(const char *op, loom_tensor *t, host_array *h) {
  loom_status st = lm_check_handle(op, t);
  if (st) return st;
  h->shape = t->node->shape;
  h->dtype = t->node->dtype;
  h->device = t->node->device;
  if (h->shape.ndim < 1) return lm_fail(LOOM_ERR_SHAPE, "%s: tensors need a batch dim", op);
  size_t bytes = (size_t)lm_shape_numel(&h->shape) * loom_dtype_size(h->dtype);
  h->row_bytes = h->shape.dim[0] ? bytes / (size_t)h->shape.dim[0] : 0;
  h->data = malloc(bytes ? bytes : 1);
  if (!h->data) return lm_fail(LOOM_ERR_OOM, "%s: out of memory for %zu bytes", op, bytes);
  return loom_copy_to_host(t, h->data, bytes);
}

loom_dataset *loom_dataset_new(loom_tensor *x, loom_tensor *y) {
  loom_dataset *d = calloc(1, sizeof *d);
  if (!d) {
    lm_fail(LOOM_ERR_OOM, "loom_dataset_new: out of memory");
    return NULL;
  }
  loom_status st = to_host("loom_dataset_new", x, &d->x);
  if (!st) st = to_host("loom_dataset_new", y, &d->y);
  if (!st && d->x.shape.dim[0] != d->y.shape.dim[0])
    st = lm_fail(LOOM_ERR_SHAPE, "loom_dataset_new: %lld inputs but %lld targets",
                 (long long)d->x.shape.dim[0], (long long)d->y.shape.dim[0]);
  if (st) {
    loom_dataset_free(d);
    return NULL;
  }
  d->n = d->x.shape.dim[0];
  return d;
}

int64_t loom_dataset_len(const loom_dataset *d) { return d ? d->n : 0; }

void loom_dataset_free(loom_dataset *d) {
  if (!d) return;
  free(d->x.data);
  free(d->y.data);
  free(d);
}

/* Fisher-Yates with Philox draws: the order depends only on (key, epoch). */
static void shuffle(int64_t *order, int64_t n, loom_key key) {
  for (int64_t i = n - 1; i > 0; i--) {
    double u = lm_philox_uniform_f64(key.k, (uint64_t)i, 0);
    int64_t j = (int64_t)(u * (double)(i + 1));
    int64_t t = order[i];
    order[i] = order[j], order[j] = t;
  }
}

static void start_epoch(loom_loader *l) {
  int64_t n = l->d->n;
  for (int64_t i = 0; i < n; i++) l->order[i] = i;
  if (l->shuffle) shuffle(l->order, n, loom_key_fold(l->key, (uint64_t)l->epoch));
  l->count = n;
  if (l->ranks > 1 && n > 0) { /* padded by wrapping, then this rank's share */
    int64_t share = (n + l->ranks - 1) / l->ranks;
    int64_t *mine = l->order + n; /* the second half of the room */
    for (int64_t i = 0; i < share; i++) mine[i] = l->order[(i * l->ranks + l->rank) % n];
    memmove(l->order, mine, sizeof *mine * (size_t)share);
    l->count = share;
  }
  l->next = 0;
}

loom_loader *loom_loader_new(const loom_dataset *d, int64_t batch, bool shuffle_rows,
                             bool drop_last, loom_key key) {
  if (!d || batch <= 0) {
    lm_fail(d ? LOOM_ERR_VALUE : LOOM_ERR_NULL, "loom_loader_new: batch size %lld",
            (long long)batch);
    return NULL;
  }
  loom_loader *l = calloc(1, sizeof *l);
  if (l) l->order = malloc(sizeof(int64_t) * (size_t)(d->n ? 2 * d->n : 1)); /* shards: 2n */
  if (!l || !l->order) {
    if (l) free(l);
    lm_fail(LOOM_ERR_OOM, "loom_loader_new: out of memory");
    return NULL;
  }
  *l = (loom_loader){d, batch, 0, 0, shuffle_rows, drop_last, key, l->order, 0, 0, 1};
  start_epoch(l);
  return l;
}

loom_status loom_loader_shard(loom_loader *l, int rank, int ranks) {
  if (!l) return lm_fail(LOOM_ERR_NULL, "loom_loader_shard: loader is NULL");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return lm_fail(LOOM_ERR_VALUE, "loom_loader_shard: rank %d of %d ranks", rank, ranks);
  l->rank = rank, l->ranks = ranks;
  start_epoch(l);
  return LOOM_OK;
}

int64_t loom_loader_batches(const loom_loader *l) {
  if (!l) return 0;
  return l->drop_last ? l->count / l->batch : (l->count + l->batch - 1) / l->batch;
}

static loom_tensor *gather_rows(const host_array *h, const int64_t *rows, int64_t count) {
  loom_shape s = h->shape;
  s.dim[0] = count;
  char *buf = malloc(h->row_bytes * (size_t)(count ? count : 1));
  if (!buf) return lm_error(LOOM_ERR_OOM, "loom_loader_next: out of memory");
  for (int64_t i = 0; i < count; i++)
    memcpy(buf + (size_t)i * h->row_bytes, (const char *)h->data + (size_t)rows[i] * h->row_bytes,
           h->row_bytes);
  loom_tensor *t = loom_from_data(buf, s, h->dtype, h->device);
  free(buf);
  return t;
}

bool loom_loader_next(loom_loader *l, loom_tensor **x, loom_tensor **y) {
  if (!l || !x || !y) return false;
  int64_t left = l->count - l->next;
  if (left <= 0 || (l->drop_last && left < l->batch)) {
    l->epoch++;
    start_epoch(l);
    return false;
  }
  int64_t count = left < l->batch ? left : l->batch;
  *x = gather_rows(&l->d->x, l->order + l->next, count);
  *y = gather_rows(&l->d->y, l->order + l->next, count);
  l->next += count;
  return true;
}

void loom_loader_free(loom_loader *l) {
  if (!l) return;
  free(l->order);
  free(l);
}

void loom_mean_loss_add(loom_mean_loss *m, double loss, int64_t n) {
  if (!m || n <= 0) return;
  m->sum += loss * (double)n;
  m->count += n;
}

double loom_mean_loss_value(const loom_mean_loss *m) {
  return m && m->count ? m->sum / (double)m->count : 0.0;
}
