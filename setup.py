"""Build of the Python package `dqn`: libdqn.so made by the project's own Makefile.

Why setuptools running `make lib` rather than a C-extension build:
- One build system for the C library, the CLI and Python. The Makefile already knows the
  sources (src/**/*.c, the CUDA backend's .cu files when nvcc is found), the flags, OpenBLAS and
  CUDA detection; a second list of sources in setup.py would drift from it.
- The binding is ctypes over the public C API (include/dqn.h), so there is no CPython extension
  to compile and nothing tied to the Python ABI; ctypes.CDLL also releases the GIL during every
  call, so the C side's updates run while other Python threads go on.
- The wheel is still platform-specific (it ships a native libdqn.so): the Distribution below
  reports ext modules, which gives a platlib, non-pure wheel.

setuptools' own build dirs go under build-pip/ (git-ignored, like every build-*/), never build/,
which is the Makefile's default BUILD. make's BUILD is set explicitly to a folder in setuptools'
build_temp, keyed by the make flags, so it never meets the CLI's build dir either.

Environment:
  DQN_MAKE_FLAGS  extra make arguments, e.g. "CUDA=0" or "BLAS=builtin" (default: auto-detect)
  MAKE            the make program (default: make)
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = "build-pip"


def dqn_version():
    with open(os.path.join(ROOT, "include", "dqn.h"), encoding="utf-8") as f:
        m = re.search(r'#define\s+DQN_VERSION\s+"([^"]+)"', f.read())
    if not m:
        raise RuntimeError("DQN_VERSION not found in include/dqn.h")
    return m.group(1)


VERSION = dqn_version()


class BinaryDistribution(Distribution):
    """A wheel with a native library: platform-specific, installed to platlib."""

    def has_ext_modules(self):
        return True


class BuildPyWithLib(build_py):
    """build_py, then `make lib`: libdqn.so and _version.py (include/dqn.h's DQN_VERSION, the
    only copy of the version) written into the package."""

    def run(self):
        super().run()
        lib = self.build_libdqn()
        pkg = os.path.join(self.build_lib, "dqn")
        os.makedirs(pkg, exist_ok=True)
        self.copy_file(lib, os.path.join(pkg, "libdqn.so"))
        with open(os.path.join(pkg, "_version.py"), "w", encoding="utf-8") as f:
            f.write(f'__version__ = "{VERSION}"  # DQN_VERSION of include/dqn.h, by setup.py\n')

    def build_libdqn(self):
        extra = shlex.split(os.environ.get("DQN_MAKE_FLAGS", ""))
        make = os.environ.get("MAKE", "make")
        if shutil.which(make) is None:
            raise RuntimeError(f"`{make}` not found: building libdqn needs GNU make and a C11 "
                               f"compiler")
        temp = self.get_finalized_command("build").build_temp
        key = hashlib.sha1(" ".join(extra + [os.environ.get("CC", "")]).encode()).hexdigest()[:8]
        bdir = os.path.join(temp, f"libdqn-{key}")
        jobs = str(max(1, os.cpu_count() or 1))
        cmd = [make, "-C", ROOT, f"-j{jobs}", "lib", f"BUILD={os.path.abspath(bdir)}"] + extra
        self.announce("building libdqn: " + " ".join(cmd), level=2)
        subprocess.check_call(cmd)
        return os.path.join(bdir, "libdqn.so")


os.makedirs(os.path.join(ROOT, BUILD_BASE), exist_ok=True)
setup(
    version=VERSION,
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLib},
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
    },
    zip_safe=False,
)
