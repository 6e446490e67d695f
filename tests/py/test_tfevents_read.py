"""dqn train's TensorBoard event files, read by the tensorboard package's own readers.

A tiny run, then a run stopped with Ctrl-C and resumed into the same directory (two event
files). For each directory: every file is named events.out.tfevents.<unix time>.<hostname> and
starts with file_version "brain.Event:2"; EventAccumulator (which merges a directory's files)
holds one scalar per tag and per metrics.csv row whose value is finite, equal to the CSV's value
as a float32, with plausible increasing wall times, and nothing else; and metrics.jsonl holds the
CSV's rows, null for nan. Needs DQN_CLI (path to the dqn program); exit 77 without it.
"""

import csv
import glob
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

CLI = os.environ.get("DQN_CLI", "build/dqn")
TAGS = {"steps_per_s": "charts/SPS", "mean_return": "charts/episodic_return",
        "loss": "losses/loss", "mean_q": "losses/q_values", "epsilon": "charts/epsilon",
        "grad_norm": "losses/grad_norm"}
FIELDS = ["step", "wall_s", "steps_per_s", "mean_return", "loss", "mean_q", "epsilon",
          "grad_norm"]
SMALL = ["--learning-starts", "100", "--batch-size", "32", "--eval-episodes", "2"]


def train(*args):
    r = subprocess.run([CLI, "train", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"dqn train {args}: exit {r.returncode}: {r.stderr}"


def interrupted_then_resumed(d):
    """Ctrl-C after three rows, then --resume for two more log intervals."""
    p = subprocess.Popen([CLI, "train", "--steps", "1000000", "--log-interval", "100", *SMALL,
                          "--run-dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path, t0 = os.path.join(d, "metrics.csv"), time.time()
    while p.poll() is None and time.time() - t0 < 60:
        if os.path.exists(path) and len(open(path).readlines()) >= 4:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, f"Ctrl-C: exit {p.returncode}: {err}"
    last = int(open(path).readlines()[-1].split(",")[0])
    time.sleep(1.1)  # a later second, so the resumed run's file sorts after the first
    train("--resume", os.path.join(d, "checkpoint.bin"), "--steps", str(last + 200))
    return last


def read_csv(d):
    with open(os.path.join(d, "metrics.csv")) as f:
        rows = list(csv.reader(f))
    assert rows[0] == FIELDS, rows[0]
    return rows[1:]


def check_jsonl(d, rows):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        lines = f.read().splitlines()
    assert len(lines) == len(rows), (len(lines), len(rows))
    for line, row in zip(lines, rows):
        obj = json.loads(line)
        assert list(obj) == FIELDS, list(obj)
        assert obj["step"] == int(row[0]) and isinstance(obj["step"], int), (obj, row)
        for k, text in zip(FIELDS[1:], row[1:]):
            want = float(text)
            got = obj[k]
            assert (got is None) if math.isnan(want) else (got == want), (k, obj, row)


def check_events(d, rows, n_files):
    files = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
    assert len(files) == n_files, files
    host = re.escape(socket.gethostname())
    for f in files:
        assert re.fullmatch(r"events\.out\.tfevents\.\d+\." + host, os.path.basename(f)), f
        first = next(iter(event_file_loader.EventFileLoader(f).Load()))
        assert first.file_version == "brain.Event:2", first
        assert abs(first.wall_time - time.time()) < 600, first.wall_time

    acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == sorted(TAGS.values()), acc.Tags()["scalars"]
    for col, tag in TAGS.items():
        i = FIELDS.index(col)
        want = [(int(r[0]), np.float32(float(r[i]))) for r in rows if not math.isnan(float(r[i]))]
        got = acc.Scalars(tag)
        assert [(e.step, np.float32(e.value)) for e in got] == want, (tag, got, want)
        walls = [e.wall_time for e in got]
        assert walls == sorted(walls) and abs(walls[-1] - time.time()) < 600, (tag, walls)
    return sum(len(acc.Scalars(t)) for t in TAGS.values())


def main():
    if not os.access(CLI, os.X_OK):
        print(f"skip: no dqn program at {CLI}")
        return 77
    with tempfile.TemporaryDirectory(prefix="dqn_test_tfevents_") as tmp:
        d = os.path.join(tmp, "tiny")
        train("--steps", "600", "--log-interval", "200", *SMALL, "--run-dir", d)
        rows = read_csv(d)
        assert [int(r[0]) for r in rows] == [200, 400, 600], rows
        check_jsonl(d, rows)
        n = check_events(d, rows, 1)
        print(f"tiny run: {len(rows)} rows, {n} scalars in TensorBoard equal metrics.csv")

        d = os.path.join(tmp, "resumed")
        last = interrupted_then_resumed(d)
        rows = read_csv(d)
        assert int(rows[-1][0]) == last + 200, rows
        check_jsonl(d, rows)
        n = check_events(d, rows, 2)
        print(f"Ctrl-C at {last}, resumed to {last + 200}: {len(rows)} rows over two event "
              f"files, {n} scalars equal metrics.csv")
    print("test_tfevents_read: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
