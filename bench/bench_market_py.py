"""The market env in numpy: the peer of bench/bench_market.c and an independent reference of it.

Usage: bench_market_py.py DIR [--seconds S] [--ours N] [--check-only]
  DIR      written by `build/bench/bench_market dump DIR` (data.csv, meta.json, our actions,
           rewards and observations from a fixed start)
  --ours N our market_env_steps_per_s (8 envs); prints the ratios

First the check: the standardisation (training rows only), the observation window and the
accounting (docs/market.md) are recomputed here from data.csv and replayed with our actions;
every reward and observation must match ours (exit 1 otherwise). Then the timing, each the best
of short windows as bench_market reports: a numpy env vectorised over 8 envs (struct of arrays,
reset inside step, actions drawn beforehand), and one env stepped from a Python loop.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from bench_env_gym import best_rate  # the same best-of-short-windows timing


def load(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    table = np.loadtxt(os.path.join(d, "data.csv"), delimiter=",", skiprows=1,
                       usecols=range(1, 1 + meta["assets"] + meta["features"]), ndmin=2)
    return meta, table[:, :meta["assets"]], table[:, meta["assets"]:]


def zscores(meta, price, feat):
    """Log-returns and features, standardised with the training rows' mean and population std."""
    lo, hi, A = meta["train_lo"], meta["train_hi"], meta["assets"]
    ret = np.zeros_like(price)
    ret[1:] = np.log(price[1:] / price[:-1])
    cols = np.concatenate([ret, feat], axis=1)
    mean = np.concatenate([ret[lo + 1:hi].mean(0), feat[lo:hi].mean(0)])
    std = np.concatenate([ret[lo + 1:hi].std(0), feat[lo:hi].std(0)])
    std = np.where(std > 1e-12, std, 1.0)
    z = np.clip((cols - mean) / std, -meta["zclip"], meta["zclip"])
    z[0, :A] = 0
    return z.astype(np.float32)


class MarketVec:
    """n market envs as arrays: positions, rows, episode lengths; reset inside step."""

    def __init__(self, meta, price, z, n, seed=0):
        self.m, self.price, self.z, self.n = meta, price, z, n
        self.W, self.A = meta["window"], meta["assets"]
        self.levels = meta["levels"]
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(n, dtype=np.int64)
        self.pos = np.zeros((n, self.A))
        self.ep = np.zeros(n, dtype=np.int64)
        self.offsets = np.arange(-self.W + 1, 1)
        self.reset(np.ones(n, dtype=bool))

    def reset(self, mask, t=None):
        k = int(mask.sum())
        lo, hi = self.m["first"], self.m["end"] - self.m["episode_len"]
        self.t[mask] = t if t is not None else self.rng.integers(lo, hi + 1, size=k)
        self.pos[mask] = 0
        self.ep[mask] = 0

    def obs(self):
        rows = self.z[self.t[:, None] + self.offsets]            # [n, W, cols]
        return np.concatenate([rows.reshape(self.n, -1), self.pos.astype(np.float32)], axis=1)

    def step(self, actions):
        m, A = self.m, self.A
        w = -1.0 + 2.0 * actions / (self.levels - 1)
        p0, p1 = self.price[self.t], self.price[self.t + 1]
        gain = (w * (p1 / p0 - 1.0)).sum(1) / A
        turnover = np.abs(w - self.pos).sum(1) / A
        gross = np.abs(w).sum(1) / A
        R = gain - m["cost"] * turnover - m["holding_cost"] * gross
        reward = (m["reward_scale"] * np.log(np.maximum(1.0 + R, 1e-9))).astype(np.float32)
        self.pos, self.t, self.ep = w, self.t + 1, self.ep + 1
        final = self.obs()
        truncated = self.ep >= m["episode_len"]
        if truncated.any():
            self.reset(truncated)
        return final, reward, np.zeros(self.n, dtype=bool), truncated


def check(d, meta, price, feat):
    z = zscores(meta, price, feat)
    M, A, od = meta["steps"], meta["assets"], meta["obs_dim"]
    act = np.fromfile(os.path.join(d, "actions.i32"), dtype=np.int32).reshape(M, A)
    ours_r = np.fromfile(os.path.join(d, "rewards.f32"), dtype=np.float32)
    ours_o = np.fromfile(os.path.join(d, "obs.f32"), dtype=np.float32).reshape(M + 1, od)
    env = MarketVec(dict(meta, episode_len=M + 1), price, z, 1)
    env.reset(np.ones(1, dtype=bool), t=meta["first"])
    worst_o = np.abs(env.obs()[0] - ours_o[0]).max()
    worst_r = 0.0
    for i in range(M):
        o, r, _, _ = env.step(act[i:i + 1])
        worst_o = max(worst_o, np.abs(o[0] - ours_o[i + 1]).max())
        worst_r = max(worst_r, abs(float(r[0]) - float(ours_r[i])) / max(1.0, abs(float(r[0]))))
    print(f"check: {M} steps, max |obs diff| {worst_o:.3g}, max reward diff {worst_r:.3g}")
    return worst_o <= 1e-5 and worst_r <= 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--ours", type=float, help="our market_env_steps_per_s (8 envs)")
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()
    meta, price, feat = load(args.dir)
    if not check(args.dir, meta, price, feat):
        print("check FAILED: the numpy env and ours differ")
        return 1
    if args.check_only:
        return 0
    z = zscores(meta, price, feat)
    rng = np.random.default_rng(0)
    vec = MarketVec(meta, price, z, 8)
    acts = rng.integers(meta["levels"], size=(200, 8, meta["assets"]))

    def vec_window():
        for a in acts:
            vec.step(a)

    one = MarketVec(meta, price, z, 1)
    acts1 = rng.integers(meta["levels"], size=(500, 1, meta["assets"]))

    def one_window():
        for a in acts1:
            one.step(a)

    figures = {
        "numpy_vec8_market_env_steps_per_s": best_rate(args.seconds, vec_window,
                                                       acts.shape[0] * acts.shape[1]),
        "numpy_1env_market_env_steps_per_s": best_rate(args.seconds, one_window, len(acts1)),
    }
    for k, v in figures.items():
        print(f"{k}={v:.0f}")
    if args.ours:
        for k, v in figures.items():
            print(f"ratio_vs_{k[:-len('_market_env_steps_per_s')]}={args.ours / v:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
