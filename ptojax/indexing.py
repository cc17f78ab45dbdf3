"""Row reads and writes at a traced index, as the executor needs them.

XLA's dynamic-slice and dynamic-update-slice clamp their start into range.
jnp indexing (`a[i]`, `a.at[i].set(v)`) adds a negative-index correction on
top (a compare, an add and a select), and XLA:CPU copies that correction into
every kernel that reads the row: across the executor it came to hundreds of
instructions. Every index here is a slot, PE, register or commit number the
caller keeps in range, so the clamp is all the guarding it needs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike
from numpy.typing import NDArray


def row(a: jax.Array | NDArray[Any], i: ArrayLike) -> jax.Array:
    """a[i] along the first axis, clamped into range; an array of indices reads
    one row each (a gather, with the same clamp)."""
    i = jnp.asarray(i)
    if i.ndim:
        return jax.vmap(lambda k: row(a, k))(i.reshape(-1)).reshape(i.shape + a.shape[1:])
    return jax.lax.dynamic_index_in_dim(a, i, keepdims=False, allow_negative_indices=False)


def set_row(a: jax.Array | NDArray[Any], i: ArrayLike, v: ArrayLike) -> jax.Array:
    """a with a[i] = v along the first axis (index clamped into range, as `row`)."""
    return jax.lax.dynamic_update_index_in_dim(a, jnp.asarray(v, a.dtype), jnp.asarray(i), 0,
                                               allow_negative_indices=False)


def cell(a: jax.Array | NDArray[Any], i: ArrayLike, j: ArrayLike) -> jax.Array:
    """a[i, j] along the first two axes (both indices clamped, as `row`); an
    array of second indices reads one row each."""
    j = jnp.asarray(j)
    if j.ndim:
        return jax.vmap(lambda k: cell(a, i, k))(j.reshape(-1)).reshape(j.shape + a.shape[2:])
    start = (jnp.asarray(i, jnp.int32), j.astype(jnp.int32)) + (jnp.int32(0),) * (a.ndim - 2)
    return jax.lax.dynamic_slice(a, start, (1, 1) + a.shape[2:]).reshape(a.shape[2:])
