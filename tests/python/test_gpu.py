"""The CUDA backend from Python (skipped, saying why, where there is no CUDA device)."""

import numpy as np
import pytest

import dqn
from dqn import _lib

needs_gpu = pytest.mark.skipif(_lib.cuda_device_count() == 0,
                               reason="no CUDA device visible to libdqn (or built without CUDA)")


@needs_gpu
def test_cuda_learns_and_round_trips(tmp_path):
    m = dqn.DQN("CartPole-v1", seed=3, device="cuda")
    assert m.device == "cuda"
    m.learn(20_000)
    st = m.get_stats()
    assert st["updates"] > 0 and np.isfinite(st["last_loss"])
    mean, _ = dqn.evaluate_policy(m, "CartPole-v1", n_eval_episodes=10, seed=4321)
    assert mean >= 100, mean
    p = tmp_path / "gpu.ckpt"
    m.save(p)
    x = np.random.default_rng(0).standard_normal((256, 4)).astype(np.float32)
    for device in (None, "cuda"):
        loaded = dqn.DQN.load(p, device=device)
        assert loaded.device == "cuda"
        assert np.array_equal(loaded.predict(x)[0], m.predict(x)[0])
    cpu = dqn.DQN.load(p, device="cpu")
    assert cpu.device == "cpu"
    # the same weights on another backend: nearly every greedy action agrees
    assert np.mean(cpu.predict(x)[0] == m.predict(x)[0]) > 0.95


@needs_gpu
def test_auto_picks_cuda():
    assert dqn.DQN("CartPole-v1", device="auto").device == "cuda"
