/* The on-disk kernel cache: object files keyed by the kernel's hash plus the
 * target and loom's version, validated (length + hash) before use. */
#ifndef LOOM_RUNTIME_DISK_CACHE_H
#define LOOM_RUNTIME_DISK_CACHE_H

#include <stddef.h>

#include "ir/ir.h"

/* The cache key of a kernel hash on this target, for this loom. */
lm_hash128 lm_disk_key(uint64_t kernel_lo, uint64_t kernel_hi);
/* The cache key of an entry named by `ident` (every input that changes the
 * code, as text: the CUDA backend's cubins), for this loom. */
lm_hash128 lm_disk_key_text(const char *ident);
/* A valid entry's payload (malloc'd) or NULL; a corrupt, truncated or
 * foreign entry is removed so it gets rebuilt. */
void *lm_disk_load(lm_hash128 key, size_t *len);
/* Stores atomically (temp file + rename); failures only cost a recompile. */
void lm_disk_store(lm_hash128 key, const void *payload, size_t len);
/* Drops an entry that loaded but failed to link. */
void lm_disk_remove(lm_hash128 key);

#endif
