/* Disk cache for JIT output (cubins from the driver's PTX JIT and from NVRTC)
 * and for the cuDNN algorithms the fast mode chose (runtime/cudnn.c).
 *
 * Location: $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember.
 * The directory must belong to the user and not be writable by group or
 * others; otherwise the cache is not used and the reason is reported. Entries
 * are written atomically (temp file, fsync, rename) and carry a checksum that
 * is verified on every load; a corrupt, truncated or foreign entry is deleted
 * and treated as a miss. A size cap evicts least recently used entries. */
#ifndef EMBER_RUNTIME_JIT_CACHE_H
#define EMBER_RUNTIME_JIT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "ember/status.h"

#define EM_JIT_CACHE_FORMAT 1            /* bump when the entry layout changes */
#define EM_JIT_CACHE_DEFAULT_CAP (256ull << 20)

typedef struct em_jit_cache em_jit_cache;

/* Everything the output depends on. */
typedef struct em_jit_key {
  const char *kind;      /* "ptx-jit", "nvrtc", or "cudnn-algo" (runtime/cudnn.c: a chosen algorithm) */
  uint64_t input_hash;   /* XXH3-64 of the PTX or source (and headers) */
  const char *options;   /* compiler options, as passed */
  int sm;                /* target SM, 10*major+minor */
  char variant;          /* 0, 'a', 'f' */
  int driver_version;    /* cuDriverGetVersion */
  int tool_version;      /* what made the payload: NVRTC's version (nvrtc), cuDNN's (cudnn-algo); 0 for the driver JIT */
} em_jit_key;

/* Opens (creating it with mode 0700 if missing) the cache directory `dir`, or
 * the default location when dir is NULL. max_bytes 0 means the default cap or
 * $EMBER_CACHE_MAX_MB. When the directory is unsafe or unusable, returns EM_OK
 * with *out = NULL and the reason in why_disabled: the caller runs uncached. */
em_status em_jit_cache_open(const char *dir, uint64_t max_bytes, em_jit_cache **out,
                            char *why_disabled, size_t why_cap);
void em_jit_cache_close(em_jit_cache *c);
const char *em_jit_cache_dir(const em_jit_cache *c);

/* Hit: EM_OK and a malloc'd copy of the payload (caller frees). Miss, or an
 * entry that failed its checks (deleted, reason logged on EMBER_LOG=cache):
 * EM_ERR_NOT_FOUND. */
em_status em_jit_cache_get(em_jit_cache *c, const em_jit_key *key, void **data, size_t *size);

/* Stores a payload atomically, then evicts least recently used entries while
 * the directory is over its cap. Concurrent writers of the same key are safe. */
em_status em_jit_cache_put(em_jit_cache *c, const em_jit_key *key, const void *data,
                           size_t size);

/* Total bytes of entries (for tests and `ember cache`). */
uint64_t em_jit_cache_size(em_jit_cache *c);

#endif
