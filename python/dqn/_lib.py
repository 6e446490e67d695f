"""ctypes binding of libdqn (include/dqn.h).

The library is the one the project's Makefile builds (``make lib``): ``pip install .`` builds it
and ships ``libdqn.so`` inside this package; the environment variable ``DQN_LIB`` may point at
another build instead (developers, tests). It is loaded with :class:`ctypes.CDLL`, which releases
the GIL for the duration of every foreign call, so the C side's updates run while other Python
threads go on.

Symbols are resolved lazily: a library from an older tree that lacks a function fails only when
that function is first used, with a message that names it.

``dqn_config`` is never mirrored field by field: a config lives in an opaque, generously sized
buffer that only the ``dqn_config_*`` functions touch (:class:`Config`); values are read back
through ``dqn_config_write`` (the same text as a run's config.txt).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import tempfile
import threading
from typing import Dict, Optional

__all__ = ["lib", "Config", "TrainStats", "DQNError", "check", "last_error"]

# Status codes (dqn_status).
OK = 0
ERR_ARG = 1
ERR_NOMEM = 2
ERR_IO = 3
ERR_FORMAT = 4
ERR_BACKEND = 5
ERR_UNSUPPORTED = 6
ERR_NUMERIC = 7

# Bytes reserved for one dqn_config (the struct is a few KiB; tests/python/test_abi.py compiles
# a check that it fits).
CONFIG_BYTES = 64 * 1024

_vp = ctypes.c_void_p
_int = ctypes.c_int
_str = ctypes.c_char_p


class TrainStats(ctypes.Structure):
    """dqn_train_stats, field for field (include/dqn.h)."""

    _fields_ = [
        ("env_steps", ctypes.c_int64),
        ("updates", ctypes.c_int64),
        ("episodes", ctypes.c_int64),
        ("mean_return", ctypes.c_double),
        ("last_loss", ctypes.c_double),
        ("mean_q", ctypes.c_double),
        ("grad_norm", ctypes.c_double),
        ("epsilon", ctypes.c_double),
        ("skipped_updates", ctypes.c_int64),
    ]

    def as_dict(self) -> Dict[str, float]:
        return {name: getattr(self, name) for name, _ in self._fields_}


# name -> (restype, argtypes)
_SIGNATURES = {
    "dqn_status_str": (_str, [_int]),
    "dqn_last_error": (_str, []),
    "dqn_config_defaults": (None, [_vp]),
    "dqn_config_preset": (_int, [_vp, _str]),
    "dqn_config_set": (_int, [_vp, _str, _str]),
    "dqn_config_validate": (_int, [_vp]),
    "dqn_config_write": (_int, [_vp, _vp]),
    "dqn_config_help": (None, [_vp]),
    "dqn_config_has_key": (_int, [_str]),
    "dqn_trainer_create": (_int, [_vp, ctypes.POINTER(_vp)]),
    "dqn_trainer_destroy": (None, [_vp]),
    "dqn_trainer_stats": (None, [_vp, ctypes.POINTER(TrainStats)]),
    "dqn_trainer_config": (_vp, [_vp]),
    "dqn_trainer_backend": (_str, [_vp]),
    "dqn_trainer_save": (_int, [_vp, _str]),
    "dqn_trainer_load": (_int, [_str, _str, ctypes.POINTER(_vp)]),
    "dqn_trainer_load_env": (_int, [_str, _str, _vp, ctypes.POINTER(_vp)]),
    "dqn_trainer_act": (_int, [_vp, _vp, _vp]),
    "dqn_trainer_observe": (_int, [_vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp]),
    "dqn_trainer_set_num_envs": (_int, [_vp, _int]),
    "dqn_trainer_update": (_int, [_vp, _int]),
    "dqn_trainer_predict": (_int, [_vp, _vp, _int, _vp]),
    "dqn_trainer_obs_dim": (_int, [_vp]),
    "dqn_trainer_branches": (_int, [_vp, _vp]),
    "dqn_trainer_eval_note": (_int, [_vp, ctypes.c_double, ctypes.POINTER(_int)]),
    "dqn_trainer_eval_best": (None, [_vp, ctypes.POINTER(ctypes.c_double),
                                     ctypes.POINTER(ctypes.c_int64)]),
    "dqn_cuda_device_count": (_int, []),
}


class DQNError(RuntimeError):
    """A libdqn failure that maps to no more specific Python exception."""


def _find_library() -> str:
    env = os.environ.get("DQN_LIB")
    if env:
        if not os.path.isfile(env):
            raise OSError(errno.ENOENT, f"DQN_LIB={env} does not exist (a built libdqn.so)", env)
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libdqn.so")
    if os.path.isfile(here):
        return here
    raise OSError(
        errno.ENOENT,
        "libdqn.so is not in the dqn package: install it with `pip install .` at the "
        "repository root, or set DQN_LIB to a built library (`make lib BUILD=build-py` "
        "builds build-py/libdqn.so)",
        here,
    )


class _Lib:
    """The loaded library; attributes are its functions, typed on first use."""

    def __init__(self) -> None:
        self._dll: Optional[ctypes.CDLL] = None
        self._path: Optional[str] = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        self._load()
        assert self._path is not None
        return self._path

    def _load(self) -> ctypes.CDLL:
        if self._dll is None:
            with self._lock:
                if self._dll is None:
                    path = _find_library()
                    self._dll = ctypes.CDLL(path)
                    self._path = path
        return self._dll

    def has(self, name: str) -> bool:
        return hasattr(self._load(), name)

    def __getattr__(self, name: str):
        if not name.startswith("dqn_"):
            raise AttributeError(name)
        dll = self._load()
        try:
            fn = getattr(dll, name)
        except AttributeError:
            raise DQNError(
                f"{self._path} has no function {name}: the library was built from a tree "
                f"older than this package; rebuild it (pip install . or make lib)"
            ) from None
        restype, argtypes = _SIGNATURES[name]
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(self, name, fn)
        return fn


lib = _Lib()


def last_error() -> str:
    msg = lib.dqn_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def error_for(status: int, context: str = "", path: Optional[str] = None) -> Exception:
    """The Python exception for a failed call: the C message, typed by its status."""
    msg = last_error() or lib.dqn_status_str(status).decode()
    if context:
        msg = f"{context}: {msg}"
    if status == ERR_ARG or status == ERR_FORMAT:
        return ValueError(msg)
    if status == ERR_IO:
        if path is not None and not os.path.exists(path):
            return FileNotFoundError(errno.ENOENT, msg, path)
        return OSError(errno.EIO, msg, path) if path is not None else OSError(msg)
    if status == ERR_NOMEM:
        return MemoryError(msg)
    return DQNError(msg)


def check(status: int, context: str = "", path: Optional[str] = None) -> None:
    if status != OK:
        raise error_for(status, context, path)


def _enc(s: str) -> bytes:
    return os.fsencode(s) if not isinstance(s, bytes) else s


_libc = None


def _capture(write) -> str:
    """Text that write(FILE *) prints, through a temporary file opened by the C library."""
    global _libc
    if _libc is None:
        c = ctypes.CDLL(ctypes.util.find_library("c") or None)
        c.fopen.restype = _vp
        c.fopen.argtypes = [_str, _str]
        c.fclose.restype = _int
        c.fclose.argtypes = [_vp]
        _libc = c
    fd, path = tempfile.mkstemp(prefix="dqn-", suffix=".txt")
    os.close(fd)
    try:
        f = _libc.fopen(_enc(path), b"w")
        if not f:
            raise OSError(ctypes.get_errno(), "fopen failed", path)
        try:
            status = write(f)
        finally:
            _libc.fclose(f)
        if status not in (None, OK):
            raise error_for(status)
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    finally:
        os.unlink(path)


def parse_config_text(text: str) -> Dict[str, str]:
    """key = value lines (as dqn_config_write prints them) -> dict of strings."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            value = value[1:-1]
        out[key.strip()] = value
    return out


def config_text(cfg_ptr) -> str:
    return _capture(lambda f: lib.dqn_config_write(cfg_ptr, f))


def config_help() -> str:
    """The config table (key, type, allowed values, default, meaning), as `dqn train --help`."""
    return _capture(lambda f: lib.dqn_config_help(f))


class Config:
    """One dqn_config in an opaque buffer; only the dqn_config_* functions touch it."""

    def __init__(self) -> None:
        # doubles: 8-byte alignment, as the struct needs
        self._buf = (ctypes.c_double * (CONFIG_BYTES // 8))()
        self.ptr = ctypes.cast(self._buf, _vp)
        lib.dqn_config_defaults(self.ptr)

    def preset(self, name: str) -> None:
        check(lib.dqn_config_preset(self.ptr, _enc(name)))

    def set(self, key: str, value: str) -> None:
        check(lib.dqn_config_set(self.ptr, _enc(key), _enc(value)))

    def validate(self) -> None:
        check(lib.dqn_config_validate(self.ptr))

    def as_dict(self) -> Dict[str, str]:
        return parse_config_text(config_text(self.ptr))


def has_key(key: str) -> bool:
    return bool(lib.dqn_config_has_key(_enc(key)))


def cuda_device_count() -> int:
    return int(lib.dqn_cuda_device_count())
