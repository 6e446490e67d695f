/* TensorBoard event files without TensorFlow: Event protos encoded by hand, in TFRecord framing.
 * A record is uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the
 * data (all little-endian). The file starts with an Event {wall_time, file_version
 * "brain.Event:2"}; each scalar is an Event {wall_time, step, summary {value {tag,
 * simple_value}}}. */
#ifndef DQN_CORE_TFEVENTS_H
#define DQN_CORE_TFEVENTS_H
#include <stddef.h>
#include <stdint.h>

#include "dqn.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); incremental from crc = 0. */
uint32_t dqn_crc32c_update(uint32_t crc, const void *data, size_t n);
static inline uint32_t dqn_crc32c(const void *data, size_t n) {
    return dqn_crc32c_update(0, data, n);
}
/* TFRecord's masking, so that a CRC over data holding CRCs stays well spread. */
static inline uint32_t dqn_tfrecord_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* Bytes of a record holding n bytes of data. */
#define DQN_TFRECORD_OVERHEAD 16
/* Frame n bytes of data into out (n + DQN_TFRECORD_OVERHEAD bytes). */
void dqn_tfrecord_frame(const void *data, size_t n, uint8_t *out);

/* Encoders of one Event into buf: the number of bytes it needs, written only when that is at
 * most cap (so a call with cap 0 sizes it). The tag of a scalar is a NUL-terminated string. */
size_t dqn_tfevents_encode_version(double wall_time, uint8_t *buf, size_t cap);
size_t dqn_tfevents_encode_scalar(double wall_time, int64_t step, const char *tag, float value,
                                  uint8_t *buf, size_t cap);

/* An open event file: DIR/events.out.tfevents.<unix time>.<hostname>, created new (with a
 * ".N" suffix should that name exist), its first record written and flushed. */
typedef struct dqn_tfevents dqn_tfevents;
dqn_status dqn_tfevents_open(const char *dir, double wall_time, dqn_tfevents **out);
const char *dqn_tfevents_path(const dqn_tfevents *w);
/* Buffered; dqn_tfevents_flush makes them visible to a reader. */
dqn_status dqn_tfevents_scalar(dqn_tfevents *w, double wall_time, int64_t step, const char *tag,
                               float value);
dqn_status dqn_tfevents_flush(dqn_tfevents *w);
/* Flush, close and free (w may be NULL); DQN_ERR_IO if what was buffered could not be written. */
dqn_status dqn_tfevents_close(dqn_tfevents *w);

#endif
