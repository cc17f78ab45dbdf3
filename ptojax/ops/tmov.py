"""TMOV completion: the Local tile copy (Function 2) and the Shared moves
(9 L2S.INSERT, 10 L2S.PUBLISH, 11 S2L.BROADCAST, 12 S2L.EXTRACT), docs/tmov.md.

Every check is a boolean, the first failing one in the spec's order is the
fault (ordered_fault, step ids MV.* and MS.* shared with reference/tmov.py),
and the effects apply only where `enable` holds and nothing failed: a new
Local tile through the PE file's pending PoolWrite (common.install), a Shared
record's fields in place and its Words as the family's RowWrite.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import families, tables
from ..indexing import row
from ..state import MachineConfig, State
from ..storage import PeFile
from . import shared as sh
from .common import (DEST_LAYOUT, DT_BITS, U64, capacity_register, core_charge, destination,
                     fractal_ok, install, ordered_fault, ordinary_shape, ordinary_source_legal,
                     payload_defined, pe_count, shared_charge, size_code_bytes, source, take)
from .family import Completion, Context, Family
from .header import Header
from .lowering import settle
from .shared_transport import RowWrite, no_row_write

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


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """Complete a TMOV block with header `h` on PE `pe`'s view."""
    # the view's tiles: PE `pe`'s storage.PeFile (dispatch._complete)
    tiles, shared, W, WS = cast(PeFile, state.tiles), state.shared, cfg.tile_words, cfg.shared_words
    assert WS is not None       # MachineConfig.__post_init__ sets it
    fn = function(h)
    local, l2s, s2l = fn == 2, (fn == 9) | (fn == 10), (fn == 11) | (fn == 12)
    publish, broadcast = fn == 10, fn == 11
    has_ios = h.ios_count > 0
    scalar_bad = ~scalar_schema_legal(h)
    datr_bad = ~datr_legal(h)
    lay = take(DEST_LAYOUT, jnp.where(h.datr_present, h.layout, 0))
    cap_reg = capacity_register(state.tile_capacity)

    # the tile source: the first source in binding order (Function 2; 9/10 bind one)
    src_index = h.sources[jnp.argmax(h.source_ok)]
    sslot, s_alloc, s, s_defined = source(tiles, src_index, cfg.hand_slots)
    s_conf = configured(s, s_alloc, state.tile_capacity)
    s_legal = ordinary_source_legal(s, s_alloc, s_defined, state.tile_capacity, cfg.max_tile_words)

    # the Shared register (9..12)
    sid, ssize, smask = h.shared_id[0], h.shared_size[0], h.shared_mask
    i, exists, has_free = sh.lookup(shared, sid)
    rec = sh.record(shared, i)
    rec_legal = sh.descriptor_legal(rec, exists, state.tile_capacity)

    # Function 2: bindings, the effective type (B.DATR's, the BSTART's, the source's)
    mv_bindings_bad = (h.n_dst != 1) | (h.n_src != 1) | ((h.iot_count > 0) & ~h.iot_closed) \
        | scalar_bad
    mv_dtype = jnp.where(h.datr_present, h.datr_dtype,
                         jnp.where(h.dtype != tables.DTYPE_NONE, h.dtype,
                                   jnp.where(s_conf, s["dtype"], -1)))
    # Functions 11/12: the read shape and type (DTYPE_NONE: the record's)
    ms_dtype = jnp.where(h.dtype != tables.DTYPE_NONE, h.dtype, jnp.where(rec_legal, rec["dtype"], -1))
    ms_bits = take(DT_BITS, jnp.maximum(ms_dtype, 0))
    vr, vc, cols = destination_shape(h, local & s_conf, s, s2l & rec_legal, rec)

    # the new Local tile (2, 11, 12): its type, slot, budget and shape
    edt = jnp.where(local, mv_dtype, jnp.where(h.datr_present, h.datr_dtype, ms_dtype))
    ebits = take(DT_BITS, jnp.maximum(edt, 0))
    k = jnp.argmax(h.bound & h.has_dst)
    dslot, found, tsize, budget_ok = destination(state, h.dst_hand[k], h.size_code[k], h.mask, cfg)
    shape_ok, rows = ordinary_shape(tsize, cols, vr, vc, ebits, cfg.max_tile_words, lay)
    dest_bad = ~found | ~budget_ok | ~shape_ok
    mv_match = fractal_ok(lay, rows, cols, ebits) & (rows == s["rows"]) & (cols == s["cols"]) \
        & (vr == s["valid_rows"]) & (vc == s["valid_cols"]) & (lay == s["layout"]) \
        & (edt == s["dtype"])

    # 9/10: the source, the register update, the bounds
    l2s_schema = (h.iot_count == 1) & ~h.has_dst[0] & h.has_src0[0] & ~h.has_src1[0] \
        & h.iot_closed & (ssize >= 1) & (ssize <= 12) & (h.pe_mask[0] == smask)
    stsize = size_code_bytes(ssize)
    compatible = ((smask & ~rec["allocation_mask"] & 0xF) == 0) & (rec["capacity"] == s["capacity"]) \
        & (rec["rows"] == s["rows"]) & (rec["cols"] == s["cols"]) \
        & (rec["valid_rows"] == s["valid_rows"]) & (rec["valid_cols"] == s["valid_cols"]) \
        & (rec["dtype"] == s["dtype"]) & (rec["layout"] == s["layout"])
    pool = shared_charge(shared) + pe_count(smask) * stsize
    if cfg.semantics == "0.58.3":
        pool = pool + core_charge(tiles)
    update_bad = ~sh.capacity_legal(stsize, state.tile_capacity) \
        | jnp.where(exists, ~compatible, pool > cap_reg)
    n_src = s["rows"].astype(jnp.int64) * s["cols"]
    l2s_bound_bad = (n_src > WS) | (~exists & ~has_free)
    new_init = rec["initialized_mask"] | smask
    prospective_bad = publish & exists & (new_init != rec["allocation_mask"])

    # 11/12: the bindings, the read schema, BROADCAST's readiness
    s2l_schema = (h.iot_count == 1) & h.has_dst[0] & ~h.has_src0[0] & ~h.has_src1[0] \
        & h.iot_closed & (ssize == 0) & (h.pe_mask[0] == smask)
    read_rows = sh.derived_rows(tsize, cols, ms_bits)
    readable = jnp.where(
        exists,
        rec_legal & (rec["capacity"] == tsize) & (rec["cols"] == cols) & (vr <= rec["valid_rows"])
        & (vc <= rec["valid_cols"]) & (rec["dtype"] == ms_dtype) & (rec["layout"] == lay),
        sh.capacity_legal(tsize, state.tile_capacity) & sh.shape_legal(tsize, cols, vr, vc, ms_bits))
    read_bad = ~s2l_schema | (ms_dtype < 0) | (vr < 1) | (vc < 1) | (cols < 1) | (vc > cols) \
        | ~readable
    ready = (smask == 0xF) & exists & (rec["allocation_mask"] == 0xF) \
        & (rec["initialized_mask"] == rec["allocation_mask"]) & rec["contents_defined"] \
        & rec["published"]

    shared_fn = l2s | s2l
    fault = settle(ordered_fault(
        ("MV.1 shared_count", local & has_ios & (h.ios_count != 1), "Fault_TileLegality"),
        ("MV.2 shared_scalar", local & has_ios & scalar_bad, "Fault_BundleControl"),
        ("MV.3 shared_path", local & has_ios, "Fault_TileLegality"),
        ("MV.4 bindings", local & mv_bindings_bad, "Fault_BundleControl"),
        ("MV.5 datr", local & datr_bad, "Fault_TileLegality"),
        ("MV.6 dtype", local & (mv_dtype < 0), "Fault_TileLegality"),
        ("MV.7 destination", local & dest_bad, "Fault_TileAllocation"),
        ("MV.8 source", local & ~s_legal, "Fault_TileLegality"),
        ("MV.9 match", local & ~mv_match, "Fault_TileLegality"),
        ("MS.1 one_shared_binding", shared_fn & (h.ios_count != 1), "Fault_TileLegality"),
        ("MS.2 scalar_schema", shared_fn & scalar_bad, "Fault_BundleControl"),
        ("MS.3 datr", shared_fn & datr_bad, "Fault_TileLegality"),
        ("MS.4 local_schema", l2s & ~l2s_schema, "Fault_TileLegality"),
        ("MS.5 local_source", l2s & (~s_legal | (s["capacity"] != stsize)), "Fault_TileLegality"),
        ("MS.6 update_compatible", l2s & update_bad, "Fault_TileLegality"),
        ("MS.7 model_bounds", l2s & l2s_bound_bad, "Fault_TileAllocation"),
        ("MS.8 prospective_init", l2s & prospective_bad, "Fault_TileLegality"),
        ("MS.9 read_schema", s2l & read_bad, "Fault_TileLegality"),
        ("MS.10 broadcast_ready", broadcast & ~ready, "Fault_TileLegality"),
        ("MS.11 destination", s2l & dest_bad, "Fault_TileAllocation"),
        ("MS.12 match", s2l & ((rows != read_rows) | (edt != ms_dtype)), "Fault_TileLegality"),
    ))
    ok = enable & (fault == 0) & ~h.zero_mask

    # ---------------- effects
    lane = tiles.lane
    src_words, src_def = payload_defined(tiles, sslot, W)
    # 11/12: every selected element of the tile's storage, from the register
    q_read = sh.quarter(lane, ms_bits, tsize)
    taken = sh.in_mask(smask, q_read) & (lane.astype(jnp.int64) < rows.astype(jnp.int64) * cols)
    read = sh.read_words(shared, i, exists, sid, lane)
    new_words = jnp.where(local, src_words, read)
    new_def = jnp.where(local, src_def, taken)
    written = local | taken
    dv = jnp.where(local, s["defined_valid"], jnp.where(smask == 0xF, vr * vc, 0))
    fields = _descriptor(edt, lay, tsize, rows, cols, vr, vc, h.mask, dv)
    do_local = ok & (local | s2l)
    tiles = install(tiles, dslot, do_local, fields, new_words, new_def, written, W)

    # 9/10: the record's fields and Words
    e = jnp.arange(WS, dtype=jnp.int32)
    L = lane.shape[0]
    pad: Callable[[jax.Array, jax.Array | bool], jax.Array] = \
        lambda a, fill: jnp.concatenate([a, jnp.full(max(WS - L, 0), fill, a.dtype)])[:WS]
    sw, sd = pad(src_words, U64(0)), pad(src_def, False)
    in_src = e.astype(jnp.int64) < n_src
    sbits = take(DT_BITS, s["dtype"])
    chosen = sh.in_mask(smask, sh.quarter(e, sbits, stsize)) & in_src & sd
    old = row(shared.words, i)
    rec_words = jnp.where(exists, jnp.where(chosen, sw, old), jnp.where(in_src, sw, U64(0)))
    init = jnp.where(exists, new_init, smask)
    alloc = jnp.where(exists, rec["allocation_mask"], smask)
    cd = jnp.where(exists, init == alloc, True)
    rec_fields = dict(sid=sid, allocation_mask=alloc, initialized_mask=init,
                      published=jnp.where(exists, rec["published"] | (publish & cd), publish),
                      contents_defined=cd, dtype=s["dtype"], layout=s["layout"],
                      capacity=stsize, rows=s["rows"], cols=s["cols"],
                      valid_rows=s["valid_rows"], valid_cols=s["valid_cols"])
    rec_fields = {name: jnp.asarray(v).astype(getattr(shared, name).dtype)
                  for name, v in rec_fields.items()}
    do_shared = ok & l2s
    i, do_shared, rec_fields = settle((i, do_shared, rec_fields))
    shared = shared.replace(**{name: getattr(shared, name).at[i].set(
        jnp.where(do_shared, v, getattr(shared, name)[i])) for name, v in rec_fields.items()})
    return Completion(fault, U64(0), state.replace(tiles=tiles, shared=shared),
                      RowWrite(i, do_shared, rec_words))


def selects(h: Header) -> jax.Array:
    """Every BSTART.TMOV block (Functions 2 and 9..12), a B.IOS or not."""
    return function(h) != 0


FAMILY = Family(families.BY_NAME["tmov"], complete, selects=selects,
                idle=lambda view: no_row_write(view.shared))
