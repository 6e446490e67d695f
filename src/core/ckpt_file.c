#include "core/ckpt_file.h"

#include <errno.h>
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

/* fwrite that also folds the bytes into the running CRC */
static int put(FILE *f, uint32_t *crc, const void *p, size_t n) {
    *crc = dqn_crc32_update(*crc, p, n);
    return n == 0 || fwrite(p, 1, n, f) == n;
}

static int write_all(const dqn_ckpt_writer *w, FILE *f) {
    uint32_t crc = 0;
    unsigned char head[HEADER_BYTES];
    memcpy(head, magic, sizeof magic);
    put_le32(head + 8, DQN_CKPT_VERSION);
    put_le32(head + 12, w->n);
    if (!put(f, &crc, head, sizeof head)) return 0;
    for (uint32_t i = 0; i < w->n; i++) {
        unsigned char sh[SECTION_HEADER_BYTES];
        memcpy(sh, w->sec[i].name, DQN_CKPT_NAME_MAX);
        put_le64(sh + DQN_CKPT_NAME_MAX, w->sec[i].size);
        if (!put(f, &crc, sh, sizeof sh)) return 0;
        if (!put(f, &crc, w->sec[i].data, (size_t)w->sec[i].size)) return 0;
    }
    unsigned char tail[CRC_BYTES];
    put_le32(tail, crc);
    return fwrite(tail, 1, sizeof tail, f) == sizeof tail;
}

dqn_status dqn_ckpt_writer_write(const dqn_ckpt_writer *w, const char *path) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp) return DQN_ERR(DQN_ERR_NOMEM, "checkpoint path");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(tmp);
        return dqn_error_user(DQN_ERR_IO, "%s: cannot write checkpoint: %s", path, strerror(e));
    }
    int ok = write_all(w, f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) remove(tmp);
    free(tmp);
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
