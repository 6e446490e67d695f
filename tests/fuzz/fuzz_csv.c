/* Fuzz target: the market CSV loader (src/market/csv.c, dqn train --env market --data FILE).
 * Input: a first line of config settings KEY=VALUE separated by ';' (the market keys:
 * ts_column, price_columns, feature_columns, fill; any key is accepted), then the CSV file.
 * The config must validate, as dqn train checks it before reading the data. Properties: a table
 * that loads has >= 2 rows, strictly increasing timestamps, positive finite prices and finite
 * features. */
#include <math.h>

#include "fuzz_common.h"
#include "market/market.h"

static void fuzz_csv_check(const dqn_market_data *d) {
    int bad = d->rows < 2 || d->assets < 1 || d->assets > DQN_MARKET_MAX_ASSETS || d->features < 0;
    for (int r = 1; r < d->rows && !bad; r++) bad = d->ts[r] <= d->ts[r - 1];
    for (int i = 0; i < d->rows * d->assets && !bad; i++)
        bad = !(d->price[i] > 0) || !(d->price[i] < INFINITY);
    for (int i = 0; i < d->rows * d->features && !bad; i++)
        bad = !(d->feat[i] > -INFINITY && d->feat[i] < INFINITY);
    if (bad) {
        fprintf(stderr, "a loaded table breaks its contract (%d rows, %d assets)\n", d->rows,
                d->assets);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n = 0;
    while (n < size && data[n] != '\n') n++;
    char *head = malloc(n + 1);
    if (!head) abort();
    memcpy(head, data, n);
    head[n] = 0;
    dqn_config c;
    dqn_config_preset(&c, "market");
    char *save = NULL;
    for (char *kv = strtok_r(head, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = 0;
        (void)dqn_config_set(&c, kv, eq + 1);
    }
    free(head);
    if (dqn_config_validate(&c) != DQN_OK) return 0;
    const char *path = fuzz_path("data.csv");
    size_t skip = n < size ? n + 1 : size;
    fuzz_write(path, data + skip, size - skip);
    dqn_market_data d;
    if (dqn_market_csv_load(path, &c, &d) == DQN_OK) {
        fuzz_csv_check(&d);
        fuzz_accepted++;
        dqn_market_data_free(&d);
    }
    return 0;
}
