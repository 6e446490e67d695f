/* Acrobot-v1: greedy mean >= -100 over 20 episodes within 100,000 env steps. */
#include "learn_common.h"

int main(void) {
    double m = learn_once("acrobot", 1, 100000, 20);
    CHECK(m >= -100.0, "acrobot: eval mean %.1f < -100", m);
    return check_finish("test_learn_acrobot");
}
