"""Vector envs: SyncVectorEnv in each autoreset mode, AsyncVectorEnv; num_timesteps counts every
env's steps."""

import numpy as np
import pytest

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

import dqn

from conftest import TINY

N = 4
STEPS = 2000


def make_cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP,
                                  AutoresetMode.DISABLED])
def test_sync_vector_env(mode):
    env = SyncVectorEnv([make_cartpole] * N, autoreset_mode=mode)
    m = dqn.DQN(env, seed=3, **TINY)
    assert m.get_config()["num_envs"] == str(N)
    m.learn(STEPS)
    st = m.get_stats()
    assert m.num_timesteps == STEPS
    assert st["updates"] > 0 and st["episodes"] > 20
    if mode == AutoresetMode.NEXT_STEP:
        # each finished episode costs its slot one reset step, which is no transition (valid = 0)
        assert STEPS - st["episodes"] <= st["env_steps"] <= STEPS - st["episodes"] + N
    else:
        assert st["env_steps"] == STEPS
    # the learner's returns are CartPole's (at least 8 steps an episode, and at most 500)
    assert 8 <= st["mean_return"] <= 500
    env.close()


def test_async_vector_env():
    env = AsyncVectorEnv([make_cartpole] * N)
    try:
        m = dqn.DQN(env, seed=3, **TINY)
        m.learn(STEPS)
        st = m.get_stats()
        assert m.num_timesteps == STEPS and st["updates"] > 0 and st["episodes"] > 20
        m.learn(400, reset_num_timesteps=False)
        assert m.num_timesteps == STEPS + 400
    finally:
        env.close()


def test_id_with_num_envs_makes_a_vector_env():
    m = dqn.DQN("CartPole-v1", num_envs=3, **TINY)
    assert isinstance(m.env, gym.vector.VectorEnv) and m.env.num_envs == 3
    m.learn(301)   # rounded up to whole vector steps
    assert m.num_timesteps == 303


class CycleEnv(gym.Env):
    """Reset in B; B -> A with reward 0; A -> A with reward 1 and a time limit (truncated), so the
    final observation (A) differs from the next episode's first (B). With the final observation
    as next_obs, Q(A) = 1 / (1 - g) = 10 and Q(B) = g Q(A) = 9; with the reset observation in
    its place, Q(A) = 1 / (1 - g^2) = 5.3 and Q(B) = 4.7."""

    A = np.array([1.0, 0.0], np.float32)
    B = np.array([0.0, 1.0], np.float32)

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.at_a = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.at_a = False
        return self.B.copy(), {}

    def step(self, action):
        if self.at_a:
            return self.A.copy(), 1.0, False, True, {}
        self.at_a = True
        return self.A.copy(), 0.0, False, False, {}


@pytest.mark.parametrize("mode", [None, AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP,
                                  AutoresetMode.DISABLED])
def test_final_observation_is_next_obs(mode):
    env = CycleEnv() if mode is None else SyncVectorEnv([CycleEnv] * 2, autoreset_mode=mode)
    m = dqn.DQN(env, seed=0, gamma=0.9, n_step=1, d=16, head_hidden=16, n_tau=8,
                n_tau_target=8, k_tau=8, batch_size=32, learning_starts=100, lr=3e-3,
                target_update_interval=10, exploration_fraction=0.01, exploration_final_eps=0.0)
    m.learn(3000)
    q = m.get_stats()["mean_q"]   # over the states acted in: (10 + 9) / 2, not (5.3 + 4.7) / 2
    assert 8.5 <= q <= 10.5, f"mean Q {q:.2f}"
