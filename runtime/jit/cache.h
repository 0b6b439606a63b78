/* The on-disk kernel cache (docs/design.md, "Kernel cache"). Safe across processes: entries appear by rename.
 *
 * Layout: <dir>/v1/sm_<arch>/<ih[0:2]>/<ih>/<key>.entry, temp files in <dir>/tmp/.
 *   key = sha256 of every compile input, the NVRTC version included;
 *   ih  = the same without the NVRTC version, so a host with no usable NVRTC can still find an
 *         entry built elsewhere (`volt8 compile --arch sm_70`) by the inputs alone.
 * An entry is a fixed header (magic, format version, image kind, arch, sizes, key, payload sha256,
 * NVRTC version, header sha256), the kernel name, then the image. Anything that does not verify
 * is a miss. */
#ifndef VOLT8_CACHE_H
#define VOLT8_CACHE_H

#include "jit/image.h"
#include "volt8.h"
#include "core/sha256.h"

#define VOLT8_CACHE_FORMAT_VERSION 1

typedef struct volt8_cache_inputs {
  const char *kernel_name;
  const char *source;
  int32_t arch;
  volt8_image_kind kind;
  const char *const *options;    /* every option NVRTC gets, in any order: the key sorts them */
  int32_t num_options;
} volt8_cache_inputs;

/* The entry key of (inputs, nvrtc_version "12.9"); nvrtc_version NULL gives the inputs hash ih.
 * Depends on the inputs and the library version only. */
volt8_status volt8_cache_key(const volt8_cache_inputs *inputs, const char *nvrtc_version,
                             uint8_t digest[VOLT8_SHA256_BYTES]);

/* 1 for the name of an entry file ("<64 lowercase hex digits>.entry"), and for the name a publish gives
 * its temp file in <dir>/tmp ("volt8-<pid>.<16 lowercase hex digits>"): what the cache owns. */
int volt8_cache_is_entry_name(const char *name);
int volt8_cache_is_temp_name(const char *name);
/* Path of the entry for (inputs, nvrtc_version) under dir, malloc'ed (NULL when out of memory). */
char *volt8_cache_entry_path(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version);

/* Loads a verified entry: with nvrtc_version, exactly that key; with NULL, any valid entry for the
 * inputs, the highest NVRTC version first. Fills data, size, kind, nvrtc_version and from_cache = 1.
 * VOLT8_ERR_NOT_FOUND on a miss (absent, unreadable or invalid entries alike). Sets no error message. */
volt8_status volt8_cache_load(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                              volt8_jit_image *out_image);

/* Publishes an image as the entry for (inputs, nvrtc_version): temp file, fsync, rename over any
 * existing entry. volt8's own temp files (tmp/volt8-<pid>.<16 hex digits>) older than an hour, left
 * by processes killed mid-publish, are removed first; nothing else is. On failure leaves no temp file and returns VOLT8_ERR_IO or
 * VOLT8_ERR_OUT_OF_MEMORY, setting no error message: a cache that cannot be written is only slower. */
volt8_status volt8_cache_store(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                               const void *data, size_t size);
/* The same, writing why a failure happened ("cannot create <path>: Not a directory") into why
 * (may be NULL). */
volt8_status volt8_cache_publish(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                                 const void *data, size_t size, char *why, size_t why_size);

#endif
