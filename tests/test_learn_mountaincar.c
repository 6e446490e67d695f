/* MountainCar-v0: a greedy mean >= -150 over 20 episodes within 200,000 env steps. */
#include "learn_common.h"

int main(void) {
    double m = learn_until("mountaincar", 1, 200000, 20000, 20, -150.0);
    CHECK(m >= -150.0, "mountaincar: best eval mean %.1f < -150", m);
    return check_finish("test_learn_mountaincar");
}
