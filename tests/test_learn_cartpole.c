/* CartPole-v1: a greedy mean >= 475 over 20 episodes within 100,000 env steps, seeds 1, 2, 3. */
#include "learn_common.h"

int main(void) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double m = learn_until("cartpole", seed, 100000, 5000, 20, 475.0);
        CHECK(m >= 475.0, "cartpole seed %llu: best eval mean %.1f < 475",
              (unsigned long long)seed, m);
    }
    return check_finish("test_learn_cartpole");
}
