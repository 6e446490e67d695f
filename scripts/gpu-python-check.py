"""The Python package on the CUDA backend: Gymnasium's CartPole-v1 trained with
dqn.DQN(device="cuda") to a greedy mean >= 475 on unseen seeds, bit-exact save/load, the CLI
evaluating the Python checkpoint, and the host-driven loop's time per env step. Run by
scripts/gpu-extra.d/python.sh on the GPU machine (DQN_LIB = the sm_90 build's libdqn.so)."""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import dqn


def main():
    cli = sys.argv[1]
    seeds = [int(x) for x in os.environ.get("PY_SEEDS", "1 2 3").split()]
    bad = 0
    rows = []
    for seed in seeds:
        model = dqn.DQN("CartPole-v1", seed=seed, device="cuda")
        t0 = time.perf_counter()
        model.learn(total_timesteps=100_000)
        wall = time.perf_counter() - t0
        mean, _ = dqn.evaluate_policy(model, "CartPole-v1", n_eval_episodes=20,
                                      seed=10_000 + 100 * seed)
        ok = mean >= 475 and model.device == "cuda"
        bad += not ok
        rows.append(f"python cuda cartpole seed {seed}: {wall:.1f} s for 100k steps "
                    f"({wall / 1e5 * 1e6:.0f} us/step), greedy {mean:.1f} on 20 unseen "
                    f"episodes, device {model.device}: {'ok' if ok else 'FAIL'}")
        print(rows[-1], flush=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cartpole_cuda.ckpt")
        model.save(path)
        back = dqn.DQN.load(path, device="cuda")
        obs = np.random.default_rng(0).normal(0, 0.1, size=(256, 4)).astype(np.float32)
        a0, _ = model.predict(obs)
        a1, _ = back.predict(obs)
        same = bool(np.array_equal(a0, a1))
        bad += not same
        rows.append(f"python cuda save/load: greedy actions on 256 obs identical: {same}")
        r = subprocess.run([cli, "eval", "--checkpoint", path, "--env", "cartpole",
                            "--device", "cuda", "--episodes", "20"], capture_output=True, text=True)
        bad += r.returncode != 0
        rows.append(f"dqn eval --env cartpole of the Python checkpoint: rc {r.returncode}: "
                    f"{r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr.strip()}")
    print("\n".join(rows[-2:]))
    print(f"python-cuda: {'ok' if bad == 0 else f'{bad} FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
