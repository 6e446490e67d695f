"""dqn: distributional deep Q-networks (IQN + GRN trunk + dueling heads + action branching),
trained by the C library libdqn, with a Stable-Baselines3-shaped API over Gymnasium envs.

    import dqn
    model = dqn.DQN("CartPole-v1", seed=0).learn(50_000)
    mean, std = dqn.evaluate_policy(model, "CartPole-v1", n_eval_episodes=20, seed=1000)
    model.save("cartpole.ckpt")
    model = dqn.DQN.load("cartpole.ckpt")
"""

from ._lib import DQNError, config_help
from .dqn import DQN, PRESETS, SB3_ALIASES
from .evaluation import evaluate_policy


def _version() -> str:
    """include/dqn.h's DQN_VERSION: written into _version.py by the build, or read from the
    header of the source tree this package sits in (DQN_LIB development use)."""
    try:
        from ._version import __version__ as v

        return v
    except ImportError:
        pass
    import os
    import re

    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "dqn.h")
    try:
        with open(header, encoding="utf-8") as f:
            m = re.search(r'#define\s+DQN_VERSION\s+"([^"]+)"', f.read())
        return m.group(1) if m else "0+unknown"
    except OSError:
        return "0+unknown"


__version__ = _version()

__all__ = ["DQN", "DQNError", "PRESETS", "SB3_ALIASES", "config_help", "evaluate_policy",
           "__version__"]
