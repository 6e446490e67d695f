/* Checkpoint container: named byte sections behind a versioned header, sealed by a CRC-32.
 *
 * Layout (integers little-endian, no padding):
 *   "DQNCKPT\0"  uint32 version (2)  uint32 section count
 *   per section: char name[32] (NUL-padded)  uint64 size  size bytes
 *   uint32 CRC-32 of every byte before it
 *
 * Payloads start at arbitrary offsets: copy them out (dqn_ckpt_reader_copy) rather than casting
 * the pointer from dqn_ckpt_reader_find to a wider type. */
#ifndef DQN_CORE_CKPT_FILE_H
#define DQN_CORE_CKPT_FILE_H
#include <stdint.h>
#include "dqn.h"

/* 2: the parameter layout stacks the heads' v1 and a1 tensors; a version-1 file's
 * parameters would load into the wrong tensors, so it is refused */
#define DQN_CKPT_VERSION 2u
#define DQN_CKPT_NAME_MAX 32 /* bytes of a section name, its NUL included */

typedef struct dqn_ckpt_writer dqn_ckpt_writer;
typedef struct dqn_ckpt_reader dqn_ckpt_reader;

dqn_status dqn_ckpt_writer_create(dqn_ckpt_writer **out);
void dqn_ckpt_writer_destroy(dqn_ckpt_writer *w);
/* Register a section. The bytes are not copied: data must stay valid until the write. Names are
 * 1..31 characters and unique. */
dqn_status dqn_ckpt_writer_add(dqn_ckpt_writer *w, const char *name, const void *data,
                               uint64_t size);
/* Write every section to path.tmp, fsync and close it, rename it over path, then fsync the
 * directory, so that after a crash or power loss path holds the old file or the new one, whole.
 * On failure path.tmp is removed, path is left as it was, and DQN_ERR_IO names the file and the
 * reason. Test-only: the environment variable DQN_CKPT_FAULT=k kills the process (SIGKILL)
 * right after the k-th of these steps (ckpt_file.c lists them; tests/test_crash.sh). */
dqn_status dqn_ckpt_writer_write(const dqn_ckpt_writer *w, const char *path);

/* Read and verify a whole file: magic, version, structure, CRC (DQN_ERR_FORMAT naming the file
 * and the fault); a file that cannot be read is DQN_ERR_IO. */
dqn_status dqn_ckpt_reader_open(const char *path, dqn_ckpt_reader **out);
void dqn_ckpt_reader_destroy(dqn_ckpt_reader *r);
int dqn_ckpt_reader_has(const dqn_ckpt_reader *r, const char *name);
/* A section's bytes (inside the reader, valid until it is destroyed); missing: DQN_ERR_FORMAT. */
dqn_status dqn_ckpt_reader_find(const dqn_ckpt_reader *r, const char *name, const void **data,
                                uint64_t *size);
/* Copy a section that must be exactly size bytes (else DQN_ERR_FORMAT naming both sizes). */
dqn_status dqn_ckpt_reader_copy(const dqn_ckpt_reader *r, const char *name, void *dst,
                                uint64_t size);

#endif
