"""The rest of the SB3-shaped surface: callbacks, progress, verbose, predict's modes,
evaluate_policy, the properties."""

import math

import numpy as np
import pytest

import dqn

from conftest import TINY


def test_callable_callback_stops_learning():
    m = dqn.DQN("CartPole-v1", **TINY)
    seen = []

    def cb(loc, glob):
        seen.append(loc["self"].num_timesteps)
        assert "infos" in loc and "dones" in loc and "rewards" in loc
        return len(seen) < 50

    m.learn(1000, callback=cb)
    assert m.num_timesteps == 50 and seen == list(range(1, 51))


def test_object_callback_hooks():
    class Probe:
        def __init__(self):
            self.calls = []

        def init_callback(self, model):
            self.model = model
            self.calls.append("init")

        def on_training_start(self, loc, glob):
            self.calls.append("start")

        def update_locals(self, loc):
            self.last = loc

        def on_step(self):
            self.calls.append("step")
            return True

        def on_training_end(self):
            self.calls.append("end")

    p = Probe()
    m = dqn.DQN("CartPole-v1", num_envs=2, **TINY)
    m.learn(20, callback=[p])
    assert p.model is m
    assert p.calls == ["init", "start"] + ["step"] * 10 + ["end"]
    assert p.last["dones"].shape == (2,)
    with pytest.raises(TypeError):
        m.learn(10, callback=42)


def test_progress_bar_and_verbose(capsys):
    m = dqn.DQN("CartPole-v1", verbose=1, device="cpu", **TINY)
    m.learn(400, progress_bar=True, log_interval=200)
    out, err = capsys.readouterr()
    assert "Using cpu device" in out
    assert out.count("steps ") >= 2 and "mean_return" in out
    assert "400" in err or "400" in out   # tqdm's bar or the plain line, on stderr


def test_predict_modes():
    m = dqn.DQN("CartPole-v1", seed=1, exploration_initial_eps=1.0, exploration_final_eps=1.0,
                **TINY)
    x = np.random.default_rng(0).standard_normal((400, 4)).astype(np.float32)
    g1, _ = m.predict(x)
    g2, _ = m.predict(x, deterministic=True)
    assert np.array_equal(g1, g2)
    r, _ = m.predict(x, deterministic=False)       # epsilon 1: uniform choices
    assert 0.3 < np.mean(r != g1) < 0.7
    empty, _ = m.predict(np.zeros((0, 4), np.float32))
    assert empty.shape == (0,)
    a, state = m.predict(x[0], state="s", episode_start=np.array([True]))
    assert state == "s" and isinstance(a, int)


def test_evaluate_policy():
    m = dqn.DQN("CartPole-v1", **TINY)
    rets, lens = dqn.evaluate_policy(m, "CartPole-v1", n_eval_episodes=3, seed=0,
                                     return_episode_rewards=True)
    assert len(rets) == 3 and rets == [float(n) for n in lens]
    mean, std = dqn.evaluate_policy(m, "CartPole-v1", n_eval_episodes=3, seed=0)
    assert mean == pytest.approx(np.mean(rets)) and std == pytest.approx(np.std(rets))


def test_properties_and_stats():
    m = dqn.DQN("Acrobot-v1", seed=9, device="cpu", **TINY)
    assert m.device == "cpu" and m.env is m.get_env() and m.num_timesteps == 0
    assert m.observation_space.shape == (6,) and m.action_space.n == 3
    s = m.get_stats()
    assert set(s) == {"env_steps", "updates", "episodes", "mean_return", "last_loss", "mean_q",
                      "grad_norm", "epsilon", "skipped_updates"}
    assert s["env_steps"] == 0 and math.isnan(s["mean_return"]) and s["epsilon"] == 1.0
    assert m.get_config()["env_id"] == "Acrobot-v1" and "Acrobot-v1" in repr(m)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.get_stats()


def test_first_learn_sets_the_schedule():
    """The first learn() decays epsilon over its own total_timesteps (eps_fraction of it)."""
    m = dqn.DQN("CartPole-v1", exploration_fraction=0.5, **TINY)
    x = np.zeros((1, 4), np.float32)
    before = m.predict(x)[0]
    m.learn(1000)
    assert m.get_config()["steps"] == "1000"
    assert m.get_stats()["epsilon"] == pytest.approx(float(m.get_config()["eps_end"]))
    # an explicit steps is kept
    m2 = dqn.DQN("CartPole-v1", steps=10_000, exploration_fraction=0.5, **TINY)
    assert np.array_equal(m2.predict(x)[0], before)   # same seed: the same initial weights
    m2.learn(1000)
    assert m2.get_config()["steps"] == "10000"
    end = float(m2.get_config()["eps_end"])
    assert m2.get_stats()["epsilon"] == pytest.approx(1 - (1 - end) * 1000 / 5000)
