/* See scratch.h. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scratch.h"

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
