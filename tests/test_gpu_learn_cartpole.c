/* CartPole-v1 on the CUDA backend through the host's env loop (env_loop host; the device loop,
 * CUDA's default, learns in test_gpu_device_loop) reaches the CPU test's bar (a greedy mean >= 475
 * over 20 episodes within 100,000 env steps, seeds 1-3), and the run's wall clock is printed. */
#include "backends/backend.h"
#include "learn_common.h"

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double t0 = learn_now();
        double m = learn_until_on("cuda", "host", "cartpole", seed, 100000, 5000, 20, 475.0);
        printf("gpu solve cartpole seed %llu: best eval %.1f, %.1f s\n", (unsigned long long)seed,
               m, learn_now() - t0);
        CHECK(m >= 475.0, "cuda cartpole seed %llu: best eval mean %.1f < 475",
              (unsigned long long)seed, m);
    }
    return check_finish("test_gpu_learn_cartpole");
}
