"""evaluate_policy: Stable-Baselines3's helper, over a plain Gymnasium env."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

import numpy as np

import gymnasium as gym

__all__ = ["evaluate_policy"]


def evaluate_policy(model: Any, env: Union[str, gym.Env], n_eval_episodes: int = 10,
                    deterministic: bool = True, return_episode_rewards: bool = False,
                    seed: Optional[int] = None,
                    ) -> Union[Tuple[float, float], Tuple[List[float], List[int]]]:
    """Run ``n_eval_episodes`` episodes of ``model.predict`` on ``env`` (a gymnasium.Env or a
    Gymnasium id, made and closed here).

    Returns (mean, std) of the episode returns, or with ``return_episode_rewards`` the lists
    (returns, lengths). ``seed`` seeds the first reset (later episodes continue its stream), so
    that an evaluation can use seeds that training did not.
    """
    if n_eval_episodes < 1:
        raise ValueError(f"n_eval_episodes={n_eval_episodes} < 1")
    own = isinstance(env, str)
    if own:
        env = gym.make(env)
    if isinstance(env, gym.vector.VectorEnv):
        raise ValueError("evaluate_policy takes a single gymnasium.Env (or a Gymnasium id)")
    returns: List[float] = []
    lengths: List[int] = []
    try:
        obs, _ = env.reset(seed=seed)
        for ep in range(n_eval_episodes):
            total, steps, done = 0.0, 0, False
            while not done:
                action, _ = model.predict(obs, deterministic=deterministic)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                steps += 1
                done = bool(terminated or truncated)
            returns.append(total)
            lengths.append(steps)
            if ep + 1 < n_eval_episodes:
                obs, _ = env.reset()
    finally:
        if own:
            env.close()
    if return_episode_rewards:
        return returns, lengths
    return float(np.mean(returns)), float(np.std(returns))
