/* The on-disk kernel cache, one scenario per child process (the cache
 * directory is read once per process): a warm start loads instead of
 * compiling; truncated, corrupted and foreign entries are rebuilt, never
 * loaded; an unusable directory degrades to memory with a warning; two
 * processes filling one directory at once corrupt nothing. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "check.h"
#include "loom.h"

/* The child's work: one fused kernel whose value is known. Prints
 * "<compiled> <disk hits> <ok>". */
static int child(void) {
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  double v = 0;
  LOOM_SCOPE {
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
    v = loom_item(loom_sum_all(loom_mul_s(loom_add_s(t, 1.0), 0.5)));
  }
  loom_stats s = loom_get_stats();
  printf("%llu %llu %d\n", (unsigned long long)s.kernels_compiled,
         (unsigned long long)s.disk_cache_hits, v == 0.5 * 256 * 257 / 2);
  return 0;
}

/* Another kernel (`--child-other`), or that one and then the first in one
 * process (`--child-both`). */
static int child_other(bool then_first) {
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  double v = 0, u = 0;
  LOOM_SCOPE {
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
    v = loom_item(loom_sum_all(loom_sub_s(loom_mul_s(t, 3.0), 1.0)));
    if (then_first) u = loom_item(loom_sum_all(loom_mul_s(loom_add_s(t, 1.0), 0.5)));
  }
  bool ok = v == 3.0 * 256 * 255 / 2 - 256 && (!then_first || u == 0.5 * 256 * 257 / 2) &&
            !loom_last_error();
  loom_stats s = loom_get_stats();
  printf("%llu %llu %d\n", (unsigned long long)s.kernels_compiled,
         (unsigned long long)s.disk_cache_hits, ok);
  if (loom_last_error()) fprintf(stderr, "%s\n", loom_last_error());
  return 0;
}

typedef struct result {
  unsigned long long compiled, disk_hits;
  int ok;
} result;

static char self[4096];

static result run_child_as(const char *dir, const char *mode) {
  result r = {0, 0, 0};
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "LOOM_CACHE_DIR='%s' timeout 60 '%s' %s 2>/dev/null", dir, self, mode);
  FILE *p = popen(cmd, "r");
  if (!p) return r;
  if (fscanf(p, "%llu %llu %d", &r.compiled, &r.disk_hits, &r.ok) != 3) r.ok = 0;
  pclose(p);
  return r;
}

static result run_child(const char *dir) { return run_child_as(dir, "--child"); }

/* n kernels, each new (small integer constants are folded into the code);
 * prints the cache's cap. */
static int child_many(int n) {
  float x[256] = {0};
  loom_set_dynamic(LOOM_DYNAMIC_OFF); /* twelve constants, twelve kernels (not one generic) */
  LOOM_SCOPE {
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
    for (int i = 0; i < n; i++) loom_item(loom_sum_all(loom_add_s(t, i + 1)));
  }
  loom_cache_info info;
  loom_cache_info_get(&info);
  printf("%llu %llu %d\n", (unsigned long long)loom_get_stats().kernels_compiled,
         (unsigned long long)info.max_bytes, !loom_last_error());
  return 0;
}

/* The one entry in dir (the test's graph has one kernel). */
static int entry(const char *dir, char *path, size_t len) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".lko") && !strstr(e->d_name, ".tmp")) {
      snprintf(path, len, "%s/%s", dir, e->d_name);
      n++;
    }
  if (d) closedir(d);
  return n;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void rewrite(const char *path, long keep, long flip_at) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  if (flip_at >= 0) {
    fseek(f, flip_at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, flip_at, SEEK_SET);
    fputc(c ^ 0x5a, f);
  }
  fclose(f);
  if (keep >= 0) truncate(path, keep);
}

static void test_cold_warm_and_damage(const char *dir) {
  char path[8192];
  result cold = run_child(dir);
  CHECK(cold.ok && cold.compiled == 1 && cold.disk_hits == 0);
  CHECK_EQ_INT(entry(dir, path, sizeof path), 1);
  long size = file_size(path);
  result warm = run_child(dir);
  CHECK(warm.ok && warm.compiled == 0 && warm.disk_hits == 1);

  rewrite(path, size / 2, -1); /* truncated */
  result t = run_child(dir);
  CHECK_MSG(t.ok && t.compiled == 1 && t.disk_hits == 0, "truncated entry: compiled %llu hits %llu",
            t.compiled, t.disk_hits);
  CHECK_EQ_INT(file_size(path), size); /* rebuilt */

  rewrite(path, -1, size - 10); /* a flipped byte in the object code */
  result c = run_child(dir);
  CHECK(c.ok && c.compiled == 1 && c.disk_hits == 0);
  result again = run_child(dir);
  CHECK(again.ok && again.compiled == 0 && again.disk_hits == 1);

  rewrite(path, -1, 30); /* a foreign key in the header */
  result f = run_child(dir);
  CHECK(f.ok && f.compiled == 1 && f.disk_hits == 0);
}

static unsigned char *read_all(const char *path, long *size) {
  *size = file_size(path);
  FILE *f = fopen(path, "rb");
  unsigned char *data = *size > 0 ? malloc((size_t)*size) : NULL;
  if (f && data && fread(data, 1, (size_t)*size, f) != (size_t)*size) *size = -1;
  if (f) fclose(f);
  return data;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* An entry whose header is valid for its key but whose object is another
 * kernel's (what a forged or mixed-up cache holds): it loads, cannot serve
 * its key, and is removed and rebuilt; the other kernel's code it brought into
 * the JIT is removed too, so compiling that kernel later in the same process
 * works (it once failed with "Duplicate definition of symbol"). */
static void test_entry_of_another_kernel(const char *base) {
  char dir_a[4200], dir_b[4200], path_a[8192], path_b[8192];
  snprintf(dir_a, sizeof dir_a, "%s/kernel_a", base);
  snprintf(dir_b, sizeof dir_b, "%s/kernel_b", base);
  CHECK(run_child(dir_a).ok);
  CHECK(run_child_as(dir_b, "--child-other").ok);
  CHECK_EQ_INT(entry(dir_a, path_a, sizeof path_a), 1);
  CHECK_EQ_INT(entry(dir_b, path_b, sizeof path_b), 1);
  long size_a, size_b;
  unsigned char *a = read_all(path_a, &size_a), *b = read_all(path_b, &size_b);
  CHECK(a && b && size_a > 56 && size_b > 56);
  if (a && b && size_a > 56 && size_b > 56) {
    /* b's header (its key) over a's object, length and checksum made right */
    XXH128_hash_t h = XXH3_128bits(a + 56, (size_t)(size_a - 56));
    memcpy(a, b, 56);
    put_u64(a + 16, (uint64_t)(size_a - 56));
    put_u64(a + 40, h.low64);
    put_u64(a + 48, h.high64);
    FILE *f = fopen(path_b, "wb");
    if (f) fwrite(a, 1, (size_t)size_a, f), fclose(f);
    result r = run_child_as(dir_b, "--child-both");
    CHECK_MSG(r.ok && r.compiled == 2 && r.disk_hits == 0,
              "an entry holding another kernel's object: ok %d compiled %llu disk hits %llu", r.ok,
              r.compiled, r.disk_hits);
    CHECK(run_child_as(dir_b, "--child-both").ok); /* both entries good now */
  }
  free(a);
  free(b);
}

static int count_entries(const char *dir) {
  char path[8192];
  return entry(dir, path, sizeof path);
}

/* The cache directory's whole way from "/" is checked, as ssh checks the way
 * to a user's keys: a parent writable by others (not sticky) is refused, a
 * sticky one (as /tmp) accepted. Entries are read through the directory held
 * open: a symbolic link, or a file of another user's, is never loaded. */
static void test_directory_chain(const char *base) {
  char open_parent[4200], cache[4400], sticky[4200], good[4200], path[8192];
  snprintf(open_parent, sizeof open_parent, "%s/writable_by_all", base);
  mkdir(open_parent, 0777);
  chmod(open_parent, 0777);
  snprintf(cache, sizeof cache, "%s/cache", open_parent);
  result r = run_child(cache);
  CHECK_MSG(r.ok && r.compiled == 1 && count_entries(cache) == 0,
            "a cache under a parent others can write: %d entries", count_entries(cache));
  snprintf(sticky, sizeof sticky, "%s/sticky", base);
  mkdir(sticky, 0777);
  chmod(sticky, 01777);
  snprintf(cache, sizeof cache, "%s/cache", sticky);
  r = run_child(cache);
  CHECK_MSG(r.ok && count_entries(cache) == 1, "a cache under a sticky parent: %d entries",
            count_entries(cache));

  snprintf(good, sizeof good, "%s/good", base);
  CHECK(run_child(good).ok);
  CHECK_EQ_INT(entry(good, path, sizeof path), 1);
  char elsewhere[8300];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere.lko", base);
  CHECK_EQ_INT(rename(path, elsewhere), 0); /* the valid entry, moved out and linked to */
  CHECK_EQ_INT(symlink(elsewhere, path), 0);
  r = run_child(good);
  CHECK_MSG(r.ok && r.compiled == 1 && r.disk_hits == 0, "a symbolic link entry: disk hits %llu",
            r.disk_hits);
  CHECK(run_child(good).disk_hits == 1); /* rebuilt in its place */
  if (geteuid() == 0) {                  /* another user's file where an entry belongs */
    CHECK_EQ_INT(chown(path, 65534, 65534), 0);
    r = run_child(good);
    CHECK_MSG(r.ok && r.compiled == 1 && r.disk_hits == 0,
              "an entry owned by another user: disk hits %llu", r.disk_hits);
  }
}

/* A relative LOOM_CACHE_DIR is resolved once: after a chdir() to where the
 * same name is a directory anyone may write, entries still go to the first. */
static int child_chdir(const char *elsewhere) {
  float x[256] = {0};
  LOOM_SCOPE {
    loom_tensor *t = loom_from_data(x, LOOM_SHAPE(256), LOOM_F32, LOOM_CPU);
    loom_item(loom_sum_all(loom_add_s(t, 2.0)));
    if (chdir(elsewhere) != 0) return 1;
    loom_item(loom_sum_all(loom_mul_s(loom_exp(t), 3.0)));
  }
  printf("%llu %llu %d\n", (unsigned long long)loom_get_stats().kernels_compiled, 0ull,
         !loom_last_error());
  return 0;
}

static void test_relative_dir(const char *base) {
  char first[4200], second[4200], cmd[16384];
  snprintf(first, sizeof first, "%s/first", base);
  snprintf(second, sizeof second, "%s/second", base);
  mkdir(first, 0700);
  mkdir(second, 0700);
  char shared[4300];
  snprintf(shared, sizeof shared, "%s/cache", second);
  mkdir(shared, 0777);
  chmod(shared, 0777);
  snprintf(cmd, sizeof cmd, "cd '%s' && LOOM_CACHE_DIR=cache timeout 60 '%s' --child-chdir '%s'",
           first, self, second);
  FILE *p = popen(cmd, "r");
  result r = {0, 0, 0};
  if (p && fscanf(p, "%llu %llu %d", &r.compiled, &r.disk_hits, &r.ok) != 3) r.ok = 0;
  if (p) pclose(p);
  char cache[4300];
  snprintf(cache, sizeof cache, "%s/cache", first);
  CHECK_MSG(r.ok && count_entries(cache) == (int)r.compiled && count_entries(shared) == 0,
            "relative LOOM_CACHE_DIR after chdir: %d entries in the first, %d in the other",
            count_entries(cache), count_entries(shared));
}

/* Two users (CI runs as root; elsewhere this part is skipped): a cache of
 * user nobody's under a parent writable by others is refused, one under a
 * safe parent is used, and a file another user (root) plants in it as an
 * entry is never loaded by nobody's process. */
static void test_two_users(void) {
  if (geteuid() != 0 || system("command -v setpriv >/dev/null 2>&1") != 0) {
    printf("two users: skipped (needs root and setpriv)\n");
    return;
  }
  char base[] = "/tmp/loom-two-users-XXXXXX";
  if (!mkdtemp(base)) return;
  chmod(base, 0755);
  char own[4200], open_parent[4200], under[4300], cmd[16384], path[8192];
  snprintf(own, sizeof own, "%s/nobody", base);
  snprintf(open_parent, sizeof open_parent, "%s/open", base);
  snprintf(under, sizeof under, "%s/cache", open_parent);
  mkdir(own, 0700);
  mkdir(open_parent, 0777);
  chmod(open_parent, 0777);
  mkdir(under, 0700);
  CHECK_EQ_INT(chown(own, 65534, 65534) | chown(under, 65534, 65534), 0);
  const char *dirs[3] = {own, under, own};
  for (int i = 0; i < 3; i++) {
    if (i == 2) { /* root plants a file where nobody's entry is */
      CHECK_EQ_INT(entry(own, path, sizeof path), 1);
      CHECK_EQ_INT(chown(path, 0, 0), 0);
      chmod(path, 0644);
    }
    snprintf(cmd, sizeof cmd,
             "setpriv --reuid=65534 --regid=65534 --clear-groups env LOOM_CACHE_DIR='%s' "
             "timeout 60 '%s' --child 2>/dev/null",
             dirs[i], self);
    FILE *p = popen(cmd, "r");
    result r = {0, 0, 0};
    if (p && fscanf(p, "%llu %llu %d", &r.compiled, &r.disk_hits, &r.ok) != 3) r.ok = 0;
    if (p) pclose(p);
    if (i == 0) CHECK_MSG(r.ok && count_entries(own) == 1, "nobody's own cache: ok %d", r.ok);
    if (i == 1)
      CHECK_MSG(r.ok && count_entries(under) == 0, "under a parent others write: %d entries",
                count_entries(under));
    if (i == 2)
      CHECK_MSG(r.ok && r.disk_hits == 0 && r.compiled == 1,
                "root's file as nobody's entry: disk hits %llu", r.disk_hits);
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK_EQ_INT(system(cmd), 0);
}

static uint64_t dir_bytes(const char *dir, int *count) {
  DIR *d = opendir(dir);
  uint64_t total = 0;
  *count = 0;
  struct dirent *e;
  char path[8400];
  while (d && (e = readdir(d))) {
    if (!strstr(e->d_name, ".lko")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    total += (uint64_t)file_size(path), ++*count;
  }
  if (d) closedir(d);
  return total;
}

/* LOOM_CACHE_MAX_BYTES caps the directory: 12 kernels stored under a cap of
 * about three entries leave at most the cap; the cap is what loom_cache_info
 * reports. */
static void test_size_cap(const char *base) {
  char dir[4200], one[4200], cmd[16384];
  snprintf(one, sizeof one, "%s/cap_one", base);
  CHECK(run_child(one).ok);
  int count;
  uint64_t entry_bytes = dir_bytes(one, &count);
  snprintf(dir, sizeof dir, "%s/capped", base);
  uint64_t cap = 3 * entry_bytes + entry_bytes / 2;
  snprintf(cmd, sizeof cmd,
           "LOOM_CACHE_MAX_BYTES=%llu LOOM_CACHE_DIR='%s' timeout 60 '%s' --child-many 12",
           (unsigned long long)cap, dir, self);
  FILE *p = popen(cmd, "r");
  unsigned long long compiled = 0, reported = 0;
  int ok = 0;
  if (p && fscanf(p, "%llu %llu %d", &compiled, &reported, &ok) != 3) ok = 0;
  if (p) pclose(p);
  uint64_t total = dir_bytes(dir, &count);
  CHECK_MSG(ok && compiled == 12 && reported == cap, "capped run: ok %d compiled %llu cap %llu", ok,
            compiled, reported);
  CHECK_MSG(total <= cap && count >= 1 && count < 12,
            "12 entries of about %llu bytes under a cap of %llu: %d kept, %llu bytes",
            (unsigned long long)entry_bytes, (unsigned long long)cap, count,
            (unsigned long long)total);
}

/* A FIFO where an entry belongs is refused at once and the entry rebuilt over
 * it, never waited on: the child runs under `timeout`, which a blocking open
 * would reach. */
static void test_fifo_entry(const char *base) {
  char dir[4200], path[8192];
  snprintf(dir, sizeof dir, "%s/fifo", base);
  result cold = run_child(dir);
  CHECK(cold.ok && cold.compiled == 1);
  CHECK_EQ_INT(entry(dir, path, sizeof path), 1);
  unlink(path);
  CHECK_EQ_INT(mkfifo(path, 0600), 0);
  result r = run_child(dir);
  CHECK_MSG(r.ok && r.compiled == 1 && r.disk_hits == 0, "a FIFO entry: ok %d compiled %llu", r.ok,
            r.compiled);
}

/* Under `ulimit -f 1` (1 KiB, less than an entry) the cache write is not made
 * and the process goes on (SIGXFSZ used to end it), with no temporary left. */
static void test_file_size_limit(const char *base) {
#if defined(__SANITIZE_THREAD__)
  (void)base; /* TSan's own runtime does not start under a 1 KiB file size limit */
  return;
#endif
  char dir[4200], cmd[9000];
  snprintf(dir, sizeof dir, "%s/ulimit", base);
  mkdir(dir, 0700);
  snprintf(cmd, sizeof cmd,
           "ulimit -f 1; LOOM_CACHE_DIR='%s' timeout 60 '%s' --child 2>'%s/stderr.txt'", dir, self,
           base);
  FILE *p = popen(cmd, "r");
  result r = {0, 0, 0};
  if (p && fscanf(p, "%llu %llu %d", &r.compiled, &r.disk_hits, &r.ok) != 3) r.ok = 0;
  int status = p ? pclose(p) : -1;
  CHECK_MSG(r.ok && r.compiled == 1 && status == 0, "under ulimit -f 1: ok %d status %d", r.ok,
            status);
  char path[8192];
  CHECK_EQ_INT(entry(dir, path, sizeof path), 0);
  DIR *d = opendir(dir);
  int leftovers = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) leftovers += e->d_name[0] != '.';
  if (d) closedir(d);
  CHECK_EQ_INT(leftovers, 0);
  char log[9000], line[1024] = "";
  snprintf(log, sizeof log, "%s/stderr.txt", base);
  FILE *f = fopen(log, "r");
  int warnings = 0;
  while (f && fgets(line, sizeof line, f))
    warnings += strstr(line, "cannot write the kernel cache") != NULL;
  if (f) fclose(f);
  CHECK_EQ_INT(warnings, 1);
  remove(log);
}

static void test_unusable_dir(const char *base) {
  char file[4200];
  snprintf(file, sizeof file, "%s/not-a-dir", base);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  result r = run_child(file); /* a file where the directory should be */
  CHECK(r.ok && r.compiled == 1 && r.disk_hits == 0);
  char shared[4200];
  snprintf(shared, sizeof shared, "%s/open", base);
  mkdir(shared, 0777);
  chmod(shared, 0777); /* others could plant code: refused */
  r = run_child(shared);
  CHECK(r.ok && r.compiled == 1);
  char path[8192];
  CHECK_EQ_INT(entry(shared, path, sizeof path), 0);
}

static void test_concurrent_fill(const char *base) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/concurrent", base);
  char cmd[8600];
  snprintf(cmd, sizeof cmd,
           "for i in 1 2 3 4; do LOOM_CACHE_DIR='%s' '%s' --child >/dev/null 2>&1 & done; wait",
           dir, self);
  CHECK_EQ_INT(system(cmd), 0);
  char path[8192];
  CHECK_EQ_INT(entry(dir, path, sizeof path), 1);
  result r = run_child(dir);
  CHECK(r.ok && r.compiled == 0 && r.disk_hits == 1);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
  if (argc > 1 && strcmp(argv[1], "--child-other") == 0) return child_other(false);
  if (argc > 1 && strcmp(argv[1], "--child-both") == 0) return child_other(true);
  if (argc > 2 && strcmp(argv[1], "--child-chdir") == 0) return child_chdir(argv[2]);
  if (argc > 2 && strcmp(argv[1], "--child-many") == 0) return child_many(atoi(argv[2]));
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  char base[] = "/tmp/loom-disk-cache-XXXXXX";
  CHECK(mkdtemp(base) != NULL);
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/cache", base);
  test_cold_warm_and_damage(dir);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700);
  test_unusable_dir(base);
  test_concurrent_fill(base);
  test_fifo_entry(base);
  test_file_size_limit(base);
  test_entry_of_another_kernel(base);
  test_directory_chain(base);
  test_relative_dir(base);
  test_two_users();
  test_size_cap(base);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK_EQ_INT(system(cmd), 0);
  return check_report();
}
