#!/usr/bin/env python3
"""Learning table: each env's preset trained on several seeds, the FINAL policy evaluated.

For every env x replay mode x seed it runs `dqn train --env E --seed S --eval-episodes 100`
(the preset's own step budget), in parallel, with periodic evaluations (--eval-interval, 10
episodes each) that keep best.bin, then `dqn eval --checkpoint best.bin --episodes 100` on the
final evaluation's episodes, and writes
  - a markdown table: mean +- std over the seeds of the final policy's greedy return (each
    seed's figure is the mean of its evaluation episodes) and of best.bin's, beside the
    reference numbers;
  - an SVG of the learning curves: per env one panel, per replay mode the mean over seeds of the
    training return (metrics.csv's mean_return: the last 100 training episodes, exploration on)
    against env steps, with a band of +- one std over the seeds.

Runs whose eval.json exists are reused (--force reruns them), so a table can be rendered again
from an earlier run directory (--render-only runs nothing). Python 3 standard library only.

  python3 bench/learn_table.py --jobs 16                      # every mode the binary has
  python3 bench/learn_table.py --replay uniform --seeds 9001-9005 \\
      --table docs/learn_table.md --svg docs/learning_curves.svg
"""
import argparse
import concurrent.futures
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ENVS = {
    # name: (title, (RL-Zoo QR-DQN mean, std, steps), CleanRL dqn.py at 500k steps)
    "cartpole": ("CartPole-v1", (500.0, 0.0, 50000), 488.7),
    "acrobot": ("Acrobot-v1", (-69.1, 10.0, 100000), -91.5),
    "mountaincar": ("MountainCar-v0", (-106.0, 15.5, 120000), -195.0),
}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def parse_seeds(s):
    out = []
    for part in s.split(","):
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def supported_replay_modes(dqn):
    """(modes, has_key): the values of the config key `replay` that `dqn train --help` lists,
    or (["uniform"], False) where the binary has no such key."""
    try:
        text = subprocess.run([dqn, "train", "--help"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        sys.exit(f"cannot run {dqn}: {e}")
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == "replay" and f[1] == "enum":
            return f[2].split("|"), True
    return ["uniform"], False


def run_dir(root, env, replay, seed):
    return os.path.join(root, f"{env}-{replay}-{seed}")


def train(args, env, replay, seed, has_replay_key):
    d = run_dir(args.runs, env, replay, seed)
    ev = os.path.join(d, "eval.json")
    done = os.path.exists(ev) and (not args.eval_interval or
                                   os.path.exists(os.path.join(d, "best_eval.json")))
    if done and not args.force:
        return env, replay, seed, "reused"
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(args.runs, exist_ok=True)
    cmd = [args.dqn, "train", "--env", env, "--seed", str(seed), "--eval-episodes",
           str(args.eval_episodes), "--run-dir", d, "--device", args.device]
    if has_replay_key and replay != "preset":
        cmd += ["--replay", replay]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    if args.eval_interval:
        cmd += ["--eval-interval", str(args.eval_interval), "--eval-interval-episodes",
                str(args.eval_interval_episodes)]
    cmd += args.extra
    t0 = time.time()
    with open(d + ".log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        best = os.path.join(d, "best.bin")
        if rc == 0 and args.eval_interval and os.path.exists(best):
            # the same episodes as the final evaluation (dqn eval's default seed)
            p = subprocess.run([args.dqn, "eval", "--checkpoint", best, "--episodes",
                                str(args.eval_episodes), "--device", args.device],
                               capture_output=True, text=True)
            log.write(p.stdout + p.stderr)
            m = re.search(r"mean return (\S+), std (\S+)", p.stdout)
            if p.returncode == 0 and m:
                with open(os.path.join(d, "best_eval.json"), "w") as f:
                    json.dump({"mean_return": float(m.group(1)), "std_return": float(m.group(2)),
                               "episodes": args.eval_episodes, "best_step": best_step(d)}, f)
    return env, replay, seed, f"rc {rc}, {time.time() - t0:.0f} s"


def best_step(d):
    """The env step of best.bin (evaluations.csv's last best_step), or None."""
    try:
        with open(os.path.join(d, "evaluations.csv")) as f:
            rows = list(csv.DictReader(f))
        return int(rows[-1]["best_step"]) if rows else None
    except (OSError, KeyError, ValueError):
        return None


def read_eval(d):
    try:
        with open(os.path.join(d, "eval.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_best(d):
    try:
        with open(os.path.join(d, "best_eval.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_steps(d):
    try:
        with open(os.path.join(d, "config.txt")) as f:
            for line in f:
                m = re.match(r"\s*steps\s*=\s*(\d+)", line)
                if m:
                    return int(m.group(1))
    except OSError:
        pass
    return None


def read_curve(d):
    pts = {}
    try:
        with open(os.path.join(d, "metrics.csv")) as f:
            for row in csv.DictReader(f):
                try:
                    v = float(row["mean_return"])
                except (KeyError, ValueError):
                    continue
                if math.isfinite(v):
                    pts[int(row["step"])] = v
    except OSError:
        pass
    return pts


def mean_std(xs):
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def collect(args, envs, modes, seeds):
    """{(env, mode): {"finals": [(seed, mean, wall_s)], "steps": N, "curves": [dict]}}"""
    res = {}
    for env in envs:
        for mode in modes:
            r = {"finals": [], "steps": None, "curves": [], "missing": [], "best": []}
            for seed in seeds:
                d = run_dir(args.runs, env, mode, seed)
                e = read_eval(d)
                if e is None:
                    r["missing"].append(seed)
                    continue
                r["finals"].append((seed, float(e["mean_return"]), float(e.get("wall_s", 0))))
                r.setdefault("episodes", set()).add(int(e.get("episodes", 0)))
                r["steps"] = r["steps"] or read_steps(d) or e.get("env_steps")
                r["curves"].append(read_curve(d))
                b = read_best(d)
                if b is not None:
                    r["best"].append((seed, float(b["mean_return"]), b.get("best_step")))
            res[env, mode] = r
    return res


def fmt(m, s):
    return "—" if math.isnan(m) else f"{m:.1f} ± {s:.1f}"


def table(res, envs, modes, seeds):
    with_best = [m for m in modes if any(res[e, m]["best"] for e in envs)]
    cols = [c for m in modes for c in ([f"{m} final", f"{m} best.bin"] if m in with_best
                                       else [f"{m} final"])]
    out = ["| env | steps | " + " | ".join(cols) + " | RL-Zoo QR-DQN | CleanRL dqn.py @ 500k |",
           "|---|---|" + "---|" * len(cols) + "---|---|"]
    for env in envs:
        title, (zm, zs, zsteps), clean = ENVS.get(env, (env, (math.nan, 0, 0), math.nan))
        steps = next((res[env, m]["steps"] for m in modes if res[env, m]["steps"]), None)
        cells = []
        for m in modes:
            r = res[env, m]
            mu, sd = mean_std([x[1] for x in r["finals"]])
            cell = fmt(mu, sd)
            if r["finals"] and len(r["finals"]) < len(seeds):
                cell += f" ({len(r['finals'])} of {len(seeds)} seeds)"
            cells.append(cell)
            if m in with_best:
                bm, bs = mean_std([x[1] for x in r["best"]])
                cell = fmt(bm, bs)
                if len(r["best"]) < len(seeds):
                    cell += f" ({len(r['best'])} of {len(seeds)} seeds)"
                cells.append(cell)
        zoo = "—" if math.isnan(zm) else f"{zm:.1f} ± {zs:.1f} @ {zsteps // 1000}k"
        out.append(f"| {title} | {steps:,} | " if steps else f"| {title} | — | ")
        out[-1] += " | ".join(cells) + f" | {zoo} | " + ("—" if math.isnan(clean) else f"{clean:.1f}") + " |"
    eps = sorted(set().union(*(r.get("episodes", set()) for r in res.values())))
    span = (f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1))
            else ", ".join(map(str, seeds)))
    out.append("")
    out.append(f"Greedy, {' or '.join(map(str, eps)) or '?'} episodes per seed; "
               f"mean ± sample std over the seeds' means; seeds {span}. final: the policy at "
               f"the end of the run (checkpoint.bin); best.bin: the checkpoint of the best "
               f"periodic evaluation, evaluated on the same episodes as the final policy.")
    out.append("")
    out.append("Per seed (final greedy mean; best.bin's and its env step; wall clock of the "
               "run, periodic evaluations included):")
    out.append("")
    for env in envs:
        for m in modes:
            r = res[env, m]
            if not r["finals"]:
                continue
            best = {s: (v, at) for s, v, at in r["best"]}
            per = ", ".join(f"{s}: {v:.1f}" + (f" (best.bin {best[s][0]:.1f} @ {best[s][1]})"
                                                if s in best else "")
                            for s, v, _ in r["finals"])
            wall = statistics.mean(w for _, _, w in r["finals"])
            out.append(f"- {ENVS.get(env, (env,))[0]}, {m}: {per}; {wall:.0f} s a run")
    return "\n".join(out) + "\n"


def nice_ticks(lo, hi, n=5):
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def svg(res, envs, modes, seeds):
    W, H, ML, MR, MT, MB = 320, 230, 52, 12, 28, 38
    total_w = W * len(envs)
    legend_h = 26
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{H + legend_h}" '
             f'viewBox="0 0 {total_w} {H + legend_h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{total_w}" height="{H + legend_h}" fill="white"/>']
    for k, env in enumerate(envs):
        x0 = k * W
        title = ENVS.get(env, (env,))[0]
        series = []
        for i, m in enumerate(modes):
            curves = [c for c in res[env, m]["curves"] if c]
            if not curves:
                continue
            steps = sorted(set().union(*curves))
            rows = []
            for s in steps:
                vals = [c[s] for c in curves if s in c]
                if len(vals) == len(curves):
                    mu, sd = mean_std(vals)
                    rows.append((s, mu, sd))
            if rows:
                series.append((i, m, rows))
        budget = next((res[env, m]["steps"] for m in modes if res[env, m]["steps"]), None)
        xmax = budget or max((r[-1][0] for _, _, r in series),
                             default=ENVS.get(env, (0, (0, 0, 100000)))[1][2])
        ref = ENVS.get(env, (None, (math.nan,)))[1][0]
        ys = [v for _, _, r in series for _, mu, sd in r for v in (mu - sd, mu + sd)]
        if not math.isnan(ref):
            ys.append(ref)
        lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
        if env == "cartpole":
            lo, hi = 0.0, 500.0
        elif env == "acrobot":
            lo, hi = -500.0, 0.0
        elif env == "mountaincar":
            lo, hi = -200.0, max(-100.0, hi)
        if hi - lo < 1e-9:
            hi = lo + 1
        pw, ph = W - ML - MR, H - MT - MB

        def X(s):
            return x0 + ML + pw * s / xmax

        def Y(v):
            v = min(max(v, lo), hi)
            return MT + ph * (hi - v) / (hi - lo)

        parts.append(f'<text x="{x0 + ML + pw / 2:.1f}" y="16" text-anchor="middle" '
                     f'font-weight="bold" font-size="12">{title}</text>')
        for t in nice_ticks(lo, hi):
            y = Y(t)
            parts.append(f'<line x1="{x0 + ML}" y1="{y:.1f}" x2="{x0 + ML + pw}" y2="{y:.1f}" '
                         f'stroke="#e5e5e5"/>')
            parts.append(f'<text x="{x0 + ML - 4}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
        for t in nice_ticks(0, xmax, 4):
            x = X(t)
            parts.append(f'<line x1="{x:.1f}" y1="{MT + ph}" x2="{x:.1f}" y2="{MT + ph + 4}" '
                         f'stroke="#333"/>')
            parts.append(f'<text x="{x:.1f}" y="{MT + ph + 16}" text-anchor="middle">'
                         f'{t / 1000:g}k</text>')
        parts.append(f'<rect x="{x0 + ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" '
                     f'stroke="#333"/>')
        parts.append(f'<text x="{x0 + ML + pw / 2:.1f}" y="{H - 6}" text-anchor="middle">'
                     f'env steps</text>')
        if not math.isnan(ref):
            parts.append(f'<line x1="{x0 + ML}" y1="{Y(ref):.1f}" x2="{x0 + ML + pw}" '
                         f'y2="{Y(ref):.1f}" stroke="#888" stroke-dasharray="4 3"/>')
        for i, m, rows in series:
            c = COLORS[i % len(COLORS)]
            upper = " ".join(f"{X(s):.1f},{Y(mu + sd):.1f}" for s, mu, sd in rows)
            lower = " ".join(f"{X(s):.1f},{Y(mu - sd):.1f}" for s, mu, sd in reversed(rows))
            parts.append(f'<polygon points="{upper} {lower}" fill="{c}" fill-opacity="0.18" '
                         f'stroke="none"/>')
            line = " ".join(f"{X(s):.1f},{Y(mu):.1f}" for s, mu, _ in rows)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="1.6"/>')
        if k == 0:
            parts.append(f'<text x="{x0 + 12}" y="{MT + ph / 2:.1f}" text-anchor="middle" '
                         f'transform="rotate(-90 {x0 + 12} {MT + ph / 2:.1f})">'
                         f'training return (last 100 episodes)</text>')
    ly = H + 14
    lx = 12
    for i, m in enumerate(modes):
        c = COLORS[i % len(COLORS)]
        parts.append(f'<rect x="{lx}" y="{ly - 8}" width="14" height="8" fill="{c}" '
                     f'fill-opacity="0.35" stroke="{c}"/>')
        label = "the presets" if m == "preset" else f"{m} replay"
        parts.append(f'<text x="{lx + 18}" y="{ly}">{label}: mean ± std over {len(seeds)} '
                     f'seeds</text>')
        lx += 250
    parts.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="#888" '
                 f'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{lx + 22}" y="{ly}">RL-Zoo QR-DQN (final)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dqn", default="build/dqn", help="the dqn binary (default build/dqn)")
    ap.add_argument("--envs", default="cartpole,acrobot,mountaincar")
    ap.add_argument("--seeds", default="9001-9005", help="e.g. 9001-9005 or 1,2,3")
    ap.add_argument("--replay", default=None,
                    help="comma-separated replay modes (preset: each env's own, no --replay "
                         "flag); default: every mode the binary lists")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", default="runs/learn_table", help="directory of the run dirs")
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--eval-interval", type=int, default=5000,
                    help="env steps between periodic evaluations (best.bin); 0 = none")
    ap.add_argument("--eval-interval-episodes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0, help="override the presets' budgets")
    ap.add_argument("--table", default=None, help="also write the markdown table to this file")
    ap.add_argument("--svg", default=None, help="write the learning curves here")
    ap.add_argument("--force", action="store_true", help="rerun runs that have an eval.json")
    ap.add_argument("--render-only", action="store_true", help="run nothing; render what exists")
    ap.add_argument("extra", nargs="*", help="after --: more `dqn train` flags for every run")
    args = ap.parse_args()

    envs = args.envs.split(",")
    seeds = parse_seeds(args.seeds)
    if args.render_only:
        supported, has_key = None, False
        found = {n.split("-")[1] for n in (os.listdir(args.runs) if os.path.isdir(
            args.runs) else []) if n.count("-") == 2 and not n.endswith(".log")}
        found = sorted(found, key=lambda m: (m != "uniform", m != "prioritized", m))
        modes = args.replay.split(",") if args.replay else (found or ["uniform"])
    else:
        supported, has_key = supported_replay_modes(args.dqn)
        modes = args.replay.split(",") if args.replay else supported
        bad = [m for m in modes if m not in supported and m != "preset"]
        if bad:
            sys.exit(f"{args.dqn} has no replay mode {', '.join(bad)} (it has: "
                     f"{', '.join(supported)})")

    if not args.render_only:
        jobs = [(e, m, s) for e in envs for m in modes for s in seeds]
        # the longest runs first, so that the pool ends together
        order = {"mountaincar": 0, "acrobot": 1}
        jobs.sort(key=lambda j: order.get(j[0], 2))
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = [ex.submit(train, args, e, m, s, has_key) for e, m, s in jobs]
            for f in concurrent.futures.as_completed(futs):
                env, mode, seed, what = f.result()
                d = run_dir(args.runs, env, mode, seed)
                e = read_eval(d)
                got = f"{e['mean_return']:.1f}" if e else "no eval.json"
                print(f"[{time.time() - t0:6.0f} s] {env} {mode} seed {seed}: {got} ({what})",
                      flush=True)

    res = collect(args, envs, modes, seeds)
    md = table(res, envs, modes, seeds)
    if args.table:
        with open(args.table, "w") as f:
            f.write(md)
    print(md, end="")
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(svg(res, envs, modes, seeds))
    missing = [(e, m, s) for (e, m), r in res.items() for s in r["missing"]]
    if missing:
        print(f"missing runs: {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
