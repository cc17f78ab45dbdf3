"""GM element accesses as array code: probe order, reads, ordered writes.

A.8: an access of s bytes at A faults Fault_DataAlignment when A mod s != 0,
else Fault_DataPage when A + s > GM size (no wrap), else succeeds.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import tables

F = tables.FAULT_CODE


def probe(addr, size, gm_bytes: int):
    """Fault code of each access (addr uint64[...], size int[...])."""
    size64 = jnp.asarray(size).astype(jnp.uint64)
    misaligned = (addr % size64) != 0
    limit = jnp.uint64(gm_bytes) - jnp.minimum(size64, jnp.uint64(gm_bytes))
    out_of_range = (addr > limit) | (size64 > jnp.uint64(gm_bytes))
    return jnp.where(misaligned, F["Fault_DataAlignment"],
                     jnp.where(out_of_range, F["Fault_DataPage"], F["Fault_None"])).astype(jnp.int32)


def first_fault(codes, addr, order, active):
    """(code, address) of the active access with the lowest `order` that faults."""
    bad = active & (codes != 0)
    big = jnp.iinfo(jnp.int32).max
    key = jnp.where(bad, order, big)
    i = jnp.argmin(key)
    any_bad = key[i] != big
    return jnp.where(any_bad, codes[i], 0), jnp.where(any_bad, addr[i], jnp.uint64(0))


def read_elements(gm, addr, nbytes, nibble_hi, four_bit, signed):
    """Little-endian element reads -> uint64 carriers (A.4 extension rules).

    addr uint64[n] (already probed), nbytes int scalar, nibble_hi bool[n] for
    4-bit elements (odd column), signed: sign-extend 8/16/32-bit values.
    """
    n = gm.shape[0]
    a = jnp.minimum(addr, jnp.uint64(n - 1)).astype(jnp.int32)
    word = jnp.zeros(addr.shape, jnp.uint64)
    for k in range(8):
        b = gm[jnp.minimum(a + k, n - 1)].astype(jnp.uint64)
        word = word | jnp.where(k < nbytes, b << (8 * k), jnp.uint64(0))
    nib = jnp.where(nibble_hi, word >> 4, word) & jnp.uint64(0xF)
    word = jnp.where(four_bit, nib, word)
    bits = (jnp.asarray(nbytes) * 8).astype(jnp.uint64)
    sign = (word >> jnp.maximum(bits, jnp.uint64(1)) - jnp.uint64(1)) & jnp.uint64(1)
    ext = (~jnp.uint64(0)) << jnp.minimum(bits, jnp.uint64(63))
    extend = signed & ~four_bit & (nbytes < 8) & (sign == 1)
    return jnp.where(extend, word | ext, word)


def write_elements(gm, addr, value, nbytes, nibble_hi, four_bit, order, active):
    """Store elements in `order` (row-major) with last-writer-wins per byte/nibble.

    Aliased rows (e.g. stride 0) make several elements hit the same bytes; the
    model stores sequentially, so the element latest in order wins. Writes are
    done at nibble granularity so 4-bit stores keep their sibling nibble.
    """
    n = gm.shape[0]
    nib = jnp.stack([gm & 0xF, gm >> 4], axis=-1).reshape(-1)        # [2n] nibbles
    a = jnp.minimum(addr, jnp.uint64(n - 1)).astype(jnp.int32)
    # nibble targets of each element: 16 candidates (8 bytes x 2 halves)
    k = jnp.arange(16)
    byte_k, half = k // 2, k % 2
    tgt = 2 * (a[:, None] + byte_k[None, :]) + half[None, :]
    use = jnp.where(four_bit,
                    (byte_k[None, :] == 0) & (half[None, :] == nibble_hi[:, None].astype(jnp.int32)),
                    byte_k[None, :] < nbytes)
    use = use & active[:, None]
    nibval = jnp.where(four_bit, value[:, None] & jnp.uint64(0xF),
                       (value[:, None] >> (4 * k[None, :]).astype(jnp.uint64)) & jnp.uint64(0xF))
    tgt = jnp.where(use, tgt, 2 * n)                                  # dropped
    seq = jnp.broadcast_to(order[:, None], tgt.shape)
    last = jnp.full((2 * n + 1,), -1, jnp.int32).at[tgt.reshape(-1)].max(seq.reshape(-1))
    win = use & (last[tgt] == seq)
    tgt = jnp.where(win, tgt, 2 * n)
    nib = nib.at[tgt.reshape(-1)].set(nibval.reshape(-1).astype(jnp.uint8), mode="drop")
    nib = nib.reshape(n, 2)
    return (nib[:, 0] | (nib[:, 1] << 4)).astype(jnp.uint8)
