"""Gymnasium's CartPole-v1 env steps per second from Python, the baseline for bench/bench_env.c.

Usage: bench_env_gym.py [--seconds S] [--ours N]
  --ours N   our cartpole_env_steps_per_s (from build/bench/bench_env); prints the ratios.
Figures: gym.make("CartPole-v1") stepped with env.step in a loop (reset when an episode ends),
SyncVectorEnv of 8 envs, and Gymnasium's numpy-vectorised CartPoleVectorEnv of 8 envs; each the
best of short windows, as bench_env reports, since the machine may be shared.
"""

import argparse
import time

import gymnasium as gym
import numpy as np


def best_rate(seconds, window, steps_per_window):
    """Best of short windows over `seconds` (the machine is shared): steps per second."""
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        window()
        best = max(best, steps_per_window / (time.perf_counter() - t0))
    return best


def single_env(seconds):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(2, size=1000).tolist()

    def window():
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()
    return best_rate(seconds, window, len(actions))


def vector_env(seconds, mode, n=8):
    envs = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode=mode)
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(2, size=(200, n))

    def window():
        for a in actions:   # autoreset inside step
            envs.step(a)
    return best_rate(seconds, window, actions.size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--ours", type=float, help="our cartpole_env_steps_per_s")
    args = ap.parse_args()
    figures = {
        "gym_cartpole_env_steps_per_s": single_env(args.seconds),
        "gym_sync8_cartpole_env_steps_per_s": vector_env(args.seconds, "sync"),
        "gym_numpyvec8_cartpole_env_steps_per_s": vector_env(args.seconds, "vector_entry_point"),
    }
    for k, v in figures.items():
        print(f"{k}={v:.0f}")
    if args.ours:
        for k, v in figures.items():
            print(f"ratio_vs_{k[:-len('_cartpole_env_steps_per_s')]}={args.ours / v:.0f}")


if __name__ == "__main__":
    main()
