#include "core/ckpt_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32.h"
#include "core/error.h"

static const unsigned char magic[8] = {'D', 'Q', 'N', 'C', 'K', 'P', 'T', '\0'};
enum { HEADER_BYTES = 16, SECTION_HEADER_BYTES = DQN_CKPT_NAME_MAX + 8, CRC_BYTES = 4 };

typedef struct {
    char name[DQN_CKPT_NAME_MAX];
    const unsigned char *data;
    uint64_t size;
} section;

struct dqn_ckpt_writer {
    section *sec;
    uint32_t n, cap;
};

struct dqn_ckpt_reader {
    char *path;
    unsigned char *buf;
    section *sec;
    uint32_t n;
};

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_le32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

dqn_status dqn_ckpt_writer_create(dqn_ckpt_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? DQN_OK : DQN_ERR(DQN_ERR_NOMEM, "checkpoint writer");
}

void dqn_ckpt_writer_destroy(dqn_ckpt_writer *w) {
    if (!w) return;
    free(w->sec);
    free(w);
}

dqn_status dqn_ckpt_writer_add(dqn_ckpt_writer *w, const char *name, const void *data,
                               uint64_t size) {
    size_t len = strlen(name);
    if (len == 0 || len >= DQN_CKPT_NAME_MAX)
        return DQN_ERR(DQN_ERR_ARG, "checkpoint section name \"%s\" must be 1..%d characters", name,
                       DQN_CKPT_NAME_MAX - 1);
    if (size > 0 && !data) return DQN_ERR(DQN_ERR_ARG, "checkpoint section \"%s\": no data", name);
    for (uint32_t i = 0; i < w->n; i++)
        if (strcmp(w->sec[i].name, name) == 0)
            return DQN_ERR(DQN_ERR_ARG, "checkpoint section \"%s\" added twice", name);
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? 2 * w->cap : 16;
        section *s = realloc(w->sec, cap * sizeof *s);
        if (!s) return DQN_ERR(DQN_ERR_NOMEM, "checkpoint sections");
        w->sec = s;
        w->cap = cap;
    }
    section *s = &w->sec[w->n++];
    memset(s->name, 0, sizeof s->name);
    memcpy(s->name, name, len);
    s->data = data;
    s->size = size;
    return DQN_OK;
}

/* ---- the test-only crash hook ----
 * The writer's steps: open (of path.tmp), each write, fsync, close, rename, then open, fsync and
 * close of the directory. Two environment variables, read by tests only (tests/test_crash.sh):
 *   DQN_CKPT_FAULT=k   raise SIGKILL right after the k-th step, counted from 1 across every
 *                      dqn_ckpt_writer_write of the process; just before, write
 *                      "DQN_CKPT_FAULT k: STEP PATH" to stderr, so the test knows which step it was
 *   DQN_CKPT_TRACE=F   append a line "k STEP PATH" to the file F after each step
 * Unset (the normal case) they cost one getenv each per checkpoint and nothing else. */
typedef struct {
    long long at;      /* DQN_CKPT_FAULT, else 0 */
    const char *trace; /* DQN_CKPT_TRACE, else NULL */
} fault_hook;

static _Atomic long long fault_steps;

static void fault_point(const fault_hook *h, const char *step, const char *path) {
    if (h->at <= 0 && !h->trace) return;
    long long k = ++fault_steps;
    char line[600];
    int n, saved = errno;
    if (h->trace) {
        n = snprintf(line, sizeof line, "%lld %s %s\n", k, step, path);
        int fd = open(h->trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0 && n > 0) {
            ssize_t ignored = write(fd, line, strnlen(line, sizeof line));
            (void)ignored;
        }
        if (fd >= 0) close(fd);
        errno = saved;
    }
    if (k != h->at) return;
    n = snprintf(line, sizeof line, "DQN_CKPT_FAULT %lld: %s %s\n", k, step, path);
    if (n > 0) {
        ssize_t ignored = write(STDERR_FILENO, line, strnlen(line, sizeof line));
        (void)ignored;
    }
    raise(SIGKILL);
}

static fault_hook fault_hook_read(void) {
    fault_hook h = {0, NULL};
    const char *v = getenv("DQN_CKPT_FAULT");
    if (v && *v) {
        char *end;
        long long k = strtoll(v, &end, 10);
        if (*end == 0 && k > 0) h.at = k;
    }
    v = getenv("DQN_CKPT_TRACE");
    if (v && *v) h.trace = v;
    return h;
}

/* write(2) all n bytes (retrying short writes and EINTR); 0 with errno set on failure */
static int write_full(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return 0;
        }
        b += w;
        n -= (size_t)w;
    }
    return 1;
}

typedef struct {
    int fd;
    uint32_t crc;
    const fault_hook *hook;
    const char *tmp;
} out_file;

/* one write of the file, folding the bytes into the running CRC */
static int put(out_file *o, const void *p, size_t n, int crc) {
    if (crc) o->crc = dqn_crc32_update(o->crc, p, n);
    if (n == 0) return 1;
    int ok = write_full(o->fd, p, n);
    fault_point(o->hook, "write", o->tmp);
    return ok;
}

static int write_all(const dqn_ckpt_writer *w, out_file *o) {
    unsigned char head[HEADER_BYTES];
    memcpy(head, magic, sizeof magic);
    put_le32(head + 8, DQN_CKPT_VERSION);
    put_le32(head + 12, w->n);
    if (!put(o, head, sizeof head, 1)) return 0;
    for (uint32_t i = 0; i < w->n; i++) {
        unsigned char sh[SECTION_HEADER_BYTES];
        memcpy(sh, w->sec[i].name, DQN_CKPT_NAME_MAX);
        put_le64(sh + DQN_CKPT_NAME_MAX, w->sec[i].size);
        if (!put(o, sh, sizeof sh, 1)) return 0;
        if (!put(o, w->sec[i].data, (size_t)w->sec[i].size, 1)) return 0;
    }
    unsigned char tail[CRC_BYTES];
    put_le32(tail, o->crc);
    return put(o, tail, sizeof tail, 0);
}

/* fsync the directory that holds path, so that the rename itself survives a power loss. A file
 * system that cannot sync a directory (EINVAL) is taken as having nothing to sync. */
static int sync_dir(const char *path, const fault_hook *hook) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return 0;
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    int e = errno;
    fault_point(hook, "open-dir", dir);
    int ok = fd >= 0;
    if (ok && fsync(fd) != 0 && errno != EINVAL) {
        ok = 0;
        e = errno;
    }
    if (fd >= 0) fault_point(hook, "fsync-dir", dir);
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (fd >= 0) fault_point(hook, "close-dir", dir);
    free(dir);
    errno = e;
    return ok;
}

dqn_status dqn_ckpt_writer_write(const dqn_ckpt_writer *w, const char *path) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp) return DQN_ERR(DQN_ERR_NOMEM, "checkpoint path");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    fault_hook hook = fault_hook_read();
    out_file o = {.fd = -1, .crc = 0, .hook = &hook, .tmp = tmp};
    o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int e = errno;
    if (o.fd < 0) {
        free(tmp);
        return dqn_error_user(DQN_ERR_IO, "%s: cannot write checkpoint: %s", path, strerror(e));
    }
    fault_point(&hook, "open", tmp);
    /* the data reach the disk before the rename makes them the checkpoint */
    int ok = write_all(w, &o);
    if (ok) {
        ok = fsync(o.fd) == 0;
        fault_point(&hook, "fsync", tmp);
    }
    e = errno;
    if (close(o.fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    fault_point(&hook, "close", tmp);
    if (ok) {
        ok = rename(tmp, path) == 0;
        e = errno;
        fault_point(&hook, "rename", path);
    }
    if (!ok) remove(tmp);
    free(tmp);
    /* after the rename the new file is the checkpoint; the directory's sync makes that durable */
    if (ok && !sync_dir(path, &hook))
        return dqn_error_user(DQN_ERR_IO, "%s: checkpoint written, but its directory could not be "
                              "synced: %s", path, strerror(errno));
    return ok ? DQN_OK
              : dqn_error_user(DQN_ERR_IO, "%s: cannot write checkpoint: %s", path, strerror(e));
}

void dqn_ckpt_reader_destroy(dqn_ckpt_reader *r) {
    if (!r) return;
    free(r->path);
    free(r->buf);
    free(r->sec);
    free(r);
}

static dqn_status read_file(const char *path, unsigned char **buf, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return dqn_error_user(DQN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int ok = fstat(fileno(f), &st) == 0;
    const char *why = !ok ? strerror(errno) : S_ISREG(st.st_mode) ? NULL : "not a regular file";
    if (why) {
        fclose(f);
        return dqn_error_user(DQN_ERR_IO, "%s: cannot open: %s", path, why);
    }
    *size = (uint64_t)st.st_size;
    *buf = malloc((size_t)*size + 1);
    if (!*buf) {
        fclose(f);
        return DQN_ERR(DQN_ERR_NOMEM, "%s: %llu bytes", path, (unsigned long long)*size);
    }
    size_t got = fread(*buf, 1, (size_t)*size, f);
    int e = errno;
    fclose(f);
    if (got != *size) {
        free(*buf);
        *buf = NULL;
        return dqn_error_user(DQN_ERR_IO, "%s: read failed: %s", path, strerror(e));
    }
    return DQN_OK;
}

/* Walk the structure (so truncation is reported as such), then check the CRC. */
static dqn_status parse(dqn_ckpt_reader *r, uint64_t n) {
    const unsigned char *b = r->buf;
    const char *p = r->path;
    if (n < sizeof magic) {
        if (memcmp(b, magic, (size_t)n) == 0)
            return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (%llu bytes)", p,
                                  (unsigned long long)n);
        return dqn_error_user(DQN_ERR_FORMAT, "%s: not a dqn checkpoint", p);
    }
    if (memcmp(b, magic, sizeof magic) != 0)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: not a dqn checkpoint", p);
    if (n < HEADER_BYTES)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (%llu bytes)", p,
                              (unsigned long long)n);
    uint32_t version = get_le32(b + 8);
    if (version != DQN_CKPT_VERSION)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: version %u not supported (expected %u)", p,
                              version, DQN_CKPT_VERSION);
    uint32_t count = get_le32(b + 12);
    if ((uint64_t)count * SECTION_HEADER_BYTES > n - HEADER_BYTES)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (%u sections in %llu bytes)", p,
                              count, (unsigned long long)n);
    r->sec = calloc(count ? count : 1, sizeof *r->sec);
    if (!r->sec) return DQN_ERR(DQN_ERR_NOMEM, "%s: %u sections", p, count);
    uint64_t pos = HEADER_BYTES;
    for (uint32_t i = 0; i < count; i++) {
        if (n - pos < SECTION_HEADER_BYTES)
            return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (in section %u of %u)", p, i + 1,
                                  count);
        section *s = &r->sec[i];
        memcpy(s->name, b + pos, DQN_CKPT_NAME_MAX);
        if (s->name[0] == 0 || !memchr(s->name, 0, DQN_CKPT_NAME_MAX))
            return dqn_error_user(DQN_ERR_FORMAT, "%s: section %u has a malformed name", p, i + 1);
        s->size = get_le64(b + pos + DQN_CKPT_NAME_MAX);
        pos += SECTION_HEADER_BYTES;
        if (s->size > n - pos)
            return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (section \"%s\")", p, s->name);
        s->data = b + pos;
        pos += s->size;
        r->n = i + 1;
    }
    if (n - pos < CRC_BYTES)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: truncated (no CRC)", p);
    if (n - pos > CRC_BYTES)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: %llu unexpected bytes after the last section",
                              p, (unsigned long long)(n - pos - CRC_BYTES));
    if (dqn_crc32(b, (size_t)pos) != get_le32(b + pos))
        return dqn_error_user(DQN_ERR_FORMAT, "%s: CRC mismatch (file corrupt)", p);
    return DQN_OK;
}

dqn_status dqn_ckpt_reader_open(const char *path, dqn_ckpt_reader **out) {
    *out = NULL;
    dqn_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return DQN_ERR(DQN_ERR_NOMEM, "checkpoint reader");
    }
    uint64_t n = 0;
    dqn_status s = read_file(path, &r->buf, &n);
    if (s == DQN_OK) s = parse(r, n);
    if (s != DQN_OK) {
        dqn_ckpt_reader_destroy(r);
        return s;
    }
    *out = r;
    return DQN_OK;
}

static const section *lookup(const dqn_ckpt_reader *r, const char *name) {
    for (uint32_t i = 0; i < r->n; i++)
        if (strcmp(r->sec[i].name, name) == 0) return &r->sec[i];
    return NULL;
}

int dqn_ckpt_reader_has(const dqn_ckpt_reader *r, const char *name) {
    return lookup(r, name) != NULL;
}

dqn_status dqn_ckpt_reader_find(const dqn_ckpt_reader *r, const char *name, const void **data,
                                uint64_t *size) {
    const section *s = lookup(r, name);
    if (!s) return dqn_error_user(DQN_ERR_FORMAT, "%s: no section \"%s\"", r->path, name);
    *data = s->data;
    *size = s->size;
    return DQN_OK;
}

dqn_status dqn_ckpt_reader_copy(const dqn_ckpt_reader *r, const char *name, void *dst,
                                uint64_t size) {
    const void *data;
    uint64_t have;
    DQN_TRY(dqn_ckpt_reader_find(r, name, &data, &have));
    if (have != size)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: section \"%s\" has %llu bytes, expected %llu",
                              r->path, name, (unsigned long long)have, (unsigned long long)size);
    if (size) memcpy(dst, data, (size_t)size);
    return DQN_OK;
}
