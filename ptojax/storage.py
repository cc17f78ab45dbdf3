"""Executor storage: the forms the executor keeps a State in while a stream
runs, apart from the public State (state.py) they are packed from and
unpacked to.

* LocalFile: the Local tile files with the descriptors as columns of one int32
  array and each PE's payload pool flat (pack_tiles / unpack_tiles);
* the open block packed into one int32 vector (pack_block / unpack_block,
  ROW_BITS for its binding rows);
* PeFile and PoolWrite: one PE's view while one of its blocks completes, and
  the window it writes (pe_file / with_pe_file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import NDArray

from .indexing import row, set_row
from .pytree import PytreeDataclass, pytree_dataclass
from .state import BLOCK_FIELDS, TILE_FIELDS, Block, Tiles, window_slots


@pytree_dataclass
class LocalFile(PytreeDataclass):
    """Tiles as the executor holds them while a stream runs: the descriptor
    fields as columns of one int32 array, so that reading a descriptor,
    publishing one or projecting a PE's file is one operation, not fifteen;
    each PE's pool flat, so that a tile's window is one slice of it (a window
    cut from a pool reshaped inside the loop made XLA copy the whole pool on
    every install)."""
    desc: jax.Array             # int32[4, S, len(TILE_FIELDS)], or [1, ...]: one PE's (pack_tiles)
    words: jax.Array            # uint64 or uint32 [4, K * W]
    defined: jax.Array          # bool[4, K * W]


def pack_tiles(t: Tiles, pe: Optional[ArrayLike] = None) -> LocalFile:
    """The executor's form of `t`. With `pe` (a stream of one PE's blocks,
    which read and write no other PE's descriptors) only PE `pe`'s
    descriptors, desc [1, S, F]: packing every PE's table and unpacking it
    after cost a batched TLOAD a fifth of its time."""
    fields = [getattr(t, n).astype(jnp.int32) for n in TILE_FIELDS]
    if pe is not None:
        fields = [row(f, pe)[None] for f in fields]
    desc = jnp.stack(fields, axis=-1)
    flat: Callable[[jax.Array], jax.Array] = lambda a: a.reshape(a.shape[:-2] + (-1,))
    return LocalFile(desc=desc, words=flat(t.words), defined=flat(t.defined))


def unpack_tiles(f: LocalFile, W: int, t: Tiles, pe: Optional[ArrayLike] = None) -> Tiles:
    """Inverse of pack_tiles(t, pe): `t` after the stream (its other PEs'
    descriptors, when f holds one PE's)."""
    if f.desc.shape[0] == 1:
        assert pe is not None           # f holds one PE's descriptors: packed with pe
        cols = {n: set_row(getattr(t, n), pe, f.desc[0, :, i]) for i, n in enumerate(TILE_FIELDS)}
    else:
        cols = {n: f.desc[..., i] for i, n in enumerate(TILE_FIELDS)}
    cols["allocated"] = cols["allocated"] != 0
    paged: Callable[[jax.Array], jax.Array] = lambda a: a.reshape(a.shape[:-1] + (-1, W))
    return Tiles(words=paged(f.words), defined=paged(f.defined), **cols)


def local_desc(local: LocalFile, pe: ArrayLike) -> jax.Array:
    """PE `pe`'s descriptor table [S, F] in `local` (pe may be traced)."""
    return local.desc[0] if local.desc.shape[0] == 1 else row(local.desc, pe)



# pack_block holds a B.IOT or B.IOS row as one int32, its columns as bit
# fields of these widths (the binding tables are most of the block, and
# phase 1 selects the whole packed block at every word). B.IOT: has_dst,
# DstTile, SizeCode, PE mask, has_src0, has_src1, SrcTile0, SrcTile1; B.IOS:
# SharedTID, SizeCode, PE mask. _DOMAIN's values fit (asserted there).
ROW_BITS = {"iot": (1, 2, 4, 4, 1, 1, 6, 6), "ios": (8, 4, 4)}


def packed_width(name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """int32 words a Block leaf takes in pack_block (a uint64 value takes two,
    a binding row one)."""
    if name in ROW_BITS:
        return shape[0]
    return int(np.prod(shape)) * (2 if dtype == np.uint64 else 1)


def _row_offsets(name: str) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    bits = np.array(ROW_BITS[name], np.int32)
    return np.concatenate([[0], np.cumsum(bits)[:-1]]).astype(np.int32), (1 << bits) - 1


def pack_block(blk: Block) -> jax.Array:
    """The Block as one int32 vector (a uint64 leaf as two words, a binding
    row one word of ROW_BITS fields: 52 words): a scan step selects or stores
    one array, not one per field (each field would be its own kernel). (The
    executor also packs blocks whose row tables hold one row: ops.commands._latch.)"""
    parts = []
    for name, _, dtype in BLOCK_FIELDS:
        v = jnp.asarray(getattr(blk, name))
        if name in ROW_BITS:        # fields disjoint: the sum is their bitwise or
            v = jnp.sum(v.astype(jnp.int32) << _row_offsets(name)[0], axis=-1, dtype=jnp.int32)
        v = v.reshape(-1)
        parts.append(jax.lax.bitcast_convert_type(v, jnp.int32).reshape(-1)
                     if dtype in (np.uint64, np.uint32) else v.astype(jnp.int32))
    return jnp.concatenate(parts)


def unpack_block(vec: jax.Array) -> Block:
    """Inverse of pack_block."""
    out: dict[str, jax.Array]
    out, at = {}, 0
    for name, shape, dtype in BLOCK_FIELDS:
        n = packed_width(name, shape, dtype)
        v = vec[at:at + n]
        at += n
        if name in ROW_BITS:
            offsets, masks = _row_offsets(name)
            v = (v[:, None] >> offsets) & masks
        elif dtype == np.uint64:
            v = jax.lax.bitcast_convert_type(v.reshape(-1, 2), jnp.uint64)
        elif dtype == np.uint32:
            v = jax.lax.bitcast_convert_type(v, jnp.uint32)
        else:
            v = v != 0 if dtype == np.bool_ else v.astype(dtype)
        out[name] = v.reshape(shape)
    return Block(**out)



@pytree_dataclass
class PoolWrite(PytreeDataclass):
    """A block's write to its PE's pool, held until its completion is over
    (with_pe_file applies it): at pool slot `base`, the slots of `words` where
    `words_mask` holds and the bits of `defined` where `defined_mask` does. The
    completion's conditionals (lane classes, families) then carry a window and
    read the Core's pools, which XLA would otherwise copy whole into and out
    of each conditional, every block."""
    base: jax.Array             # int32 pool slot of the window's first
    words: jax.Array            # uint64 or uint32 [n] slots
    words_mask: jax.Array       # bool[n]
    defined: jax.Array          # bool[n]
    defined_mask: jax.Array     # bool[n]


def no_pool_write(local: LocalFile, n: int) -> PoolWrite:
    """A PoolWrite of `n` slots that writes nothing."""
    none = jnp.zeros(n, bool)
    return PoolWrite(base=jnp.int32(0), words=jnp.zeros(n, local.words.dtype), words_mask=none,
                     defined=none, defined_mask=none)


@pytree_dataclass
class PeFile(PytreeDataclass):
    """PE `pe`'s Local register file while one of its blocks completes: its
    descriptors projected (S x 16 int32), its payload left in the Core's pools
    and addressed at (pe, a tile's base). A block then copies only the windows
    it names; projecting the whole file and writing it back cost a batched
    TLOAD two passes over all of the PE's payload. The block's write to the
    pools waits in `write` (PoolWrite)."""
    desc: jax.Array             # int32[S, len(TILE_FIELDS)]: this PE's
    words: jax.Array            # uint64 or uint32 [4, K * W]: the Core's pools, read only
    defined: jax.Array          # bool[4, K * W]: the Core's, read only
    pe: jax.Array               # int32
    lane: jax.Array             # int32[L] 0..L-1, a constant: L is the completion's lane count
    write: PoolWrite            # the window the block writes (at most one tile's)
    aux: Optional[PoolWrite] = None     # [2, n]: two small windows (a matrix block's
                                        # RowMax / GroupMax outputs), where the program has one


def pe_file(local: LocalFile, pe: ArrayLike, lanes: int, aux_slots: int = 0) -> PeFile:
    """PE `pe`'s view of the Core's Local files (pe may be traced) for a
    completion over `lanes` lanes (ops.lowering.lane_classes; at most tile_words),
    with two auxiliary windows of `aux_slots` slots when that is nonzero."""
    aux: Optional[PoolWrite] = None
    if aux_slots:
        aux = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), no_pool_write(local, aux_slots))
    return PeFile(desc=local_desc(local, pe), words=local.words, defined=local.defined,
                  pe=jnp.asarray(pe, jnp.int32), lane=jnp.arange(lanes, dtype=jnp.int32),
                  write=no_pool_write(local, window_slots(lanes, local.words.dtype == jnp.uint64)),
                  aux=aux)


def with_pe_file(local: LocalFile, f: PeFile) -> LocalFile:
    """`local` after PE `f.pe`'s block: its descriptors written back and its
    pool writes applied (in place: its window, then the auxiliary ones)."""
    words, defined = local.words, local.defined
    writes = [f.write] + ([jax.tree_util.tree_map(lambda x, k=k: x[k], f.aux) for k in range(2)]
                          if f.aux is not None else [])
    for w in writes:
        n = w.words.shape[0]

        def put(a: jax.Array, new: jax.Array, mask: jax.Array) -> jax.Array:
            old = jax.lax.dynamic_slice(a, (f.pe, w.base), (1, n))[0]
            return jax.lax.dynamic_update_slice(a, jnp.where(mask, new, old)[None], (f.pe, w.base))
        words, defined = put(words, w.words, w.words_mask), put(defined, w.defined, w.defined_mask)
    desc = f.desc[None] if local.desc.shape[0] == 1 else set_row(local.desc, f.pe, f.desc)
    return LocalFile(desc=desc, words=words, defined=defined)
