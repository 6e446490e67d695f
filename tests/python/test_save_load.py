"""save / load: bit-identical greedy actions, learning goes on, bad files raise."""

import os

import numpy as np
import pytest

import gymnasium as gym

import dqn

from conftest import TINY, ContextBandit


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    m = dqn.DQN("CartPole-v1", seed=4, device="cpu", **TINY)
    m.learn(1500)
    path = str(tmp_path_factory.mktemp("ckpt") / "model.bin")
    m.save(path)
    return m, path


def random_obs(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 4)) * [1.0, 1.5, 0.1, 1.5]).astype(np.float32)


def test_save_writes_exactly_the_path(trained):
    _, path = trained
    assert os.path.isfile(path)
    assert sorted(os.listdir(os.path.dirname(path))) == ["model.bin"]


def test_round_trip_bit_identical(trained):
    m, path = trained
    loaded = dqn.DQN.load(path)
    x = random_obs(512)
    a0, _ = m.predict(x)
    a1, _ = loaded.predict(x)
    assert a0.dtype == a1.dtype and np.array_equal(a0, a1)
    # (not all one action: the comparison means something)
    assert len(np.unique(a0)) == 2
    assert loaded.num_timesteps == m.get_stats()["env_steps"]
    assert loaded.get_config()["lr"] == m.get_config()["lr"]
    assert loaded.observation_space.shape == (4,) and loaded.action_space.n == 2


def test_loaded_model_learns_on(trained):
    m, path = trained
    loaded = dqn.DQN.load(path, env="CartPole-v1", device="cpu")
    before = loaded.get_stats()
    loaded.learn(300, reset_num_timesteps=False)
    after = loaded.get_stats()
    assert after["env_steps"] == before["env_steps"] + 300
    assert after["updates"] > before["updates"]
    assert loaded.num_timesteps == before["env_steps"] + 300
    assert loaded.device == "cpu"


def test_load_checks_the_env(trained):
    _, path = trained
    with pytest.raises(ValueError, match="does not match"):
        dqn.DQN.load(path, env="Acrobot-v1")
    with pytest.raises(ValueError, match="unknown_thing"):
        dqn.DQN.load(path, unknown_thing=1)
    with pytest.raises(ValueError, match="no env"):
        dqn.DQN.load(path).learn(10)


def test_load_for_another_number_of_envs(trained):
    m, path = trained
    env = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
    loaded = dqn.DQN.load(path, env=env)
    assert loaded.n_envs == 3 and loaded.get_config()["num_envs"] == "3"
    x = random_obs(64, seed=3)
    assert np.array_equal(loaded.predict(x)[0], m.predict(x)[0])
    before = loaded.get_stats()
    loaded.learn(300)
    after = loaded.get_stats()
    assert loaded.num_timesteps == 300 and after["updates"] > before["updates"]
    env.close()


def test_multidiscrete_round_trip(tmp_path):
    env = ContextBandit()
    m = dqn.DQN(env, seed=2, **TINY)
    m.learn(400)
    p = tmp_path / "md.bin"
    m.save(p)
    x = np.eye(4, dtype=np.float32)
    # with the env given, its spaces' start offsets come back
    loaded = dqn.DQN.load(p, env=ContextBandit())
    assert np.array_equal(m.predict(x)[0], loaded.predict(x)[0])
    loaded.learn(100)


@pytest.mark.parametrize("damage", ["truncated", "bitflip", "empty", "garbage", "missing"])
def test_bad_file_raises(trained, tmp_path, damage):
    _, path = trained
    data = open(path, "rb").read()
    bad = tmp_path / "bad.bin"
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "bitflip":
        b = bytearray(data)
        b[len(b) * 2 // 3] ^= 0x10
        bad.write_bytes(bytes(b))
    elif damage == "empty":
        bad.write_bytes(b"")
    elif damage == "garbage":
        bad.write_bytes(os.urandom(4096))
    with pytest.raises((OSError, ValueError)) as e:
        dqn.DQN.load(bad)
    assert str(bad) in str(e.value) or damage == "missing" or str(e.value)
    if damage == "missing":
        assert isinstance(e.value, FileNotFoundError)


def test_save_to_a_missing_directory_raises(trained, tmp_path):
    m, _ = trained
    with pytest.raises(OSError):
        m.save(tmp_path / "no" / "such" / "dir" / "m.bin")
