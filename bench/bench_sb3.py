"""dqn.DQN against sb3-contrib's QR-DQN at the RL-Zoo hyperparameters, same machine, same run.

Each run trains on a fresh Gymnasium env object, evaluates the greedy policy every
--eval-every steps (10 episodes, time excluded from training time) to find the training wall
clock (and process CPU time, which a busy machine disturbs less) at which it first reaches the
solve threshold, and ends with a greedy evaluation over 100 episodes on env seeds no run trained
on. Both libraries run on one CPU thread.

  python bench/bench_sb3.py --envs CartPole-v1,LunarLander-v3 --seeds 5 --out runs/sb3.jsonl

--jobs N runs N of the (env, library, seed) runs at once, one process and one thread each: on a
machine with N free cores every run still has a core of its own.

Needs: the dqn package (pip install .), sb3-contrib, torch, gymnasium[box2d].
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

# Gymnasium's reward thresholds
THRESHOLD = {"CartPole-v1": 475.0, "LunarLander-v3": 200.0, "Acrobot-v1": -100.0,
             "MountainCar-v0": -110.0}
# The zoo's budgets for SB3; dqn's presets' own (CartPole's preset is tuned for 100k steps).
STEPS = {("sb3", "CartPole-v1"): 50_000, ("sb3", "LunarLander-v3"): 100_000,
         ("dqn", "CartPole-v1"): 100_000, ("dqn", "LunarLander-v3"): 100_000,
         ("sb3", "Acrobot-v1"): 100_000, ("dqn", "Acrobot-v1"): 100_000,
         ("sb3", "MountainCar-v0"): 120_000, ("dqn", "MountainCar-v0"): 120_000}
EVAL_EVERY = {"CartPole-v1": 2_500, "LunarLander-v3": 10_000, "Acrobot-v1": 5_000,
              "MountainCar-v0": 5_000}


def zoo_qrdqn(env_id):
    """RL-Zoo's qrdqn.yml entries (LunarLander-v2's for v3)."""
    if env_id == "CartPole-v1":
        return dict(batch_size=64, buffer_size=100_000, exploration_final_eps=0.04,
                    exploration_fraction=0.16, gamma=0.99, gradient_steps=128,
                    learning_rate=2.3e-3, learning_starts=1000, target_update_interval=10,
                    train_freq=256, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10))
    if env_id == "LunarLander-v3":
        return dict(batch_size=128, buffer_size=100_000, exploration_final_eps=0.18,
                    exploration_fraction=0.24, gamma=0.995, gradient_steps=-1,
                    learning_rate=lambda progress: 1.5e-3 * progress, learning_starts=10_000,
                    target_update_interval=1, train_freq=256,
                    policy_kwargs=dict(net_arch=[256, 256], n_quantiles=170))
    if env_id == "Acrobot-v1":
        return dict(batch_size=128, buffer_size=50_000, exploration_final_eps=0.1,
                    exploration_fraction=0.12, gamma=0.99, gradient_steps=-1,
                    learning_rate=6.3e-4, learning_starts=0, target_update_interval=250,
                    train_freq=4, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=25))
    if env_id == "MountainCar-v0":
        return dict(batch_size=128, buffer_size=10_000, exploration_final_eps=0.07,
                    exploration_fraction=0.2, gamma=0.98, gradient_steps=8,
                    learning_rate=4e-3, learning_starts=1000, target_update_interval=600,
                    train_freq=16, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=25))
    raise ValueError(env_id)


def greedy_return(model, env_id, episodes, seed0):
    env = gym.make(env_id)
    out = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed0 + k)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = term or trunc
        out.append(total)
    env.close()
    return float(np.mean(out)), float(np.std(out))


class Probe:
    """A (locals, globals) -> bool callback both libraries call every env step."""

    def __init__(self, env_id, every, seed):
        self.env_id, self.every, self.seed = env_id, every, seed
        self.model = None
        self.steps = 0
        self.eval_s = 0.0
        self.eval_cpu = 0.0
        self.t0 = None
        self.c0 = None
        self.solved_at = None
        self.solved_cpu = None
        self.curve = []

    def __call__(self, loc, glob):
        if self.t0 is None:
            self.t0 = time.perf_counter()
            self.c0 = time.process_time()
        self.steps += 1
        if self.steps % self.every:
            return True
        e0, c0 = time.perf_counter(), time.process_time()
        mean, _ = greedy_return(self.model, self.env_id, 10, 500_000 + 1000 * self.seed + self.steps)
        e1, c1 = time.perf_counter(), time.process_time()
        train_s = e0 - self.t0 - self.eval_s
        train_cpu = c0 - self.c0 - self.eval_cpu
        self.eval_s += e1 - e0
        self.eval_cpu += c1 - c0
        self.curve.append((self.steps, round(train_s, 2), round(train_cpu, 2), mean))
        if self.solved_at is None and mean >= THRESHOLD[self.env_id]:
            self.solved_at, self.solved_cpu = train_s, train_cpu
        return True


def run(lib, env_id, seed, args):
    steps = args.steps or STEPS[(lib, env_id)]
    probe = Probe(env_id, args.eval_every or EVAL_EVERY[env_id], seed)
    env = gym.make(env_id)
    if lib == "dqn":
        import dqn
        model = dqn.DQN(env, seed=seed, device="cpu")
    else:
        import torch
        from sb3_contrib import QRDQN
        torch.set_num_threads(1)
        model = QRDQN("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **zoo_qrdqn(env_id))
    probe.model = model
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps, callback=probe)
    wall = time.perf_counter() - t0 - probe.eval_s
    cpu = time.process_time() - c0 - probe.eval_cpu
    mean, std = greedy_return(model, env_id, 100, 1_000_000 + 1000 * seed)
    env.close()
    return dict(lib=lib, env=env_id, seed=seed, steps=steps, train_s=round(wall, 2),
                train_cpu_s=round(cpu, 2),
                solved_s=None if probe.solved_at is None else round(probe.solved_at, 2),
                solved_cpu_s=None if probe.solved_cpu is None else round(probe.solved_cpu, 2),
                final_mean=mean, final_std=std, curve=probe.curve)


def summary(rows):
    print()
    print("| env | library | seeds | steps | train s, wall (CPU) | to threshold s, wall (CPU), "
          "median of solved | solved | final greedy return, 100 ep, mean ± std over seeds |")
    print("|---|---|---|---|---|---|---|---|")
    keyed = {}
    for r in rows:
        keyed.setdefault((r["env"], r["lib"]), []).append(r)
    for (env_id, lib), rs in sorted(keyed.items()):
        solved = [r for r in rs if r["solved_s"] is not None]
        finals = [r["final_mean"] for r in rs]
        tw = statistics.mean(r["train_s"] for r in rs)
        tc = statistics.mean(r["train_cpu_s"] for r in rs)
        sw = statistics.median(r["solved_s"] for r in solved) if solved else float("nan")
        sc = statistics.median(r["solved_cpu_s"] for r in solved) if solved else float("nan")
        print(f"| {env_id} | {lib} | {len(rs)} | {rs[0]['steps']} | {tw:.1f} ({tc:.1f}) | "
              f"{sw:.1f} ({sc:.1f}) | {len(solved)}/{len(rs)} | {statistics.mean(finals):.1f} ± "
              f"{statistics.pstdev(finals):.1f} |")
    for env_id in sorted({r["env"] for r in rows}):
        a, b = keyed.get((env_id, "dqn")), keyed.get((env_id, "sb3"))
        if a and b:
            ta = statistics.mean(r["train_cpu_s"] for r in a)
            tb = statistics.mean(r["train_cpu_s"] for r in b)
            print(f"{env_id}: dqn's whole run takes {ta / tb:.2f}x SB3's CPU time ({ta:.1f} s vs "
                  f"{tb:.1f} s)")
            sa = [r["solved_cpu_s"] for r in a if r["solved_cpu_s"] is not None]
            sb = [r["solved_cpu_s"] for r in b if r["solved_cpu_s"] is not None]
            if sa and sb:
                ma, mb = statistics.median(sa), statistics.median(sb)
                print(f"{env_id}: to the threshold, dqn takes {ma / mb:.2f}x SB3's CPU time "
                      f"({ma:.1f} s vs {mb:.1f} s, medians of the solved runs)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="CartPole-v1,LunarLander-v3")
    p.add_argument("--libs", default="dqn,sb3")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=101)
    p.add_argument("--steps", type=int, default=0,
                   help="env steps (default: the zoo's budget for sb3, the preset's for dqn)")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--out", default="")
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args()
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = "1"
    rows = []
    out = open(args.out, "a") if args.out else None
    tasks = [(lib, env_id, seed, args) for env_id in args.envs.split(",")
             for seed in range(args.first_seed, args.first_seed + args.seeds)
             for lib in args.libs.split(",")]
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run, *t) for t in tasks]
        for f in concurrent.futures.as_completed(futures):
            r = f.result()
            rows.append(r)
            print(f"{r['env']} {r['lib']} seed {r['seed']}: train {r['train_s']} s "
                  f"({r['train_cpu_s']} s CPU), threshold at {r['solved_s']} s "
                  f"({r['solved_cpu_s']} s CPU), final {r['final_mean']:.1f} ± "
                  f"{r['final_std']:.1f}", flush=True)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
    summary(rows)


if __name__ == "__main__":
    sys.exit(main())
