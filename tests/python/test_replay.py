"""replay="prioritized" through the Python API: it trains, survives save/load with the replay's
priorities, learns a bandit where rare rows carry the signal, and rejects bad values."""

import math

import numpy as np
import pytest

import dqn

from conftest import TINY, ContextBandit


def test_prioritized_trains_and_reloads(tmp_path):
    m = dqn.DQN("CartPole-v1", seed=2, device="cpu", replay="prioritized", per_alpha=0.7,
                save_replay=True, **TINY)
    m.learn(1200)
    cfg, st = m.get_config(), m.get_stats()
    assert cfg["replay"] == "prioritized" and float(cfg["per_alpha"]) == 0.7
    assert st["updates"] > 500 and math.isfinite(st["last_loss"])
    path = str(tmp_path / "per.bin")
    m.save(path)
    loaded = dqn.DQN.load(path, env="CartPole-v1", device="cpu")
    assert loaded.get_config()["replay"] == "prioritized"
    x = np.zeros((3, 4), np.float32)
    assert np.array_equal(m.predict(x)[0], loaded.predict(x)[0])
    loaded.learn(200, reset_num_timesteps=False)
    assert loaded.get_stats()["updates"] > st["updates"]


def test_prioritized_learns_a_bandit():
    m = dqn.DQN(ContextBandit(), seed=1, replay="prioritized", d=32, head_hidden=32, n_tau=8,
                n_tau_target=8, k_tau=8, batch_size=32, learning_starts=200, lr=1e-3,
                exploration_fraction=0.5, target_update_interval=100, device="cpu")
    m.learn(3000)
    env, total = ContextBandit(), 0.0
    obs, _ = env.reset(seed=12345)
    for _ in range(400):
        obs, r, _, _, _ = env.step(m.predict(obs)[0])
        total += r
        obs, _ = env.reset()
    assert total / 400 >= 2.9, f"greedy return per step {total / 400:.2f} (best 3)"


@pytest.mark.parametrize("key,value", [("replay", "ranked"), ("per_alpha", 1.5),
                                       ("per_beta", -0.1), ("per_eps", 0.0)])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        dqn.DQN("CartPole-v1", device="cpu", **{key: value})
