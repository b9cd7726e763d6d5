/* See disk_cache.h. Entry format (little-endian), one file per kernel:
 *   "LOOMKOBJ" | u32 format | u32 header size | u64 payload length |
 *   u64[2] key | u64[2] XXH3-128 of the payload | payload (an object file)
 * The directory is created 0700 and refused when another user could write
 * into it: its contents are code this process will run. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "backends/llvm/llvm_backend.h"
#include "base/atomic_file.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

#define MAGIC "LOOMKOBJ"
#define FORMAT 1u
#define HEADER 56u
#define SUFFIX ".lko"

/* The cap on the entries' total size (LOOM_CACHE_MAX_BYTES, read with the
 * directory) and this process's running estimate of that total (scanned at
 * the first store, then grown by each store; entries other processes add are
 * found by the scan a store past the cap makes). */
#define DEFAULT_MAX_BYTES ((uint64_t)1 << 30)
static uint64_t max_bytes = DEFAULT_MAX_BYTES;
static _Atomic uint64_t stored_estimate = UINT64_MAX; /* UINT64_MAX: not scanned yet */

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static char dir_path[4096]; /* set once, absolute; empty when the disk cache is off */
static int dir_fd = -1;     /* set once: the directory checked, held open */

static void warn_off(const char *path, const char *why) {
  fprintf(stderr,
          "loom: kernel cache directory %s is not usable (%s); caching kernels in "
          "memory only\n",
          path, why);
}

/* A store that failed (disk full, ulimit -f, permissions): the kernel is in
 * memory all the same; said once per process. */
static atomic_flag store_warned = ATOMIC_FLAG_INIT;

static void warn_store(const char *path) {
  int saved = errno;
  if (!atomic_flag_test_and_set(&store_warned))
    fprintf(stderr,
            "loom: cannot write the kernel cache entry %s (%s); kernels not stored stay in memory "
            "only\n",
            path, strerror(saved));
}

static bool make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int rc = mkdir(path, 0700);
    *p = '/';
    if (rc != 0 && errno != EEXIST) return false;
  }
  return mkdir(path, 0700) == 0 || errno == EEXIST;
}

/* Whether st may lie on the way to the cache (as ssh checks the way to a
 * user's keys): owned by root or this user, since an owner can rename what
 * the directory holds, and writable by group or others only when sticky
 * (/tmp), where no one renames another's entries. */
static bool safe_parent(const struct stat *st) {
  if (st->st_uid != 0 && st->st_uid != geteuid()) return false;
  return !(st->st_mode & 022) || (st->st_mode & S_ISVTX);
}

/* The resolved path's every parent, "/" first; the component that fails, or
 * NULL. */
static const char *unsafe_parent(const char *path, char *at, size_t len) {
  snprintf(at, len, "%s", path);
  for (char *slash = at; (slash = strchr(slash, '/'));) {
    char keep = slash[1];
    slash[1] = 0;
    struct stat st;
    bool ok = lstat(at, &st) == 0 && S_ISDIR(st.st_mode) && safe_parent(&st);
    slash[1] = keep;
    if (!ok) {
      slash[slash == at ? 1 : 0] = 0;
      return at;
    }
    slash++;
    if (!strchr(slash, '/')) break; /* the directory itself is checked by its caller */
  }
  return NULL;
}

static void read_max_bytes(void) {
  max_bytes = lm_env_count("LOOM_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES);
}

static void resolve_dir(void) {
  read_max_bytes();
  char path[4096];
  const char *env = getenv("LOOM_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  if (env && *env)
    snprintf(path, sizeof path, "%s", env);
  else if (xdg && *xdg)
    snprintf(path, sizeof path, "%s/loom", xdg);
  else if (home && *home)
    snprintf(path, sizeof path, "%s/.cache/loom", home);
  else
    return warn_off("(none)", "neither LOOM_CACHE_DIR, XDG_CACHE_HOME nor HOME is set");
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') path[--len] = 0;
  if (!make_dirs(path)) return warn_off(path, strerror(errno));
  /* resolved once, absolute: a later chdir() changes nothing */
  char *real = realpath(path, NULL), bad[4096];
  if (!real) return warn_off(path, strerror(errno));
  const char *parent = unsafe_parent(real, bad, sizeof bad);
  if (parent) {
    char why[4200];
    snprintf(why, sizeof why,
             "its parent %s is owned by another user, or writable by others and not sticky",
             parent);
    warn_off(real, why);
    free(real);
    return;
  }
  int fd = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    warn_off(real, fd >= 0 || errno == ENOTDIR ? "not a directory" : strerror(errno));
  } else if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    warn_off(real, "owned by another user or writable by group or others");
  } else if (faccessat(fd, ".", W_OK | X_OK, 0) != 0) {
    warn_off(real, strerror(errno));
  } else {
    snprintf(dir_path, sizeof dir_path, "%s", real);
    dir_fd = fd, fd = -1;
  }
  if (fd >= 0) close(fd);
  free(real);
}

const char *loom_cache_dir(void) {
  pthread_once(&dir_once, resolve_dir);
  return dir_path[0] ? dir_path : NULL;
}

const char *loom_target_id(void) { return lm_llvm_target_id(); }

lm_hash128 lm_disk_key_text(const char *ident) {
  char text[2048];
  int n = snprintf(text, sizeof text, "%s|loom-%s", ident, LOOM_VERSION_STRING);
  size_t len = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
  XXH128_hash_t h = XXH3_128bits(text, len);
  return (lm_hash128){h.low64, h.high64};
}

lm_hash128 lm_disk_key(uint64_t kernel_lo, uint64_t kernel_hi) {
  char ident[1536];
  snprintf(ident, sizeof ident, "%016llx%016llx|%s", (unsigned long long)kernel_hi,
           (unsigned long long)kernel_lo, lm_llvm_target_id());
  return lm_disk_key_text(ident);
}

/* An entry's name in the directory (entry_path: with the directory, for messages). */
static void entry_name(lm_hash128 key, char *buf, size_t len) {
  snprintf(buf, len, "%016llx%016llx" SUFFIX, (unsigned long long)key.hi,
           (unsigned long long)key.lo);
}

static void entry_path(lm_hash128 key, char *buf, size_t len) {
  char name[64];
  entry_name(key, name, sizeof name);
  snprintf(buf, len, "%s/%s", loom_cache_dir(), name);
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void make_header(unsigned char *h, lm_hash128 key, const void *payload, size_t len) {
  XXH128_hash_t ph = XXH3_128bits(payload, len);
  memcpy(h, MAGIC, 8);
  put_u32(h + 8, FORMAT);
  put_u32(h + 12, HEADER);
  put_u64(h + 16, len);
  put_u64(h + 24, key.lo);
  put_u64(h + 32, key.hi);
  put_u64(h + 40, ph.low64);
  put_u64(h + 48, ph.high64);
}

static bool valid(const unsigned char *data, size_t size, lm_hash128 key) {
  if (size < HEADER || memcmp(data, MAGIC, 8) != 0) return false;
  if (get_u32(data + 8) != FORMAT || get_u32(data + 12) != HEADER) return false;
  uint64_t len = get_u64(data + 16);
  if (len != size - HEADER) return false;
  if (get_u64(data + 24) != key.lo || get_u64(data + 32) != key.hi) return false;
  XXH128_hash_t ph = XXH3_128bits(data + HEADER, (size_t)len);
  return get_u64(data + 40) == ph.low64 && get_u64(data + 48) == ph.high64;
}

/* An entry's bytes, read through the directory held open: not a symbolic
 * link, a regular file of this user's that no one else may write (another
 * user's planted file is code this process would run). */
static unsigned char *read_file(const char *name, size_t *size) {
  int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return NULL;
  struct stat st;
  unsigned char *data = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022) &&
      st.st_size > 0 && st.st_size < (1 << 30))
    data = malloc((size_t)st.st_size);
  size_t got = 0;
  while (data && got < (size_t)st.st_size) {
    ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      free(data);
      data = NULL;
    } else {
      got += (size_t)r;
    }
  }
  close(fd);
  *size = got;
  return data;
}

void *lm_disk_load(lm_hash128 key, size_t *len) {
  if (!loom_cache_dir()) return NULL;
  char name[64];
  entry_name(key, name, sizeof name);
  size_t size = 0;
  unsigned char *data = read_file(name, &size);
  if (!data) return NULL;
  if (!valid(data, size, key)) {
    free(data);
    unlinkat(dir_fd, name, 0); /* corrupt, truncated or foreign: rebuilt by the caller */
    return NULL;
  }
  /* used now: its time is what the cap's eviction orders by */
  utimensat(dir_fd, name, NULL, AT_SYMLINK_NOFOLLOW);
  memmove(data, data + HEADER, size - HEADER);
  *len = size - HEADER;
  return data;
}

/* The held directory as a stream from its start (fdopendir takes a
 * duplicate: the held descriptor stays); NULL with errno set. */
static DIR *open_entries(void) {
  int fd = dup(dir_fd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d && fd >= 0) {
    int saved = errno;
    close(fd);
    errno = saved;
  }
  if (d) rewinddir(d);
  return d;
}

typedef struct aged_entry {
  char name[64];
  struct timespec used;
  uint64_t bytes;
} aged_entry;

static int least_recent_first(const void *a, const void *b) {
  const struct timespec *x = &((const aged_entry *)a)->used, *y = &((const aged_entry *)b)->used;
  if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
  return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

static bool is_entry(const char *name);

/* Every entry's size and last use; the total (UINT64_MAX when unreadable). */
static uint64_t scan_entries(aged_entry **out, size_t *count) {
  *out = NULL, *count = 0;
  DIR *d = open_entries();
  if (!d) return UINT64_MAX;
  size_t cap = 0;
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    struct stat st;
    if (!is_entry(e->d_name) || fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    total += (uint64_t)st.st_size;
    if (*count == cap) {
      size_t ncap = cap ? 2 * cap : 256;
      aged_entry *grown = realloc(*out, ncap * sizeof *grown);
      if (!grown) continue;
      *out = grown, cap = ncap;
    }
    aged_entry *a = &(*out)[(*count)++];
    memcpy(a->name, e->d_name, strlen(e->d_name) + 1); /* is_entry: 36 characters */
    a->used = st.st_mtim;
    a->bytes = (uint64_t)st.st_size;
  }
  closedir(d);
  return total;
}

/* After a store of `bytes`: past the cap, the least recently used entries go
 * until the total is under 90% of it (so that eviction is not every store). */
static void account_store(uint64_t bytes) {
  uint64_t estimate = atomic_load(&stored_estimate);
  if (estimate == UINT64_MAX) {
    aged_entry *all;
    size_t n;
    estimate = scan_entries(&all, &n);
    free(all);
    if (estimate == UINT64_MAX) return;
    atomic_store(&stored_estimate, estimate);
  } else {
    estimate = atomic_fetch_add(&stored_estimate, bytes) + bytes;
  }
  if (estimate <= max_bytes) return;
  aged_entry *all;
  size_t n;
  uint64_t total = scan_entries(&all, &n);
  if (total != UINT64_MAX) {
    qsort(all, n, sizeof *all, least_recent_first);
    for (size_t i = 0; i < n && total > max_bytes / 10 * 9; i++)
      if (unlinkat(dir_fd, all[i].name, 0) == 0) total -= all[i].bytes;
    atomic_store(&stored_estimate, total);
  }
  free(all);
}

void lm_disk_store(lm_hash128 key, const void *payload, size_t len) {
  if (!loom_cache_dir()) return;
  char path[4200], name[64];
  entry_path(key, path, sizeof path);
  entry_name(key, name, sizeof name);
  lm_atomic_file f;
  if (!lm_atomic_file_open_at(&f, dir_fd, name, 0600)) {
    warn_store(path);
    return;
  }
  unsigned char header[HEADER];
  make_header(header, key, payload, len);
  if (lm_write_all(f.fd, header, HEADER) && lm_write_all(f.fd, payload, len)) {
    if (!lm_atomic_file_commit(&f, false, NULL))
      warn_store(path); /* unsynced: a lost entry is rebuilt */
    else
      account_store(HEADER + len);
  } else {
    lm_atomic_file_abandon(&f);
    warn_store(path);
  }
}

void lm_disk_remove(lm_hash128 key) {
  if (!loom_cache_dir()) return;
  char name[64];
  entry_name(key, name, sizeof name);
  unlinkat(dir_fd, name, 0);
}

static bool is_entry(const char *name) {
  size_t n = strlen(name);
  return n == 32 + strlen(SUFFIX) && strcmp(name + 32, SUFFIX) == 0;
}

/* Visits entries; with `remove` set, deletes them (and stale temp files). */
static loom_status walk_entries(const char *op, loom_cache_info *info, bool remove) {
  const char *dir = loom_cache_dir();
  pthread_once(&dir_once, resolve_dir);
  if (info) *info = (loom_cache_info){0, 0, max_bytes};
  if (!dir) return LOOM_OK;
  DIR *d = open_entries();
  if (!d) return lm_fail(LOOM_ERR_IO, "%s: cannot open %s: %s", op, dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    bool temp = strstr(e->d_name, SUFFIX ".tmp.") != NULL;
    if (!is_entry(e->d_name) && !temp) continue;
    struct stat st;
    if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (remove)
      unlinkat(dir_fd, e->d_name, 0);
    else if (info && !temp)
      info->entries++, info->bytes += (uint64_t)st.st_size;
  }
  closedir(d);
  return LOOM_OK;
}

loom_status loom_cache_info_get(loom_cache_info *info) {
  if (!info) return lm_fail(LOOM_ERR_NULL, "loom_cache_info_get: info is NULL");
  return walk_entries("loom_cache_info_get", info, false);
}

loom_status loom_cache_clear(void) { return walk_entries("loom_cache_clear", NULL, true); }
