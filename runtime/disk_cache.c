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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "backends/llvm/llvm_backend.h"
#include "runtime/atomic_file.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

#define MAGIC "LOOMKOBJ"
#define FORMAT 1u
#define HEADER 56u
#define SUFFIX ".lko"

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static char dir_path[4096]; /* set once; empty when the disk cache is off */

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

static void resolve_dir(void) {
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
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return warn_off(path, "not a directory");
  if (st.st_uid != geteuid() || (st.st_mode & 022))
    return warn_off(path, "owned by another user or writable by group or others");
  if (access(path, W_OK | X_OK) != 0) return warn_off(path, strerror(errno));
  memcpy(dir_path, path, len + 1);
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

static void entry_path(lm_hash128 key, char *buf, size_t len) {
  snprintf(buf, len, "%s/%016llx%016llx" SUFFIX, loom_cache_dir(), (unsigned long long)key.hi,
           (unsigned long long)key.lo);
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

static unsigned char *read_file(const char *path, size_t *size) {
  int fd = lm_open_for_reading(path);
  if (fd < 0) return NULL;
  struct stat st;
  unsigned char *data = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size < (1 << 30))
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
  char path[4200];
  entry_path(key, path, sizeof path);
  size_t size = 0;
  unsigned char *data = read_file(path, &size);
  if (!data) return NULL;
  if (!valid(data, size, key)) {
    free(data);
    unlink(path); /* corrupt, truncated or foreign: rebuilt by the caller */
    return NULL;
  }
  memmove(data, data + HEADER, size - HEADER);
  *len = size - HEADER;
  return data;
}

void lm_disk_store(lm_hash128 key, const void *payload, size_t len) {
  if (!loom_cache_dir()) return;
  char path[4200];
  entry_path(key, path, sizeof path);
  lm_atomic_file f;
  if (!lm_atomic_file_open(&f, path, 0600)) {
    warn_store(path);
    return;
  }
  unsigned char header[HEADER];
  make_header(header, key, payload, len);
  if (lm_write_all(f.fd, header, HEADER) && lm_write_all(f.fd, payload, len)) {
    if (!lm_atomic_file_commit(&f, false, NULL))
      warn_store(path); /* unsynced: a lost entry is rebuilt */
  } else {
    lm_atomic_file_abandon(&f);
    warn_store(path);
  }
}

void lm_disk_remove(lm_hash128 key) {
  if (!loom_cache_dir()) return;
  char path[4200];
  entry_path(key, path, sizeof path);
  unlink(path);
}

static bool is_entry(const char *name) {
  size_t n = strlen(name);
  return n == 32 + strlen(SUFFIX) && strcmp(name + 32, SUFFIX) == 0;
}

/* Visits entries; with `remove` set, deletes them (and stale temp files). */
static loom_status walk_entries(const char *op, loom_cache_info *info, bool remove) {
  const char *dir = loom_cache_dir();
  if (info) *info = (loom_cache_info){0, 0};
  if (!dir) return LOOM_OK;
  DIR *d = opendir(dir);
  if (!d) return lm_fail(LOOM_ERR_IO, "%s: cannot open %s: %s", op, dir, strerror(errno));
  struct dirent *e;
  char path[4400];
  while ((e = readdir(d))) {
    bool temp = strstr(e->d_name, SUFFIX ".tmp.") != NULL;
    if (!is_entry(e->d_name) && !temp) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (remove)
      unlink(path);
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
