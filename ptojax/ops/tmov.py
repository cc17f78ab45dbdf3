"""TMOV completion: the Local tile copy (Function 2) and the Shared moves
(9 L2S.INSERT, 10 L2S.PUBLISH, 11 S2L.BROADCAST, 12 S2L.EXTRACT), docs/tmov.md.

Every check is a boolean, the first failing one in the spec's order is the
fault (ordered_fault, step ids MV.* and MS.* shared with reference/tmov.py),
and the effects apply only where `enable` holds and nothing failed: a new
Local tile through the PE file's pending PoolWrite (common.install), a Shared
record's fields in place and its Words as the family's RowWrite.

This module holds the family record, the block's decoding, the Local move's
verdicts, the new Local tile, both ordered check lists and the Local effect;
ops/tmov_shared.py the Shared moves' verdicts and the register's side of the
effects. `complete` computes every verdict, then the fault, then the effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import families, tables
from ..state import MachineConfig, SharedTiles, State
from ..storage import PeFile
from . import shared as sh
from . import tmov_shared
from .common import (DEST_LAYOUT, DT_BITS, U64, capacity_register, destination, fractal_ok, install,
                     ordered_fault, ordinary_shape, ordinary_source_legal, payload_defined, source, take)
from .family import Completion, Context, Family
from .header import Header
from .lowering import settle
from .shared_transport import no_row_write

_FUNCTION = np.zeros(len(tables.OPS), np.int32)     # op id -> TMOV Function, 0 elsewhere
for _i, (_name, _, _fn) in enumerate(tables.OPS):
    if _name in families.BY_NAME["tmov"].ops:
        _FUNCTION[_i] = _fn
FP64 = tables.DTYPE_BY_NAME["FP64"].code
ANY = tables.TILE_LOCATION_CODE["Any"]


def function(h: Header) -> jax.Array:
    """The block's TMOV Function (2, 9..12), 0 for any other operation."""
    return take(_FUNCTION, h.op)


def scalar_schema_legal(h: Header) -> jax.Array:
    """TMOV reads no GPR: a B.IOR is legal only with every field zero."""
    fields = (h.reg_dst != 0) | (h.reg_src0 != 0) | (h.reg_src1 != 0) | (h.reg_src2 != 0)
    return ~h.ior_present | ~fields


def datr_legal(h: Header) -> jax.Array:
    """TMOV's B.DATR contract: only Layout may be nonzero (DataType 0 is FP64)."""
    return ~h.datr_present | ((h.datr_dtype == 0) & (h.pad == 0) & ~h.conversion_attrs)


def configured(s: Mapping[str, jax.Array], allocated: jax.Array, tile_capacity: jax.Array) -> jax.Array:
    """TileDescriptorConfigured: allocated, a legal capacity, rows derived from
    (capacity, columns), the valid region inside (any layout, CUBE included)."""
    bits = take(DT_BITS, s["dtype"])
    cap = s["capacity"]
    cap_ok = (cap >= 128) & ((cap & 127) == 0) & (cap <= 65536) \
        & (cap.astype(jnp.int64) <= capacity_register(tile_capacity))
    rows = sh.derived_rows(cap, s["cols"], bits)
    return allocated & cap_ok & (rows != 0) & (s["rows"] == rows) \
        & (s["valid_rows"] >= 0) & (s["valid_rows"] <= s["rows"]) \
        & (s["valid_cols"] >= 0) & (s["valid_cols"] <= s["cols"])


def _lb(h: Header, n: int) -> tuple[jax.Array, jax.Array]:
    """LB<n> when 1..65535 (B.DIM 0 inherits), else None-like: (value, usable)."""
    return h.lb[n], (h.lb[n] >= 1) & (h.lb[n] <= 65535)


def destination_shape(h: Header, src_ok: jax.Array, src: Mapping[str, jax.Array], rec_ok: jax.Array,
                      rec: Mapping[str, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(valid rows, valid columns, columns) of a new destination: LB1/LB0/LB2
    when 1..65535, else the configured tile source's, else the legal Shared
    record's, else 1 / 1 / the valid columns."""
    def pick(n: int, field: str, default: jax.Array | int) -> jax.Array:
        v, given = _lb(h, n)
        return jnp.where(given, v, jnp.where(src_ok, src[field], jnp.where(rec_ok, rec[field],
                                                                           default)))
    vr = pick(1, "valid_rows", 1)
    vc = pick(0, "valid_cols", 1)
    return vr, vc, pick(2, "cols", vc)


def _descriptor(dtype: jax.Array, layout: jax.Array, tsize: jax.Array, rows: jax.Array, cols: jax.Array,
                vr: jax.Array, vc: jax.Array, mask: jax.Array, defined_valid: jax.Array) -> dict[str, jax.Array | int]:
    zero = jnp.int32(0)
    return dict(dtype=dtype, layout=layout, location=ANY, capacity=tsize, rows=rows, cols=cols,
                valid_rows=vr, valid_cols=vc, k_repeat=zero, n_repeat=zero, cell_count=zero,
                storage_bytes=zero, mask=mask, defined_valid=defined_valid)


class _Block(NamedTuple):
    """The decoded TMOV block: its Function (Local 2, L2S 9/10, S2L 11/12) and
    the header's verdicts every Function reads."""
    local: jax.Array
    l2s: jax.Array
    s2l: jax.Array
    publish: jax.Array              # 10
    broadcast: jax.Array            # 11
    has_ios: jax.Array
    scalar_bad: jax.Array
    datr_bad: jax.Array
    lay: jax.Array                  # the new tile's layout (B.DATR's, the model's map)
    cap_reg: jax.Array              # TILE_CAPACITY's register value


def _decode(state: State, h: Header) -> _Block:
    """The block's Function and shared verdicts (scalar schema, B.DATR)."""
    fn = function(h)
    local, l2s, s2l = fn == 2, (fn == 9) | (fn == 10), (fn == 11) | (fn == 12)
    publish, broadcast = fn == 10, fn == 11
    has_ios = h.ios_count > 0
    scalar_bad = ~scalar_schema_legal(h)
    datr_bad = ~datr_legal(h)
    lay = take(DEST_LAYOUT, jnp.where(h.datr_present, h.layout, 0))
    cap_reg = capacity_register(state.tile_capacity)
    return _Block(local, l2s, s2l, publish, broadcast, has_ios, scalar_bad, datr_bad, lay, cap_reg)


class _Source(NamedTuple):
    """The tile source: the first source in binding order (Function 2; 9/10
    bind one): its slot, descriptor fields, and whether it is configured and
    a legal ordinary source."""
    slot: jax.Array
    fields: dict[str, jax.Array]
    configured: jax.Array
    legal: jax.Array


def _source(state: State, tiles: PeFile, h: Header, cfg: MachineConfig) -> _Source:
    src_index = h.sources[jnp.argmax(h.source_ok)]
    sslot, s_alloc, s, s_defined = source(tiles, src_index, cfg.hand_slots)
    s_conf = configured(s, s_alloc, state.tile_capacity)
    s_legal = ordinary_source_legal(s, s_alloc, s_defined, state.tile_capacity, cfg.max_tile_words)
    return _Source(sslot, s, s_conf, s_legal)


def _local_type(h: Header, blk: _Block, src: _Source) -> tuple[jax.Array, jax.Array]:
    """Function 2: (the bindings' verdict, the effective type: B.DATR's, the
    BSTART's, the configured source's, else -1)."""
    mv_bindings_bad = (h.n_dst != 1) | (h.n_src != 1) | ((h.iot_count > 0) & ~h.iot_closed) \
        | blk.scalar_bad
    mv_dtype = jnp.where(h.datr_present, h.datr_dtype,
                         jnp.where(h.dtype != tables.DTYPE_NONE, h.dtype,
                                   jnp.where(src.configured, src.fields["dtype"], -1)))
    return mv_bindings_bad, mv_dtype


class _Destination(NamedTuple):
    """The new Local tile (2, 11, 12): its type and width, slot, TSize, shape,
    and the verdict on its slot, budget and shape (MV.7 / MS.11)."""
    dtype: jax.Array
    bits: jax.Array
    slot: jax.Array
    tsize: jax.Array
    rows: jax.Array
    cols: jax.Array
    vr: jax.Array
    vc: jax.Array
    bad: jax.Array


def _destination(state: State, h: Header, cfg: MachineConfig, blk: _Block, src: _Source,
                 reg: tmov_shared.Register, mv_dtype: jax.Array, ms_dtype: jax.Array) -> _Destination:
    """The new tile: Function 2's type `mv_dtype`, else B.DATR's, else the
    type 11/12 read (`ms_dtype`); the first bound destination's slot."""
    vr, vc, cols = destination_shape(h, blk.local & src.configured, src.fields, blk.s2l & reg.legal,
                                     reg.rec)
    edt = jnp.where(blk.local, mv_dtype, jnp.where(h.datr_present, h.datr_dtype, ms_dtype))
    ebits = take(DT_BITS, jnp.maximum(edt, 0))
    k = jnp.argmax(h.bound & h.has_dst)
    dslot, found, tsize, budget_ok = destination(state, h.dst_hand[k], h.size_code[k], h.mask, cfg)
    shape_ok, rows = ordinary_shape(tsize, cols, vr, vc, ebits, cfg.max_tile_words, blk.lay)
    dest_bad = ~found | ~budget_ok | ~shape_ok
    return _Destination(edt, ebits, dslot, tsize, rows, cols, vr, vc, dest_bad)


def _local_match(blk: _Block, s: Mapping[str, jax.Array], d: _Destination) -> jax.Array:
    """Function 2 (MV.9): the new tile is indexable and has source `s`'s
    shape, layout and type."""
    return fractal_ok(blk.lay, d.rows, d.cols, d.bits) & (d.rows == s["rows"]) & (d.cols == s["cols"]) \
        & (d.vr == s["valid_rows"]) & (d.vc == s["valid_cols"]) & (blk.lay == s["layout"]) \
        & (d.dtype == s["dtype"])


class _LocalMove(NamedTuple):
    """Function 2's own verdicts: the bindings (MV.4), the effective type (MV.6,
    -1 none) and the new tile's match with the source (MV.9)."""
    bindings_bad: jax.Array
    dtype: jax.Array
    match: jax.Array


# an ordered check list's entry: (step id, condition, fault name)
_Check = tuple[str, jax.Array, str]


def _local_checks(h: Header, blk: _Block, src: _Source, mv: _LocalMove,
                  dst: _Destination) -> tuple[_Check, ...]:
    """Function 2's checks, in the spec's order (docs/tmov.md, MV.*)."""
    local, has_ios = blk.local, blk.has_ios
    return (
        ("MV.1 shared_count", local & has_ios & (h.ios_count != 1), "Fault_TileLegality"),
        ("MV.2 shared_scalar", local & has_ios & blk.scalar_bad, "Fault_BundleControl"),
        ("MV.3 shared_path", local & has_ios, "Fault_TileLegality"),
        ("MV.4 bindings", local & mv.bindings_bad, "Fault_BundleControl"),
        ("MV.5 datr", local & blk.datr_bad, "Fault_TileLegality"),
        ("MV.6 dtype", local & (mv.dtype < 0), "Fault_TileLegality"),
        ("MV.7 destination", local & dst.bad, "Fault_TileAllocation"),
        ("MV.8 source", local & ~src.legal, "Fault_TileLegality"),
        ("MV.9 match", local & ~mv.match, "Fault_TileLegality"),
    )


def _shared_checks(h: Header, blk: _Block, shared_fn: jax.Array, src: _Source, tosh: tmov_shared.ToShared,
                   tolo: tmov_shared.ToLocal, dst: _Destination) -> tuple[_Check, ...]:
    """The Shared moves' checks (9..12; `shared_fn`), in the spec's order
    (docs/tmov.md, MS.*)."""
    l2s, s2l = blk.l2s, blk.s2l
    return (
        ("MS.1 one_shared_binding", shared_fn & (h.ios_count != 1), "Fault_TileLegality"),
        ("MS.2 scalar_schema", shared_fn & blk.scalar_bad, "Fault_BundleControl"),
        ("MS.3 datr", shared_fn & blk.datr_bad, "Fault_TileLegality"),
        ("MS.4 local_schema", l2s & ~tosh.schema, "Fault_TileLegality"),
        ("MS.5 local_source", l2s & (~src.legal | (src.fields["capacity"] != tosh.size)),
         "Fault_TileLegality"),
        ("MS.6 update_compatible", l2s & tosh.update_bad, "Fault_TileLegality"),
        ("MS.7 model_bounds", l2s & tosh.bound_bad, "Fault_TileAllocation"),
        ("MS.8 prospective_init", l2s & tosh.prospective_bad, "Fault_TileLegality"),
        ("MS.9 read_schema", s2l & tolo.read_bad, "Fault_TileLegality"),
        ("MS.10 broadcast_ready", blk.broadcast & ~tolo.ready, "Fault_TileLegality"),
        ("MS.11 destination", s2l & dst.bad, "Fault_TileAllocation"),
        ("MS.12 match", s2l & ((dst.rows != tolo.read_rows) | (dst.dtype != tolo.dtype)),
         "Fault_TileLegality"),
    )


def _install_local(tiles: PeFile, shared: SharedTiles, h: Header, blk: _Block, src: _Source,
                   reg: tmov_shared.Register, dst: _Destination, ms_bits: jax.Array,
                   payload: tuple[jax.Array, jax.Array], ok: jax.Array, W: int) -> PeFile:
    """The effect of 2, 11 and 12 where `ok`: the new Local tile, of the
    source's `payload` (Words, definedness) or the register's elements."""
    src_words, src_def = payload
    lane = tiles.lane
    taken, read = tmov_shared.read_register(shared, reg, lane, ms_bits, dst.tsize, dst.rows, dst.cols)
    local = blk.local
    new_words = jnp.where(local, src_words, read)
    new_def = jnp.where(local, src_def, taken)
    written = local | taken
    dv = jnp.where(local, src.fields["defined_valid"], jnp.where(reg.mask == 0xF, dst.vr * dst.vc, 0))
    fields = _descriptor(dst.dtype, blk.lay, dst.tsize, dst.rows, dst.cols, dst.vr, dst.vc, h.mask, dv)
    do_local = ok & (local | blk.s2l)
    return install(tiles, dst.slot, do_local, fields, new_words, new_def, written, W)


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """Complete a TMOV block with header `h` on PE `pe`'s view."""
    # the view's tiles: PE `pe`'s storage.PeFile (dispatch._complete)
    tiles, shared, W, WS = cast(PeFile, state.tiles), state.shared, cfg.tile_words, cfg.shared_words
    assert WS is not None       # MachineConfig.__post_init__ sets it
    blk = _decode(state, h)
    src = _source(state, tiles, h, cfg)
    reg = tmov_shared.register(state, h)

    # the verdicts: Function 2's type, 11/12's, the new tile, 9/10's, 11/12's
    mv_bindings_bad, mv_dtype = _local_type(h, blk, src)
    ms_dtype, ms_bits = tmov_shared.read_type(h, reg)
    dst = _destination(state, h, cfg, blk, src, reg, mv_dtype, ms_dtype)
    mv = _LocalMove(mv_bindings_bad, mv_dtype, _local_match(blk, src.fields, dst))
    tosh = tmov_shared.to_shared(state, h, cfg, tiles, reg, src.fields, blk.publish, blk.cap_reg)
    tolo = tmov_shared.to_local(state, h, reg, ms_dtype, ms_bits, blk.lay, dst.tsize,
                                (dst.vr, dst.vc, dst.cols))

    # the first failing check in the spec's order, MV.* then MS.*
    shared_fn = blk.l2s | blk.s2l
    fault = settle(ordered_fault(*_local_checks(h, blk, src, mv, dst),
                                 *_shared_checks(h, blk, shared_fn, src, tosh, tolo, dst)))
    ok = enable & (fault == 0) & ~h.zero_mask

    # the effects: the new Local tile (2, 11, 12), the Shared record (9, 10)
    payload = payload_defined(tiles, src.slot, W)
    tiles = _install_local(tiles, shared, h, blk, src, reg, dst, ms_bits, payload, ok, W)
    shared, write = tmov_shared.write_record(shared, reg, tosh, src.fields, *payload, blk.publish, ok,
                                             blk.l2s, WS)
    return Completion(fault, U64(0), state.replace(tiles=tiles, shared=shared), write)


def selects(h: Header) -> jax.Array:
    """Every BSTART.TMOV block (Functions 2 and 9..12), a B.IOS or not."""
    return function(h) != 0


FAMILY = Family(families.BY_NAME["tmov"], complete, selects=selects,
                idle=lambda view: no_row_write(view.shared))
