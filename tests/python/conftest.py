"""Shared fixtures and small envs for the tests of the Python package `dqn`.

The tests import the installed package; DQN_LIB may point at another libdqn.so. DQN_CLI (set by
tests/run_tests.sh) is the built CLI, for the interop tests.
"""

import os
import shutil

import numpy as np
import pytest

import gymnasium as gym
from gymnasium import spaces

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Small and fast: a model for tests that need a trainer but not a good policy.
TINY = dict(d=16, head_hidden=16, n_cos=8, n_tau=4, n_tau_target=4, k_tau=4, batch_size=16,
            buffer_size=2000, learning_starts=64)


class ContextBandit(gym.Env):
    """One-step episodes: the observation is a one-hot context c (of K); the action is
    MultiDiscrete(nvec, start); the reward is the number of dimensions whose action equals
    TARGET[c] (so 0..len(nvec)). Random play earns sum(1/n) per step."""

    def __init__(self, nvec=(3, 4, 3), start=(-1, 0, 2), contexts=4, seed_table=7):
        self.K = contexts
        self.observation_space = spaces.Box(0.0, 1.0, (contexts,), np.float32)
        self.action_space = spaces.MultiDiscrete(np.array(nvec), start=np.array(start))
        rng = np.random.default_rng(seed_table)
        self.start = np.array(start)
        self.target = np.stack([s + rng.integers(0, n, contexts) for s, n in zip(start, nvec)],
                               axis=1)
        self.c = 0

    def _obs(self):
        o = np.zeros(self.K, np.float32)
        o[self.c] = 1.0
        return o

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.c = int(self.np_random.integers(self.K))
        return self._obs(), {}

    def step(self, action):
        a = np.asarray(action)
        assert self.action_space.contains(a), a
        r = float(np.sum(a == self.target[self.c]))
        return self._obs(), r, True, False, {}


class ConstantEnv(gym.Env):
    """Constant observation and reward 1; every episode is one step, ending as truncated (a time
    limit: the target bootstraps, Q -> 1 / (1 - gamma)) or as terminated (Q -> 1)."""

    def __init__(self, end="truncated"):
        self.end = end
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.o = np.array([0.5, -0.5], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.o.copy(), {}

    def step(self, action):
        return self.o.copy(), 1.0, self.end == "terminated", self.end == "truncated", {}


@pytest.fixture
def cli():
    path = os.environ.get("DQN_CLI")
    if not path:
        pytest.skip("DQN_CLI is not set (tests/run_tests.sh sets it to the built CLI)")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"DQN_CLI={path} is not an executable")
    return path


@pytest.fixture
def cc():
    c = shutil.which(os.environ.get("CC", "cc"))
    if not c:
        pytest.skip("no C compiler to build the layout check")
    return c
