/* Wall clock to solve CartPole-v1 (the learning bar: a greedy mean >= 475 over 20 episodes),
 * evaluating every 5,000 env steps (every=N to change it) within the config's budget, for seeds
 * 1..N (or A..B), on one device and env loop: the cartpole preset, changed by a config file
 * (config=FILE, as dqn train --config) and key=value pairs, in the order given.
 * usage: bench_solve [N | A-B (3)] [cpu|cuda (cpu)] [auto|host|device (the config's)]
 *                    [every=N] [config=FILE] [key=value]...
 * Prints the steps and seconds to the first passing evaluation. */
#include <stdlib.h>
#include <string.h>
#include "learn_common.h"

static int usage(const char *why) {
    fprintf(stderr, "bench_solve: %s\nusage: bench_solve [N | A-B] [cpu|cuda] "
            "[auto|host|device] [every=N] [config=FILE] [key=value]...\n", why);
    return 2;
}

int main(int argc, char **argv) {
    long first = 1, last = 3;
    if (argc > 1 && sscanf(argv[1], "%ld-%ld", &first, &last) != 2) {
        first = 1;
        last = atol(argv[1]);
    }
    const char *device = argc > 2 ? argv[2] : "cpu";
    const char *loop = argc > 3 ? argv[3] : NULL;
    if (first < 0 || last < first || (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0))
        return usage("bad seeds or device");
    dqn_config c;
    if (dqn_config_preset(&c, "cartpole") != DQN_OK) return 1;
    long every = 5000;
    char tag[512] = "";
    for (int i = 4; i < argc; i++) {
        char key[64];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i] || (size_t)(eq - argv[i]) >= sizeof key)
            return usage("expected key=value");
        memcpy(key, argv[i], (size_t)(eq - argv[i]));
        key[eq - argv[i]] = 0;
        if (strcmp(key, "every") == 0) every = atol(eq + 1);
        else if (strcmp(key, "config") == 0) {
            if (dqn_config_load_file(&c, eq + 1) != DQN_OK) return usage(dqn_last_error());
        } else if (dqn_config_set(&c, key, eq + 1) != DQN_OK) return usage(dqn_last_error());
        size_t u = strlen(tag);
        snprintf(tag + u, sizeof tag - u, " %s", argv[i]);
    }
    snprintf(c.device, sizeof c.device, "%s", device);   /* the arguments', over a file's */
    if (loop && dqn_config_set(&c, "env_loop", loop) != DQN_OK) return usage(dqn_last_error());
    if (strcmp(c.env, "cartpole") != 0) return usage("the config's env is not cartpole");
    if (every < 1 || dqn_config_validate(&c) != DQN_OK) return usage("bad config or every");
    const char *used = c.env_loop;   /* the loop the trainers ran, once one has been made */
    double total = 0;
    int solved = 0;
    const long seeds = last - first + 1;
    for (long s = first; s <= last; s++) {
        c.seed = (uint64_t)s;
        double t0 = learn_now();
        double m = learn_until_config(&c, every, 20, 475.0, &used);
        double dt = learn_now() - t0;
        total += dt;
        solved += m >= 475.0;
        printf("solve cartpole %s %s%s seed %ld: %s in %.2f s (evaluations included)\n", device,
               used, tag, s, m >= 475.0 ? "solved" : "NOT solved", dt);
    }
    printf("solve cartpole %s %s%s: mean %.2f s over %ld seeds, %d solved (CleanRL dqn.py: about "
           "145 s, quoted in the issue, not measured here)\n", device, used, tag,
           total / (double)seeds, seeds, solved);
    return check_finish("bench_solve") ? 1 : 0;
}
