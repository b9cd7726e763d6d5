/* libFuzzer target: the ONNX model reader and importer (loom_onnx_load) on
 * any bytes.
 *
 * The bytes are a model file. Whatever it holds (truncated or hostile
 * protobufs, nesting bombs, cycles, undefined inputs, huge or negative dims,
 * short initializers, external data leaving the folder, absurd attributes),
 * loading must not crash, hang or leak, and must give either NULL with a
 * known status and a message naming the file, or a program; a program that
 * takes no inputs is run. Seeds: tests/fuzz/corpus/onnx. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0) {
    /* The file lives in memory; the reader opens it by path like any other. */
    fd = memfd_create("fuzz.onnx", 0);
    if (fd < 0) perror("memfd_create"), abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  loom_clear_error();
  loom_program *p = loom_onnx_load(path, NULL);
  if (!p) {
    loom_status st = loom_last_status();
    if (st <= LOOM_OK || st >= LOOM_NUM_STATUS || !loom_last_error()) abort();
    if (!strstr(loom_last_error(), path)) abort(); /* every refusal names the file */
    return 0;
  }
  if (loom_program_num_inputs(p) == 0 && loom_program_num_outputs(p) <= 16) {
    loom_tensor *outs[16] = {0};
    if (loom_program_run(p, NULL, outs) == LOOM_OK)
      for (int i = 0; i < loom_program_num_outputs(p); i++) loom_free(outs[i]);
  }
  loom_program_free(p);
  return 0;
}
