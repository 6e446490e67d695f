/* Wall clock to solve CartPole-v1 (the learning bar: a greedy mean >= 475 over 20 episodes),
 * evaluating every 5,000 env steps within the preset's own budget (so its epsilon schedule is
 * the shipped one), for seeds 1..N, on one device and env loop.
 * usage: bench_solve [seeds (3)] [cpu|cuda (cpu)] [host|device (the config's default)]
 * Prints the steps and seconds to the first passing evaluation. */
#include <stdlib.h>
#include <string.h>

#include "learn_common.h"

int main(int argc, char **argv) {
    int seeds = argc > 1 ? atoi(argv[1]) : 3;
    const char *device = argc > 2 ? argv[2] : "cpu";
    const char *loop = argc > 3 ? argv[3] : NULL;
    if (seeds < 1 || (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) ||
        (loop && strcmp(loop, "host") != 0 && strcmp(loop, "device") != 0)) {
        fprintf(stderr, "usage: bench_solve [seeds >= 1] [cpu|cuda] [host|device]\n");
        return 2;
    }
    double total = 0;
    dqn_config c;
    if (dqn_config_preset(&c, "cartpole") != DQN_OK) return 1;
    const char *tag = loop ? loop : c.env_loop;
    for (int s = 1; s <= seeds; s++) {
        double t0 = learn_now();
        double m = learn_until_on(device, loop, "cartpole", (uint64_t)s, c.steps, 5000, 20, 475.0);
        double dt = learn_now() - t0;
        total += dt;
        printf("solve cartpole %s %s seed %d: %s in %.1f s (evaluations included)\n", device, tag,
               s, m >= 475.0 ? "solved" : "NOT solved", dt);
    }
    printf("solve cartpole %s %s: mean %.1f s over %d seeds (CleanRL dqn.py: about 145 s, quoted "
           "in the issue, not measured here)\n", device, tag, total / seeds, seeds);
    return check_finish("bench_solve") ? 1 : 0;
}
