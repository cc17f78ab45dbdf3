"""64-bit JAX scoped to ptojax's own entry points.

Payload slots and GPRs are 64-bit words, so ptojax computes with uint64. It
enables x64 only inside its public functions (a context), never in the
caller's global JAX configuration.
"""

from __future__ import annotations

import functools

import jax


def x64(fn):
    """Run `fn` with jax x64 enabled for the duration of the call."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)
    return wrapper
