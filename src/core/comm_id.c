/* A communicator id as text, for the environment (DQN_NCCL_ID) and for a file on a filesystem
 * that every host sees (DQN_NCCL_ID_FILE): one line of hex. The file is made visible by link(2),
 * which is atomic and refuses an existing name, so a reader never sees half an id and a stale id
 * from an earlier launch is an error, not a hang. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "dqn.h"

static const char hexdig[] = "0123456789abcdef";

void dqn_comm_id_to_hex(const dqn_comm_id *id, char hex[DQN_COMM_ID_HEX]) {
    for (int i = 0; i < DQN_COMM_ID_BYTES; i++) {
        hex[2 * i] = hexdig[id->bytes[i] >> 4];
        hex[2 * i + 1] = hexdig[id->bytes[i] & 15];
    }
    hex[2 * DQN_COMM_ID_BYTES] = 0;
}

static int nibble(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

dqn_status dqn_comm_id_from_hex(const char *hex, const char *what, dqn_comm_id *id) {
    size_t n = strlen(hex);
    if (n != 2 * DQN_COMM_ID_BYTES)
        return dqn_error_user(DQN_ERR_ARG, "bad %s: %zu characters, expected %d hex digits (an "
                              "NCCL unique id)", what, n, 2 * DQN_COMM_ID_BYTES);
    dqn_comm_id tmp;
    for (int i = 0; i < DQN_COMM_ID_BYTES; i++) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return dqn_error_user(DQN_ERR_ARG, "bad %s: character %d is not a hex digit", what,
                                  hi < 0 ? 2 * i + 1 : 2 * i + 2);
        tmp.bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    *id = tmp;
    return DQN_OK;
}

dqn_status dqn_comm_id_write_file(const char *path, const dqn_comm_id *id) {
    if (access(path, F_OK) == 0)
        return dqn_error_user(DQN_ERR_IO, "%s exists: a stale id of an earlier launch? (use a "
                              "fresh path per launch, or remove it)", path);
    char tmp[4096], hex[DQN_COMM_ID_HEX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return dqn_error_user(DQN_ERR_IO, "%s: path too long", path);
    dqn_comm_id_to_hex(id, hex);
    FILE *f = fopen(tmp, "w");
    if (!f) return dqn_error_user(DQN_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%s\n", hex) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad && link(tmp, path) != 0) {
        bad = 1;
        err = errno;
    }
    unlink(tmp);
    if (bad)
        return dqn_error_user(DQN_ERR_IO, "cannot write %s: %s", path,
                              err == EEXIST ? "it exists (another rank 0?)" : strerror(err));
    return DQN_OK;
}

static dqn_status read_once(const char *path, dqn_comm_id *id) {
    FILE *f = fopen(path, "r");
    if (!f) return dqn_error_user(DQN_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    char line[2 * DQN_COMM_ID_HEX];
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    char what[4200];
    snprintf(what, sizeof what, "id in %s", path);
    dqn_status s = dqn_comm_id_from_hex(line, what, id);
    return s == DQN_OK ? s : DQN_ERR_FORMAT;
}

dqn_status dqn_comm_id_read_file(const char *path, double timeout_s, dqn_comm_id *id) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const struct timespec nap = {0, 50 * 1000 * 1000};
    while (access(path, F_OK) != 0) {
        if (errno != ENOENT)
            return dqn_error_user(DQN_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (timeout_s > 0 && waited >= timeout_s)
            return dqn_error_user(DQN_ERR_IO, "%s did not appear within %g s (rank 0 writes it: "
                                  "did rank 0 start, with the same DQN_NCCL_ID_FILE?)", path,
                                  timeout_s);
        nanosleep(&nap, NULL);
    }
    return read_once(path, id);
}
