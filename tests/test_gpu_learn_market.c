/* Market walk-forward on the CUDA backend: the CPU test's bar (tests/learn_market.h), with the
 * wall clock of each fold printed. */
#include "backends/backend.h"
#include "learn_market.h"

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    learn_market_on("cuda");
    return check_finish("test_gpu_learn_market");
}
