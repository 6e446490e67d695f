"""The market env against its numpy reference (bench/bench_market_py.py): `bench_market dump`
steps our env 2,000 times from a fixed row with random actions over 5 position levels, with
transaction and holding costs; the numpy env recomputes the standardisation from data.csv and
replays the actions. Every observation and reward must agree (exit 1 otherwise)."""

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_market_py  # noqa: E402

BUILD = os.environ.get("DQN_BUILD", os.path.join(ROOT, "build"))


def main():
    exe = os.path.join(BUILD, "bench", "bench_market")
    if not os.access(exe, os.X_OK):
        print(f"skip: no {exe}")
        return 77
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([exe, "dump", d], check=True)
        meta, price, feat = bench_market_py.load(d)
        assert meta["levels"] == 5 and meta["cost"] > 0 and meta["holding_cost"] > 0, meta
        ok = bench_market_py.check(d, meta, price, feat)
    print("market reference:", "all steps agree" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
