/* MountainCar-v0: the preset's final policy (120,000 env steps, prioritized replay) scores a
 * greedy mean >= -190 over 50 episodes, so it reaches the flag. This seed scored -106.8 with the
 * built-in GEMM; on unseen seeds the final policies scored -98 to -122 (docs/BENCHMARKS.md,
 * "Learning"). The bar leaves room for a late find of the flag under another GEMM's rounding. */
#include "learn_common.h"

int main(void) {
    double m = learn_final("mountaincar", 1, 50);
    CHECK(m >= -190.0, "mountaincar: final greedy mean %.1f < -190", m);
    return check_finish("test_learn_mountaincar");
}
