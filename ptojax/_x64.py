"""64-bit JAX scoped to ptojax's own entry points.

Payload slots and GPRs are 64-bit words, so ptojax computes with uint64. It
enables x64 only inside its public functions (a context), never in the
caller's global JAX configuration.

The first call of any of them in a process also turns on JAX's persistent
compilation cache (ptojax/compile_cache.py: $PTOJAX_JAX_CACHE, a directory the
caller configured is kept).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

from . import compile_cache

P = ParamSpec("P")
R = TypeVar("R")


def x64(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with jax x64 enabled for the duration of the call."""
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not compile_cache._checked:
            compile_cache.ensure_compile_cache()
        with jax.enable_x64(True):
            return fn(*args, **kwargs)
    return wrapper
