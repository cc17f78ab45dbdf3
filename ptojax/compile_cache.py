"""JAX's persistent compilation cache for ptojax.

A process's first `pj.run` (`pj.run_core`, `pj.batch.run`, `pj.ops.matmul`)
compiles the word-stream executor: seconds to tens of seconds on a CPU. With
JAX's persistent compilation cache, a later process with the same config and
program shape loads the compiled code from disk instead.

`ensure_compile_cache()` turns that cache on once per process. ptojax's public
jitted entry points call it on their first use (the `x64` decorator of
`ptojax/_x64.py`), so library users get it as well as the `ptojax` CLI:

- the directory is `$PTOJAX_JAX_CACHE`, default `~/.cache/ptojax/jax-cache`;
  `PTOJAX_JAX_CACHE=` (empty) turns it off;
- a cache directory the process already configured (`jax_compilation_cache_dir`,
  e.g. from `$JAX_COMPILATION_CACHE_DIR`) is kept, with its settings, and
  `jax_enable_compilation_cache=False` is respected;
- otherwise it sets `jax_compilation_cache_dir` and, unless
  `$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` is set,
  `jax_persistent_cache_min_compile_time_secs` to `MIN_COMPILE_SECS`, so the
  executor programs are written and millisecond helper compiles are not. No
  other JAX setting changes.

The executor's own programs keep their executables in a folder of this
directory (ptojax/executables.py), so that a later process need not even
trace them. `ptojax.warmup` fills both ahead of time (`ptojax warmup`).
"""

from __future__ import annotations

import os
import threading
from typing import Optional

__all__ = ["CACHE_ENV", "MIN_COMPILE_SECS", "default_cache_dir", "ensure_compile_cache", "cache_dir"]

CACHE_ENV = "PTOJAX_JAX_CACHE"
# the executor's programs compile in 0.3-3 s on a 2-core CPU; JAX's own helpers
# (device_put, small jnp ops) in milliseconds and are not worth a file each
MIN_COMPILE_SECS = 0.2
_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"

_lock = threading.Lock()
_checked = False


def default_cache_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "ptojax", "jax-cache")


def cache_dir() -> Optional[str]:
    """The persistent cache directory in effect in this process, None when it is off."""
    import jax
    # jax's Config declares no option attributes (add_option sets them at import)
    if not jax.config.jax_enable_compilation_cache:  # type: ignore[attr-defined]
        return None
    return jax.config.jax_compilation_cache_dir or None  # type: ignore[attr-defined]


def ensure_compile_cache() -> Optional[str]:
    """Turn JAX's persistent compilation cache on (once per process); returns the
    directory in effect, None when the cache is off. See the module docstring."""
    global _checked
    if not _checked:
        with _lock:
            if not _checked:
                _configure()
                _checked = True
    return cache_dir()


def _configure() -> None:
    import jax
    # jax's Config declares no option attributes (add_option sets them at import)
    if (not jax.config.jax_enable_compilation_cache  # type: ignore[attr-defined]
            or jax.config.jax_compilation_cache_dir):  # type: ignore[attr-defined]
        return                                   # the caller's choice
    path = os.environ.get(CACHE_ENV)
    if path is None:
        path = default_cache_dir()
    if not path:
        return                                   # PTOJAX_JAX_CACHE= : off
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return                                   # unwritable: run without the cache
    jax.config.update("jax_compilation_cache_dir", path)
    if _MIN_TIME_ENV not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
