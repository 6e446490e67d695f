/* TensorBoard event files: CRC-32C against its standard check values and a bitwise reference;
 * two records byte for byte against a hand-built expectation (its CRCs taken from TensorBoard's
 * own masked_crc32c); scalar Events over many steps and values read back by a protobuf decoder
 * written here; the event file a writer leaves; and the errors it reports. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crc_ref.h"
#include "core/tfevents.h"
#include "dqn.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

#define crc32c_bitwise(p, n) crc_bitwise(0x82f63b78u, (p), (n))

static void test_crc32c(void) {
    CHECK(dqn_crc32c("123456789", 9) == 0xe3069283u, "check value %08x",
          dqn_crc32c("123456789", 9));
    CHECK(dqn_crc32c("", 0) == 0, "empty");
    /* RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, ascending */
    unsigned char v[32];
    memset(v, 0, sizeof v);
    CHECK(dqn_crc32c(v, 32) == 0x8a9136aau, "32 zeros: %08x", dqn_crc32c(v, 32));
    memset(v, 0xff, sizeof v);
    CHECK(dqn_crc32c(v, 32) == 0x62a8ab43u, "32 0xff: %08x", dqn_crc32c(v, 32));
    for (int i = 0; i < 32; i++) v[i] = (unsigned char)i;
    CHECK(dqn_crc32c(v, 32) == 0x46dd794eu, "0..31: %08x", dqn_crc32c(v, 32));
    unsigned char buf[4096];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)next_u64();
    for (int t = 0; t < 50; t++) {
        size_t n = (size_t)(next_u64() % sizeof buf);
        uint32_t whole = dqn_crc32c(buf, n);
        CHECK(whole == crc32c_bitwise(buf, n), "n=%zu table vs bitwise", n);
        size_t a = n ? (size_t)(next_u64() % n) : 0;
        CHECK(dqn_crc32c_update(dqn_crc32c_update(0, buf, a), buf + a, n - a) == whole,
              "n=%zu split at %zu: incremental differs", n, a);
    }
    /* (0x12345678 >> 15) | (0x12345678 << 17) = 0xacf02468, + 0xa282ead8 mod 2^32 */
    CHECK(dqn_tfrecord_mask(0x12345678u) == 0x4f730f40u, "mask %08x",
          dqn_tfrecord_mask(0x12345678u));
}

/* wall_time 1700000000.25 as a little-endian double */
#define WALL 0x00, 0x00, 0x10, 0x40, 0xfc, 0x54, 0xd9, 0x41
static const uint8_t version_record[] = {
    24, 0, 0, 0, 0, 0, 0, 0,        /* uint64 length */
    0xa3, 0x7f, 0x4b, 0x22,         /* masked CRC32C of the length */
    0x09, WALL,                     /* field 1 wall_time, fixed64 */
    0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2', /* 3 file_version */
    0x33, 0x8d, 0x2f, 0xe9,         /* masked CRC32C of the data */
};
static const uint8_t scalar_record[] = {
    34, 0, 0, 0, 0, 0, 0, 0,
    0x78, 0x11, 0x3d, 0xfd,
    0x09, WALL,
    0x10, 0xd8, 0x04,               /* field 2 step, varint 600 */
    0x2a, 20,                       /* field 5 summary, 20 bytes */
    0x0a, 18,                       /*   field 1 value, 18 bytes */
    0x0a, 11, 'l', 'o', 's', 's', 'e', 's', '/', 'l', 'o', 's', 's', /* field 1 tag */
    0x15, 0x00, 0x00, 0x00, 0x3f,   /*     field 2 simple_value, fixed32 0.5f */
    0x8c, 0x4d, 0x96, 0x52,
};

static void test_records(void) {
    uint8_t ev[128], rec[160];
    size_t n = dqn_tfevents_encode_version(1700000000.25, ev, sizeof ev);
    CHECK(n + DQN_TFRECORD_OVERHEAD == sizeof version_record, "version event: %zu bytes", n);
    dqn_tfrecord_frame(ev, n, rec);
    CHECK(memcmp(rec, version_record, sizeof version_record) == 0, "version record bytes");
    n = dqn_tfevents_encode_scalar(1700000000.25, 600, "losses/loss", 0.5f, ev, sizeof ev);
    CHECK(n + DQN_TFRECORD_OVERHEAD == sizeof scalar_record, "scalar event: %zu bytes", n);
    dqn_tfrecord_frame(ev, n, rec);
    CHECK(memcmp(rec, scalar_record, sizeof scalar_record) == 0, "scalar record bytes");
    /* too small a buffer: sized, untouched */
    memset(ev, 0xee, sizeof ev);
    CHECK(dqn_tfevents_encode_scalar(1.0, 600, "losses/loss", 0.5f, ev, n - 1) == n, "sizing");
    CHECK(dqn_tfevents_encode_version(1.0, NULL, 0) == 24, "sizing the version event");
    int untouched = 1;
    for (size_t i = 0; i < sizeof ev; i++) untouched &= ev[i] == 0xee;
    CHECK(untouched, "a too-small buffer was written");
}

/* ---- a protobuf reader for the fields an Event of a scalar holds */
typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint64_t rd_varint(rd *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) break;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    r->bad = 1;
    return 0;
}

static uint64_t rd_fixed(rd *r, int bytes) {
    uint64_t v = 0;
    if (r->end - r->p < bytes) {
        r->bad = 1;
        return 0;
    }
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    return v;
}

static rd rd_sub(rd *r) {
    uint64_t n = rd_varint(r);
    rd s = {r->p, r->p, 1};
    if (r->bad || n > (uint64_t)(r->end - r->p)) {
        r->bad = 1;
        return s;
    }
    s.end = r->p + n, s.bad = 0;
    r->p += n;
    return s;
}

typedef struct {
    double wall_time;
    int64_t step;
    char tag[256];
    float value;
    int fields, bad;
} decoded;

static decoded decode_scalar(const uint8_t *p, size_t n) {
    decoded d = {0};
    rd r = {p, p + n, 0};
    while (r.p < r.end && !r.bad) {
        uint64_t key = rd_varint(&r);
        if (key == 0x09) {
            uint64_t b = rd_fixed(&r, 8);
            memcpy(&d.wall_time, &b, 8);
            d.fields |= 1;
        } else if (key == 0x10) {
            d.step = (int64_t)rd_varint(&r);
            d.fields |= 2;
        } else if (key == 0x2a) {
            rd s = rd_sub(&r);
            if (rd_varint(&s) != 0x0a) s.bad = 1;
            rd v = rd_sub(&s);
            while (v.p < v.end && !v.bad) {
                uint64_t k = rd_varint(&v);
                if (k == 0x0a) {
                    rd t = rd_sub(&v);
                    size_t len = (size_t)(t.end - t.p);
                    if (t.bad || len >= sizeof d.tag) v.bad = 1;
                    else memcpy(d.tag, t.p, len), d.tag[len] = 0, d.fields |= 4;
                } else if (k == 0x15) {
                    uint32_t b = (uint32_t)rd_fixed(&v, 4);
                    memcpy(&d.value, &b, 4);
                    d.fields |= 8;
                } else {
                    v.bad = 1;
                }
            }
            r.bad |= s.bad || v.bad || s.p != s.end;
        } else {
            r.bad = 1;
        }
    }
    d.bad = r.bad;
    return d;
}

static void test_decoded(void) {
    const int64_t steps[] = {0, 1, 127, 128, 16383, 16384, 1000000, (int64_t)1 << 40, INT64_MAX,
                             -1};
    const char *tags[] = {"charts/SPS", "", "losses/q_values",
                          "a/tag/longer/than/one/hundred/and/twenty/seven/bytes/so/that/its/"
                          "length/is/a/two/byte/varint/and/the/value/and/summary/too/xxxxxxxxx"};
    const float values[] = {0.5f, -3.25e-7f, 1e30f, 0.0f, -0.0f, INFINITY, 123.456f};
    uint8_t ev[256];
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        for (size_t j = 0; j < sizeof tags / sizeof *tags; j++) {
            float v = values[(i + j) % (sizeof values / sizeof *values)];
            double wall = 1.7e9 + (double)i * 0.125 + (double)j;
            size_t n = dqn_tfevents_encode_scalar(wall, steps[i], tags[j], v, ev, sizeof ev);
            CHECK(n <= sizeof ev, "event size %zu", n);
            decoded d = decode_scalar(ev, n);
            CHECK(!d.bad && d.fields == 15, "step %lld tag \"%s\": fields %x bad %d",
                  (long long)steps[i], tags[j], d.fields, d.bad);
            CHECK(d.wall_time == wall && d.step == steps[i] && !strcmp(d.tag, tags[j]) &&
                      !memcmp(&d.value, &v, 4),
                  "step %lld tag \"%s\": decoded %.17g %lld \"%s\" %g", (long long)steps[i],
                  tags[j], d.wall_time, (long long)d.step, d.tag, d.value);
        }
    size_t n = dqn_tfevents_encode_scalar(1.0, -1, "x", 1.0f, ev, sizeof ev);
    CHECK(n == 9 + 11 + 2 + 2 + 3 + 5, "a negative step takes a ten-byte varint: %zu", n);
}

static char tmpdir[] = "/tmp/dqn_test_tfevents_XXXXXX";

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static void test_writer(void) {
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    char host[256], want[600];
    CHECK(gethostname(host, sizeof host) == 0, "gethostname");
    host[sizeof host - 1] = 0;
    dqn_tfevents *w = NULL;
    CHECK_OK(dqn_tfevents_open(tmpdir, 1700000000.25, &w));
    if (!w) return;
    snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s", tmpdir, host);
    CHECK(!strcmp(dqn_tfevents_path(w), want), "path %s, want %s", dqn_tfevents_path(w), want);
    size_t n = 0;
    uint8_t *b = slurp(want, &n);
    CHECK(b && n == sizeof version_record && !memcmp(b, version_record, n),
          "the first record is not on disk after open (%zu bytes)", n);
    free(b);
    CHECK_OK(dqn_tfevents_scalar(w, 1700000000.25, 600, "losses/loss", 0.5f));
    CHECK_OK(dqn_tfevents_flush(w));
    b = slurp(want, &n);
    CHECK(b && n == sizeof version_record + sizeof scalar_record &&
              !memcmp(b, version_record, sizeof version_record) &&
              !memcmp(b + sizeof version_record, scalar_record, sizeof scalar_record),
          "file after a flush: %zu bytes", n);
    free(b);

    /* the same second again (a quick resume): a second file beside the first */
    dqn_tfevents *w2 = NULL;
    CHECK_OK(dqn_tfevents_open(tmpdir, 1700000000.75, &w2));
    if (w2) {
        char want2[620];
        snprintf(want2, sizeof want2, "%s.1", want);
        CHECK(!strcmp(dqn_tfevents_path(w2), want2), "second path %s", dqn_tfevents_path(w2));
        CHECK_OK(dqn_tfevents_close(w2));
        remove(want2);
    }

    char tag[300];
    memset(tag, 'a', sizeof tag - 1);
    tag[sizeof tag - 1] = 0;
    CHECK(dqn_tfevents_scalar(w, 1.0, 1, tag, 1.0f) == DQN_ERR_ARG, "overlong tag accepted");
    CHECK(strstr(dqn_last_error(), "aaaa") != NULL, "message: %s", dqn_last_error());
    CHECK_OK(dqn_tfevents_close(w));
    CHECK_OK(dqn_tfevents_close(NULL));
    remove(want);

    char missing[128];
    snprintf(missing, sizeof missing, "%s/no/such/dir", tmpdir);
    dqn_tfevents *bad = (dqn_tfevents *)1;
    CHECK(dqn_tfevents_open(missing, 1.0, &bad) == DQN_ERR_IO && bad == NULL, "missing dir");
    CHECK(strstr(dqn_last_error(), missing) != NULL, "message names the dir: %s",
          dqn_last_error());
    CHECK(rmdir(tmpdir) == 0, "left files behind in %s", tmpdir);
}

int main(void) {
    test_crc32c();
    test_records();
    test_decoded();
    test_writer();
    return check_finish("test_tfevents");
}
