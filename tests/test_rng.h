/* The tests' own input generator (splitmix64), independent of the Philox under test. Define
 * TEST_RNG_SEED before including to give a test its own sequence. */
#ifndef DQN_TEST_RNG_H
#define DQN_TEST_RNG_H
#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng = TEST_RNG_SEED;

static uint64_t next_u64(void) {
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) with 53 bits */
static double unif(double lo, double hi) {
    return lo + (hi - lo) * ((double)(next_u64() >> 11) * (1.0 / 9007199254740992.0));
}
#endif
