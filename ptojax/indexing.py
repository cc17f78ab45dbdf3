"""Row reads and writes at a traced index, as the executor needs them.

XLA's dynamic-slice and dynamic-update-slice clamp their start into range.
jnp indexing (`a[i]`, `a.at[i].set(v)`) adds a negative-index correction on
top (a compare, an add and a select), and XLA:CPU copies that correction into
every kernel that reads the row: across the executor it came to hundreds of
instructions. Every index here is a slot, PE, register or commit number the
caller keeps in range, so the clamp is all the guarding it needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def row(a, i):
    """a[i] along the first axis, clamped into range; an array of indices reads
    one row each (a gather, with the same clamp)."""
    i = jnp.asarray(i)
    if i.ndim:
        return jax.vmap(lambda k: row(a, k))(i.reshape(-1)).reshape(i.shape + a.shape[1:])
    return jax.lax.dynamic_index_in_dim(a, i, keepdims=False, allow_negative_indices=False)


def set_row(a, i, v):
    """a with a[i] = v along the first axis (index clamped into range, as `row`)."""
    return jax.lax.dynamic_update_index_in_dim(a, jnp.asarray(v, a.dtype), jnp.asarray(i), 0,
                                               allow_negative_indices=False)
