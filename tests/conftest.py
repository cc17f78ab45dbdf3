"""Test-session setup.

XLA compiles of the word-stream executor take 10-20 s each on a small CPU, so
the session keeps JAX's persistent compilation cache (outside the repo) and
tests reuse a few fixed configs and stream shapes.
"""

import os

import jax

_cache = os.environ.get("PTOJAX_TEST_JAX_CACHE", os.path.expanduser("~/.cache/ptojax/jax-cache"))
if _cache:
    os.makedirs(_cache, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", _cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
else:
    # a cold run: keep the library's own cache hook (ptojax.compile_cache) off too
    os.environ["PTOJAX_JAX_CACHE"] = ""
