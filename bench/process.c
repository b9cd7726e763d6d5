/* Running a child process and capturing its standard output (posix_spawn: no
 * code runs between fork and exec in this multi-threaded process). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

static size_t count_strings(const char *const *list) {
  size_t n = 0;
  while (list && list[n]) n++;
  return n;
}

/* True when entry ("NAME=value") sets a name that one of overrides also sets. */
static bool is_overridden(const char *entry, const char *const *overrides) {
  const char *eq = strchr(entry, '=');
  size_t name_len = eq ? (size_t)(eq - entry) : strlen(entry);
  for (size_t i = 0; overrides && overrides[i]; i++)
    if (strncmp(entry, overrides[i], name_len) == 0 && overrides[i][name_len] == '=') return true;
  return false;
}

/* The environment plus extra_env (which wins); the strings are borrowed. */
static char **merged_environment(const char *const *extra_env) {
  size_t nenv = count_strings((const char *const *)environ), nextra = count_strings(extra_env);
  char **env = malloc((nenv + nextra + 1) * sizeof *env);
  if (!env) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < nenv; i++)
    if (!is_overridden(environ[i], extra_env)) env[n++] = environ[i];
  for (size_t i = 0; i < nextra; i++) env[n++] = (char *)extra_env[i];
  env[n] = NULL;
  return env;
}

/* Reads fd to its end into a malloc'd, NUL-ended string. */
static char *read_all(int fd) {
  size_t size = 0, capacity = 4096;
  char *text = malloc(capacity);
  while (text) {
    if (size + 1 >= capacity) {
      char *bigger = realloc(text, capacity * 2);
      if (!bigger) break;
      text = bigger, capacity *= 2;
    }
    ssize_t got = read(fd, text + size, capacity - size - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      text[size] = 0;
      return text;
    }
    size += (size_t)got;
  }
  free(text);
  return NULL;
}

static int wait_exit_status(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int spawn_with_stdout(const char *const *argv, char **env, int pipe_write, pid_t *pid) {
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0) return -1;
  int rc = posix_spawn_file_actions_adddup2(&actions, pipe_write, STDOUT_FILENO);
  if (rc == 0) rc = posix_spawn(pid, argv[0], &actions, NULL, (char *const *)argv, env);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) errno = rc;
  return rc == 0 ? 0 : -1;
}

int bench_run_process(const char *const *argv, const char *const *extra_env, char **output) {
  *output = NULL;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  char **env = merged_environment(extra_env);
  pid_t pid;
  int rc = env ? spawn_with_stdout(argv, env, fds[1], &pid) : -1;
  int saved_errno = errno;
  free(env);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    errno = saved_errno;
    return -1;
  }
  *output = read_all(fds[0]);
  close(fds[0]);
  return wait_exit_status(pid);
}
