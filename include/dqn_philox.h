/* Philox4x32-10 counter-based generator, shared by C host code and CUDA kernels so that both
 * backends draw identical numbers. Every draw is a pure function of (seed, stream, index). */
#ifndef DQN_PHILOX_H
#define DQN_PHILOX_H
#include <stdint.h>

#if defined(__CUDACC__)
#define DQN_HD __host__ __device__ __forceinline__
#else
#define DQN_HD static inline
#endif

/* Stream ids: one per kind of draw, so adding draws of one kind never shifts another's. */
enum {
    DQN_STREAM_INIT = 1,        /* weight initialisation */
    DQN_STREAM_TAU_ONLINE = 2,  /* N taus of the online forward on x */
    DQN_STREAM_TAU_TARGET = 3,  /* N' taus of the target forward on x' */
    DQN_STREAM_TAU_SELECT = 4,  /* K taus of the online forward on x' (double-DQN argmax) */
    DQN_STREAM_REPLAY = 5,      /* replay indices */
    DQN_STREAM_TAU_ACT = 6,     /* K taus of the actor */
    DQN_STREAM_EXPLORE = 7,     /* epsilon-greedy coin flips and random actions */
    DQN_STREAM_EVAL = 8,        /* evaluation env resets */
    DQN_STREAM_RANK = 9,        /* seed keys of the ranks of a data-parallel run */
    DQN_STREAM_MARKET_DATA = 15, /* the synthetic market data (episode starts: env streams) */
    DQN_STREAM_ENV = 16         /* + env index: env resets (each env its own stream) */
};

typedef struct { uint32_t v[4]; } dqn_philox_out;

DQN_HD uint32_t dqn_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* counter = (index lo, index hi, stream, 0), key = (seed lo, seed hi) */
DQN_HD dqn_philox_out dqn_philox4x32_10(uint64_t seed, uint32_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = stream, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = dqn_mulhilo32(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = dqn_mulhilo32(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    dqn_philox_out o;
    o.v[0] = c0; o.v[1] = c1; o.v[2] = c2; o.v[3] = c3;
    return o;
}

/* The i-th 32-bit word of a stream: block i/4, lane i%4. */
DQN_HD uint32_t dqn_philox_u32(uint64_t seed, uint32_t stream, uint64_t i) {
    dqn_philox_out o = dqn_philox4x32_10(seed, stream, i >> 2);
    return o.v[i & 3];
}

/* Uniform in the open interval (0, 1): 24 bits plus half an ulp, never 0 or 1 (taus need that). */
DQN_HD float dqn_u32_to_unit(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f) + (0.5f / 16777216.0f);
}

DQN_HD float dqn_philox_uniform(uint64_t seed, uint32_t stream, uint64_t i) {
    return dqn_u32_to_unit(dqn_philox_u32(seed, stream, i));
}

/* Integer in [0, n) by multiply-shift (bias below 2^-32 * n, irrelevant at replay sizes). */
DQN_HD uint32_t dqn_philox_below(uint64_t seed, uint32_t stream, uint64_t i, uint32_t n) {
    return (uint32_t)(((uint64_t)dqn_philox_u32(seed, stream, i) * (uint64_t)n) >> 32);
}

/* Uniform double in [0, 1) with 53 bits from two words; env resets use it (Gymnasium draws doubles). */
DQN_HD double dqn_philox_double(uint64_t seed, uint32_t stream, uint64_t i2) {
    dqn_philox_out o = dqn_philox4x32_10(seed, stream, i2);
    uint64_t hi = o.v[0] >> 5, lo = o.v[1] >> 6;   /* 27 + 26 bits */
    return ((double)hi * 67108864.0 + (double)lo) * (1.0 / 9007199254740992.0);
}

/* The seed key of rank r of a data-parallel run: its envs, exploration, replay draws and taus
 * (the initial weights keep the run's seed). Rank 0 keeps the run's seed. */
DQN_HD uint64_t dqn_rank_seed(uint64_t seed, uint32_t rank) {
    if (rank == 0) return seed;
    dqn_philox_out o = dqn_philox4x32_10(seed, DQN_STREAM_RANK, rank);
    return (uint64_t)o.v[0] | (uint64_t)o.v[1] << 32;
}

#endif
