"""LunarLander-v3 (gymnasium[box2d]), the first env the project does not implement: its preset
learns at half the RL-Zoo budget (at 50k steps all 5 benchmark seeds were at -46 or better in
their 10-episode evaluations). The 5-seed figure at the zoo's budget is bench/bench_sb3.py's."""

import numpy as np

import dqn


def test_lunarlander_preset_learns():
    model = dqn.DQN("LunarLander-v3", seed=7, device="cpu")
    model.learn(50_000)
    returns, _ = dqn.evaluate_policy(model, "LunarLander-v3", n_eval_episodes=10,
                                     return_episode_rewards=True, seed=900_000)  # unseen seeds
    mean = float(np.mean(returns))
    # a random policy scores about -180; an untrained greedy one crashes lower still
    assert mean > -100, f"greedy mean {mean:.1f} after 50k steps (returns {returns})"
