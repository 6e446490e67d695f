/* dqn train with ranks > 1 (docs/multi-gpu.md). On one host this process is the launcher: it
 * makes the NCCL id, starts one `dqn train` per GPU with the same flags (and the resolved
 * --run-dir) and the rank in the environment, and waits; the first rank that fails stops the
 * others, so no rank hangs in a collective. Each started process, or each process of a
 * multi-host launch, is a rank: DQN_RANK and DQN_WORLD_SIZE say which, DQN_LOCAL_DEVICE picks
 * its GPU (default: DQN_RANK), and DQN_NCCL_ID (hex), DQN_NCCL_ID_FILE (rank 0 writes it) or
 * NCCL_COMM_ID (host:port of rank 0) bring the ranks together. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

#define DEFAULT_TIMEOUT_S 600.0

/* ---------------------------------------------------------------- a rank */

static int env_double(const char *name, const char *v, double *out) {
    char *end;
    errno = 0;
    double x = *v ? strtod(v, &end) : NAN;
    if (!*v || errno || *end || !(x >= 0) || !isfinite(x))
        return cli_error(CLI_USAGE, "bad value for %s: \"%.80s\" (expected seconds >= 0; 0 = "
                                    "wait forever)", name, v);
    *out = x;
    return CLI_OK;
}

int cli_rank_from_env(const dqn_config *c, cli_rank *r) {
    memset(r, 0, sizeof *r);
    const char *rank = getenv("DQN_RANK"), *world = getenv("DQN_WORLD_SIZE");
    if (!rank) return CLI_OK;
    r->active = 1;
    if (!world)
        return cli_error(CLI_USAGE, "DQN_RANK is set but DQN_WORLD_SIZE is not (a rank needs "
                                    "both; docs/multi-gpu.md)");
    long long w, k, dev;
    int rc = cli_parse_int("DQN_WORLD_SIZE", world, 1, 1024, &w);
    if (rc) return rc;
    if (w != c->ranks)
        return cli_error(CLI_USAGE, "DQN_WORLD_SIZE (%lld) differs from ranks (%d): every rank "
                                    "runs with --ranks %lld", w, c->ranks, w);
    if ((rc = cli_parse_int("DQN_RANK", rank, 0, w - 1, &k))) return rc;
    if (strcmp(c->device, "cpu") == 0)
        return cli_error(CLI_USAGE, "DQN_RANK is set, but device is cpu: a rank needs device "
                                    "cuda");
    const char *local = getenv("DQN_LOCAL_DEVICE");
    if (!local) dev = k;
    else if ((rc = cli_parse_int("DQN_LOCAL_DEVICE", local, 0, 1023, &dev))) return rc;
    r->info.rank = (int)k;
    r->info.world = (int)w;
    r->info.device = (int)dev;
    r->info.timeout_s = DEFAULT_TIMEOUT_S;
    const char *t = getenv("DQN_NCCL_TIMEOUT_S");
    if (t && (rc = env_double("DQN_NCCL_TIMEOUT_S", t, &r->info.timeout_s))) return rc;
    const char *hex = getenv("DQN_NCCL_ID");
    r->id_file = getenv("DQN_NCCL_ID_FILE");
    if (hex) {
        dqn_status s = dqn_comm_id_from_hex(hex, "DQN_NCCL_ID", &r->info.id);
        if (s != DQN_OK) return cli_fail_status(s);
        r->have_id = 1;
        r->id_file = NULL;
    } else if (!r->id_file && !getenv("NCCL_COMM_ID")) {
        return cli_error(CLI_USAGE, "rank %lld: no NCCL id: set DQN_NCCL_ID (hex), "
                                    "DQN_NCCL_ID_FILE (a path every rank sees; rank 0 writes it) "
                                    "or NCCL_COMM_ID=host:port (docs/multi-gpu.md)", k);
    }
    int visible = dqn_cuda_device_count();
    if (dev >= visible)
        return cli_error(CLI_USAGE, "DQN_LOCAL_DEVICE %lld%s is not a visible CUDA device (%d "
                                    "visible on this host)", dev, local ? "" : " (= DQN_RANK)",
                         visible);
    return CLI_OK;
}

static int rank_failed(const cli_rank *r, dqn_status s) {
    const char *msg = dqn_last_error();
    int usage = s == DQN_ERR_ARG || s == DQN_ERR_IO || s == DQN_ERR_FORMAT ||
                s == DQN_ERR_UNSUPPORTED;
    return cli_error(usage ? CLI_USAGE : CLI_FAIL, "rank %d: %s", r->info.rank,
                     msg[0] ? msg : dqn_status_str(s));
}

int cli_rank_trainer(const dqn_config *c, cli_rank *r, dqn_trainer **t) {
    *t = NULL;
    dqn_status s = DQN_OK;
    int wrote_id = 0;
    if (!r->have_id && r->id_file && r->info.rank == 0) {
        s = dqn_comm_id_create(&r->info.id);
        if (s == DQN_OK) s = dqn_comm_id_write_file(r->id_file, &r->info.id);
        wrote_id = s == DQN_OK;
    } else if (!r->have_id && r->id_file) {
        s = dqn_comm_id_read_file(r->id_file, r->info.timeout_s, &r->info.id);
    } else if (!r->have_id) {
        s = dqn_comm_id_create(&r->info.id);   /* NCCL_COMM_ID: the same id on every rank */
    }
    if (s == DQN_OK) s = dqn_trainer_create_rank(c, &r->info, t);
    if (wrote_id) unlink(r->id_file);   /* every rank has joined, or this one failed: it is spent */
    return s == DQN_OK ? CLI_OK : rank_failed(r, s);
}

int cli_rank_stop(dqn_trainer *t, int local, int *stop) {
    dqn_status s = dqn_trainer_any_rank(t, local, stop);
    return s == DQN_OK ? CLI_OK : cli_error(CLI_FAIL, "%s", dqn_last_error());
}

/* ---------------------------------------------------------------- the launcher */

static volatile sig_atomic_t pending_signal;
static void on_signal(int sig) { pending_signal = sig; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *const rank_vars[] = {"DQN_RANK=", "DQN_WORLD_SIZE=", "DQN_LOCAL_DEVICE=",
                                        "DQN_NCCL_ID=", "DQN_NCCL_ID_FILE=", "NCCL_NVLS_ENABLE=",
                                        NULL};

/* The environment of rank r: ours, less any rank variables it held, plus the rank's (mine[4]
 * receives the strings it allocated). */
static char **rank_env(int r, int world, const char *hex, char *mine[4]) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 6, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (const char *const *v = rank_vars; *v && !drop; v++)
            drop = strncmp(environ[i], *v, strlen(*v)) == 0;
        if (!drop) env[k++] = environ[i];
    }
    char buf[64 + DQN_COMM_ID_HEX];
    snprintf(buf, sizeof buf, "DQN_RANK=%d", r);
    mine[0] = strdup(buf);
    snprintf(buf, sizeof buf, "DQN_WORLD_SIZE=%d", world);
    mine[1] = strdup(buf);
    snprintf(buf, sizeof buf, "DQN_LOCAL_DEVICE=%d", r);
    mine[2] = strdup(buf);
    snprintf(buf, sizeof buf, "DQN_NCCL_ID=%s", hex);
    mine[3] = strdup(buf);
    for (int j = 0; j < 4; j++) env[k++] = mine[j];
    env[k++] = "NCCL_NVLS_ENABLE=0";   /* NVLink multicast stays off on these machines */
    env[k] = NULL;
    if (!mine[0] || !mine[1] || !mine[2] || !mine[3]) {
        free(env);
        return NULL;
    }
    return env;
}

/* `train` and every flag as --key=value (a value may start with "--"), then the run directory;
 * argv[2..] are allocated. */
static char **rank_argv(const cli_flags *f, const char *run_dir) {
    char **argv = calloc((size_t)f->n + 4, sizeof *argv);
    if (!argv) return NULL;
    argv[0] = "dqn";
    argv[1] = "train";
    int k = 2;
    for (int i = 0; i <= f->n; i++, k++) {
        const char *key = i < f->n ? f->v[i].key : "--run-dir";
        const char *value = i < f->n ? f->v[i].value : run_dir;
        size_t len = strlen(key) + strlen(value) + 2;
        if (!(argv[k] = malloc(len))) return argv;   /* the caller sees argv[k] == NULL */
        snprintf(argv[k], len, "%s=%s", key, value);
    }
    return argv;
}

static void signal_all(const pid_t *pid, const int *live, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (live[r]) kill(pid[r], sig);
}

/* Wait for every rank. The first failure stops the others after a grace period (long for an
 * interrupt, when they are saving and stopping by themselves); signals to the launcher are
 * passed on. Returns rank 0's exit status, or the first failure's if rank 0 was stopped. */
static int wait_ranks(const pid_t *pid, int *live, int *code, int n) {
    int alive = n, first = -1, stopped_by_us = 0;
    double term_at = 0, kill_at = 0;
    const struct timespec nap = {0, 20 * 1000 * 1000};
    while (alive > 0) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            int r = 0;
            while (r < n && pid[r] != w) r++;
            if (r == n) continue;
            live[r] = 0;
            alive--;
            code[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            if (code[r] != 0 && first < 0) {
                first = r;
                int interrupted = code[r] == CLI_INTERRUPTED;
                if (!interrupted && !stopped_by_us)
                    cli_error(code[r], "rank %d (pid %d) %s %d; stopping the other ranks", r,
                              (int)w, WIFEXITED(st) ? "failed with exit status" : "died of signal",
                              WIFEXITED(st) ? code[r] : code[r] - 128);
                term_at = now_s() + (interrupted ? 600 : 10);
            }
            continue;
        }
        if (w < 0 && errno != EINTR) break;
        if (pending_signal) {
            int sig = pending_signal;
            pending_signal = 0;
            signal_all(pid, live, n, sig == SIGINT ? SIGINT : SIGTERM);
        }
        double t = now_s();
        if (first >= 0 && !stopped_by_us && t >= term_at) {
            signal_all(pid, live, n, SIGTERM);
            stopped_by_us = 1;
            kill_at = t + 10;
        } else if (stopped_by_us && t >= kill_at) {
            signal_all(pid, live, n, SIGKILL);
            kill_at = t + 3600;
        }
        nanosleep(&nap, NULL);
    }
    if (first < 0) return code[0];
    return stopped_by_us || code[0] == 0 ? code[first] : code[0];
}

/* Start the ranks (only async-signal-safe calls between fork and exec: the NCCL id server is a
 * thread of this process) and wait for them. */
static int start_and_wait(char **argv, char ***env, pid_t *pid, int *live, int *code, int n,
                          const char *run_dir) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal;   /* no SA_RESTART: a signal ends the wait's nap early */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    fflush(NULL);
    pid_t parent = getpid();
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            setpgid(0, 0);   /* Ctrl-C reaches the launcher alone, which passes it on once */
            prctl(PR_SET_PDEATHSIG, SIGKILL);   /* no rank outlives a killed launcher */
            if (getppid() != parent) _exit(CLI_FAIL);
            if (r > 0) {   /* rank 0 alone speaks; the others' errors still reach stderr */
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0) dup2(null, STDOUT_FILENO);
            }
            execve("/proc/self/exe", argv, env[r]);
            _exit(127);
        }
        if (pid[r] < 0) {
            cli_error(CLI_FAIL, "fork of rank %d failed: %s", r, strerror(errno));
            signal_all(pid, live, r, SIGKILL);
            while (wait(NULL) > 0) {}
            return CLI_FAIL;
        }
        live[r] = 1;
    }
    printf("launched %d ranks, one process per GPU (pids %d..%d); rank 0 writes %s\n", n,
           (int)pid[0], (int)pid[n - 1], run_dir);
    fflush(stdout);
    return wait_ranks(pid, live, code, n);
}

int cli_ranks_launch(const cli_flags *f, const dqn_config *c) {
    int n = c->ranks, visible = dqn_cuda_device_count();
    if (n > visible) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        return cli_error(CLI_USAGE, "--ranks %d: only %d CUDA device%s visible on this host%s%s%s;"
                                    " each rank needs its own GPU (several hosts: see "
                                    "docs/multi-gpu.md)", n, visible, visible == 1 ? " is" : "s are",
                         cvd ? " (CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "", cvd ? ")" : "");
    }
    dqn_comm_id id;
    if (dqn_comm_id_create(&id) != DQN_OK) return cli_error(CLI_FAIL, "%s", dqn_last_error());
    char hex[DQN_COMM_ID_HEX];
    dqn_comm_id_to_hex(&id, hex);
    char **argv = rank_argv(f, c->run_dir), ***env = calloc((size_t)n, sizeof *env);
    char **mine = calloc((size_t)n * 4, sizeof *mine);
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    int *live = calloc((size_t)n, sizeof *live), *code = calloc((size_t)n, sizeof *code);
    int ok = argv && argv[f->n + 2] && env && mine && pid && live && code;
    for (int r = 0; ok && r < n; r++) ok = (env[r] = rank_env(r, n, hex, mine + 4 * r)) != NULL;
    int rc = ok ? start_and_wait(argv, env, pid, live, code, n, c->run_dir)
                : cli_error(CLI_FAIL, "out of memory");
    for (int k = 2; argv && argv[k]; k++) free(argv[k]);
    for (int r = 0; env && r < n; r++) free(env[r]);
    for (int k = 0; mine && k < 4 * n; k++) free(mine[k]);
    free(argv);
    free(env);
    free(mine);
    free(pid);
    free(live);
    free(code);
    return rc;
}
