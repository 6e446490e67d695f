"""Conformance of dqn's CartPole-v1, Acrobot-v1 and MountainCar-v0 with Gymnasium 1.4.0.

Gymnasium plays several episodes per env: seeded random actions, goal-reaching or balancing
controllers (terminations and time-limit truncations), a few start states set into
env.unwrapped.state to reach the velocity bounds and clips, and one episode steered to end on the
time limit's last step, where Gymnasium reports terminated and truncated together. Its start
states (env.unwrapped.state after each reset) and actions are replayed through libdqn's
dqn_env_trace, and observations, float64 states, rewards, terminated and truncated are compared
step by step to 1e-5 absolute + relative. Exit 1 at the first difference, or if the episodes do
not cover what they should.
"""

import ctypes
import math
import os
import sys

import gymnasium as gym
import numpy as np

ATOL = RTOL = 1e-5
MIN_STEPS = 2000

BUILD = os.environ.get("DQN_BUILD", "build")
lib = ctypes.CDLL(os.path.join(BUILD, "libdqn.so"))
lib.dqn_last_error.restype = ctypes.c_char_p
lib.dqn_env_trace.restype = ctypes.c_int
lib.dqn_env_trace.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                              ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


def cartpole_balance(o, t):
    x, x_dot, theta, theta_dot = o
    return int(theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


def acrobot_swing(o, t):
    """Torque along dtheta1 + dtheta2 / 2: pumps energy and reaches the goal in ~100 steps."""
    return 2 if o[4] + 0.5 * o[5] >= 0 else 0


def mountaincar_pump(o, t):
    """Push along the velocity: reaches the goal in ~100 steps."""
    return 2 if o[1] >= 0 else 0


def random_policy(n, seed):
    rng = np.random.default_rng(seed)
    return lambda o, t: int(rng.integers(n))


def noisy(policy, n, p, seed):
    rng = np.random.default_rng(seed)
    return lambda o, t: int(rng.integers(n)) if rng.random() < p else policy(o, t)


def switch_at(k, first, then):
    return lambda o, t: first(o, t) if t < k else then(o, t)


def play(env, seed, policy, state=None):
    """One Gymnasium episode: its start state, reset observation and per-step records. A given
    state replaces the reset's (to reach the velocity bounds and clips within an episode)."""
    o, _ = env.reset(seed=seed)
    if state is not None:
        env.unwrapped.state = np.array(state, dtype=np.float64)
        u = env.unwrapped
        o = u._get_ob() if hasattr(u, "_get_ob") else np.array(u.state, dtype=np.float32)
    ep = {"start": np.array(env.unwrapped.state, dtype=np.float64), "start_obs": o,
          "actions": [], "obs": [], "reward": [], "terminated": [], "truncated": [], "state": []}
    t = 0
    while True:
        a = policy(o, t)
        o, r, te, tr, _ = env.step(a)
        for k, v in (("actions", a), ("obs", o), ("reward", r), ("terminated", te),
                     ("truncated", tr), ("state", np.array(env.unwrapped.state, dtype=np.float64))):
            ep[k].append(v)
        t += 1
        if te or tr:
            return ep


def both_flags_episode(env, controller, finisher, ks):
    """Search (seed, k) so that `controller` for k steps then `finisher` terminates the episode
    on exactly the time limit's last step (Gymnasium: terminated=True and truncated=True)."""
    for seed in range(20):
        for k in ks:
            ep = play(env, seed, switch_at(k, controller, finisher))
            if ep["terminated"][-1] and ep["truncated"][-1]:
                return seed, ep
    raise SystemExit(f"{env.spec.id}: found no episode that terminates on its last step")


def plans(gym_id, env):
    """Episodes per env: (seed, policy[, start state]); plus one episode ending with both flags."""
    if gym_id == "CartPole-v1":
        eps = [(100 + k, random_policy(2, k)) for k in range(40)]
        eps += [(200 + k, cartpole_balance) for k in range(4)]
        eps += [(300 + k, noisy(cartpole_balance, 2, 0.15, k)) for k in range(8)]
        eps += [(0, cartpole_balance, [2.35, 0.5, 0.0, 0.0]),   # leave through x = +-2.4
                (0, cartpole_balance, [-2.35, -0.5, 0.0, 0.0])]
        both = both_flags_episode(env, cartpole_balance, lambda o, t: 1, range(480, 500))
    elif gym_id == "Acrobot-v1":
        eps = [(100 + k, random_policy(3, k)) for k in range(2)]
        eps += [(200 + k, acrobot_swing) for k in range(8)]
        eps += [(300 + k, noisy(acrobot_swing, 3, 0.3, k)) for k in range(4)]
        eps += [(0, lambda o, t: 2, [0.0, 0.0, 12.0, 27.0]),
                (0, lambda o, t: 0, [0.5, -1.0, -12.3, -28.0]),
                (0, lambda o, t: 2, [3.0, 0.3, 12.5, 20.0])]
        both = both_flags_episode(env, lambda o, t: 1, acrobot_swing, range(380, 430))
    else:
        eps = [(100 + k, random_policy(3, k)) for k in range(4)]
        eps += [(200 + k, mountaincar_pump) for k in range(10)]
        eps += [(300 + k, noisy(mountaincar_pump, 3, 0.3, k)) for k in range(4)]
        eps += [(400, lambda o, t: 0)]
        eps += [(0, lambda o, t: 2, [-0.52, 0.069]), (0, lambda o, t: 0, [-0.52, -0.069]),
                (0, lambda o, t: 2, [0.56, 0.069]),
                (0, lambda o, t: 1, [0.5, -(math.cos(3 * 0.5) * -0.0025)])]  # goal at velocity 0
        both = both_flags_episode(env, lambda o, t: 1, mountaincar_pump, range(0, 200))
    return eps, both


def cat(episodes, key, dtype):
    return np.ascontiguousarray(np.concatenate([np.asarray(e[key], dtype=dtype) for e in episodes]))


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def close(ours, ref):
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    return np.abs(a - b) <= ATOL + RTOL * np.abs(b)


def check_env(name, gym_id):
    env = gym.make(gym_id)
    eps, (both_seed, both_ep) = plans(gym_id, env)
    episodes = [play(env, *plan) for plan in eps]
    episodes.insert(len(episodes) // 2, both_ep)

    starts = np.ascontiguousarray(np.stack([e["start"] for e in episodes]))
    gym_start_obs = np.stack([e["start_obs"] for e in episodes]).astype(np.float32)
    actions = cat(episodes, "actions", np.int32)
    g = {k: cat(episodes, k, dt) for k, dt in (("obs", np.float32), ("reward", np.float32),
                                               ("terminated", np.uint8), ("truncated", np.uint8))}
    n, n_eps = len(actions), len(episodes)
    g["state"] = cat(episodes, "state", np.float64)
    ours = {"obs": np.zeros_like(g["obs"]), "reward": np.zeros(n, np.float32),
            "terminated": np.zeros(n, np.uint8), "truncated": np.zeros(n, np.uint8),
            "state": np.zeros_like(g["state"])}
    start_obs = np.zeros_like(gym_start_obs)
    st = lib.dqn_env_trace(name.encode(), ptr(starts), n_eps, ptr(actions), n, ptr(start_obs),
                           ptr(ours["obs"]), ptr(ours["reward"]), ptr(ours["terminated"]),
                           ptr(ours["truncated"]), ptr(ours["state"]))
    ok = st == 0
    if not ok:   # the steps it wrote still locate the first difference
        print(f"{name}: dqn_env_trace failed: {lib.dqn_last_error().decode()}")

    ends = np.cumsum([len(e["actions"]) for e in episodes])
    term, trunc = g["terminated"].astype(bool), g["truncated"].astype(bool)
    n_both = int(np.sum(term & trunc))
    n_term, n_trunc = int(np.sum(term)) - n_both, int(np.sum(trunc)) - n_both
    print(f"{name} vs {gym_id}: {n} steps, {n_eps} episodes ({n_term} terminated, {n_trunc} "
          f"truncated, {n_both} both: seed {both_seed}, length {len(both_ep['actions'])}), "
          f"max |obs diff| {np.max(np.abs(ours['obs'] - g['obs'])):.3g}, "
          f"max |state diff| {np.nanmax(np.abs(ours['state'] - g['state'])):.3g}, "
          f"max |start obs diff| {np.max(np.abs(start_obs - gym_start_obs)):.3g}")
    # steps where Gymnasium's clips and bounds acted: each must occur
    states = np.concatenate([np.array(e["state"]) for e in episodes])
    edges = {}
    if name == "cartpole":
        edges = {"terminated at |x| > 2.4": term & (np.abs(states[:, 0]) > 2.4)}
    elif name == "acrobot":
        edges = {"|dtheta1| = 4 pi": np.abs(states[:, 2]) == 4 * np.pi,
                 "|dtheta2| = 9 pi": np.abs(states[:, 3]) == 9 * np.pi}
    elif name == "mountaincar":
        edges = {"on the left wall": states[:, 0] == -1.2,
                 "position clipped at 0.6": states[:, 0] == 0.6,
                 "|velocity| = 0.07": np.abs(states[:, 1]) == 0.07,
                 "goal at velocity 0": term & (states[:, 1] == 0)}
    if edges:
        print("  steps " + ", ".join(f"{k}: {int(v.sum())}" for k, v in edges.items()))
        ok &= all(v.any() for v in edges.values())
    if n < MIN_STEPS or n_term == 0 or n_trunc == 0 or n_both != 1:
        print(f"{name}: the episodes do not cover what they should (>= {MIN_STEPS} steps, "
              "terminations, truncations, one episode with both flags)")
        ok = False

    bad = ~np.all(close(ours["obs"], g["obs"]), axis=1)
    for k in ("reward", "terminated", "truncated"):
        bad |= ~close(ours[k], g[k])
    # the state after a step that ends an episode is gone from ours (the vector reset it)
    bad |= ~(np.all(close(ours["state"], g["state"]), axis=1) | term | trunc)
    if bad.any():
        t = int(np.argmax(bad))
        e = int(np.searchsorted(ends, t, side="right"))
        t_in = t - (ends[e - 1] if e else 0)
        print(f"{name}: first difference at step {t} (episode {e}, its step {t_in + 1}, "
              f"action {actions[t]}):")
        for k in ("obs", "state", "reward", "terminated", "truncated"):
            print(f"  {k:10s} ours {ours[k][t]}  gymnasium {g[k][t]}")
        return False
    bad_start = ~np.all(close(start_obs, gym_start_obs), axis=1)
    if bad_start.any():
        k = int(np.argmax(bad_start))
        print(f"{name}: start observation of episode {k} differs: ours {start_obs[k]}, "
              f"gymnasium {gym_start_obs[k]} (state {starts[k]})")
        return False
    return ok


def main():
    ok = True
    for name, gym_id in (("cartpole", "CartPole-v1"), ("acrobot", "Acrobot-v1"),
                         ("mountaincar", "MountainCar-v0")):
        ok &= check_env(name, gym_id)
    print("conformance: " + ("all steps agree" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
