/* Internal access to the config table (src/core/config.c) beyond the public dqn_config_* calls:
 * iterate the keys, format one value, parse the branches list. */
#ifndef DQN_CORE_CONFIG_H
#define DQN_CORE_CONFIG_H
#include <stddef.h>
#include <stdio.h>
#include "dqn.h"

int dqn_config_key_count(void);
/* The canonical ('_') name of key i, 0 <= i < dqn_config_key_count(), in table order. */
const char *dqn_config_key_name(int i);
/* The value of a key as dqn_config_write prints it (strings unquoted); DQN_ERR_ARG if unknown. */
dqn_status dqn_config_format(const dqn_config *c, const char *key, char *buf, size_t cap);
/* Parse a branches list: "" gives *count = 0 (the env's own), else 1..DQN_CFG_MAX_BRANCHES
 * comma-separated sizes, each in [2, 64]. Returns 0 if s is malformed. */
int dqn_config_parse_branches(const char *s, int *sizes, int *count);

#define DQN_CFG_NAME 64        /* a column name and its NUL */
#define DQN_CFG_MAX_NAMES 128
/* Split a comma-separated list of column names: "" gives *count = 0; else 1..max names, each
 * 1..DQN_CFG_NAME-1 characters taken as written (spaces included), no repeats. Returns 0 if s is
 * malformed. */
int dqn_config_parse_names(const char *s, char (*names)[DQN_CFG_NAME], int max, int *count);

/* Load "key = value" lines from an open stream; errors name `path` and the line. */
dqn_status dqn_config_load_stream(dqn_config *c, FILE *f, const char *path);
/* The config as dqn_config_write's text in a malloc'd buffer (checkpoints, event files), and
 * back: defaults, then the text's lines (errors name `path`). */
dqn_status dqn_config_to_text(const dqn_config *c, char **text, size_t *len);
dqn_status dqn_config_from_text(const char *text, size_t len, const char *path, dqn_config *c);

#endif
