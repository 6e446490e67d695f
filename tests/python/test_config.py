"""Config kwargs, SB3 aliases, presets, the version and the C layout the binding relies on."""

import ctypes
import os
import re
import subprocess

import numpy as np
import pytest

import dqn
from dqn import _lib

from conftest import REPO, TINY


def test_version_is_the_headers():
    with open(os.path.join(REPO, "include", "dqn.h"), encoding="utf-8") as f:
        want = re.search(r'#define\s+DQN_VERSION\s+"([^"]+)"', f.read()).group(1)
    assert dqn.__version__ == want


def test_unknown_key_names_it():
    with pytest.raises(ValueError, match="no_such_key"):
        dqn.DQN("CartPole-v1", no_such_key=3)


def test_bad_value_carries_the_c_message():
    with pytest.raises(ValueError) as e:
        dqn.DQN("CartPole-v1", batch_size=0)
    msg = str(e.value)
    # the C table's own message: the key, the value and what is allowed
    assert "batch_size" in msg and '"0"' in msg and "[1, 65536]" in msg, msg
    with pytest.raises(ValueError, match=r"target_mode.*\"nope\".*mean\|independent"):
        dqn.DQN("CartPole-v1", target_mode="nope")


def test_sb3_alias_sets_the_key_and_its_errors_name_both():
    m = dqn.DQN("CartPole-v1", learning_rate=2.5e-4, gradient_steps=2,
                target_update_interval=123, exploration_final_eps=0.02, max_grad_norm=7)
    c = m.get_config()
    assert float(c["lr"]) == 2.5e-4
    assert c["updates_per_round"] == "2" and c["target_period"] == "123"
    assert float(c["eps_end"]) == 0.02 and float(c["grad_clip"]) == 7
    with pytest.raises(ValueError, match=r"learning_rate \(config key lr\).*bad value for lr"):
        dqn.DQN("CartPole-v1", learning_rate=-1)
    with pytest.raises(ValueError, match="both set config key 'lr'"):
        dqn.DQN("CartPole-v1", learning_rate=1e-3, lr=1e-3)


def test_train_freq_tuple_is_refused():
    with pytest.raises(ValueError, match="train_freq"):
        dqn.DQN("CartPole-v1", train_freq=(4, "step"))
    m = dqn.DQN("CartPole-v1", train_freq=4)
    assert m.get_config()["train_freq"] == "4"


def test_keys_of_the_spaces_and_args_are_refused():
    for k, v in (("branches", "2"), ("obs_dim", 4)):
        with pytest.raises(ValueError, match=k):
            dqn.DQN("CartPole-v1", **{k: v})


def test_bools_and_dashes():
    m = dqn.DQN("CartPole-v1", save_replay=True, **{"eps-start": 0.5})
    c = m.get_config()
    assert c["save_replay"] in ("true", "1") and float(c["eps_start"]) == 0.5


def test_host_driven_config_and_preset():
    m = dqn.DQN("CartPole-v1", seed=5)
    c = m.get_config()
    assert c["env"] == "external" and c["obs_dim"] == "4" and c["branches"] == "2"
    assert c["env_id"] == "CartPole-v1" and c["seed"] == "5" and c["num_envs"] == "1"
    # the cartpole preset's values (src/core/config.c), over the defaults
    ref = _lib.Config()
    ref.preset("cartpole")
    want = ref.as_dict()
    for k in ("n_tau", "batch_size", "lr", "target_period", "train_freq"):
        assert c[k] == want[k], k
    # a user value wins over the preset
    assert dqn.DQN("CartPole-v1", batch_size=48).get_config()["batch_size"] == "48"


def test_lunarlander_preset_exists():
    cfg = _lib.Config()
    cfg.preset("lunarlander")   # raises ValueError until the C table has it
    c = cfg.as_dict()
    assert c["env"] == "external" and c["obs_dim"] == "8" and c["branches"] == "4"


def test_config_help_lists_the_keys():
    h = dqn.config_help()
    for k in ("lr", "batch_size", "obs_dim", "env_id", "branches"):
        assert re.search(rf"^\s*{k}\s", h, re.M), k


def test_device_argument_is_validated():
    with pytest.raises(ValueError, match="device"):
        dqn.DQN("CartPole-v1", device="tpu")


def test_cuda_without_a_gpu_is_a_clear_error():
    if _lib.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present: tests/python/test_gpu.py covers it")
    with pytest.raises((ValueError, RuntimeError)) as e:
        dqn.DQN("CartPole-v1", device="cuda", **TINY)
    assert str(e.value).strip(), "the error carries the C message"


def test_stats_layout_matches_the_header(cc, tmp_path):
    """The binding mirrors dqn_train_stats and reserves CONFIG_BYTES for dqn_config: check both
    against the compiler's view of include/dqn.h."""
    src = tmp_path / "layout.c"
    src.write_text(
        '#include <stddef.h>\n#include <stdio.h>\n#include "dqn.h"\n'
        "int main(void) {\n"
        '  printf("%zu %zu\\n", sizeof(dqn_config), sizeof(dqn_train_stats));\n'
        "#define O(f) printf(\"%s %zu\\n\", #f, offsetof(dqn_train_stats, f));\n"
        "  O(env_steps) O(updates) O(episodes) O(mean_return) O(last_loss) O(mean_q)\n"
        "  O(grad_norm) O(epsilon) O(skipped_updates)\n  return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    cfg_size, stats_size = map(int, out[0].split())
    assert cfg_size <= _lib.CONFIG_BYTES
    assert stats_size == ctypes.sizeof(_lib.TrainStats)
    for line in out[1:]:
        if line:
            name, off = line.split()
            assert getattr(_lib.TrainStats, name).offset == int(off), name


def test_periodic_evaluation_keeps_the_best_and_leaves_training_alone(tmp_path):
    m = dqn.DQN("CartPole-v1", eval_freq=200, n_eval_episodes=3, run_dir=str(tmp_path),
                steps=600, **TINY)
    c = m.get_config()
    assert c["eval_interval"] == "200" and c["eval_interval_episodes"] == "3"
    assert m.get_eval_best()[1] == -1
    m.learn(600)
    plain = dqn.DQN("CartPole-v1", steps=600, **TINY)
    plain.learn(600)
    assert [e[0] for e in m.evaluations] == [200, 400, 600]
    means = [e[1] for e in m.evaluations]
    k = max(range(3), key=lambda i: (means[i], -i))
    assert m.get_eval_best() == (means[k], 200 * (k + 1))
    rows = (tmp_path / "evaluations.csv").read_text().splitlines()
    assert rows[0] == "step,mean,std,best,best_step" and len(rows) == 4
    # training is the same with the evaluations or without
    assert m.get_stats() == plain.get_stats()
    obs = np.random.default_rng(0).uniform(-0.2, 0.2, (64, 4)).astype(np.float32)
    assert np.array_equal(m.predict(obs)[0], plain.predict(obs)[0])
    # best.bin is a checkpoint that holds its own best
    b = dqn.DQN.load(str(tmp_path / "best.bin"))
    assert b.get_eval_best() == (means[k], 200 * (k + 1))
    assert b.get_stats()["env_steps"] == 200 * (k + 1)
    for x in (m, plain, b):
        x.close()


def test_periodic_evaluation_keys_are_validated():
    with pytest.raises(ValueError, match=r"eval_freq \(config key eval_interval\).*\[0, "):
        dqn.DQN("CartPole-v1", eval_freq=-1)
    with pytest.raises(ValueError, match=r"n_eval_episodes.*eval_interval_episodes.*\"0\""):
        dqn.DQN("CartPole-v1", n_eval_episodes=0)
