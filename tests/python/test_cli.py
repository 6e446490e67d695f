"""Interop with the CLI: its checkpoints load in Python, and Python's evaluate with `dqn eval`."""

import os
import re
import subprocess

import numpy as np

import dqn

from conftest import TINY


def test_cli_checkpoint_loads_and_predicts(cli, tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([cli, "train", "--env", "cartpole", "--steps", "3000", "--seed", "2",
                        "--run-dir", str(run), "--eval-episodes", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ckpt = run / "checkpoint.bin"
    m = dqn.DQN.load(ckpt)
    assert m.num_timesteps == 3000
    assert m.observation_space.shape == (4,) and m.action_space.n == 2
    x = np.random.default_rng(1).standard_normal((64, 4)).astype(np.float32)
    a, _ = m.predict(x)
    assert a.shape == (64,) and set(np.unique(a)) <= {0, 1}
    assert m.predict(x[0])[0] == a[0]
    # the same file, with CartPole-v1 from Gymnasium: the model can go on learning
    m2 = dqn.DQN.load(ckpt, env="CartPole-v1", device="cpu")
    assert np.array_equal(m2.predict(x)[0], a)
    m2.learn(200)
    assert m2.get_stats()["env_steps"] == 3200
    mean, _ = dqn.evaluate_policy(m2, "CartPole-v1", n_eval_episodes=2, seed=5)
    assert mean >= 8


def test_python_checkpoint_evaluates_in_the_cli(cli, tmp_path):
    m = dqn.DQN("CartPole-v1", seed=1, device="cpu", **TINY)
    m.learn(1000)
    path = tmp_path / "py.ckpt"
    m.save(path)
    r = subprocess.run([cli, "eval", "--checkpoint", str(path), "--env", "cartpole",
                        "--episodes", "3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"3 greedy episodes.*mean return", r.stdout), r.stdout


def test_cli_refuses_a_python_checkpoint_without_an_env(cli, tmp_path):
    m = dqn.DQN("CartPole-v1", seed=1, device="cpu", **TINY)
    path = tmp_path / "py.ckpt"
    m.save(path)
    r = subprocess.run([cli, "eval", "--checkpoint", str(path), "--episodes", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.returncode < 128, (r.returncode, r.stdout, r.stderr)
    assert (r.stdout + r.stderr).strip()
