"""The DQN class: a Stable-Baselines3-shaped front end of libdqn's host-driven trainer.

Python steps the Gymnasium env(s); libdqn acts (epsilon-greedy per branch), stores transitions
and runs the scheduled updates inside ``dqn_trainer_observe``. The loop passes preallocated numpy
buffers (float32 observations, int32 actions, float32 rewards, uint8 flags) by pointer, so no
per-step arrays cross the boundary.

When the trainer is made: at construction (so that a bad config, device or shape fails at once),
with the config's ``steps``. Epsilon decays over ``steps`` (``eps_fraction`` of it), and SB3 users
give the length at ``learn(total_timesteps)``; so the first ``learn`` of a model that has not
stepped yet remakes the trainer with ``steps = total_timesteps`` (same seed: the same initial
weights), unless ``steps`` was given explicitly. A later ``learn`` goes on with the same trainer
and its schedule over the first call's ``steps`` (epsilon stays at ``eps_end`` once past it).
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

import gymnasium as gym
from gymnasium import spaces

from . import _lib
from ._lib import lib

__all__ = ["DQN", "PRESETS", "SB3_ALIASES"]

# Gymnasium ids whose tuned presets the C config table holds.
PRESETS: Dict[str, str] = {
    "CartPole-v1": "cartpole",
    "Acrobot-v1": "acrobot",
    "MountainCar-v0": "mountaincar",
    "LunarLander-v3": "lunarlander",
}
# The built-in envs of the CLI, back to their Gymnasium ids (for checkpoints written by it).
_BUILTIN_IDS = {v: k for k, v in PRESETS.items()}

# Stable-Baselines3 argument names that mean the same as a config key.
SB3_ALIASES: Dict[str, str] = {
    "learning_rate": "lr",
    "buffer_size": "buffer_size",
    "batch_size": "batch_size",
    "gamma": "gamma",
    "learning_starts": "learning_starts",
    "train_freq": "train_freq",
    "gradient_steps": "updates_per_round",
    "target_update_interval": "target_period",
    "exploration_fraction": "eps_fraction",
    "exploration_initial_eps": "eps_start",
    "exploration_final_eps": "eps_end",
    "max_grad_norm": "grad_clip",
    # EvalCallback's
    "eval_freq": "eval_interval",
    "n_eval_episodes": "eval_interval_episodes",
}
# Keys that the env's spaces decide.
_OWNED_KEYS = ("env", "obs_dim", "branches")
# DQN.load's SB3 arguments that have no meaning here (accepted and ignored).
_LOAD_IGNORED = ("custom_objects", "print_system_info", "force_reset")

_vp = ctypes.c_void_p


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _key(k: str) -> str:
    return k.replace("-", "_")


def _value_text(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, np.integer)) for x in v):
        return ",".join(str(int(x)) for x in v)
    return str(v)


def _env_id_text(name: str) -> str:
    """A name the config's env_id accepts: printable, no quote, at most 63 characters."""
    s = "".join(ch for ch in str(name) if 0x20 <= ord(ch) < 0x7F and ch != '"')
    return s[:63]


# ---- spaces -----------------------------------------------------------------------------------

def _check_obs_space(space: gym.Space) -> Tuple[Tuple[int, ...], int]:
    if not isinstance(space, spaces.Box):
        raise ValueError(
            f"observation space {space} is not supported: dqn needs a Box observation space "
            f"(flattened to float32)")
    shape = tuple(int(s) for s in space.shape)
    return shape, int(np.prod(shape, dtype=np.int64)) if shape else 1


def _check_action_space(space: gym.Space) -> Tuple[List[int], np.ndarray, bool]:
    """(branch sizes, start of each branch, discrete?)"""
    if isinstance(space, spaces.Discrete):
        sizes, starts, discrete = [int(space.n)], np.array([int(space.start)], np.int64), True
    elif isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        if nvec.ndim != 1:
            raise ValueError(
                f"action space {space} is not supported: dqn needs a 1-D MultiDiscrete "
                f"(nvec of shape {nvec.shape})")
        sizes = [int(x) for x in nvec]
        starts = np.asarray(getattr(space, "start", np.zeros_like(nvec)), np.int64).reshape(-1)
        discrete = False
    else:
        raise ValueError(
            f"action space {space} is not supported: dqn needs Discrete or MultiDiscrete")
    if not 1 <= len(sizes) <= 16:
        raise ValueError(f"action space {space} has {len(sizes)} dimensions: dqn allows 1..16")
    bad = [n for n in sizes if not 2 <= n <= 64]
    if bad:
        raise ValueError(
            f"action space {space} is not supported: each dimension needs 2..64 choices "
            f"(got {bad[0]})")
    return sizes, starts, discrete


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return spec.id
    try:
        return type(env.unwrapped).__name__
    except Exception:
        return type(env).__name__


def _make_env(env: Any, num_envs: Optional[int]) -> Tuple[Any, bool, str, bool]:
    """(env, vector?, env name, made here?)"""
    if isinstance(env, str):
        if num_envs is not None and int(num_envs) > 1:
            e = gym.make_vec(env, num_envs=int(num_envs), vectorization_mode="sync")
            return e, True, env, True
        return gym.make(env), False, env, True
    if isinstance(env, gym.vector.VectorEnv):
        if num_envs is not None and int(num_envs) != env.num_envs:
            raise ValueError(f"num_envs={num_envs} but the vector env has {env.num_envs} envs")
        return env, True, _env_name(env), False
    if isinstance(env, gym.Env):
        if num_envs is not None and int(num_envs) != 1:
            raise ValueError(
                f"num_envs={num_envs} with a single gymnasium.Env: pass a gymnasium.vector."
                f"VectorEnv (or a Gymnasium id) for several envs")
        return env, False, _env_name(env), False
    raise TypeError(
        f"env must be a Gymnasium id, a gymnasium.Env or a gymnasium.vector.VectorEnv, "
        f"not {type(env).__name__}")


def _spaces_of(env: Any, vector: bool) -> Tuple[gym.Space, gym.Space]:
    if vector:
        return env.single_observation_space, env.single_action_space
    return env.observation_space, env.action_space


def _autoreset_mode(env: Any):
    from gymnasium.vector import AutoresetMode

    mode = getattr(env, "metadata", {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if not isinstance(mode, AutoresetMode):
        mode = AutoresetMode(getattr(mode, "value", mode))
    return mode


# ---- the trainer handle -----------------------------------------------------------------------

class _Trainer:
    """Owns one dqn_trainer*."""

    def __init__(self, ptr: ctypes.c_void_p) -> None:
        self.ptr = ptr

    @classmethod
    def create(cls, cfg: _lib.Config) -> "_Trainer":
        p = _vp()
        _lib.check(lib.dqn_trainer_create(cfg.ptr, ctypes.byref(p)))
        return cls(p)

    @classmethod
    def load(cls, path: str, device: str) -> "_Trainer":
        p = _vp()
        _lib.check(lib.dqn_trainer_load_env(os.fsencode(path), device.encode(), None,
                                            ctypes.byref(p)),
                   context=f"loading {path}", path=path)
        return cls(p)

    def close(self) -> None:
        p, self.ptr = self.ptr, None
        if p and lib is not None:
            lib.dqn_trainer_destroy(p)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def stats(self) -> _lib.TrainStats:
        s = _lib.TrainStats()
        lib.dqn_trainer_stats(self.ptr, ctypes.byref(s))
        return s

    def config(self) -> Dict[str, str]:
        return _lib.parse_config_text(_lib.config_text(lib.dqn_trainer_config(self.ptr)))

    def backend(self) -> str:
        return lib.dqn_trainer_backend(self.ptr).decode()

    def shape(self) -> Tuple[int, List[int]]:
        sizes = (ctypes.c_int * 16)()
        d = lib.dqn_trainer_branches(self.ptr, ctypes.cast(sizes, _vp))
        return int(lib.dqn_trainer_obs_dim(self.ptr)), [int(sizes[i]) for i in range(d)]


# ---- callbacks --------------------------------------------------------------------------------

class _Callbacks:
    """callback=None | callable(locals, globals) -> bool | object with on_step() | a list.

    An object may also have init_callback(model), on_training_start(locals, globals),
    update_locals(locals) and on_training_end() (Stable-Baselines3's BaseCallback has them all).
    A False from a callable or from on_step() stops learning.
    """

    def __init__(self, callback: Any, model: "DQN") -> None:
        items = callback if isinstance(callback, (list, tuple)) else [callback]
        self.items = [c for c in items if c is not None]
        for c in self.items:
            if not callable(c) and not hasattr(c, "on_step"):
                raise TypeError(f"callback {c!r} is neither callable nor has on_step()")
        self.active = bool(self.items)
        for c in self.items:
            if hasattr(c, "init_callback") and hasattr(c, "on_step"):
                c.init_callback(model)

    def start(self, loc: Dict[str, Any], glob: Dict[str, Any]) -> None:
        for c in self.items:
            if hasattr(c, "on_step") and hasattr(c, "on_training_start"):
                c.on_training_start(loc, glob)

    def step(self, loc: Dict[str, Any], glob: Dict[str, Any]) -> bool:
        go = True
        for c in self.items:
            if hasattr(c, "on_step"):
                if hasattr(c, "update_locals"):
                    c.update_locals(loc)
                r = c.on_step()
            else:
                r = c(loc, glob)
            if r is False:
                go = False
        return go

    def end(self) -> None:
        for c in self.items:
            if hasattr(c, "on_step") and hasattr(c, "on_training_end"):
                c.on_training_end()


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.bar, self.enabled = total, 0, None, enabled
        self.every = max(1, total // 200)
        self.next = self.every
        self.t0 = time.monotonic()
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="step")
        except Exception:
            self.bar = None

    def update(self, done: int) -> None:
        if not self.enabled or done < self.next:
            return
        self.next = done + self.every
        if self.bar is not None:
            self.bar.update(done - self.done)
        else:
            rate = done / max(time.monotonic() - self.t0, 1e-9)
            sys.stderr.write(f"\r{done}/{self.total} steps ({100.0 * done / max(self.total, 1):.0f}%)"
                             f"  {rate:.0f} steps/s")
            sys.stderr.flush()
        self.done = done

    def close(self, done: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(max(0, done - self.done))
            self.bar.close()
        else:
            self.next = 0
            self.update(done)
            sys.stderr.write("\n")


# ---- the model --------------------------------------------------------------------------------

class DQN:
    """IQN + GRN trunk + dueling heads + action branching, trained by libdqn.

    ``DQN(env, seed=0, device="auto", verbose=0, **config)``

    - ``env``: a Gymnasium id (``gymnasium.make``; with ``num_envs=N > 1`` a ``SyncVectorEnv``
      of N copies), a ``gymnasium.Env``, or a ``gymnasium.vector.VectorEnv`` (``num_envs`` from
      it; both autoreset modes, and ``DISABLED``).
    - Observation space: Box (any shape, flattened to float32). Action space: Discrete (one
      branch) or 1-D MultiDiscrete (a branch per dimension), each with 2..64 choices; ``start``
      is honoured.
    - ``**config``: any key of the C config table (``dqn.config_help()``), or a Stable-Baselines3
      name that means the same (``SB3_ALIASES``). A bad value raises ValueError with the table's
      own message. ``CartPole-v1``, ``Acrobot-v1``, ``MountainCar-v0`` and ``LunarLander-v3`` start
      from their tuned presets.
    """

    def __init__(self, env: Any, *, seed: Optional[int] = 0, device: str = "auto",
                 verbose: int = 0, **config: Any) -> None:
        self._lock = threading.RLock()
        self._trainer: Optional[_Trainer] = None
        self.verbose = int(verbose)
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.seed = int(seed)
        num_envs = config.pop("num_envs", None)
        self._env, self._vector, name, self._own_env = _make_env(env, num_envs)
        self._setup_spaces(*_spaces_of(self._env, self._vector))
        self.n_envs = self._env.num_envs if self._vector else 1
        self.env_id = name
        self._settings = self._resolve(config)
        self._user_steps = "steps" in self._settings
        self._cfg = self._make_config(self._settings, device)
        self._device_arg = device
        self._trainer = _Trainer.create(self._cfg)
        self._fresh = True
        self._steps_cfg = int(self._trainer.config().get("steps", "0"))
        self._num_timesteps = 0
        self._last_obs: Optional[np.ndarray] = None
        self._first_reset = True
        self._rng = np.random.default_rng(self.seed)
        if self.verbose >= 1:
            print(f"Using {self.device} device ({self._trainer.backend()})")

    # -- construction helpers --
    def _setup_spaces(self, obs_space: gym.Space, act_space: gym.Space) -> None:
        self._obs_shape, self.obs_dim = _check_obs_space(obs_space)
        self._branches, self._starts, self._discrete = _check_action_space(act_space)
        self.observation_space, self.action_space = obs_space, act_space

    def _resolve(self, config: Dict[str, Any]) -> Dict[str, Tuple[str, str]]:
        """kwargs -> {config key: (value text, the user's name)}"""
        out: Dict[str, Tuple[str, str]] = {}
        for name, value in config.items():
            key = _key(SB3_ALIASES.get(name, name))
            if name == "train_freq" or key == "train_freq":
                if isinstance(value, (tuple, list)) or hasattr(value, "unit"):
                    raise ValueError(
                        f"train_freq={value!r} is not supported: pass an int (env steps, "
                        f"summed over envs, per round of updates)")
            if key in ("seed", "device"):
                raise ValueError(f"{name} is an argument of DQN(...), not a config key here")
            if key in _OWNED_KEYS:
                raise ValueError(
                    f"config key {name!r} is set from the env's spaces and cannot be given")
            if not _lib.has_key(key):
                raise ValueError(
                    f"unknown config key {name!r}: not a key of the dqn config table "
                    f"(dqn.config_help() lists them) nor a Stable-Baselines3 name it accepts "
                    f"({', '.join(sorted(SB3_ALIASES))})")
            if value is None:
                continue
            if key in out:
                raise ValueError(f"{name!r} and {out[key][1]!r} both set config key {key!r}")
            out[key] = (_value_text(value), name)
        return out

    def _make_config(self, settings: Dict[str, Tuple[str, str]], device: str,
                     steps: Optional[int] = None) -> _lib.Config:
        cfg = _lib.Config()
        preset = PRESETS.get(self.env_id)
        if preset is not None:
            try:
                cfg.preset(preset)
            except ValueError:
                if preset != "lunarlander":   # not in every libdqn yet: defaults then
                    raise
                cfg = _lib.Config()
        cfg.set("env", "external")
        cfg.set("obs_dim", str(self.obs_dim))
        cfg.set("branches", ",".join(str(n) for n in self._branches))
        cfg.set("env_id", _env_id_text(self.env_id))
        cfg.set("num_envs", str(self.n_envs))
        cfg.set("seed", str(self.seed))
        try:
            cfg.set("device", str(device))
        except ValueError as e:
            raise ValueError(f"device={device!r}: {e}") from None
        for key, (text, name) in settings.items():
            try:
                cfg.set(key, text)
            except ValueError as e:
                where = name if name == key else f"{name} (config key {key})"
                raise ValueError(f"{where}: {e}") from None
        if steps is not None and "steps" not in settings:
            cfg.set("steps", str(steps))
        cfg.validate()
        return cfg

    # -- properties --
    @property
    def env(self) -> Any:
        return self._env

    def get_env(self) -> Any:
        return self._env

    @property
    def logger(self) -> None:
        return None

    @property
    def num_timesteps(self) -> int:
        return self._num_timesteps

    @property
    def device(self) -> str:
        """The backend in use: "cpu" or "cuda"."""
        return self._t().backend()

    def get_stats(self) -> Dict[str, float]:
        """The trainer's counters (dqn_train_stats): env_steps, updates, episodes, mean_return
        (NaN before an episode ends), last_loss, mean_q, grad_norm, epsilon, skipped_updates."""
        with self._lock:
            return self._t().stats().as_dict()

    def get_config(self) -> Dict[str, str]:
        """The trainer's resolved config, every key as text (as a run's config.txt)."""
        with self._lock:
            return self._t().config()

    def _t(self) -> _Trainer:
        if self._trainer is None or not self._trainer.ptr:
            raise ValueError("this model is closed")
        return self._trainer

    def close(self) -> None:
        """Free the C trainer (and close the env if this model made it)."""
        with self._lock:
            if self._trainer is not None:
                self._trainer.close()
                self._trainer = None
            if getattr(self, "_own_env", False) and self._env is not None:
                self._env.close()
                self._own_env = False
            for e in getattr(self, "_eval_env_list", None) or []:
                e.close()
            self._eval_env_list = None

    def __del__(self) -> None:
        try:
            if self._trainer is not None:
                self._trainer.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"DQN(env={self.env_id!r}, n_envs={self.n_envs}, obs_dim={self.obs_dim}, "
                f"branches={self._branches}, num_timesteps={self._num_timesteps})")

    # -- learning --
    def learn(self, total_timesteps: int, callback: Any = None, log_interval: Optional[int] = None,
              tb_log_name: str = "DQN", reset_num_timesteps: bool = True,
              progress_bar: bool = False) -> "DQN":
        """Run ``total_timesteps`` env steps (summed over envs; rounded up to whole vector steps).

        ``log_interval``: env steps between printed lines when verbose >= 1 (default: a tenth of
        the call). ``reset_num_timesteps`` restarts ``num_timesteps`` at 0 as in SB3; the trainer's
        own counters and schedule go on (``get_stats()``). ``tb_log_name`` is accepted and unused.
        """
        total = int(total_timesteps)
        if total < 0:
            raise ValueError(f"total_timesteps={total_timesteps} < 0")
        with self._lock:
            if self._env is None:
                raise ValueError("this model has no env: DQN.load(path, env=...) gives it one")
            if (self._fresh and not self._user_steps and total > 0
                    and total != self._steps_cfg):
                # no step taken yet: remake with the schedule over this call (same seed, same
                # initial weights)
                cfg = self._make_config(self._settings, self._device_arg, steps=total)
                old = self._trainer
                self._trainer = _Trainer.create(cfg)
                self._cfg = cfg
                self._steps_cfg = total
                if old is not None:
                    old.close()
            if reset_num_timesteps:
                self._num_timesteps = 0
            self._fresh = False
            self._ran = 0
            cbs = _Callbacks(callback, self)
            self._eval_setup()
            every = int(log_interval) if log_interval else max(total // 10, 1)
            progress = _Progress(total, bool(progress_bar))
            try:
                cbs.start(locals(), globals())
                if self._vector:
                    self._run_vector(total, cbs, every, progress)
                else:
                    self._run_single(total, cbs, every, progress)
            finally:
                progress.close(self._ran)
                cbs.end()
        return self

    def _buffers(self):
        n, d, D = self.n_envs, self.obs_dim, len(self._branches)
        b = {
            "obs": np.zeros((n, d), np.float32),
            "next": np.zeros((n, d), np.float32),
            "act": np.zeros((n, D), np.int32),
            "rew": np.zeros(n, np.float32),
            "term": np.zeros(n, np.uint8),
            "trunc": np.zeros(n, np.uint8),
            "valid": np.ones(n, np.uint8),
        }
        return b, {k: _ptr(v) for k, v in b.items()}

    def _reset_env(self):
        if self._first_reset:
            self._first_reset = False
            self.action_space.seed(self.seed)
            return self._env.reset(seed=self.seed)
        return self._env.reset()

    def _log(self, t0: float, ran: int) -> None:
        s = self._t().stats()
        rate = ran / max(time.monotonic() - t0, 1e-9)
        ret = "n/a" if math.isnan(s.mean_return) else f"{s.mean_return:.2f}"
        loss = "n/a" if math.isnan(s.last_loss) else f"{s.last_loss:.4g}"
        print(f"steps {self._num_timesteps}  episodes {s.episodes}  mean_return {ret}  "
              f"loss {loss}  mean_q {s.mean_q:.4g}  eps {s.epsilon:.3f}  {rate:.0f} steps/s",
              flush=True)

    def _run_single(self, total: int, cbs: _Callbacks, every: int, progress: _Progress) -> None:
        env = self._env
        b, p = self._buffers()
        obs_v = b["obs"].reshape((1,) + self._obs_shape)
        next_v = b["next"].reshape((1,) + self._obs_shape)
        act, rew, term_b, trunc_b = b["act"], b["rew"], b["term"], b["trunc"]
        t = self._t().ptr
        act_fn, observe_fn = lib.dqn_trainer_act, lib.dqn_trainer_observe
        p_obs, p_next, p_act = p["obs"], p["next"], p["act"]
        p_rew, p_term, p_trunc = p["rew"], p["term"], p["trunc"]
        discrete, start0, starts = self._discrete, int(self._starts[0]), self._starts
        if self._last_obs is None:
            o, _ = self._reset_env()
            obs_v[0] = o
        else:
            b["obs"][:] = self._last_obs
        glob = globals()
        self._ran = ran = 0
        next_log = every
        t0 = time.monotonic()
        try:
            while ran < total:
                st = act_fn(t, p_obs, p_act)
                if st:
                    raise _lib.error_for(st, "dqn_trainer_act")
                action = int(act[0, 0]) + start0 if discrete else act[0] + starts
                new_obs, reward, terminated, truncated, info = env.step(action)
                next_v[0] = new_obs
                rew[0] = reward
                term_b[0] = terminated
                trunc_b[0] = truncated
                st = observe_fn(t, p_obs, p_act, p_rew, p_next, p_term, p_trunc, None)
                if st:
                    raise _lib.error_for(st, "dqn_trainer_observe")
                if terminated or truncated:
                    new_obs, _ = env.reset()
                obs_v[0] = new_obs
                ran += 1
                self._num_timesteps += 1
                self._ran = ran
                if cbs.active:
                    dones = np.array([bool(terminated or truncated)])
                    infos, rewards = [info], rew
                    if not cbs.step(locals(), glob):
                        break
                progress.update(ran)
                if self.verbose >= 1 and ran >= next_log:
                    next_log += every
                    self._log(t0, ran)
                if ran >= self._eval_due:
                    self._periodic_eval(ran)
        finally:
            self._last_obs = b["obs"].copy()

    def _run_vector(self, total: int, cbs: _Callbacks, every: int, progress: _Progress) -> None:
        from gymnasium.vector import AutoresetMode

        env, n = self._env, self.n_envs
        mode = _autoreset_mode(env)
        b, p = self._buffers()
        shape = (n,) + self._obs_shape
        obs_v, next_v = b["obs"].reshape(shape), b["next"].reshape(shape)
        act, rew, term_b, trunc_b, valid = b["act"], b["rew"], b["term"], b["trunc"], b["valid"]
        t = self._t().ptr
        act_fn, observe_fn = lib.dqn_trainer_act, lib.dqn_trainer_observe
        p_obs, p_next, p_act = p["obs"], p["next"], p["act"]
        p_rew, p_term, p_trunc = p["rew"], p["term"], p["trunc"]
        p_valid = p["valid"] if mode == AutoresetMode.NEXT_STEP else None
        discrete, starts = self._discrete, self._starts
        prev_done = np.zeros(n, np.bool_)
        if self._last_obs is None:
            o, _ = self._reset_env()
            obs_v[:] = o
        else:
            b["obs"][:] = self._last_obs
            prev_done[:] = getattr(self, "_last_done", prev_done)
        glob = globals()
        self._ran = ran = 0
        next_log = every
        t0 = time.monotonic()
        try:
            while ran < total:
                st = act_fn(t, p_obs, p_act)
                if st:
                    raise _lib.error_for(st, "dqn_trainer_act")
                actions = act[:, 0] + starts[0] if discrete else act + starts
                new_obs, reward, terminated, truncated, infos = env.step(actions)
                next_v[:] = new_obs
                if mode == AutoresetMode.SAME_STEP:
                    mask = infos.get("_final_obs")
                    if mask is not None and mask.any():
                        final = infos["final_obs"]
                        for i in np.flatnonzero(mask):
                            next_v[i] = final[i]
                elif mode == AutoresetMode.NEXT_STEP:
                    np.logical_not(prev_done, out=valid, casting="unsafe")
                rew[:] = reward
                term_b[:] = terminated
                trunc_b[:] = truncated
                st = observe_fn(t, p_obs, p_act, p_rew, p_next, p_term, p_trunc, p_valid)
                if st:
                    raise _lib.error_for(st, "dqn_trainer_observe")
                dones = np.logical_or(terminated, truncated)
                if mode == AutoresetMode.NEXT_STEP:
                    prev_done[:] = dones
                elif mode == AutoresetMode.DISABLED and dones.any():
                    new_obs, _ = env.reset(options={"reset_mask": dones.astype(np.bool_)})
                obs_v[:] = new_obs
                ran += n
                self._num_timesteps += n
                self._ran = ran
                if cbs.active:
                    rewards = rew
                    if not cbs.step(locals(), glob):
                        break
                progress.update(ran)
                if self.verbose >= 1 and ran >= next_log:
                    next_log += every
                    self._log(t0, ran)
                if ran >= self._eval_due:
                    self._periodic_eval(ran)
        finally:
            self._last_obs = b["obs"].copy()
            self._last_done = prev_done.copy()

    # -- periodic evaluation (config keys eval_interval, eval_interval_episodes) --
    def _eval_setup(self) -> None:
        """The next periodic evaluation, in this learn() call's env steps (never when off)."""
        cfg = self._t().config()
        self._eval_every = int(cfg.get("eval_interval", "0"))
        self._eval_due = math.inf
        if self._eval_every > 0:
            done = int(self._t().stats().env_steps)
            self._eval_base = done
            self._eval_due = (done // self._eval_every + 1) * self._eval_every - done
            self._eval_envs(int(cfg["eval_interval_episodes"]))   # a bad env id fails here

    def _eval_envs(self, n: int) -> List[Any]:
        envs = getattr(self, "_eval_env_list", None)
        if envs is not None and len(envs) == n:
            return envs
        try:
            envs = [gym.make(self.env_id) for _ in range(n)]
        except Exception as e:
            raise ValueError(f"eval_interval: the periodic evaluation makes its own envs with "
                             f"gymnasium.make({self.env_id!r}), which failed: {e}") from None
        self._eval_env_list = envs
        return envs

    def _periodic_eval(self, ran: int) -> None:
        """eval_interval_episodes greedy episodes on envs of their own (fixed seeds apart from
        training's), stepped together with one batched predict per step; the mean is noted in
        the trainer (its best is checkpointed) and, when it is the best and run_dir is set,
        the checkpoint is written to run_dir/best.bin."""
        t = self._t()
        cfg = t.config()
        n = int(cfg["eval_interval_episodes"])
        envs = self._eval_envs(n)
        base = (self.seed ^ 0xD1B54A32) & 0x7FFFFFFF
        obs = np.zeros((n, self.obs_dim), np.float32)
        for i, e in enumerate(envs):
            o, _ = e.reset(seed=base + i)
            obs[i] = np.asarray(o, np.float32).reshape(-1)
        ret = np.zeros(n)
        live = np.ones(n, np.bool_)
        while live.any():
            idx = np.flatnonzero(live)
            actions, _ = self.predict(obs[idx].reshape((len(idx),) + self._obs_shape))
            for k, i in enumerate(idx):
                o, r, term, trunc, _ = envs[i].step(actions[k])
                ret[i] += float(r)
                obs[i] = np.asarray(o, np.float32).reshape(-1)
                if term or trunc:
                    live[i] = False
        mean, std = float(ret.mean()), float(ret.std())
        improved = ctypes.c_int(0)
        _lib.check(lib.dqn_trainer_eval_note(t.ptr, mean, ctypes.byref(improved)), "eval_note")
        steps = int(t.stats().env_steps)
        best, at = self.get_eval_best()
        run_dir = cfg.get("run_dir", "")
        if improved.value and run_dir:
            os.makedirs(run_dir, exist_ok=True)
            self.save(os.path.join(run_dir, "best.bin"))
        self.evaluations.append((steps, mean, std))
        if run_dir:
            path = os.path.join(run_dir, "evaluations.csv")
            new = not os.path.exists(path)
            with open(path, "a") as f:
                if new:
                    f.write("step,mean,std,best,best_step\n")
                f.write(f"{steps},{mean!r},{std!r},{best!r},{at}\n")
        if self.verbose >= 1:
            print(f"eval at {steps} steps: mean {mean:.2f} +- {std:.2f} over {n} episodes "
                  f"(best {best:.2f} at {at})", flush=True)
        self._eval_due = ran + max(1, (steps // self._eval_every + 1) * self._eval_every - steps)

    @property
    def evaluations(self) -> List[Tuple[int, float, float]]:
        """The periodic evaluations of this model object: (env steps, mean, std) each."""
        if not hasattr(self, "_evaluations"):
            self._evaluations: List[Tuple[int, float, float]] = []
        return self._evaluations

    def get_eval_best(self) -> Tuple[float, int]:
        """The best periodic evaluation's mean and env step (NaN, -1 before the first); kept in
        checkpoints, so a loaded model goes on from it."""
        with self._lock:
            m, s = ctypes.c_double(), ctypes.c_int64()
            lib.dqn_trainer_eval_best(self._t().ptr, ctypes.byref(m), ctypes.byref(s))
            return float(m.value), int(s.value)

    def train(self, gradient_steps: int, batch_size: Optional[int] = None) -> None:
        """``gradient_steps`` updates now, off the schedule (the replay must hold a batch).
        ``batch_size`` must be None or the config's (it is fixed when the trainer is made)."""
        with self._lock:
            t = self._t()
            if batch_size is not None and int(batch_size) != int(t.config()["batch_size"]):
                raise ValueError(f"batch_size={batch_size}: the trainer's batch size is fixed at "
                                 f"{t.config()['batch_size']} (set it with DQN(..., batch_size=))")
            self._fresh = False
            _lib.check(lib.dqn_trainer_update(t.ptr, int(gradient_steps)), "train")

    # -- acting --
    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> Tuple[Any, Any]:
        """Greedy actions (midpoint taus) for one observation or a batch.

        One observation gives an int (Discrete) or a 1-D array (MultiDiscrete); a batch gives an
        array with a leading batch axis. ``deterministic=False`` takes a uniformly random choice
        per branch with the schedule's current epsilon (``get_stats()["epsilon"]``), drawn from a
        numpy generator seeded with the model's seed. ``state`` is returned as given (None).
        """
        obs = np.asarray(observation, dtype=np.float32)
        shape = self._obs_shape
        if obs.shape == shape:
            single, n = True, 1
        elif obs.ndim == len(shape) + 1 and obs.shape[1:] == shape:
            single, n = False, obs.shape[0]
        else:
            raise ValueError(f"observation of shape {obs.shape} does not match the observation "
                             f"space's shape {shape} (nor a batch of it)")
        D = len(self._branches)
        x = np.ascontiguousarray(obs.reshape(n, self.obs_dim))
        out = np.zeros((n, D), np.int32)
        if n > 0:
            with self._lock:
                t = self._t()
                _lib.check(lib.dqn_trainer_predict(t.ptr, _ptr(x), n, _ptr(out)), "predict")
                eps = t.stats().epsilon if not deterministic else 0.0
            if eps > 0:
                explore = self._rng.random((n, D)) < eps
                rand = self._rng.integers(0, np.asarray(self._branches), size=(n, D))
                out = np.where(explore, rand, out).astype(np.int32)
        actions = out.astype(np.int64) + self._starts
        if self._discrete:
            actions = actions[:, 0]
        if single:
            return (int(actions[0]) if self._discrete else actions[0]), state
        return actions, state

    # -- files --
    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the trainer's checkpoint to exactly ``path`` (libdqn's format: versioned, CRC32,
        atomic; nothing is appended to the name). It loads with DQN.load and the CLI."""
        path = os.fspath(path)
        with self._lock:
            _lib.check(lib.dqn_trainer_save(self._t().ptr, os.fsencode(path)),
                       f"saving {path}", path=None)

    @classmethod
    def load(cls, path: Union[str, os.PathLike], env: Any = None, device: Optional[str] = None,
             *, seed: Optional[int] = None, verbose: int = 0, **kwargs: Any) -> "DQN":
        """Load a checkpoint (written by save() or by ``dqn train``) as a host-driven trainer.

        The model, optimizer, replay (if saved), counters and schedule resume as saved. ``env``
        (optional) must have the checkpoint's observation size and branch sizes; it may have
        another number of envs (the n-step windows in flight are dropped). With it the model can
        go on learning, and its spaces (with their ``start``) are used.
        Without it the spaces are a flat float32 Box and Discrete / MultiDiscrete from 0.
        ``device``: None keeps the saved one; "cpu", "cuda" or "auto".
        """
        for k in kwargs:
            if k not in _LOAD_IGNORED:
                raise ValueError(f"{k}: a loaded model keeps the checkpoint's config; "
                                 f"DQN.load takes env, device, seed and verbose")
        path = os.fspath(path)
        if device is not None:
            probe = _lib.Config()
            try:
                probe.set("device", str(device))
            except ValueError as e:
                raise ValueError(f"device={device!r}: {e}") from None
        trainer = _Trainer.load(path, "" if device is None else str(device))
        self = cls.__new__(cls)
        try:
            self._init_loaded(trainer, env, device, seed, verbose)
        except BaseException:
            trainer.close()
            raise
        return self

    def _init_loaded(self, trainer: _Trainer, env: Any, device: Optional[str],
                     seed: Optional[int], verbose: int) -> None:
        self._lock = threading.RLock()
        self._trainer = trainer
        self.verbose = int(verbose)
        conf = trainer.config()
        obs_dim, sizes = trainer.shape()
        n_envs = int(conf.get("num_envs", "1"))
        self.seed = int(conf.get("seed", "0")) if seed is None else int(seed)
        saved_env = conf.get("env", "external")
        self.env_id = conf.get("env_id") or _BUILTIN_IDS.get(saved_env, saved_env)
        if env is not None:
            self._env, self._vector, name, self._own_env = _make_env(
                env, n_envs if isinstance(env, str) else None)
            obs_space, act_space = _spaces_of(self._env, self._vector)
            o_shape, o_dim = _check_obs_space(obs_space)
            a_sizes, _, _ = _check_action_space(act_space)
            n = self._env.num_envs if self._vector else 1
            if o_dim != obs_dim or a_sizes != sizes:
                raise ValueError(
                    f"env {name} does not match the checkpoint: observation size {o_dim} and "
                    f"branches {a_sizes}, the checkpoint has {obs_dim} and {sizes}")
            if n != n_envs:
                # another vector: the trainer drops its n-step windows in flight
                _lib.check(lib.dqn_trainer_set_num_envs(trainer.ptr, n),
                           f"env {name} has {n} env(s), the checkpoint {n_envs}")
                n_envs = n
            self._setup_spaces(obs_space, act_space)
            self.env_id = name
        else:
            self._env, self._vector, self._own_env = None, n_envs > 1, False
            obs_space = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
            act_space = (spaces.Discrete(sizes[0]) if len(sizes) == 1
                         else spaces.MultiDiscrete(sizes))
            self._setup_spaces(obs_space, act_space)
        self.n_envs = n_envs
        self._settings = {}
        self._user_steps = True
        self._device_arg = device or conf.get("device", "auto")
        self._cfg = None
        self._fresh = False
        self._steps_cfg = int(conf.get("steps", "0"))
        self._num_timesteps = int(trainer.stats().env_steps)
        self._last_obs = None
        self._first_reset = True
        self._rng = np.random.default_rng(self.seed)
        if self.verbose >= 1:
            print(f"Loaded on {self.device} ({trainer.backend()})")
