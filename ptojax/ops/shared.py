"""Shared tile registers as array code (docs/shared-decisions.md section 1).

`State.shared` materializes the Core's S0..S255 as records tagged with the
SharedTileID they hold. These helpers find a record, judge its descriptor,
read its elements with the quarter/undefined-register rule, and derive the
ordinary shape rules the Shared paths share (DerivedTileRows and friends).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .. import tables
from ..indexing import row
from ..state import SharedTiles
from .common import DT_BITS, ORDINARY_LAYOUTS, U64, capacity_register, div, fractal_ok, mod, take

ROW_MAJOR = tables.TILE_LAYOUT_CODE["RowMajor"]
MAX_SHARED_BYTES = 262144


def derived_rows(capacity: jax.Array, cols: jax.Array, bits: jax.Array) -> jax.Array:
    """DerivedTileRows: whole rows of a power-of-two column count, else 0."""
    cap_bits = capacity.astype(jnp.int64) * 8
    unit = jnp.maximum(cols.astype(jnp.int64) * bits, 1)
    rows = div(cap_bits, unit)
    ok = (capacity > 0) & (cols > 0) & ((cols & (cols - 1)) == 0) & (mod(cap_bits, unit) == 0) \
        & (rows >= 1) & (rows <= 65535) & (bits > 0)
    return jnp.where(ok, rows, 0).astype(jnp.int32)


def shape_legal(capacity: jax.Array, cols: jax.Array, vr: jax.Array, vc: jax.Array, bits: jax.Array) -> jax.Array:
    """TileDescriptorShapeLegal for an ordinary tile of `capacity` bytes."""
    rows = derived_rows(capacity, cols, bits)
    elems = div(capacity.astype(jnp.int64) * 8, bits)
    return (rows != 0) & (vr <= rows) & (vc <= cols) & (vr.astype(jnp.int64) * vc <= elems)


def minimum_capacity(cols: jax.Array, vr: jax.Array, vc: jax.Array, bits: jax.Array) -> jax.Array:
    """MinimumTileCapacityBytesForShape: the smallest TSize admitting the shape, else 0."""
    sizes = jnp.int32(128) << jnp.arange(12, dtype=jnp.int32)
    ok = shape_legal(sizes, cols, vr, vc, bits)
    return jnp.where(jnp.any(ok), sizes[jnp.argmax(ok)], 0)


def lookup(shared: SharedTiles, sid: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(record index, exists, free record available) for SharedTileID `sid`.

    An existing record is returned when there is one, else the lowest free
    record (where a first write would put the register).
    """
    hit = shared.sid == sid
    free = shared.sid < 0
    exists = jnp.any(hit)
    return jnp.where(exists, jnp.argmax(hit), jnp.argmax(free)).astype(jnp.int32), exists, jnp.any(free)


def record(shared: SharedTiles, i: ArrayLike) -> dict[str, jax.Array]:
    """Descriptor fields of record `i` as a dict of scalars."""
    return {k: getattr(shared, k)[i] for k in (
        "allocation_mask", "initialized_mask", "published", "contents_defined", "dtype", "layout",
        "capacity", "rows", "cols", "valid_rows", "valid_cols")}


def capacity_legal(capacity: jax.Array, tile_capacity: jax.Array) -> jax.Array:
    """SharedTileCapacityIsLegal: whole CELLs, 128 B .. 256 KiB, within TILE_CAPACITY."""
    return (capacity >= 128) & ((capacity & 127) == 0) & (capacity <= MAX_SHARED_BYTES) \
        & (capacity.astype(jnp.int64) <= capacity_register(tile_capacity))


def descriptor_legal(r: Mapping[str, jax.Array], exists: jax.Array, tile_capacity: jax.Array) -> jax.Array:
    """SharedTileDescriptorLegal of an existing record's fields `r`."""
    bits = take(DT_BITS, r["dtype"])
    elems = div(r["capacity"].astype(jnp.int64) * 8, bits)
    return exists & (r["allocation_mask"] != 0) \
        & ((r["initialized_mask"] & ~r["allocation_mask"] & 0xF) == 0) \
        & capacity_legal(r["capacity"], tile_capacity) \
        & (r["rows"] == derived_rows(r["capacity"], r["cols"], bits)) & (r["rows"] != 0) \
        & (r["valid_rows"] >= 0) & (r["valid_cols"] >= 0) \
        & (r["valid_rows"] <= r["rows"]) & (r["valid_cols"] <= r["cols"]) \
        & (r["rows"].astype(jnp.int64) * r["cols"] <= elems) \
        & jnp.isin(r["layout"], jnp.asarray(ORDINARY_LAYOUTS)) \
        & fractal_ok(r["layout"], r["rows"], r["cols"], bits)


def quarter(e: jax.Array, bits: ArrayLike, capacity: jax.Array) -> jax.Array:
    """PE owning element e of a Shared tile: floor(4 * byte offset / capacity)."""
    byte = (e.astype(jnp.int64) * bits) >> 3
    return jnp.clip(div(byte * 4, capacity.astype(jnp.int64)), 0, 3).astype(jnp.int32)


def in_mask(mask: jax.Array, pe: ArrayLike) -> jax.Array:
    """Whether PE `pe`'s bit (PE0 = bit 3) is set in a 4-bit mask."""
    return ((mask >> (3 - pe)) & 1) == 1


def read_words(shared: SharedTiles, i: jax.Array, exists: jax.Array, sid: jax.Array, e: jax.Array) -> jax.Array:
    """ReadSharedTileWord for elements e (int32[...]) of SharedTileID `sid` in record i:
    the payload Word of an initialized quarter, else the undefined-register Word sid XOR e."""
    r = record(shared, i)
    q = quarter(e, take(DT_BITS, r["dtype"]), r["capacity"])
    init = exists & in_mask(r["initialized_mask"], q)
    words = row(shared.words, i)[jnp.clip(e, 0, shared.words.shape[-1] - 1)]
    undefined = sid.astype(U64) ^ e.astype(U64)
    return jnp.where(init, words, undefined)


def cooperative_ready(r: Mapping[str, jax.Array], exists: jax.Array, tile_capacity: jax.Array) -> jax.Array:
    """SharedTileCooperativeMatrixReady: legal, all four quarters allocated,
    initialized and published, contents defined."""
    return descriptor_legal(r, exists, tile_capacity) & (r["allocation_mask"] == 0xF) \
        & (r["initialized_mask"] == 0xF) & r["published"] & r["contents_defined"]
