/* Acrobot-v1: a greedy mean >= -100 over 20 episodes within 100,000 env steps. */
#include "learn_common.h"

int main(void) {
    double m = learn_until("acrobot", 1, 100000, 10000, 20, -100.0);
    CHECK(m >= -100.0, "acrobot: best eval mean %.1f < -100", m);
    return check_finish("test_learn_acrobot");
}
