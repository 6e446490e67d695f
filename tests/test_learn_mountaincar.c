/* MountainCar-v0: greedy mean >= -150 over 20 episodes within 200,000 env steps. */
#include "learn_common.h"

int main(void) {
    double m = learn_once("mountaincar", 1, 200000, 20);
    CHECK(m >= -150.0, "mountaincar: eval mean %.1f < -150", m);
    return check_finish("test_learn_mountaincar");
}
