"""LunarLander-v3 (gymnasium[box2d]), the first env the project does not implement: its preset
learns at a modest budget. The 5-seed figure at the RL-Zoo budget is bench/bench_sb3.py's."""

import numpy as np
import pytest

import gymnasium as gym

import dqn

pytest.importorskip("Box2D", reason="LunarLander-v3 needs box2d (tests/requirements.txt)")


def test_lunarlander_preset_learns():
    model = dqn.DQN("LunarLander-v3", seed=7, device="cpu")
    model.learn(30_000)
    env = gym.make("LunarLander-v3")
    returns = []
    for k in range(10):
        obs, _ = env.reset(seed=900_000 + k)   # seeds training never used
        total, done = 0.0, False
        while not done:
            a, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(a)
            total += float(r)
            done = term or trunc
        returns.append(total)
    mean = float(np.mean(returns))
    # a random policy scores about -180; an untrained greedy one crashes lower still
    assert mean > -100, f"greedy mean {mean:.1f} after 30k steps (returns {returns})"
