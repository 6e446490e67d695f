"""Observation and action spaces: what is accepted, what is refused, and predict's shapes."""

import numpy as np
import pytest

import gymnasium as gym
from gymnasium import spaces

import dqn

from conftest import TINY, ContextBandit


class SpaceEnv(gym.Env):
    def __init__(self, obs_space, act_space):
        self.observation_space, self.action_space = obs_space, act_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


BOX = spaces.Box(-1, 1, (3,), np.float32)


def test_box_discrete():
    m = dqn.DQN(SpaceEnv(BOX, spaces.Discrete(5)), **TINY)
    c = m.get_config()
    assert c["obs_dim"] == "3" and c["branches"] == "5"
    a, state = m.predict(np.zeros(3, np.float32))
    assert isinstance(a, int) and 0 <= a < 5 and state is None
    a, _ = m.predict(np.zeros((7, 3)))
    assert a.shape == (7,) and a.dtype == np.int64


def test_discrete_start_is_added_back():
    m = dqn.DQN(SpaceEnv(BOX, spaces.Discrete(3, start=-1)), **TINY)
    a, _ = m.predict(np.random.default_rng(0).uniform(-1, 1, (64, 3)))
    assert a.min() >= -1 and a.max() <= 1


def test_multidiscrete_branches_are_nvec():
    env = ContextBandit(nvec=(3, 4, 5), start=(-1, 0, 10))
    m = dqn.DQN(env, **TINY)
    assert m.get_config()["branches"] == "3,4,5"
    a, _ = m.predict(np.eye(4, dtype=np.float32)[0])
    assert a.shape == (3,) and env.action_space.contains(a)
    a, _ = m.predict(np.eye(4, dtype=np.float32))
    assert a.shape == (4, 3) and all(env.action_space.contains(x) for x in a)


def test_image_shaped_box_is_flattened():
    m = dqn.DQN(SpaceEnv(spaces.Box(0, 255, (2, 3, 2), np.uint8), spaces.Discrete(2)), **TINY)
    assert m.get_config()["obs_dim"] == "12"
    a, _ = m.predict(np.zeros((2, 3, 2), np.uint8))
    assert a in (0, 1)
    m.learn(100)
    with pytest.raises(ValueError, match="shape"):
        m.predict(np.zeros(5))


def test_box_action_space_is_refused():
    with pytest.raises(ValueError, match=r"action space Box\(.*not supported.*Discrete or "
                                         r"MultiDiscrete"):
        dqn.DQN(SpaceEnv(BOX, spaces.Box(-1, 1, (2,), np.float32)))


def test_dict_observation_space_is_refused():
    obs = spaces.Dict({"a": BOX})
    with pytest.raises(ValueError, match=r"observation space Dict\(.*not supported"):
        dqn.DQN(SpaceEnv(obs, spaces.Discrete(2)))


def test_branch_size_limits():
    with pytest.raises(ValueError, match="2..64"):
        dqn.DQN(SpaceEnv(BOX, spaces.Discrete(65)))
    with pytest.raises(ValueError, match="2..64"):
        dqn.DQN(SpaceEnv(BOX, spaces.MultiDiscrete([3, 1])))
    with pytest.raises(ValueError, match="1-D"):
        dqn.DQN(SpaceEnv(BOX, spaces.MultiDiscrete([[2, 2], [2, 2]])))
    dqn.DQN(SpaceEnv(BOX, spaces.Discrete(64)), **TINY)


def test_bad_env_argument():
    with pytest.raises(TypeError):
        dqn.DQN(42)
    with pytest.raises(ValueError, match="num_envs"):
        dqn.DQN(ContextBandit(), num_envs=2)
