/* The market CSV loader: every error path names the file, the line and the column and loads
 * nothing; the fill policies fill or drop only when chosen, and count what they did; timestamps
 * (integers, dates, dates and times) parse strictly; the writer round-trips exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "test_tmp.h"
#include "market/market.h"

static void config(dqn_config *c, const char *price, const char *feat, const char *fill) {
    dqn_config_preset(c, "market");
    snprintf(c->price_columns, sizeof c->price_columns, "%s", price);
    snprintf(c->feature_columns, sizeof c->feature_columns, "%s", feat);
    snprintf(c->fill, sizeof c->fill, "%s", fill);
}

/* Loading text must fail with status st and a message holding "<file>:<where>" and each part. */
static void expect_error(const char *name, const char *text, const char *fill, dqn_status st,
                         const char *where, const char *part1, const char *part2) {
    dqn_config c;
    config(&c, "", "f", fill);
    const char *path = test_tmp_file(name, text, strlen(text));
    dqn_market_data d;
    memset(&d, 0x5a, sizeof d);
    dqn_status s = dqn_market_csv_load(path, &c, &d);
    char want[300];
    snprintf(want, sizeof want, "%s%s", path, where);
    const char *msg = dqn_last_error();
    CHECK(s == st, "%s: status %d, want %d (%s)", name, s, st, msg);
    CHECK(strstr(msg, want) != NULL, "%s: message lacks '%s': %s", name, want, msg);
    CHECK(strstr(msg, part1) != NULL, "%s: message lacks '%s': %s", name, part1, msg);
    CHECK(!part2 || strstr(msg, part2) != NULL, "%s: message lacks '%s': %s", name, part2, msg);
    CHECK(!strchr(msg, '\n'), "%s: message is not one line", name);
    CHECK(d.rows == 0 && d.price == NULL && d.ts == NULL, "%s: a failed load left data", name);
}

#define HDR "timestamp,a,b,f\n"

static void test_errors(void) {
    const dqn_status F = DQN_ERR_FORMAT;
    /* the file and its header */
    dqn_config c;
    config(&c, "", "", "none");
    dqn_market_data d;
    const char *missing = test_tmp_path("nope.csv");
    CHECK(dqn_market_csv_load(missing, &c, &d) == DQN_ERR_IO && strstr(dqn_last_error(), missing)
              && strstr(dqn_last_error(), "No such file"), "missing file: %s", dqn_last_error());
    expect_error("empty.csv", "", "none", F, ": empty file", "header", NULL);
    expect_error("noname.csv", "timestamp,a,,f\n1,2,3,4\n", "none", F, ":1:", "column 3",
                 "no name");
    expect_error("twice.csv", "timestamp,a,f,a\n", "none", F, ":1:", "\"a\" appears twice",
                 "columns 2 and 4");
    expect_error("nots.csv", "time,a,b,f\n1,2,3,4\n", "none", F, ":1:",
                 "no timestamp column \"timestamp\"", "the header has: time, a, b, f");
    expect_error("nofeat.csv", "timestamp,a,b\n1,2,3\n", "none", F, ":1:",
                 "no feature column \"f\"", "feature_columns");
    expect_error("noprice.csv", "timestamp,f\n1,2\n", "none", F, ":1:", "no price column", NULL);
    char wide[600] = "timestamp,f";
    for (int i = 0; i < 17; i++) snprintf(wide + strlen(wide), 20, ",p%d", i);
    strcat(wide, "\n");
    expect_error("wide.csv", wide, "none", F, ":1:", "more than 16 price columns",
                 "price_columns");
    char longname[200] = "timestamp,f,";
    memset(longname + strlen(longname), 'x', 70);
    strcat(longname, "\n");
    expect_error("longname.csv", longname, "none", F, ":1:", "column 3", "longer than 63");
    /* named price columns that are not there */
    config(&c, "a,zz", "", "none");
    const char *p = test_tmp_file("named.csv", HDR "1,2,3,4\n2,2,3,4\n", strlen(HDR) + 16);
    CHECK(dqn_market_csv_load(p, &c, &d) == F && strstr(dqn_last_error(), ":1: no price column "
          "\"zz\" (price_columns)"), "named price column: %s", dqn_last_error());

    /* rows */
    expect_error("emptyline.csv", HDR "1,2,3,4\n\n3,2,3,4\n", "none", F, ":3:", "empty line",
                 "4 comma-separated fields");
    expect_error("short.csv", HDR "1,2,3,4\n2,2,3\n", "none", F, ":3:", "3 fields, expected 4",
                 NULL);
    expect_error("long.csv", HDR "1,2,3,4,5\n", "none", F, ":2:", "5 fields, expected 4", NULL);
    expect_error("nots2.csv", HDR "1,2,3,4\n,2,3,4\n", "ffill", F, ":3:",
                 "column timestamp: missing timestamp", "no fill policy");
    const char *bad_ts[] = {"abc", "2020-13-01", "2020-02-30", "2021-02-29", "2020-1-01",
                            "2020-01-01T25:00", "2020-01-01T10:60", "2020-01-01X10:00", "1.5",
                            "2020-01-01T10:00:00+01:00"};
    for (size_t i = 0; i < sizeof bad_ts / sizeof bad_ts[0]; i++) {
        char text[200], quoted[80];
        snprintf(text, sizeof text, HDR "%s,2,3,4\n", bad_ts[i]);
        snprintf(quoted, sizeof quoted, "\"%s\" is not an integer or an ISO 8601 date", bad_ts[i]);
        expect_error("badts.csv", text, "none", F, ":2:", "column timestamp", quoted);
    }
    expect_error("kind.csv", HDR "1,2,3,4\n2020-01-02,2,3,4\n", "none", F, ":3:",
                 "\"2020-01-02\" is a date", "first row's timestamp is an integer");
    expect_error("same.csv", HDR "2020-01-02,2,3,4\n2020-01-03,2,3,4\n2020-01-03,2,3,4\n", "none",
                 F, ":4:", "2020-01-03 is not after the previous row's 2020-01-03", "strictly");
    expect_error("back.csv", HDR "5,2,3,4\n7,2,3,4\n6,2,3,4\n", "drop", F, ":4:",
                 "6 is not after the previous row's 7", NULL);
    expect_error("nan_ts_drop.csv", HDR "5,2,,4\n5,2,3,4\n7,2,3,4\n", "drop", F, ":3:",
                 "5 is not after the previous row's 5", NULL); /* dropped rows count too */
    expect_error("notnum.csv", HDR "1,2,abc,4\n", "ffill", F, ":2:", "column b", "\"abc\" is not a "
                 "number");
    expect_error("notnum2.csv", HDR "1,2,3,1.2.3\n", "drop", F, ":2:", "column f", "\"1.2.3\"");
    expect_error("zero.csv", HDR "1,2,3,4\n2,0,3,4\n", "ffill", F, ":3:", "column a",
                 "price 0 is not positive");
    expect_error("neg.csv", HDR "1,2,-3,4\n", "drop", F, ":2:", "column b", "price -3");
    /* a malformed value after a missing one is an error even when the row would be dropped */
    expect_error("dropbad.csv", HDR "1,2,3,4\n2,,x,4\n3,2,3,4\n", "drop", F, ":3:", "column b",
                 "\"x\" is not a number");
    const char *missing_v[] = {"", "NA", "n/a", "null", "NULL"};
    for (size_t i = 0; i < sizeof missing_v / sizeof missing_v[0]; i++) {
        char text[200], want[80];
        snprintf(text, sizeof text, HDR "1,2,3,4\n2,2,%s,4\n", missing_v[i]);
        snprintf(want, sizeof want, "missing value \"%s\"", missing_v[i]);
        expect_error("missing.csv", text, "none", F, ":3:", "column b", want);
    }
    const char *nonfinite[] = {"inf", "-Infinity", "nan", "1e999"};
    for (size_t i = 0; i < sizeof nonfinite / sizeof nonfinite[0]; i++) {
        char text[200], want[80];
        snprintf(text, sizeof text, HDR "1,2,3,4\n2,2,3,%s\n", nonfinite[i]);
        snprintf(want, sizeof want, "non-finite value \"%s\"", nonfinite[i]);
        expect_error("nonfinite.csv", text, "none", F, ":3:", "column f", want);
    }
    expect_error("ffirst.csv", HDR "1,,3,4\n2,2,3,4\n", "ffill", F, ":2:", "column a",
                 "in the first row: nothing to fill forward from");
    expect_error("onerow.csv", HDR "1,2,3,4\n", "none", F, ": 1 data row(s)", "at least 2",
                 NULL);
    expect_error("dropall.csv", HDR "1,2,3,4\n2,NA,3,4\n3,2,3,\n", "drop", F, ": 1 data row(s)",
                 "after the fill policy dropped some", NULL);
    const char nul[] = HDR "1,2,3,4\n2,2\0,3,4\n";
    p = test_tmp_file("nul.csv", nul, sizeof nul - 1);
    config(&c, "", "f", "none");
    CHECK(dqn_market_csv_load(p, &c, &d) == F && strstr(dqn_last_error(), ":3: NUL byte"), "%s",
          dqn_last_error());
    /* a row past the bound (1 MiB), and a file with no newline at all */
    size_t big = (1u << 20) + 64;
    char *row = malloc(big + sizeof HDR);
    memcpy(row, HDR, sizeof HDR - 1);
    memset(row + sizeof HDR - 1, '1', big);
    p = test_tmp_file("long.csv", row, sizeof HDR - 1 + big);
    free(row);
    CHECK(dqn_market_csv_load(p, &c, &d) == F &&
              strstr(dqn_last_error(), ":2: line longer than 1048576 bytes"), "%s",
          dqn_last_error());
    CHECK(dqn_market_csv_load("/dev/zero", &c, &d) == F &&
              strstr(dqn_last_error(), "/dev/zero:1: line longer than"), "%s", dqn_last_error());
}

static void test_loads(void) {
    dqn_config c;
    dqn_market_data d;
    /* CRLF, a byte-order mark, blanks around fields, an unused column, implicit price columns */
    const char text[] = "\xEF\xBB\xBFtimestamp , a,b ,f\r\n"
                        "2020-01-02, 10, 20 ,0.5\r\n"
                        "2020-01-03,11,19,-1e-3\r\n"
                        "2020-01-06,12.5,21,2\r\n";
    config(&c, "", "f", "none");
    CHECK_OK(dqn_market_csv_load(test_tmp_file("ok.csv", text, sizeof text - 1), &c, &d));
    CHECK(d.rows == 3 && d.assets == 2 && d.features == 1 && d.ts_kind == DQN_TS_DATE,
          "shape %d %d %d kind %d", d.rows, d.assets, d.features, d.ts_kind);
    CHECK(d.rows && !strcmp(d.asset_names[0], "a") && !strcmp(d.asset_names[1], "b") &&
              !strcmp(d.feature_names[0], "f"), "names");
    CHECK(d.rows && d.price[0] == 10 && d.price[1] == 20 && d.price[4] == 12.5 &&
              d.feat[1] == -1e-3 && d.feat[2] == 2, "values");
    CHECK(d.rows && d.ts[0] == 18263LL * 86400 && d.ts[2] - d.ts[1] == 3 * 86400, "dates");
    CHECK(d.filled == 0 && d.dropped == 0, "counts");
    dqn_market_data_free(&d);

    /* named columns pick and order; others are ignored */
    config(&c, "b", "", "none");
    CHECK_OK(dqn_market_csv_load(test_tmp_file("ok2.csv", text, sizeof text - 1), &c, &d));
    CHECK(d.rows == 3 && d.assets == 1 && d.features == 0 && d.price[2] == 21, "price_columns b");
    dqn_market_data_free(&d);

    /* ffill: previous row's value of the column, counted */
    const char gaps[] = "t,a,f\n10,1,5\n20,,6\n30,3,NA\n40,inf,\n50,5,9\n";
    config(&c, "", "f", "ffill");
    snprintf(c.ts_column, sizeof c.ts_column, "t");
    CHECK_OK(dqn_market_csv_load(test_tmp_file("gaps.csv", gaps, sizeof gaps - 1), &c, &d));
    double want_a[5] = {1, 1, 3, 3, 5}, want_f[5] = {5, 6, 6, 6, 9};
    int same = d.rows == 5;
    for (int i = 0; same && i < 5; i++) same = d.price[i] == want_a[i] && d.feat[i] == want_f[i];
    CHECK(same && d.filled == 4 && d.dropped == 0 && d.ts_kind == DQN_TS_INTEGER && d.ts[4] == 50,
          "ffill: rows %d filled %lld", d.rows, (long long)d.filled);
    dqn_market_data_free(&d);
    /* drop: rows with any missing or non-finite value skipped, counted */
    snprintf(c.fill, sizeof c.fill, "drop");
    CHECK_OK(dqn_market_csv_load(test_tmp_file("gaps.csv", gaps, sizeof gaps - 1), &c, &d));
    CHECK(d.rows == 2 && d.dropped == 3 && d.filled == 0 && d.ts[0] == 10 && d.ts[1] == 50 &&
              d.price[1] == 5, "drop: rows %d dropped %lld", d.rows, (long long)d.dropped);
    dqn_market_data_free(&d);

    /* dates with times; the writer reads back bit for bit */
    const char times[] = "timestamp,p\n2021-03-04T09:30,1.1\n2021-03-04 09:31:15,1.2\n"
                         "2021-03-04T09:32:00Z,0.30000000000000004\n";
    config(&c, "", "", "none");
    CHECK_OK(dqn_market_csv_load(test_tmp_file("times.csv", times, sizeof times - 1), &c, &d));
    CHECK(d.rows == 3 && d.ts_kind == DQN_TS_DATETIME && d.ts[1] - d.ts[0] == 75, "datetimes");
    const char *out = test_tmp_path("written.csv");
    CHECK_OK(dqn_market_csv_write(&d, out));
    dqn_market_data back;
    CHECK_OK(dqn_market_csv_load(out, &c, &back));
    CHECK(back.rows == 3 && !memcmp(back.ts, d.ts, 3 * sizeof *d.ts) &&
              !memcmp(back.price, d.price, 3 * sizeof *d.price), "write -> load round trip");
    dqn_market_data_free(&back);
    dqn_market_data_free(&d);
}

static void test_timestamps(void) {
    struct {
        const char *in, *out;
        dqn_ts_kind kind;
    } ok[] = {{"0", "0", DQN_TS_INTEGER},
              {"-42", "-42", DQN_TS_INTEGER},
              {"+7", "7", DQN_TS_INTEGER},
              {"1970-01-01", "1970-01-01", DQN_TS_DATE},
              {"2000-02-29", "2000-02-29", DQN_TS_DATE},
              {"1900-03-01", "1900-03-01", DQN_TS_DATE},
              {"1969-12-31T23:59:59", "1969-12-31T23:59:59", DQN_TS_DATETIME},
              {"2024-12-31 00:00", "2024-12-31T00:00:00", DQN_TS_DATETIME}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t ts = 0;
        dqn_ts_kind kind = DQN_TS_INTEGER;
        char buf[48];
        int parsed = dqn_market_ts_parse(ok[i].in, &ts, &kind);
        dqn_market_ts_format(kind, ts, buf, sizeof buf);
        CHECK(parsed && kind == ok[i].kind && !strcmp(buf, ok[i].out), "%s -> %s", ok[i].in, buf);
    }
    int64_t ts;
    dqn_ts_kind kind;
    CHECK(dqn_market_ts_parse("1970-01-02", &ts, &kind) && ts == 86400, "epoch + 1 day");
    CHECK(dqn_market_ts_parse("1969-12-31T23:59:59", &ts, &kind) && ts == -1, "before the epoch");
    CHECK(!dqn_market_ts_parse("", &ts, &kind) && !dqn_market_ts_parse("-", &ts, &kind) &&
              !dqn_market_ts_parse("99999999999999999999", &ts, &kind), "malformed");
}

int main(void) {
    test_tmp_init();
    test_errors();
    test_loads();
    test_timestamps();
    test_tmp_cleanup();
    return check_finish("test_market_csv");
}
