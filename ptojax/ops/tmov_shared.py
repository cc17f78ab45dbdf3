"""TMOV's Shared moves (docs/tmov.md): 9 L2S.INSERT, 10 L2S.PUBLISH (a Local
tile's quarters into a Shared register) and 11 S2L.BROADCAST, 12 S2L.EXTRACT
(a register into a new Local tile).

The verdicts the MS.* checks read (ops/tmov.py holds the ordered list, with
the Local move's MV.* checks) and the Shared side of the effects: the
register's elements a new Local tile takes, and the record a 9/10 writes
(its fields in place, its Words as the family's RowWrite).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import tables
from ..indexing import row
from ..state import MachineConfig, SharedTiles, State
from ..storage import PeFile
from . import shared as sh
from .common import DT_BITS, U64, core_charge, pe_count, shared_charge, size_code_bytes, take
from .header import Header
from .lowering import settle
from .shared_transport import RowWrite


class Register(NamedTuple):
    """The Shared register the B.IOS names: its id, SizeCode and mask, its
    record (index, whether it exists, a free one left, its fields) and whether
    that record's descriptor is legal."""
    sid: jax.Array
    size: jax.Array
    mask: jax.Array
    i: jax.Array
    exists: jax.Array
    has_free: jax.Array
    rec: dict[str, jax.Array]
    legal: jax.Array


def register(state: State, h: Header) -> Register:
    """The block's Shared register (9..12)."""
    sid, ssize, smask = h.shared_id[0], h.shared_size[0], h.shared_mask
    i, exists, has_free = sh.lookup(state.shared, sid)
    rec = sh.record(state.shared, i)
    rec_legal = sh.descriptor_legal(rec, exists, state.tile_capacity)
    return Register(sid, ssize, smask, i, exists, has_free, rec, rec_legal)


def read_type(h: Header, reg: Register) -> tuple[jax.Array, jax.Array]:
    """Functions 11/12: the type read (the BSTART's; DTYPE_NONE: the record's,
    -1 without a legal one) and its width."""
    ms_dtype = jnp.where(h.dtype != tables.DTYPE_NONE, h.dtype, jnp.where(reg.legal, reg.rec["dtype"], -1))
    return ms_dtype, take(DT_BITS, jnp.maximum(ms_dtype, 0))


class ToShared(NamedTuple):
    """Functions 9/10 (MS.4, MS.6-MS.8): the binding schema, the register's
    TSize, the update's and the bounds' verdicts; the source's element count
    and the record's new initialized mask (the effect's)."""
    schema: jax.Array
    size: jax.Array                 # TSize of the B.IOS SizeCode
    update_bad: jax.Array
    bound_bad: jax.Array
    n_src: jax.Array
    new_init: jax.Array
    prospective_bad: jax.Array


def to_shared(state: State, h: Header, cfg: MachineConfig, tiles: PeFile, reg: Register,
              s: Mapping[str, jax.Array], publish: jax.Array, cap_reg: jax.Array) -> ToShared:
    """9/10: the source, the register update, the bounds (source `s`'s fields)."""
    ssize, smask, rec, exists = reg.size, reg.mask, reg.rec, reg.exists
    l2s_schema = (h.iot_count == 1) & ~h.has_dst[0] & h.has_src0[0] & ~h.has_src1[0] \
        & h.iot_closed & (ssize >= 1) & (ssize <= 12) & (h.pe_mask[0] == smask)
    stsize = size_code_bytes(ssize)
    compatible = ((smask & ~rec["allocation_mask"] & 0xF) == 0) & (rec["capacity"] == s["capacity"]) \
        & (rec["rows"] == s["rows"]) & (rec["cols"] == s["cols"]) \
        & (rec["valid_rows"] == s["valid_rows"]) & (rec["valid_cols"] == s["valid_cols"]) \
        & (rec["dtype"] == s["dtype"]) & (rec["layout"] == s["layout"])
    pool = shared_charge(state.shared) + pe_count(smask) * stsize
    if cfg.semantics == "0.58.3":
        pool = pool + core_charge(tiles)
    update_bad = ~sh.capacity_legal(stsize, state.tile_capacity) \
        | jnp.where(exists, ~compatible, pool > cap_reg)
    n_src = s["rows"].astype(jnp.int64) * s["cols"]
    assert cfg.shared_words is not None     # MachineConfig.__post_init__ sets it
    l2s_bound_bad = (n_src > cfg.shared_words) | (~exists & ~reg.has_free)
    new_init = rec["initialized_mask"] | smask
    prospective_bad = publish & exists & (new_init != rec["allocation_mask"])
    return ToShared(l2s_schema, stsize, update_bad, l2s_bound_bad, n_src, new_init, prospective_bad)


class ToLocal(NamedTuple):
    """Functions 11/12 (MS.9, MS.10, MS.12): the type read, the rows the
    register's TSize and columns derive, the read schema's verdict and
    BROADCAST's readiness."""
    dtype: jax.Array
    read_rows: jax.Array
    read_bad: jax.Array
    ready: jax.Array


def to_local(state: State, h: Header, reg: Register, ms_dtype: jax.Array, ms_bits: jax.Array,
             lay: jax.Array, tsize: jax.Array, shape: tuple[jax.Array, jax.Array, jax.Array]) -> ToLocal:
    """11/12: the bindings, the read schema, BROADCAST's readiness, for a new
    tile of `tsize` bytes, layout `lay` and shape (valid rows, valid columns,
    columns)."""
    vr, vc, cols = shape
    ssize, smask, rec, exists = reg.size, reg.mask, reg.rec, reg.exists
    s2l_schema = (h.iot_count == 1) & h.has_dst[0] & ~h.has_src0[0] & ~h.has_src1[0] \
        & h.iot_closed & (ssize == 0) & (h.pe_mask[0] == smask)
    read_rows = sh.derived_rows(tsize, cols, ms_bits)
    readable = jnp.where(
        exists,
        reg.legal & (rec["capacity"] == tsize) & (rec["cols"] == cols) & (vr <= rec["valid_rows"])
        & (vc <= rec["valid_cols"]) & (rec["dtype"] == ms_dtype) & (rec["layout"] == lay),
        sh.capacity_legal(tsize, state.tile_capacity) & sh.shape_legal(tsize, cols, vr, vc, ms_bits))
    read_bad = ~s2l_schema | (ms_dtype < 0) | (vr < 1) | (vc < 1) | (cols < 1) | (vc > cols) \
        | ~readable
    ready = (smask == 0xF) & exists & (rec["allocation_mask"] == 0xF) \
        & (rec["initialized_mask"] == rec["allocation_mask"]) & rec["contents_defined"] \
        & rec["published"]
    return ToLocal(ms_dtype, read_rows, read_bad, ready)


def read_register(shared: SharedTiles, reg: Register, lane: jax.Array, ms_bits: jax.Array,
                  tsize: jax.Array, rows: jax.Array, cols: jax.Array) -> tuple[jax.Array, jax.Array]:
    """11/12's effect: every selected element of the new tile's storage, from
    the register: (the lanes taken, the register's Words at every lane)."""
    q_read = sh.quarter(lane, ms_bits, tsize)
    taken = sh.in_mask(reg.mask, q_read) & (lane.astype(jnp.int64) < rows.astype(jnp.int64) * cols)
    return taken, sh.read_words(shared, reg.i, reg.exists, reg.sid, lane)


def write_record(shared: SharedTiles, reg: Register, tosh: ToShared, s: Mapping[str, jax.Array],
                 src_words: jax.Array, src_def: jax.Array, publish: jax.Array, ok: jax.Array,
                 l2s: jax.Array, WS: int) -> tuple[SharedTiles, RowWrite]:
    """9/10's effect where `ok & l2s`: the record's fields in place, a new
    record or the selected quarters of an existing one (source `s`, its lanes'
    Words and definedness `src_words` / `src_def`); its Words and definedness
    as the RowWrite. A new record takes every Word and definedness bit of the
    source, whatever the mask; an existing one takes each element of a
    selected quarter that the source defines, Word and bit, and keeps every
    other (AtomicUpdateSharedTileWithPublication, docs/tmov.md 3)."""
    smask, rec, exists, stsize = reg.mask, reg.rec, reg.exists, tosh.size
    e = jnp.arange(WS, dtype=jnp.int32)
    L = src_words.shape[0]
    pad: Callable[[jax.Array, jax.Array | bool], jax.Array] = \
        lambda a, fill: jnp.concatenate([a, jnp.full(max(WS - L, 0), fill, a.dtype)])[:WS]
    sw, sd = pad(src_words, U64(0)), pad(src_def, False)
    in_src = e.astype(jnp.int64) < tosh.n_src
    sbits = take(DT_BITS, s["dtype"])
    chosen = sh.in_mask(smask, sh.quarter(e, sbits, stsize)) & in_src & sd
    old, old_def = row(shared.words, reg.i), row(shared.defined, reg.i)
    rec_words = jnp.where(exists, jnp.where(chosen, sw, old), jnp.where(in_src, sw, U64(0)))
    rec_def = jnp.where(exists, old_def | chosen, in_src & sd)
    init = jnp.where(exists, tosh.new_init, smask)
    alloc = jnp.where(exists, rec["allocation_mask"], smask)
    cd = jnp.where(exists, init == alloc, True)
    rec_fields = dict(sid=reg.sid, allocation_mask=alloc, initialized_mask=init,
                      published=jnp.where(exists, rec["published"] | (publish & cd), publish),
                      contents_defined=cd, dtype=s["dtype"], layout=s["layout"],
                      capacity=stsize, rows=s["rows"], cols=s["cols"],
                      valid_rows=s["valid_rows"], valid_cols=s["valid_cols"])
    rec_fields = {name: jnp.asarray(v).astype(getattr(shared, name).dtype)
                  for name, v in rec_fields.items()}
    do_shared = ok & l2s
    i, do_shared, rec_fields = settle((reg.i, do_shared, rec_fields))
    shared = shared.replace(**{name: getattr(shared, name).at[i].set(
        jnp.where(do_shared, v, getattr(shared, name)[i])) for name, v in rec_fields.items()})
    return shared, RowWrite(i, do_shared, rec_words, rec_def)
