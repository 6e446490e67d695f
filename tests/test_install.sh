#!/usr/bin/env bash
# `make install PREFIX=...` installs a library, header, CLI and pkg-config file that an outside
# program can build against and use.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${DQN_BUILD:-build}
B=${B#$PWD/}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
make -s BUILD="$B" install PREFIX="$tmp/prefix" >/dev/null
for f in lib/libdqn.a lib/libdqn.so include/dqn.h bin/dqn lib/pkgconfig/dqn.pc; do
  [ -e "$tmp/prefix/$f" ] || { echo "missing $f after install"; exit 1; }
done
cat > "$tmp/use.c" <<'C'
#include <dqn.h>
#include <stdio.h>
int main(void) {
    dqn_config c;
    if (dqn_config_preset(&c, "acrobot") != DQN_OK) return 1;
    if (dqn_config_set(&c, "lr", "abc") == DQN_OK) return 2;
    printf("%s n_step=%d | %s\n", c.env, c.n_step, dqn_last_error());
    return 0;
}
C
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
cc -std=c11 "$tmp/use.c" -o "$tmp/use" $(pkg-config --cflags dqn) $(pkg-config --static --libs dqn)
out=$(LD_LIBRARY_PATH=$tmp/prefix/lib "$tmp/use")
echo "installed program says: $out"
[[ $out == "acrobot n_step=1 | bad value for --lr"* ]] || [[ $out == "acrobot n_step=1 | bad value for lr"* ]] || { echo "unexpected output"; exit 1; }
"$tmp/prefix/bin/dqn" --version
echo "install: ok"
