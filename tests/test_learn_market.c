/* Market walk-forward on the CPU: the bar of tests/learn_market.h. */
#include "learn_market.h"

int main(void) {
    learn_market_on("cpu");
    return check_finish("test_learn_market");
}
