"""Executor programs compiled once per machine and loaded without tracing.

JAX's persistent compilation cache (compile_cache.py) spares a fresh process
the XLA compile, but not the Python trace and lowering that compute its key:
for the word-stream executor 3-6 s of a first call's 6-9 s. `PersistentJit`
is `jax.jit` for the executor's entry points that also keeps each compiled
executable in a file, so a later process loads it directly. Two files serve
a call:

- `<name>-<key>.ref` names the program of a call's key (everything the
  program depends on: ptojax's source files, the static arguments, the
  argument pytrees, shapes and dtypes, jax and the device) and holds the
  call's pytrees. A hit costs no trace, no lowering and no XLA compile.
- `<name>-<program>.bin` is the executable of a lowered program's text. A
  key without a .ref (ptojax changed, perhaps not this program; or the
  same program for a State of other static metadata) traces and lowers,
  and then loads the executable when the text is one already compiled;
  only a new text compiles.

- The files live in `ptojax-executables/` under the compilation cache's
  directory and follow it: `PTOJAX_JAX_CACHE=` turns both off (the programs
  then compile per process, as plain jits).
- XLA:CPU cannot serialize an executable that it deserialized from JAX's
  cache again (the copy loses kernels and fails when run), so the program a
  file is written from must be a fresh compile: these programs compile
  under a module name (`ptojax_<name>`) no earlier JAX cache entry carries,
  and their compiles write no JAX cache entry.
- A file that does not load (truncated, another jaxlib) is compiled afresh
  and replaced; writes are atomic (a temporary file renamed), so processes
  that compile the same program at once agree.
- With several local devices (a sharded batch), or several processes
  (jax.distributed), the plain jit runs: the executable then depends on the
  shardings, or would be bound to every process's devices.

`.trace` and `.lower` are the plain jit's, for the benchmarks that time or
inspect the stages; `_cache_size()` counts this process's executables, as
jax.jit's does.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import inspect
import logging
import os
import pickle
import platform
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import jax
import jax.monitoring
import numpy as np

from . import compile_cache

__all__ = ["LOADED_EVENT", "WRITTEN_EVENT", "PersistentJit", "executables_dir", "source_digest"]

# jax.monitoring events (ptojax.warmup counts them), and the log a caller can turn on
LOADED_EVENT = "/ptojax/executables/loaded"
WRITTEN_EVENT = "/ptojax/executables/written"
_log = logging.getLogger(__name__)

# bump when the file format or the key changes meaning
_FORMAT = "ptojax-executable-2"
# a compile writes no JAX cache entry of its own (see the module docstring)
_NO_JAX_WRITE = 1e12
_write_lock = threading.Lock()
# Executables a PersistentJit keeps loaded, least recently used dropped first (a
# dropped one is loaded again from its file when called). XLA:CPU maps each
# kernel of a loaded executable on its own, about 1,000 memory maps for a
# pj.batch.run program, and Linux allows a process 65,530 (vm.max_map_count):
# a process that held every program it met (a test-suite worker, a long
# session) aborted in LLVM ("Cannot allocate memory") after 60-90 of them.
MAX_LOADED = 8


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 of every file of the ptojax package (sources and data): a
    program's key, since any of them can change what a program computes."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def executables_dir() -> Optional[str]:
    """Where the executables are kept in this process, None when nowhere."""
    base = compile_cache.ensure_compile_cache()
    return None if base is None else os.path.join(base, "ptojax-executables")


def _canon(v: Any) -> str:
    """A repr that is the same in every process (sets sorted)."""
    if isinstance(v, (set, frozenset)):
        return "{" + ",".join(sorted(_canon(x) for x in v)) + "}"
    if isinstance(v, (tuple, list)):
        return type(v).__name__ + "(" + ",".join(_canon(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ",".join(f"{_canon(k)}:{_canon(x)}" for k, x in v.items()) + "}"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return type(v).__qualname__ + _canon({f.name: getattr(v, f.name) for f in dataclasses.fields(v)})
    return repr(v)


def _aval(x: Any) -> tuple:
    try:
        return (x.shape, x.dtype, x.weak_type)    # a jax.Array (the usual case: cheapest first)
    except AttributeError:
        if isinstance(x, (np.ndarray, np.generic)):
            return (x.shape, x.dtype, False)
        return ("python", type(x).__name__)      # a Python scalar: traced weakly typed


@functools.lru_cache(maxsize=1)
def _platform() -> str:
    """jax, the device and, for XLA:CPU's host-tuned code, the host CPU's
    features (a cache folder on a shared disk can meet another CPU)."""
    d = jax.local_devices()[0]
    cpu = platform.machine() + " " + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu += next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return "|".join((jax.__version__, jax.lib.__version__, d.platform, d.device_kind,
                     d.client.platform_version, os.environ.get("XLA_FLAGS", ""), cpu))


@functools.lru_cache(maxsize=1)
def _one_device() -> bool:
    """One device in one process: the executables' case. A sharded batch's
    executable depends on its shardings, and under jax.distributed a loaded
    executable would be bound to every process's devices; both run plain."""
    return jax.local_device_count() == 1 and jax.process_count() == 1


class PersistentJit:
    """`jax.jit(fn, static_argnames=..., donate_argnums=..., compiler_options=...)`
    whose executables outlive the process (module docstring)."""

    def __init__(self, fn: Callable, *, static_argnames: Sequence[str],
                 donate_argnums: Sequence[int] = (), compiler_options: Optional[dict] = None):
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters)
        self.static_argnames = tuple(static_argnames)
        unknown = set(self.static_argnames) - set(params)
        if unknown:
            raise ValueError(f"{self.name} has no parameters {sorted(unknown)}")
        self.dynamic = tuple(p for p in params if p not in self.static_argnames)
        donated = {params[i] for i in donate_argnums}
        self.donate = tuple(i for i, p in enumerate(self.dynamic) if p in donated)
        self.compiler_options = dict(compiler_options or {})
        self._jit = jax.jit(fn, static_argnames=self.static_argnames, donate_argnums=tuple(donate_argnums),
                            compiler_options=self.compiler_options or None)
        self._executables: collections.OrderedDict = collections.OrderedDict()   # key -> executable (LRU)
        self._keys: set = set()                     # every key this instance has run
        self._lock = threading.Lock()

    # ---- the plain jit's stages (benchmarks/compile.py, benchmarks/profile.py)
    def trace(self, *args, **kwargs):
        return self._jit.trace(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._jit.lower(*args, **kwargs)

    def _cache_size(self) -> int:
        """The programs this entry point has run (loaded or not now)."""
        return len(self._keys)

    def clear_cache(self) -> None:
        with self._lock:
            self._executables.clear()
            self._keys.clear()

    # ---- calls
    def __call__(self, *args, **kwargs):
        if not _one_device():
            return self._jit(*args, **kwargs)
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        static = tuple(values[n] for n in self.static_argnames)
        dynamic = tuple(values[n] for n in self.dynamic)
        leaves, tree = jax.tree_util.tree_flatten(dynamic)
        key = (static, tree, tuple(_aval(x) for x in leaves), jax.config.jax_enable_x64)  # type: ignore[attr-defined]
        with self._lock:
            exe = self._executables.get(key)
            if exe is None:
                exe = self._executables[key] = self._load_or_compile(key, static, dynamic)
                self._keys.add(key)
                while len(self._executables) > MAX_LOADED:
                    self._executables.popitem(last=False)
            else:
                self._executables.move_to_end(key)
        return exe(*dynamic)

    def _file_key(self, key: tuple) -> str:
        static, tree, avals, x64 = key
        text = "\n".join((_FORMAT, f"{self.fn.__module__}.{self.fn.__qualname__}", source_digest(), _platform(),
                          _canon(self.compiler_options and sorted(self.compiler_options.items())),
                          _canon(self.donate), str(x64), _canon(dict(zip(self.static_argnames, static))),
                          str(tree), _canon(avals)))
        return hashlib.sha256(text.encode()).hexdigest()

    def _program(self, static: tuple):
        """The jitted program of these static values, its dynamic arguments only."""
        fixed = dict(zip(self.static_argnames, static))
        names = self.dynamic

        def program(*values):
            return self.fn(**dict(zip(names, values)), **fixed)
        # a module name no JAX cache entry carries (these compiles write none)
        program.__name__ = program.__qualname__ = f"ptojax_{self.name}"
        return jax.jit(program, donate_argnums=self.donate, compiler_options=self.compiler_options or None)

    def _load_or_compile(self, key: tuple, static: tuple, dynamic: tuple):
        jitted = self._program(static)
        folder = executables_dir()
        if folder is None:
            return jitted.lower(*dynamic).compile()
        # 1. the call's key names the program: no trace at all
        ref = os.path.join(folder, f"{self.name}-{self._file_key(key)[:32]}.ref")
        try:
            with open(ref, "rb") as f:
                program, in_tree, out_tree = pickle.loads(f.read())
        except Exception:                   # none yet, or unreadable: look by the program
            pass
        else:
            exe = self._load(folder, program, in_tree, out_tree)
            if exe is not None:
                return exe
        # 2. a program of the same text (ptojax changed elsewhere, or the same
        # program under other pytree metadata): trace and lower, no XLA compile
        lowered = jitted.lower(*dynamic)
        text = "\n".join((_FORMAT, _platform(), _canon(sorted(self.compiler_options.items())),
                          _canon(self.donate), lowered.as_text()))
        program = hashlib.sha256(text.encode()).hexdigest()[:32]
        exe = self._load(folder, program, lowered.in_tree, lowered.out_tree)
        if exe is None:
            exe = self._compile(lowered, os.path.join(folder, f"{self.name}-{program}.bin"))
        try:
            _atomic_write(ref, pickle.dumps((program, lowered.in_tree, lowered.out_tree)))
        except Exception as e:
            _log.warning("could not write %s (%s: %s)", ref, type(e).__name__, e)
        return exe

    def _load(self, folder: str, program: str, in_tree, out_tree):
        """The executable of this program text's digest, called with these
        pytrees (a key's own: the text does not hold the pytree metadata);
        None when there is none."""
        path = os.path.join(folder, f"{self.name}-{program}.bin")
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as f:
                payload = zlib.decompress(f.read())
            from jax.experimental.serialize_executable import deserialize_and_load
            exe = deserialize_and_load(payload, in_tree, out_tree)
        except Exception as e:              # unreadable or from another jaxlib: compile afresh
            _log.warning("could not load %s (%s: %s); compiling it afresh", path, type(e).__name__, e)
            return None
        _log.debug("loaded executable %s", path)
        jax.monitoring.record_event(LOADED_EVENT)
        return exe

    def _compile(self, lowered, path: str):
        """A fresh XLA compile (never a JAX cache entry: see the module
        docstring), written to `path`."""
        with _write_lock:
            before = jax.config.jax_persistent_cache_min_compile_time_secs  # type: ignore[attr-defined]
            jax.config.update("jax_persistent_cache_min_compile_time_secs", _NO_JAX_WRITE)
            try:
                compiled = lowered.compile()
            finally:
                jax.config.update("jax_persistent_cache_min_compile_time_secs", before)
        try:
            from jax.experimental.serialize_executable import serialize
            payload, _, _ = serialize(compiled)
            _atomic_write(path, zlib.compress(payload, 1))
        except Exception as e:              # a read-only or full disk: this process still runs it
            _log.warning("could not write %s (%s: %s)", path, type(e).__name__, e)
        else:
            _log.debug("wrote executable %s", path)
            jax.monitoring.record_event(WRITTEN_EVENT)
        return compiled


def _atomic_write(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
