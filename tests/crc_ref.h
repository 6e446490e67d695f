/* Reference CRCs one bit at a time over a reflected polynomial: the definition, not a table
 * (0xEDB88320 for CRC-32, 0x82F63B78 for CRC-32C). */
#ifndef DQN_TEST_CRC_REF_H
#define DQN_TEST_CRC_REF_H
#include <stddef.h>
#include <stdint.h>

static uint32_t crc_bitwise(uint32_t poly, const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
    }
    return ~c;
}
#endif
