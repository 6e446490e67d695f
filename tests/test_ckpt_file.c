/* CRC-32 against a bitwise reference and the standard check value; the checkpoint container's
 * round trip, byte layout, and each corruption reported with the right status and message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crc_ref.h"
#include "core/ckpt_file.h"
#include "core/crc32.h"
#include "dqn.h"

static char tmpdir[] = "/tmp/dqn_test_ckpt_XXXXXX";

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

#define crc32_bitwise(p, n) crc_bitwise(0xedb88320u, (p), (n))

static void test_crc32(void) {
    CHECK(dqn_crc32("123456789", 9) == 0xcbf43926u, "check value %08x", dqn_crc32("123456789", 9));
    CHECK(dqn_crc32("", 0) == 0, "empty");
    CHECK(dqn_crc32("The quick brown fox jumps over the lazy dog", 43) == 0x414fa339u, "fox");
    unsigned char buf[4096];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)next_u64();
    for (int t = 0; t < 50; t++) {
        size_t n = (size_t)(next_u64() % sizeof buf);
        uint32_t whole = dqn_crc32(buf, n);
        CHECK(whole == crc32_bitwise(buf, n), "n=%zu table vs bitwise", n);
        size_t a = n ? (size_t)(next_u64() % n) : 0, b = a + (n - a) / 2;
        uint32_t inc = dqn_crc32_update(dqn_crc32_update(dqn_crc32_update(0, buf, a), buf + a,
                                                         b - a), buf + b, n - b);
        CHECK(inc == whole, "n=%zu split %zu/%zu: incremental differs", n, a, b);
    }
}

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static int has(const char *needle) { return strstr(dqn_last_error(), needle) != NULL; }

/* The sections the round trip writes: odd sizes, an empty one, a 31-character name. */
#define NSEC 4
static const char *names[NSEC] = {"config", "params", "empty", "a234567890123456789012345678901"};
static const size_t sizes[NSEC] = {37, 10007, 0, 3};
static unsigned char *data[NSEC];

static void write_good(const char *path) {
    dqn_ckpt_writer *w;
    CHECK_OK(dqn_ckpt_writer_create(&w));
    for (int i = 0; i < NSEC; i++) CHECK_OK(dqn_ckpt_writer_add(w, names[i], data[i], sizes[i]));
    CHECK_OK(dqn_ckpt_writer_write(w, path));
    dqn_ckpt_writer_destroy(w);
}

static void test_round_trip(void) {
    for (int i = 0; i < NSEC; i++) {
        data[i] = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) data[i][j] = (unsigned char)next_u64();
    }
    char path[256], tmp[260];
    path_in(path, sizeof path, "good.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    write_good(path);
    CHECK(exists(path) && !exists(tmp), "written file present, no .tmp left");

    dqn_ckpt_reader *r;
    CHECK_OK(dqn_ckpt_reader_open(path, &r));
    if (!r) return;
    for (int i = 0; i < NSEC; i++) {
        const void *p;
        uint64_t n;
        CHECK(dqn_ckpt_reader_has(r, names[i]), "has %s", names[i]);
        CHECK_OK(dqn_ckpt_reader_find(r, names[i], &p, &n));
        CHECK(n == sizes[i] && (n == 0 || memcmp(p, data[i], n) == 0), "section %s", names[i]);
        unsigned char *copy = malloc(sizes[i] + 1);
        CHECK_OK(dqn_ckpt_reader_copy(r, names[i], copy, sizes[i]));
        CHECK(sizes[i] == 0 || memcmp(copy, data[i], sizes[i]) == 0, "copy %s", names[i]);
        free(copy);
    }
    const void *p;
    uint64_t n;
    CHECK(!dqn_ckpt_reader_has(r, "replay"), "has replay");
    CHECK(dqn_ckpt_reader_find(r, "replay", &p, &n) == DQN_ERR_FORMAT, "missing section");
    CHECK(has(path) && has("no section \"replay\""), "missing section message: %s",
          dqn_last_error());
    unsigned char small[8];
    CHECK(dqn_ckpt_reader_copy(r, "params", small, sizeof small) == DQN_ERR_FORMAT &&
              has("section \"params\" has 10007 bytes, expected 8"), "size mismatch: %s",
          dqn_last_error());
    dqn_ckpt_reader_destroy(r);

    /* the layout is the documented one, byte for byte */
    size_t len;
    unsigned char *b = slurp(path, &len);
    size_t want = 16 + 4;
    for (int i = 0; i < NSEC; i++) want += 40 + sizes[i];
    CHECK(b && len == want, "file is %zu bytes, expected %zu", len, want);
    if (!b || len != want) return;
    CHECK(memcmp(b, "DQNCKPT\0", 8) == 0, "magic");
    CHECK(b[8] == DQN_CKPT_VERSION && b[9] == 0 && b[10] == 0 && b[11] == 0,
          "version %u, little-endian", DQN_CKPT_VERSION);
    CHECK(b[12] == NSEC && b[13] == 0, "section count");
    CHECK(strcmp((const char *)b + 16, "config") == 0 && b[16 + 32] == 37 && b[16 + 33] == 0,
          "first section header");
    CHECK(memcmp(b + 16 + 40, data[0], 37) == 0, "first payload");
    uint32_t crc = (uint32_t)b[len - 4] | (uint32_t)b[len - 3] << 8 | (uint32_t)b[len - 2] << 16 |
                   (uint32_t)b[len - 1] << 24;
    CHECK(crc == crc32_bitwise(b, len - 4), "trailing CRC");
    free(b);

    /* an empty container is valid too */
    dqn_ckpt_writer *w;
    CHECK_OK(dqn_ckpt_writer_create(&w));
    path_in(path, sizeof path, "empty.bin");
    CHECK_OK(dqn_ckpt_writer_write(w, path));
    dqn_ckpt_writer_destroy(w);
    CHECK_OK(dqn_ckpt_reader_open(path, &r));
    CHECK(r && !dqn_ckpt_reader_has(r, "config"), "empty container");
    dqn_ckpt_reader_destroy(r);
}

/* open must fail with status st and a message naming the file and containing part */
static void expect_open_fails(const char *path, dqn_status st, const char *part, const char *what) {
    dqn_ckpt_reader *r = (dqn_ckpt_reader *)1;
    dqn_status s = dqn_ckpt_reader_open(path, &r);
    CHECK(s == st, "%s: status %d, expected %d (%s)", what, s, st, dqn_last_error());
    CHECK(r == NULL, "%s: reader not NULL on failure", what);
    CHECK(has(path), "%s: message does not name the file: %s", what, dqn_last_error());
    CHECK(has(part), "%s: message lacks '%s': %s", what, part, dqn_last_error());
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void test_corruption(void) {
    char good[256], bad[256];
    path_in(good, sizeof good, "good.bin");
    path_in(bad, sizeof bad, "bad.bin");
    size_t len;
    unsigned char *b = slurp(good, &len);
    CHECK(b != NULL, "read good file");
    if (!b) return;
    unsigned char *m = malloc(len + 16);

    /* one flipped bit anywhere in a payload, in a name, or in the CRC itself */
    size_t spots[] = {16 + 40, 16 + 40 + 36, 16 + 40 + 37 + 40 + 5000, len - 5, len - 1, 16 + 3};
    for (size_t k = 0; k < sizeof spots / sizeof spots[0]; k++) {
        memcpy(m, b, len);
        m[spots[k]] ^= (unsigned char)(1u << (k % 8));
        spit(bad, m, len);
        expect_open_fails(bad, DQN_ERR_FORMAT, "CRC mismatch (file corrupt)", "flipped byte");
    }
    /* truncated at every structural boundary and inside payloads */
    size_t cuts[] = {0, 3, 8, 12, 15, 16, 16 + 39, 16 + 40 + 10, 16 + 40 + 37 + 40 + 9000,
                     len - 4, len - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        spit(bad, b, cuts[k]);
        expect_open_fails(bad, DQN_ERR_FORMAT, "truncated", "truncated");
    }
    /* trailing bytes after the CRC */
    memcpy(m, b, len);
    memcpy(m + len, "junk", 4);
    spit(bad, m, len + 4);
    expect_open_fails(bad, DQN_ERR_FORMAT, "4 unexpected bytes after the last section", "trailing");
    /* wrong magic, including a short file that is not a prefix of the magic */
    memcpy(m, b, len);
    m[0] = 'X';
    spit(bad, m, len);
    expect_open_fails(bad, DQN_ERR_FORMAT, "not a dqn checkpoint", "magic");
    spit(bad, (const unsigned char *)"hello", 5);
    expect_open_fails(bad, DQN_ERR_FORMAT, "not a dqn checkpoint", "short text");
    /* a future version, with a valid CRC, is refused by its version */
    memcpy(m, b, len);
    put_le32(m + 8, 7);
    put_le32(m + len - 4, crc32_bitwise(m, len - 4));
    spit(bad, m, len);
    char want[64];
    snprintf(want, sizeof want, "version 7 not supported (expected %u)", DQN_CKPT_VERSION);
    expect_open_fails(bad, DQN_ERR_FORMAT, want, "version");
    /* a huge section count or size cannot make the reader run past the end */
    memcpy(m, b, len);
    put_le32(m + 12, 0xffffffffu);
    spit(bad, m, len);
    expect_open_fails(bad, DQN_ERR_FORMAT, "truncated", "huge count");
    memcpy(m, b, len);
    memset(m + 16 + 32, 0xff, 8);
    spit(bad, m, len);
    expect_open_fails(bad, DQN_ERR_FORMAT, "truncated", "huge size");
    /* a name without its NUL */
    memcpy(m, b, len);
    memset(m + 16, 'n', 32);
    spit(bad, m, len);
    expect_open_fails(bad, DQN_ERR_FORMAT, "section 1 has a malformed name", "name");
    /* missing file and a directory: i/o errors naming the path */
    char missing[256];
    path_in(missing, sizeof missing, "nope.bin");
    expect_open_fails(missing, DQN_ERR_IO, "No such file or directory", "missing");
    expect_open_fails(tmpdir, DQN_ERR_IO, "not a regular file", "directory");
    free(m);
    free(b);
}

static void test_writer_failures(void) {
    dqn_ckpt_writer *w;
    CHECK_OK(dqn_ckpt_writer_create(&w));
    unsigned char x[4] = {1, 2, 3, 4};
    CHECK(dqn_ckpt_writer_add(w, "", x, 4) == DQN_ERR_ARG, "empty name");
    CHECK(dqn_ckpt_writer_add(w, "a2345678901234567890123456789012", x, 4) == DQN_ERR_ARG,
          "32-character name");
    CHECK(dqn_ckpt_writer_add(w, "nodata", NULL, 4) == DQN_ERR_ARG, "NULL data");
    CHECK_OK(dqn_ckpt_writer_add(w, "x", x, 4));
    CHECK(dqn_ckpt_writer_add(w, "x", x, 4) == DQN_ERR_ARG && has("\"x\" added twice"),
          "duplicate: %s", dqn_last_error());
    /* enough sections to make the writer grow its table */
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        CHECK_OK(dqn_ckpt_writer_add(w, name, x, (uint64_t)(i % 5)));
    }

    char path[256], tmp[260];
    /* into a directory that does not exist: nothing is created */
    path_in(path, sizeof path, "no/such/dir/c.bin");
    CHECK(dqn_ckpt_writer_write(w, path) == DQN_ERR_IO, "missing dir");
    CHECK(has(path) && has("No such file or directory"), "missing dir message: %s",
          dqn_last_error());
    /* over a directory: the rename fails, and the .tmp is removed */
    path_in(path, sizeof path, "adir");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(mkdir(path, 0700) == 0, "mkdir");
    CHECK(dqn_ckpt_writer_write(w, path) == DQN_ERR_IO && has(path), "over a directory: %s",
          dqn_last_error());
    CHECK(!exists(tmp), "a failed write left %s", tmp);
    /* a write that fails midway (file size limit, as on a full disk): .tmp removed, old file kept */
    path_in(path, sizeof path, "replace.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    spit(path, (const unsigned char *)"old contents", 12);
    dqn_ckpt_writer *big;
    CHECK_OK(dqn_ckpt_writer_create(&big));
    CHECK_OK(dqn_ckpt_writer_add(big, "params", data[1], sizes[1]));
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    dqn_status s = dqn_ckpt_writer_write(big, path);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(s == DQN_ERR_IO && has(path) && has("File too large"), "size limit: %s",
          dqn_last_error());
    CHECK(!exists(tmp), "a failed write left %s", tmp);
    size_t n;
    unsigned char *kept = slurp(path, &n);
    CHECK(kept && n == 12 && memcmp(kept, "old contents", 12) == 0, "old file kept");
    free(kept);
    dqn_ckpt_writer_destroy(big);
    /* a successful write replaces an existing file */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    spit(path, (const unsigned char *)"old contents", 12);
    CHECK_OK(dqn_ckpt_writer_write(w, path));
    CHECK(!exists(tmp), "no .tmp after a replace");
    dqn_ckpt_reader *r;
    CHECK_OK(dqn_ckpt_reader_open(path, &r));
    CHECK(r && dqn_ckpt_reader_has(r, "s39"), "replaced file is the new container");
    dqn_ckpt_reader_destroy(r);
    dqn_ckpt_writer_destroy(w);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_crc32();
    test_round_trip();
    test_corruption();
    test_writer_failures();
    for (int i = 0; i < NSEC; i++) free(data[i]);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("test_ckpt_file");
}
