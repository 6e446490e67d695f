/* Acrobot-v1: the preset's final policy (100,000 env steps) scores a greedy mean >= -120 over
 * 50 episodes. On unseen seeds the final policies scored -77 to -98 (docs/BENCHMARKS.md,
 * "Learning"); the bar leaves room for another GEMM's rounding. */
#include "learn_common.h"

int main(void) {
    double m = learn_final("acrobot", 101, 50);
    CHECK(m >= -120.0, "acrobot: final greedy mean %.1f < -120", m);
    return check_finish("test_learn_acrobot");
}
