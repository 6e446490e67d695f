/* CartPole-v1: greedy mean >= 475 over 20 episodes within 100,000 env steps, seeds 1, 2, 3. */
#include "learn_common.h"

int main(void) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double m = learn_once("cartpole", seed, 100000, 20);
        CHECK(m >= 475.0, "cartpole seed %llu: eval mean %.1f < 475", (unsigned long long)seed, m);
    }
    return check_finish("test_learn_cartpole");
}
