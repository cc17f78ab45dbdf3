"""Shared TLOAD / TSTORE / TSTORE.SPART completion (docs/shared-decisions.md 3-4).

A TLSU block with a B.IOS moves one Shared register: a TLOAD fills the
quarters of the selected PEs, each element through the base/stride GPRs of
the PE owning its quarter; a TSTORE writes the selected quarters back to GM
(uninitialized quarters and unallocated registers give undefined-register
Words). Every check is a boolean, the first failing one is the fault, and
effects happen only when `enable` holds and nothing failed.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import jax
import jax.numpy as jnp

from .. import families, tables
from ..indexing import row
from ..state import MachineConfig, SharedTiles, State
from ..storage import PeFile
from . import memory, shared as sh
# RowWrite is the family record's (family.py); dispatch and tmov name it here
from .family import Completion, Context, Family, RowWrite as RowWrite
from .header import Header, is_tlsu
from .common import (DEST_LAYOUT, DT_BITS, DT_SIGNED, U64, capacity_register, core_charge,
                     elem_bytes, fractal_ok, gpr_value, ordered_fault, ordinary_coords,
                     ordinary_index, pe_count, shared_charge, size_code_bytes, take)
from .lowering import branch, settle, trip_count

OP = tables.OP_ID


def _last_writer(key: jax.Array, order: jax.Array, active: jax.Array) -> jax.Array:
    """Where several active lanes hit one location, True only for the last in `order`."""
    n = key.shape[0]
    # ml_dtypes' iinfo (jnp.iinfo) has an unannotated __init__
    big = jnp.iinfo(jnp.uint64).max  # type: ignore[no-untyped-call]
    k = jnp.where(active, key, U64(big))
    idx = jnp.lexsort((order, k))
    ks = k[idx]
    last_sorted = jnp.concatenate([ks[:-1] != ks[1:], jnp.array([True])])
    return jnp.zeros(n, bool).at[idx].set(last_sorted) & active


def no_row_write(shared: SharedTiles) -> RowWrite:
    WS = shared.words.shape[-1]
    return RowWrite(jnp.int32(0), jnp.bool_(False), jnp.zeros(WS, U64), jnp.zeros(WS, bool))


def merge_row_writes(a: RowWrite | None, b: RowWrite | None) -> RowWrite | None:
    """The RowWrite of two families (None: a family without one): b's where it
    writes, else a's; at most one family's enable holds for a block."""
    if a is None or b is None:
        return b if a is None else a
    return RowWrite(*(jnp.where(b.do, x, y) for x, y in zip(b, a)))


def apply_row_write(shared: SharedTiles, w: RowWrite) -> SharedTiles:
    """`shared` with the RowWrite done (in place: one row)."""
    return shared.replace(
        words=shared.words.at[w.index].set(jnp.where(w.do, w.words, shared.words[w.index])),
        defined=shared.defined.at[w.index].set(jnp.where(w.do, w.defined, shared.defined[w.index])))


class _Register(NamedTuple):
    """The Shared register the block names: its id, its record (index, whether
    it exists, a free one left, its fields) and the binding's SizeCode, element
    width and layout."""
    sid: jax.Array
    i: jax.Array
    exists: jax.Array
    has_free: jax.Array
    rec: dict[str, jax.Array]
    size: jax.Array
    bits: jax.Array
    lay: jax.Array


class _Load(NamedTuple):
    """TLOAD steps 4-7: the register's new shape and the verdicts."""
    tsz: jax.Array
    rows: jax.Array
    vr: jax.Array
    vc: jax.Array
    cols: jax.Array
    schema_bad: jax.Array
    shape_bad: jax.Array
    update_bad: jax.Array
    bound_bad: jax.Array


class _Store(NamedTuple):
    """TSTORE steps 4-5: the shape stored and the verdicts."""
    rows: jax.Array
    vr: jax.Array
    vc: jax.Array
    cols: jax.Array
    min_cap: jax.Array
    bind_bad: jax.Array
    schema_bad: jax.Array
    bound_bad: jax.Array


def _load_checks(state: State, h: Header, cfg: MachineConfig, reg: _Register, cap_reg: jax.Array) -> _Load:
    """TLOAD steps 4-7: schema, shape, a compatible update or a new record, bounds.
    A ZN/NZ shape off the fractal grid is a shape fault: the model has no index
    for it (it stops on an assertion; docs/spec-notes.md)."""
    shared, WS = state.shared, cfg.shared_words
    assert WS is not None       # MachineConfig.__post_init__ sets it
    size, rec, exists, bits, lay = reg.size, reg.rec, reg.exists, reg.bits, reg.lay
    mask, lb, lbp, edt = h.shared_mask, h.lb, h.lb_present, h.dtype
    vc_l, vr_l, cols_l = lb[0], lb[1], lb[2]
    tsz = size_code_bytes(size)
    rows_l = sh.derived_rows(tsz, cols_l, bits)
    load_schema_bad = (size == 0) | (h.iot_count != 0) | ~lbp[0] | ~lbp[1] | ~lbp[2] \
        | (vc_l < 1) | (vr_l < 1) | (cols_l < 1) | (vc_l > cols_l)
    load_shape_bad = ~sh.shape_legal(tsz, cols_l, vr_l, vc_l, bits) \
        | ~fractal_ok(lay, rows_l, cols_l, bits)
    compatible = ((mask & ~rec["allocation_mask"] & 0xF) == 0) & (rec["capacity"] == tsz) \
        & (rec["rows"] == rows_l) & (rec["cols"] == cols_l) & (rec["valid_rows"] == vr_l) \
        & (rec["valid_cols"] == vc_l) & (rec["dtype"] == edt) & (rec["layout"] == lay)
    pool = shared_charge(shared) + pe_count(mask) * tsz
    if cfg.semantics == "0.58.3":
        pool = pool + core_charge(cast(PeFile, state.tiles))     # the view's tiles (dispatch._complete)
    update_bad = ~sh.capacity_legal(tsz, state.tile_capacity) \
        | jnp.where(exists, ~compatible, pool > cap_reg)
    load_bound_bad = (rows_l.astype(jnp.int64) * cols_l > WS) | (~exists & ~reg.has_free)
    return _Load(tsz, rows_l, vr_l, vc_l, cols_l, load_schema_bad, load_shape_bad, update_bad,
                 load_bound_bad)


def _store_checks(state: State, h: Header, cfg: MachineConfig, reg: _Register, spart: jax.Array) -> _Store:
    """TSTORE steps 4-5: bindings, the shape (defaults from the record) and bounds.
    The register is read in the layout the code names: a record's own must be
    it; without a record, a temporary descriptor in it must be indexable."""
    size, rec, exists, bits, lay = reg.size, reg.rec, reg.exists, reg.bits, reg.lay
    mask, lb, lbp, edt = h.shared_mask, h.lb, h.lb_present, h.dtype
    vc_s = jnp.where(lbp[0], lb[0], jnp.where(exists, rec["valid_cols"], 1))
    vr_s = jnp.where(lbp[1], lb[1], jnp.where(exists, rec["valid_rows"], 1))
    cols_s = jnp.where(lbp[2], lb[2], jnp.where(exists, rec["cols"], vc_s))
    store_bind_bad = jnp.where(spart, False, mask != 0xF) | (size != 0) | (h.iot_count != 0)
    min_cap = sh.minimum_capacity(cols_s, vr_s, vc_s, bits)
    schema_rec = sh.descriptor_legal(rec, exists, state.tile_capacity) & (rec["cols"] == cols_s) \
        & (vr_s <= rec["valid_rows"]) & (vc_s <= rec["valid_cols"]) & (rec["dtype"] == edt) \
        & (rec["layout"] == lay)
    rows_new = sh.derived_rows(min_cap, cols_s, bits)
    schema_new = (min_cap != 0) & sh.capacity_legal(min_cap, state.tile_capacity) \
        & fractal_ok(lay, rows_new, cols_s, bits)
    store_schema_bad = (vc_s < 1) | (vr_s < 1) | (cols_s < 1) | (vc_s > cols_s) \
        | ~jnp.where(exists, schema_rec, schema_new)
    rows_s = jnp.where(exists, rec["rows"], rows_new)
    # the last valid element has the largest index of the region in every layout
    last = ordinary_index(lay, rows_s, cols_s, bits, vr_s - 1, vc_s - 1)
    assert cfg.shared_words is not None     # MachineConfig.__post_init__ sets it
    store_bound_bad = last.astype(jnp.int64) >= cfg.shared_words
    return _Store(rows_s, vr_s, vc_s, cols_s, min_cap, store_bind_bad, store_schema_bad,
                  store_bound_bad)


def _load_effect(state: State, h: Header, reg: _Register, ld: _Load, lane: jax.Array, loaded: jax.Array,
                 do_load: jax.Array) -> tuple[SharedTiles, jax.Array, RowWrite]:
    """TLOAD effect: a new record or a compatible update of the selected quarters.
    Returns (the Shared file with the record's fields, the settled record
    index, the write of its Words and definedness). The loaded elements are
    defined: a new record's others are 0 and undefined, an existing record's
    keep their Words and bits (the model loads a fresh tile, every element
    undefined, then AtomicUpdateSharedTileWithPublication: docs/shared-decisions.md 3)."""
    shared, mask, edt = state.shared, h.shared_mask, h.dtype
    i, exists, rec, lay = reg.i, reg.exists, reg.rec, reg.lay
    new_words = jnp.where(lane, loaded, jnp.where(exists, row(shared.words, i), U64(0)))
    new_def = lane | (exists & row(shared.defined, i))
    init = jnp.where(exists, rec["initialized_mask"] | mask, mask)
    alloc = jnp.where(exists, rec["allocation_mask"], mask)
    defined = init == alloc
    fields = dict(sid=reg.sid, allocation_mask=alloc, initialized_mask=init,
                  published=jnp.where(exists, rec["published"] | defined, True),
                  contents_defined=defined, dtype=edt, layout=lay, capacity=ld.tsz,
                  rows=ld.rows, cols=ld.cols, valid_rows=ld.vr, valid_cols=ld.vc)
    fields = {k: jnp.asarray(v).astype(getattr(shared, k).dtype) for k, v in fields.items()}
    i, do_load, fields = settle((i, do_load, fields))
    upd = {k: getattr(shared, k).at[i].set(jnp.where(do_load, v, getattr(shared, k)[i]))
           for k, v in fields.items()}
    return shared.replace(**upd), i, RowWrite(i, do_load, new_words, new_def)


def selects(h: Header) -> jax.Array:
    """A TLOAD/TSTORE/TSTORE.SPART block on the Shared path (shared-decisions 3):
    one with a B.IOS, and TSTORE.SPART always; CUBE codes stay on the CUBE path."""
    spart = h.op == OP["TSTORE.SPART"]
    return is_tlsu(h) & ~h.cube & ((h.ios_count > 0) | spart)


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """Complete a Shared TLSU block with header `h` (the Core's registers: `pe`
    is not read); its `write` is the RowWrite of its Words still to apply."""
    shared, WS = state.shared, cfg.shared_words
    assert WS is not None       # MachineConfig.__post_init__ sets it
    is_load = h.op == OP["TLOAD"]
    spart = h.op == OP["TSTORE.SPART"]
    sid, size, mask = h.shared_id[0], h.shared_size[0], h.shared_mask
    cap_reg = capacity_register(state.tile_capacity)

    # steps 1-3: binding count, scalar schema, B.DATR attributes
    attr_bad = h.datr_present & ((h.datr_dtype != 0) | (h.pad != 0) | h.conversion_attrs)
    # the register's layout: a relayout code's second half (GM is row-major)
    lay = take(DEST_LAYOUT, jnp.where(h.datr_present, h.layout, 0))
    edt = h.dtype            # the Shared path transfers the BSTART DataType (never B.DATR's)
    bits = take(DT_BITS, edt)

    i, exists, has_free = sh.lookup(shared, sid)
    rec = sh.record(shared, i)
    reg = _Register(sid, i, exists, has_free, rec, size, bits, lay)
    ld = _load_checks(state, h, cfg, reg, cap_reg)
    st = _store_checks(state, h, cfg, reg, spart)

    fault = settle(ordered_fault(
        ("SH3.1 one_shared_binding", h.ios_count != 1, "Fault_TileLegality"),
        ("SH3.2 scalar_schema", h.fpatr_present | h.ior_surplus, "Fault_BundleControl"),
        ("SH3.3 datr", attr_bad, "Fault_TileLegality"),
        ("SH3.4 load_bindings", is_load & ld.schema_bad, "Fault_TileLegality"),
        ("SH3.5 descriptor", is_load & ld.shape_bad, "Fault_TileLegality"),
        ("SH3.6 update_compatible", is_load & ld.update_bad, "Fault_TileLegality"),
        ("SH3.7 model_bounds", is_load & ld.bound_bad, "Fault_TileAllocation"),
        ("SH4.4 store_bindings", ~is_load & st.bind_bad, "Fault_TileLegality"),
        ("SH4.5 read_schema", ~is_load & st.schema_bad, "Fault_TileLegality"),
        ("SH4.5 model_bound", ~is_load & st.bound_bad, "Fault_TileAllocation"),
    ))
    legal = fault == 0

    # step 8 / 6: the selected quarters' elements, addressed through their PE's GPRs
    vr, vc, cols = jnp.where(is_load, ld.vr, st.vr), jnp.where(is_load, ld.vc, st.vc), \
        jnp.where(is_load, ld.cols, st.cols)
    rows = jnp.where(is_load, ld.rows, st.rows)
    capacity = jnp.where(is_load, ld.tsz, jnp.where(exists, rec["capacity"], st.min_cap))
    e = jnp.arange(WS, dtype=jnp.int32)
    r, c = ordinary_coords(lay, rows, cols, bits, WS)          # element e's (row, col)
    q = sh.quarter(e, bits, capacity)
    lane = (r < vr) & (c < vc) & sh.in_mask(mask, q)
    gpr_q = state.gpr[q]                                   # [WS, 24]: each lane's agent
    pick = jax.vmap(gpr_value, in_axes=(0, None))
    dense = ((cols.astype(jnp.int64) * bits + 7) >> 3).astype(U64)
    base = jnp.where(h.ior_present, pick(gpr_q, h.reg_src0), U64(0))
    stride = jnp.where(h.ior_present, pick(gpr_q, h.reg_src1), dense)
    four = bits == 4
    nbytes = elem_bytes(bits)
    addr = base + r.astype(U64) * stride + jnp.where(four, c >> 1, c * nbytes).astype(U64)
    order = r * jnp.maximum(vc, 1) + c
    probe = memory.probe(addr, nbytes, cfg.gm_bytes)
    mfault, maddr = memory.first_fault(probe, addr, order, lane & legal)
    fault = jnp.where(legal, mfault, fault)
    fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
    ok = enable & legal & (mfault == 0)

    loaded = memory.read_elements(state.gm, addr, nbytes, (c & 1) == 1, four, take(DT_SIGNED, edt))
    shared, i, write = _load_effect(state, h, reg, ld, lane, loaded, ok & is_load)

    # TSTORE effect: the register's Words (undefined ones included) to GM, in element order
    writes = lane & ok & ~is_load

    def store(gm: jax.Array) -> jax.Array:
        values = sh.read_words(state.shared, i, exists, sid, e)
        key = jnp.where(four, addr * U64(2) + (c & 1).astype(U64), addr)
        return memory.write_elements(gm, addr, values, nbytes, (c & 1) == 1, four,
                                     ~_last_writer(key, order, writes), writes)

    # the writers' sort and the scatter only where some State of the batch stores:
    # a Shared TLOAD writes no GM (they were two thirds of its time in a cooperative GEMM)
    stores = trip_count(jnp.any(writes).astype(jnp.int32)) > 0
    gm = jax.lax.cond(stores, branch(store), lambda gm: gm, state.gm)
    return Completion(fault, fault_addr, state.replace(shared=shared, gm=gm), write)


FAMILY = Family(families.BY_NAME["shared_transport"], complete, selects=selects,
                idle=lambda view: no_row_write(view.shared))
