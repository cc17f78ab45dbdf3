"""GM element accesses as array code: probe order, reads, ordered writes.

A.8: an access of s bytes at A faults Fault_DataAlignment when A mod s != 0,
else Fault_DataPage when A + s > GM size (no wrap), else succeeds.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .. import tables
from .lowering import branch, settle, trip_count

F = tables.FAULT_CODE


def probe(addr: jax.Array, size: ArrayLike, gm_bytes: int) -> jax.Array:
    """Fault code of each access (addr uint64[...], size int[...])."""
    size64 = jnp.asarray(size).astype(jnp.uint64)
    misaligned = (addr & (size64 - 1)) != 0   # sizes are powers of two
    limit = jnp.uint64(gm_bytes) - jnp.minimum(size64, jnp.uint64(gm_bytes))
    out_of_range = (addr > limit) | (size64 > jnp.uint64(gm_bytes))
    return jnp.where(misaligned, F["Fault_DataAlignment"],
                     jnp.where(out_of_range, F["Fault_DataPage"], F["Fault_None"])).astype(jnp.int32)


def first_fault(codes: jax.Array, addr: jax.Array, order: jax.Array, active: jax.Array,
                ) -> tuple[jax.Array, jax.Array]:
    """(code, address) of the active access with the lowest `order` that faults."""
    bad = active & (codes != 0)
    big = jnp.iinfo(jnp.int32).max  # type: ignore[no-untyped-call]  # ml_dtypes.iinfo is unannotated
    key = jnp.where(bad, order, big)
    i = jnp.argmin(key)
    any_bad = key[i] != big
    return jnp.where(any_bad, codes[i], 0), jnp.where(any_bad, addr[i], jnp.uint64(0))


def _byte_index(addr: jax.Array, n: int) -> jax.Array:
    return jnp.minimum(addr, jnp.uint64(n)).astype(jnp.int32)


def read_elements(gm: jax.Array, addr: jax.Array, nbytes: ArrayLike, nibble_hi: jax.Array, four_bit: jax.Array,
                  signed: jax.Array) -> jax.Array:
    """Little-endian element reads -> uint64 carriers (A.4 extension rules).

    addr uint64[n] (probed in range where it matters), nbytes the element
    bytes, nibble_hi bool[n] (odd column of a 4-bit row), signed: sign-extend
    8/16/32-bit values into the 64-bit Word. One 8-byte window per element.
    """
    n = gm.shape[0]
    a = _byte_index(addr, n)
    if n >= 8:
        # 8-byte windows; near the end of GM the window starts earlier and the
        # word is shifted back into place
        start = jnp.minimum(a, n - 8)
        win = jax.vmap(lambda i: jax.lax.dynamic_slice(gm, (i,), (8,)))(start)
        word = jax.lax.bitcast_convert_type(win, jnp.uint64) >> (8 * (a - start)).astype(jnp.uint64)
    else:
        win = jnp.stack([gm[jnp.minimum(a + k, n - 1)] for k in range(8)], axis=-1)
        word = jax.lax.bitcast_convert_type(win, jnp.uint64)
    bits = (jnp.asarray(nbytes) * 8).astype(jnp.uint64)
    low = jnp.where(bits >= 64, ~jnp.uint64(0), (jnp.uint64(1) << jnp.minimum(bits, jnp.uint64(63))) - 1)
    word = word & low
    nib = jnp.where(nibble_hi, word >> 4, word) & jnp.uint64(0xF)
    sign = (word >> jnp.maximum(bits, jnp.uint64(1)) - jnp.uint64(1)) & jnp.uint64(1)
    extend = signed & ~four_bit & (bits < 64) & (sign == 1)
    word = jnp.where(extend, word | ~low, word)
    return jnp.where(four_bit, nib, word)


def overwritten_later(r: jax.Array, c: jax.Array, vr: jax.Array, vc: jax.Array, stride: jax.Array,
                      nbytes: ArrayLike, four_bit: jax.Array) -> jax.Array:
    """True where a later element (row-major) of the same store hits the same location.

    Rows are one pattern shifted by the stride, so element (r, c) is
    overwritten iff r is not the last row and column c - q of the next row is
    valid, with q the stride in element units (nibbles for 4-bit types). A
    successful store of more than one row has an element-aligned stride, and
    a stride is a signed 64-bit byte count.
    """
    s = jax.lax.bitcast_convert_type(stride, jnp.int64)
    q = jnp.where(four_bit, s * 2, s // jnp.maximum(nbytes, 1).astype(jnp.int64))
    c64 = c.astype(jnp.int64)
    return (r < vr - 1) & (q <= c64) & (q > c64 - vc)


def write_elements(gm: jax.Array, addr: jax.Array, value: jax.Array, nbytes: jax.Array, nibble_hi: jax.Array,
                   four_bit: jax.Array, overwritten: jax.Array, active: jax.Array) -> jax.Array:
    """Store elements; where rows alias only the element latest in order is written.

    The model stores sequentially, so an element that a later one overwrites
    (`overwritten_later`) is skipped: every remaining location has exactly one
    writer. Where every State of the batch that stores stores one width w,
    each lane is one index of a byte scatter whose window is its w bytes,
    else every byte is an index of its own.
    4-bit stores replace one nibble of the containing byte; even and odd
    columns never share a nibble, so they are written in two passes, run
    only where some State stores 4-bit elements. XLA:CPU scatters one index
    at a time, so these choices are most of a TSTORE's time
    (benchmarks/profile.py).
    """
    n = gm.shape[0]
    a = _byte_index(addr, n)
    half = nibble_hi.astype(jnp.int32)
    win, a = settle((active & ~overwritten, a))
    plain = win & ~four_bit

    def by_width(w: int) -> Callable[[jax.Array], jax.Array]:
        # one index a lane, its w bytes a window of the scatter (GM viewed as
        # w-byte units instead cost two conversions of the whole GM)
        dims = jax.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(),
                                               scatter_dims_to_operand_dims=(0,))

        def run(gm: jax.Array) -> jax.Array:
            data = jax.lax.bitcast_convert_type(value, jnp.uint8)[:, :w]      # little-endian bytes
            at = jnp.where(plain, a, n)[:, None]
            return jax.lax.scatter(gm, at, data, dims, indices_are_sorted=False, unique_indices=False,
                                   mode=jax.lax.GatherScatterMode.FILL_OR_DROP)
        return run

    def by_bytes(gm: jax.Array) -> jax.Array:
        k = jnp.arange(8)
        idx = jnp.where(plain[:, None] & (k[None, :] < nbytes), a[:, None] + k[None, :], n)
        return gm.at[idx.reshape(-1)].set(
            jax.lax.bitcast_convert_type(value, jnp.uint8).reshape(-1), mode="drop")

    # the widths stored by some State of the batch (batch-uniform, trip_count)
    widths = [w for w in (1, 2, 4, 8) if n % w == 0]
    present = jnp.stack([trip_count(jnp.any(plain & (nbytes == w)).astype(jnp.int32)) > 0
                         for w in widths])
    only = jnp.sum(present) == 1
    case = jnp.where(only, jnp.argmax(present), len(widths)).astype(jnp.int32)
    gm = jax.lax.switch(case, [branch(by_width(w)) for w in widths] + [branch(by_bytes)], gm)

    def nibbles(gm: jax.Array) -> jax.Array:
        """Low halves, then high halves (read-modify-write of the byte)."""
        nib = (value & jnp.uint64(0xF)).astype(jnp.uint8)
        for h in (0, 1):
            sel = win & four_bit & (half == h)
            old = gm[jnp.minimum(a, n - 1)]
            new = (old & jnp.uint8(0xF0 if h == 0 else 0x0F)) | (nib << (4 * h))
            gm = gm.at[jnp.where(sel, a, n)].set(new, mode="drop")
        return gm

    some = trip_count(jnp.any(win & four_bit).astype(jnp.int32)) > 0
    out: jax.Array = jax.lax.cond(some, branch(nibbles), lambda gm: gm, gm)
    return out
