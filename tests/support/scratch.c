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
