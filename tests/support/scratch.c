/* See scratch.h. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"

void *check_open_library(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib%s.so", dir, name);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK_MSG(h != NULL, "dlopen %s: %s", path, dlerror());
  return h;
}

void *check_library_symbol(void *h, const char *name, const char *what) {
  char sym[128];
  snprintf(sym, sizeof sym, "%s_%s", name, what);
  void *f = h ? dlsym(h, sym) : NULL;
  CHECK_MSG(f != NULL, "%s not in lib%s.so", sym, name);
  return f;
}

void check_library_needs_only_libc(const char *dir, const char *name) {
  char cmd[1200], line[512];
  snprintf(cmd, sizeof cmd, "readelf -d '%s/lib%s.so'", dir, name);
  FILE *f = popen(cmd, "r");
  CHECK(f != NULL);
  if (!f) return;
  static const char *const allowed[] = {"[libc.so", "[libm.so", "[libpthread.so", "[libdl.so"};
  int needed = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "(NEEDED)")) continue;
    bool ok = false;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
      ok |= strstr(line, allowed[i]) != NULL;
    needed++;
    CHECK_MSG(ok, "lib%s.so needs %s", name, line);
  }
  CHECK_MSG(pclose(f) == 0 && needed > 0, "readelf -d lib%s.so failed", name);
}

void check_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1024];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

bool check_file_contains(const char *path, const char *what) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  return strstr(text, what) != NULL;
}

void check_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || (len && fwrite(data, 1, len, f) != len)) fprintf(stderr, "cannot write %s\n", path);
  if (f) fclose(f);
}

unsigned char *check_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  *len = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *data = malloc(size > 0 ? (size_t)size : 1);
  *len = data ? fread(data, 1, (size_t)(size > 0 ? size : 0), f) : 0;
  fclose(f);
  return data;
}
