/* n-step assembler against a direct computation, and the replay buffer's ring. */
#include <string.h>

#include "check.h"
#include "dqn_philox.h"
#include "replay/nstep.h"
#include "replay/replay.h"

/* One env, obs = [t], reward r_t = t + 1; episodes end at given steps. Every emitted transition
 * from obs t must have R = sum_{k<m} g^k r_{t+k} over m = min(n, steps to the episode end),
 * disc = 0 if that end is a termination within the window, else g^m, next = obs t+m. */
static void check_nstep(int n, double g) {
    dqn_nstep s;
    CHECK_OK(dqn_nstep_create(&s, 1, n, 1, 1, g));
    /* episode ends: t=6 terminated, t=9 truncated, t=15 terminated, t=22 truncated */
    int term_at[32] = {0}, trunc_at[32] = {0};
    term_at[6] = term_at[15] = 1;
    trunc_at[9] = trunc_at[22] = 1;
    int seen[32] = {0};
    for (int t = 0; t <= 22; t++) {
        float obs = (float)t, next = (float)(t + 1);
        int32_t a = t % 2;
        dqn_nstep_clear_out(&s);
        dqn_nstep_push(&s, 0, &obs, &a, (float)(t + 1), &next, term_at[t], trunc_at[t]);
        for (int k = 0; k < s.out_n; k++) {
            int t0 = (int)s.out_obs[k];
            int end = t0;
            while (end < 32 && !term_at[end] && !trunc_at[end]) end++;
            int m = end - t0 + 1 < n ? end - t0 + 1 : n;
            double R = 0, gk = 1;
            for (int j = 0; j < m; j++) { R += gk * (t0 + j + 1); gk *= g; }
            int terminated = term_at[t0 + m - 1];
            CHECK(fabs(s.out_R[k] - R) < 1e-4 * fabs(R), "n=%d t0=%d: R %g vs %g", n, t0,
                  (double)s.out_R[k], R);
            CHECK(fabs(s.out_disc[k] - (terminated ? 0.0 : gk)) < 1e-6, "n=%d t0=%d: disc %g",
                  n, t0, (double)s.out_disc[k]);
            CHECK(s.out_next[k] == (float)(t0 + m), "n=%d t0=%d: next %g", n, t0,
                  (double)s.out_next[k]);
            CHECK(s.out_act[k] == t0 % 2, "n=%d t0=%d: action", n, t0);
            seen[t0]++;
        }
    }
    for (int t = 0; t <= 22; t++) CHECK(seen[t] == 1, "n=%d: transition from %d emitted %d times", n, t, seen[t]);
    dqn_nstep_destroy(&s);
}

static void check_replay(void) {
    dqn_backend *be;
    CHECK_OK(dqn_backend_cpu_create(&be));
    dqn_replay r;
    CHECK_OK(dqn_replay_create(&r, be, 5, 2, 2));
    float obs[14], nxt[14], R[7], disc[7];
    int32_t act[14];
    for (int i = 0; i < 7; i++) {
        obs[2 * i] = (float)i; obs[2 * i + 1] = -(float)i;
        nxt[2 * i] = (float)i + 0.5f; nxt[2 * i + 1] = 0;
        act[2 * i] = i; act[2 * i + 1] = 2 * i;
        R[i] = (float)(10 * i); disc[i] = 0.5f;
    }
    CHECK_OK(dqn_replay_add(&r, obs, act, R, disc, nxt, 3));
    CHECK(r.size == 3 && r.pos == 3 && *r.size_dev == 3, "after 3: size %d pos %d", r.size, r.pos);
    CHECK_OK(dqn_replay_add(&r, obs + 6, act + 6, R + 3, disc + 3, nxt + 6, 4));   /* wraps */
    CHECK(r.size == 5 && r.pos == 2 && *r.size_dev == 5, "after 7: size %d pos %d", r.size, r.pos);
    /* rows now hold transitions 5, 6, 2, 3, 4 */
    static const int expect[5] = {5, 6, 2, 3, 4};
    for (int j = 0; j < 5; j++) {
        int i = expect[j];
        CHECK(r.obs[2 * j] == (float)i && r.obs[2 * j + 1] == -(float)i && r.R[j] == 10.0f * i &&
                  r.act[2 * j + 1] == 2 * i && r.next_obs[2 * j] == (float)i + 0.5f,
              "row %d holds transition %d", j, i);
    }
    size_t bytes = dqn_replay_bytes(&r);
    char *copy = malloc(bytes);
    CHECK_OK(dqn_replay_export(&r, copy));
    dqn_replay r2;
    CHECK_OK(dqn_replay_create(&r2, be, 5, 2, 2));
    CHECK_OK(dqn_replay_import(&r2, copy, r.pos, r.size));
    CHECK(memcmp(r2.obs, r.obs, 10 * sizeof(float)) == 0 && r2.size == 5 && r2.pos == 2,
          "import round trip");
    CHECK(dqn_replay_import(&r2, copy, 7, 5) == DQN_ERR_FORMAT, "bad position accepted");
    free(copy);
    dqn_replay_destroy(&r2);
    dqn_replay_destroy(&r);
    be->ops->destroy(be);
}

int main(void) {
    for (int n = 1; n <= 5; n++) check_nstep(n, 0.9);
    check_replay();
    return check_finish("test_nstep_replay");
}
