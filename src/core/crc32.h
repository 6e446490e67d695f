/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as in zlib, PNG and gzip. */
#ifndef DQN_CORE_CRC32_H
#define DQN_CORE_CRC32_H
#include <stddef.h>
#include <stdint.h>

/* Incremental: start with crc = 0 and feed the bytes in any number of pieces. */
uint32_t dqn_crc32_update(uint32_t crc, const void *data, size_t n);

static inline uint32_t dqn_crc32(const void *data, size_t n) {
    return dqn_crc32_update(0, data, n);
}

#endif
