"""TLOAD / TSTORE completion: ordinary Local (C.7/C.8) and CUBE (C.5/C.6).

`complete(state, h, pe, cfg, enable)` computes every check of the block with header `h`
as a boolean, picks the first failing one in the spec's order
(a fault code, never an exception) and applies the effects only when
`enable` holds and nothing failed. Writes touch one tile row or the GM bytes
of the valid elements, so a batch step stays O(tile + GM), not O(state).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import families, tables
from ..indexing import row
from ..state import MachineConfig, State
from ..storage import PeFile
from . import memory
from .common import (CODE_TO_CUBE, CUBE_TILE_LAYOUT, DEST_LAYOUT, DT_BITS, DT_CLASS, DT_SIGNED,
                     PAD_WORDS, U64, capacity_register, cube_descriptor, cube_geometry, destination,
                     elem_bytes, fractal_ok, gpr_value, install, lane_count, payload, ordered_fault,
                     ordinary_shape, ordinary_slot, ordinary_source_legal, packed_carrier,
                     source, take,
                     tile_coords, valid_lanes)
from .family import Completion, Context, Family
from .lowering import branch, once_per_batch, settle, settle_pair, trip_count
from .header import Header

OP = tables.OP_ID
LAY = tables.TILE_LAYOUT_CODE
LOC = tables.TILE_LOCATION_CODE


# C.5 step 2 per operation: a TLSU block's Function always decodes (9..12 as
# TMOV, 14 as TSTORE); another's is looked up raw in 0..8 and 13
_TLSU_DECODABLE = np.array([engine == "TLSU" or 0 <= fn <= 8 or fn == 13
                            for _, engine, fn in tables.OPS])


def tlsu_decodable(h: Header) -> jax.Array:
    """C.5 step 2: the CUBE path decodes the block's Function as a TLSU
    selector; the TGEMV* Functions (16..22) have none."""
    return take(_TLSU_DECODABLE, h.op)


def cube_schema_legal(h: Header, is_load: jax.Array, is_store: jax.Array) -> jax.Array:
    """C.5 step 3 / C.6 steps 1-4: dimensions LB0, LB1 given and nonzero, LB2
    absent; B.DATR DataType none and no conversion attributes; the direction
    matches the code; one terminated B.IOT (TLOAD: a destination; TSTORE: SrcTile0
    only), no B.IOS, no B.IOR surplus."""
    lb, lbp, code = h.lb, h.lb_present, h.layout
    direction = (is_load & (code <= 23)) | (is_store & (code >= 24))
    binding = (h.iot_count == 1) & h.iot_closed & jnp.where(
        is_load, (h.n_dst == 1) & (h.n_src == 0),
        (h.n_dst == 0) & h.has_src0[0] & ~h.has_src1[0])
    return lbp[0] & lbp[1] & (lb[0] != 0) & (lb[1] != 0) & ~lbp[2] \
        & (h.datr_dtype == tables.DTYPE_NONE) & ~h.conversion_attrs & direction \
        & (h.ios_count == 0) & binding & ~h.ior_surplus


def ordinary_bindings_complete(h: Header, is_load: jax.Array) -> jax.Array:
    """C.7/C.8 step 2: TLOAD one destination and no source, TSTORE no destination
    and one source; terminated; no B.IOR surplus."""
    counts = jnp.where(is_load, (h.n_dst == 1) & (h.n_src == 0), (h.n_dst == 0) & (h.n_src == 1))
    return h.iot_closed & counts & ~h.ior_surplus


def ordinary_datr_legal(h: Header) -> jax.Array:
    """C.7 step 3: only Layout may be nonzero (DataType raw 0, PadValue 0)."""
    return ~h.datr_present | ((h.datr_dtype == 0) & (h.pad == 0) & ~h.conversion_attrs)


class _Destination(NamedTuple):
    """The TLOAD destination of both paths: its allocation, CUBE and ordinary geometry."""
    dslot: jax.Array
    tsize: jax.Array
    cr: jax.Array                  # CUBE: CELL rows, columns and geometry
    cc: jax.Array
    g: dict[str, jax.Array]
    vr_c: jax.Array
    vc_c: jax.Array
    edt: jax.Array                 # ordinary: effective dtype, layout, dims, storage rows
    lay_o: jax.Array
    vr_o: jax.Array
    vc_o: jax.Array
    col_o: jax.Array
    rows_o: jax.Array
    alloc_bad: jax.Array


class _Source(NamedTuple):
    """The TSTORE source: its slot, descriptor and the verdicts of both paths."""
    sslot: jax.Array
    s: dict[str, jax.Array]
    s_lay: jax.Array
    scr: jax.Array
    scc: jax.Array
    cube_bad: jax.Array
    ord_bad: jax.Array


class _Lanes(NamedTuple):
    """The element map: per payload lane its (r, c), validity and GM address."""
    r: jax.Array
    c: jax.Array
    valid: jax.Array
    storage: jax.Array
    value_slot: jax.Array
    nbytes: jax.Array
    four: jax.Array
    addr: jax.Array
    fault: jax.Array                # the first faulting access of the valid lanes (A.8): code
    fault_addr: jax.Array           # and its address


class _Transfer(NamedTuple):
    """What the block moves: its direction, CUBE layout, destination and source."""
    is_load: jax.Array
    is_store: jax.Array
    cube_lay: jax.Array
    d: _Destination
    src: _Source


class _MapParams(NamedTuple):
    """The element map's scalar parameters, settled once (lowering.settle)."""
    cube: jax.Array
    by_lane: jax.Array             # an ordinary TSTORE source, read lane by lane
    legal: jax.Array
    bits: jax.Array
    lay: jax.Array                 # the CUBE tile's layout, CELL shape, K_repeat and cells
    cr: jax.Array
    cc: jax.Array
    k_repeat: jax.Array
    cells: jax.Array
    col: jax.Array                 # the ordinary TLOAD destination's geometry
    lay_o: jax.Array
    rows_o: jax.Array
    vr: jax.Array
    vc: jax.Array
    src: dict[str, jax.Array]      # the ordinary TSTORE source's layout, rows, cols, dtype
    base: jax.Array
    stride: jax.Array


class _WriteParams(NamedTuple):
    """The effects' scalar parameters, settled once."""
    load: jax.Array
    store: jax.Array
    dslot: jax.Array
    sslot: jax.Array
    pad_word: jax.Array
    pad_defined: jax.Array
    signed: jax.Array


def _tload_destination(state: State, h: Header, cfg: MachineConfig, cube_lay: jax.Array,
                       cls: jax.Array) -> _Destination:
    """TLOAD destination (both paths): the allocation, CUBE geometry (C.5) and the
    ordinary shape (C.7)."""
    W = cfg.tile_words
    cube, lb, bdt = h.cube, h.lb, h.dtype
    dslot, found, tsize, budget_ok = destination(state, h.dst_hand[0], h.size_code[0], h.mask, cfg)

    # CUBE destination geometry: VR = LB1, VC = LB0
    vr_c, vc_c = lb[1], lb[0]
    cr, cc, g, shape_ok = cube_geometry(cube_lay, cls, vr_c, vc_c, tsize,
                                         capacity_register(state.tile_capacity), W)

    # ordinary destination: effective dtype (F.3), dims with defaults (C.2)
    edt = jnp.where(h.datr_present & (h.datr_dtype != tables.DTYPE_NONE), h.datr_dtype, bdt)
    ebits = take(DT_BITS, edt)
    vc_o = jnp.where(lb[0] == 0, 1, lb[0])
    vr_o = jnp.where(lb[1] == 0, 1, lb[1])
    col_o = jnp.where(lb[2] == 0, vc_o, lb[2])
    # the layout a relayout code names for the tile (GM is read row-major)
    lay_o = take(DEST_LAYOUT, jnp.where(h.datr_present, h.layout, 0))
    ord_shape_ok, rows_o = ordinary_shape(tsize, col_o, vr_o, vc_o, ebits, cfg.max_tile_words, lay_o)

    load_alloc_bad = ~found | ~budget_ok | ~jnp.where(cube, shape_ok, ord_shape_ok)
    return _Destination(dslot, tsize, cr, cc, g, vr_c, vc_c, edt, lay_o, vr_o, vc_o, col_o,
                        rows_o, load_alloc_bad)


def _tstore_source(state: State, h: Header, cfg: MachineConfig, cube_lay: jax.Array) -> _Source:
    """TSTORE source: a CUBE tile of the block's shape and layout (C.6), or an
    ordinary one (C.8 step 4)."""
    W = cfg.tile_words
    lb, bdt, bind_mask = h.lb, h.dtype, h.mask
    # the view's tiles: a storage.PeFile
    sslot, s_alloc, s, s_defined = source(cast(PeFile, state.tiles), h.src0[0], cfg.hand_slots)
    s_cube_legal, s_lay, scr, scc = cube_descriptor(s, state.tile_capacity, W)
    cube_src_bad = ~(s_alloc & s_cube_legal & s_defined & (s["dtype"] == bdt)
                     & (s_lay == cube_lay) & (s["valid_rows"] == lb[1])
                     & (s["valid_cols"] == lb[0]) & ((s["mask"] & bind_mask) == bind_mask))
    # C.8 step 4: an allocated, configured, generically indexable, fully defined source
    ord_src_bad = ~ordinary_source_legal(s, s_alloc, s_defined, state.tile_capacity,
                                         cfg.max_tile_words)
    return _Source(sslot, s, s_lay, scr, scc, cube_src_bad, ord_src_bad)


def _check_list(h: Header, is_load: jax.Array, is_store: jax.Array, cls: jax.Array, d: _Destination,
                src: _Source) -> jax.Array:
    """The ordered check list of C.5-C.8 up to the memory checks: the settled fault code."""
    cube = h.cube
    tl_op = is_load | is_store
    return settle(ordered_fault(
        ("C5.1 zero_mask", h.zero_mask, "Fault_None"),
        ("C5.2 tlsu_decodable", cube & ~tlsu_decodable(h), "Fault_IllegalInstruction"),
        # CUBE path: whatever the BSTART (C.5 "selection")
        ("C5.3 cube_schema", cube & (~tl_op | ~cube_schema_legal(h, is_load, is_store)),
         "Fault_TileLegality"),
        ("C5.4 cube_dtype", cube & (cls < 0), "Fault_TileLegality"),
        ("C5.6 cube_destination", cube & is_load & d.alloc_bad, "Fault_TileAllocation"),
        ("C6.6 cube_source", cube & is_store & src.cube_bad, "Fault_TileLegality"),
        # operations and forms not modelled yet
        ("DSP.1 unmodelled", ~cube & (~tl_op | (h.ios_count > 0)), "Fault_Unimplemented"),
        ("C7.2 bindings", ~cube & (h.fpatr_present | ~ordinary_bindings_complete(h, is_load)),
         "Fault_BundleControl"),
        ("C7.3 datr", ~cube & ~ordinary_datr_legal(h), "Fault_TileLegality"),
        ("C7.4 destination", ~cube & is_load & d.alloc_bad, "Fault_TileAllocation"),
        # the new descriptor generically indexable: a ZN/NZ tile on the fractal grid
        ("C7.4 indexable",
         ~cube & is_load & ~fractal_ok(d.lay_o, d.rows_o, d.col_o, take(DT_BITS, d.edt)),
         "Fault_TileLegality"),
        ("C8.4 source", ~cube & is_store & src.ord_bad, "Fault_TileLegality"),
    ))


def _element_map(h: Header, W: int, gm_bytes: int, t: _Transfer, legal: jax.Array, base: jax.Array,
                 stride_reg: jax.Array, stores: bool, enable: jax.Array) -> tuple[_MapParams, _Lanes]:
    """Element map of the tile filled (TLOAD) or read (TSTORE) over W lanes
    (common.lane_count): (its settled scalar parameters, the lanes). `stores`
    (static): a TSTORE can complete here, so the ordinary source's lane-by-lane
    map is traced. Where the completion is not enabled the lanes are not read."""
    is_load, is_store, cube_lay, d, src = t
    cube, lb, bdt, s = h.cube, h.lb, h.dtype, src.s
    # Its scalar parameters are settled first: each lane-wide kernel below
    # would otherwise re-derive them from the header on its own.
    bits = take(DT_BITS, jnp.where(is_load, jnp.where(cube, bdt, d.edt), s["dtype"]))
    # base and row stride (C.3): dense default from the BSTART dtype
    dense_cols = jnp.where(cube, lb[0],
                           jnp.where(is_load, d.col_o, jnp.where(lb[2] != 0, lb[2], s["cols"])))
    dense = ((dense_cols.astype(jnp.int64) * take(DT_BITS, bdt) + 7) >> 3).astype(U64)
    p = settle(_MapParams(
        cube=cube, by_lane=is_store & ~cube, legal=legal, bits=bits,
        lay=jnp.where(is_load, cube_lay, src.s_lay), cr=jnp.where(is_load, d.cr, src.scr),
        cc=jnp.where(is_load, d.cc, src.scc),
        k_repeat=jnp.where(is_load, d.g["k_repeat"], s["k_repeat"]),
        cells=jnp.where(is_load, d.g["cell_count"], s["cell_count"]), col=d.col_o,
        lay_o=d.lay_o, rows_o=d.rows_o,
        vr=jnp.where(is_load, jnp.where(cube, d.vr_c, d.vr_o), s["valid_rows"]),
        vc=jnp.where(is_load, jnp.where(cube, d.vc_c, d.vc_o), s["valid_cols"]),
        src={k: s[k] for k in ("layout", "rows", "cols", "dtype")},
        base=base, stride=jnp.where(h.ior_present, stride_reg, dense)))
    vr, vc, stride, four = p.vr, p.vc, p.stride, p.bits == 4
    nbytes = elem_bytes(p.bits)

    # payload slot j -> (r, c) for the CUBE tiles and the RowMajor TLOAD
    # destination; an ordinary TSTORE source (any ordinary layout) is read
    # lane by lane over its valid region instead; then each lane's GM address
    # and the first faulting access (A.8, in element order)
    def lanes(cube: jax.Array, lay: jax.Array, cr: jax.Array, cc: jax.Array, four: jax.Array,
              k_repeat: jax.Array, lay_o: jax.Array, rows_o: jax.Array, col: jax.Array, bits: jax.Array,
              cells: jax.Array, vr: jax.Array, vc: jax.Array, base: jax.Array, stride: jax.Array,
              legal: jax.Array, *by_lane: jax.Array) -> tuple[jax.Array, ...]:
        r, c = tile_coords(cube, lay, cr, cc, four, k_repeat, W, (lay_o, rows_o, col, bits))
        storage = jnp.where(cube, jnp.arange(W) < cells * cr * cc, True)
        if by_lane:
            lane_r, lane_c, lane_in = valid_lanes(vr, vc, W)
            r, c = jnp.where(by_lane[0], lane_r, r), jnp.where(by_lane[0], lane_c, c)
        # the coordinates are computed once, valid from them
        r, c = settle_pair(r, c)
        valid = (r < vr) & (c < vc) & storage
        if by_lane:
            valid = jnp.where(by_lane[0], lane_in, valid)
        valid = settle(valid)
        nbytes = elem_bytes(bits)
        col_off = jnp.where(four, c >> 1, c * nbytes).astype(U64)
        addr = base + r.astype(U64) * stride + col_off
        order = r * jnp.maximum(vc, 1) + c
        probe = memory.probe(addr, nbytes, gm_bytes)
        fault, fault_addr = memory.first_fault(probe, addr, order, valid & legal)
        return r, c, valid, storage, addr, fault, fault_addr
    # once for the batch where every State has the same map (a bundle repeated)
    r, c, valid, storage, addr, fault, fault_addr = once_per_batch(
        lanes, p.cube, p.lay, p.cr, p.cc, four, p.k_repeat, p.lay_o, p.rows_o, p.col, p.bits, p.cells,
        vr, vc, p.base, stride, p.legal, *((p.by_lane,) if stores else ()), active=enable)
    value_slot = jnp.arange(W)
    if stores:
        value_slot = jnp.where(p.by_lane, jnp.clip(ordinary_slot(p.src, r, c), 0, W - 1), value_slot)
    return p, _Lanes(r, c, valid, storage, value_slot, nbytes, four, addr, fault, fault_addr)


def _effects(state: State, h: Header, tile_words: int, effects: frozenset[str], ok: jax.Array,
             t: _Transfer, p: _MapParams, lanes: _Lanes) -> tuple[PeFile, jax.Array]:
    """The TLOAD destination installed, the TSTORE elements written: (tiles, gm)."""
    is_load, is_store, cube_lay, d, src = t
    tiles = cast(PeFile, state.tiles)      # the view's: a storage.PeFile
    cube, bdt, edt = h.cube, h.dtype, d.edt
    r, c, valid, four, nbytes = lanes.r, lanes.c, lanes.valid, lanes.four, lanes.nbytes
    # their scalar parameters settled too
    e = settle(_WriteParams(load=ok & is_load, store=ok & is_store, dslot=d.dslot, sslot=src.sslot,
                            pad_word=row(row(PAD_WORDS, bdt), h.pad),
                            pad_defined=h.pad != tables.PAD_NULL,
                            signed=take(DT_SIGNED, jnp.where(cube, bdt, edt))
                            & (cube | ~packed_carrier(d.rows_o, d.col_o))))
    loaded = memory.read_elements(state.gm, lanes.addr, nbytes, (c & 1) == 1, four, e.signed)
    pad_area = p.cube & lanes.storage & ~valid
    new_words = jnp.where(valid, loaded, e.pad_word)        # the other Words stay stale
    new_def = valid | (pad_area & e.pad_defined)
    g = d.g
    l_vr, l_vc = jnp.where(cube, d.vr_c, d.vr_o), jnp.where(cube, d.vc_c, d.vc_o)
    vals = dict(
        dtype=jnp.where(cube, bdt, edt),
        layout=jnp.where(cube, take(CUBE_TILE_LAYOUT, cube_lay), d.lay_o),
        location=jnp.where(cube, LOC["Matrix"], LOC["Any"]), capacity=d.tsize,
        rows=jnp.where(cube, g["storage_rows"], d.rows_o), cols=jnp.where(cube, g["storage_cols"], d.col_o),
        valid_rows=l_vr, valid_cols=l_vc,
        k_repeat=jnp.where(cube, g["k_repeat"], 0), n_repeat=jnp.where(cube, g["n_repeat"], 0),
        cell_count=jnp.where(cube, g["cell_count"], 0),
        storage_bytes=jnp.where(cube, g["required_bytes"], 0), mask=h.mask,
        defined_valid=l_vr * l_vc)
    if "TLOAD" in effects:
        tiles = install(tiles, e.dslot, e.load, vals, new_words, new_def, valid | pad_area,
                        tile_words)
    if "TSTORE" not in effects:
        return tiles, state.gm

    def store(gm: jax.Array) -> jax.Array:
        src_words = payload(tiles, e.sslot, tile_words)[lanes.value_slot]
        return memory.write_elements(gm, lanes.addr, src_words, nbytes, (c & 1) == 1, four,
                                     memory.overwritten_later(r, c, p.vr, p.vc, p.stride,
                                                              nbytes, four),
                                     valid & e.store)

    # the GM write (a scatter of every lane's bytes) runs only where some State
    # stores: a batch of TLOADs in a program that can also store pays nothing
    stores = trip_count(e.store.astype(jnp.int32)) > 0
    return tiles, jax.lax.cond(stores, branch(store), lambda gm: gm, state.gm)


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """Complete the TLOAD/TSTORE block with header `h` on `state`.

    `ctx.effects` (static) names the operations whose effects can occur in
    this stream; the host derives it from the words, so the effect code of an
    operation that cannot complete is not traced at all.
    """
    effects = ctx.effects
    # a TLOAD (TSTORE) block reaches completion only in a stream whose effects
    # name it: elsewhere the op is known not to be one, and its checks fold away
    is_load = (h.op == OP["TLOAD"]) & ("TLOAD" in effects)
    is_store = (h.op == OP["TSTORE"]) & ("TSTORE" in effects)
    # the named scopes label the compiled program's kernels by phase (benchmarks/profile.py)
    with jax.named_scope("checks"):
        gpr = row(state.gpr, pe)
        base = jnp.where(h.ior_present, gpr_value(gpr, h.reg_src0), U64(0))
        stride_reg = gpr_value(gpr, h.reg_src1)

        # ---------------- CUBE path (C.5 / C.6): the layout and CELL class
        cube_lay = take(CODE_TO_CUBE, h.layout)
        cls = take(DT_CLASS, h.dtype)
        d = _tload_destination(state, h, cfg, cube_lay, cls)
        src = _tstore_source(state, h, cfg, cube_lay)

        fault = _check_list(h, is_load, is_store, cls, d, src)
        legal = (fault == 0) & ~h.zero_mask     # the zero-mask entry ends the list with no effect
    if not effects & {"TLOAD", "TSTORE"}:
        # no TLOAD/TSTORE can complete in this stream, so no block reaches the
        # memory checks: skip the element map (a matrix-only stream's cost)
        return Completion(fault, U64(0), state)

    with jax.named_scope("elements"):
        t = _Transfer(is_load, is_store, cube_lay, d, src)
        p, lanes = _element_map(h, lane_count(cast(PeFile, state.tiles)), cfg.gm_bytes, t, legal, base,
                                stride_reg, "TSTORE" in effects, enable)
        mfault, maddr = lanes.fault, lanes.fault_addr
        fault = jnp.where(legal, mfault, fault)
        fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
        ok = enable & legal & (mfault == 0)

    with jax.named_scope("writes"):
        tiles, gm = _effects(state, h, cfg.tile_words, effects, ok, t, p, lanes)
    return Completion(fault, fault_addr, state.replace(tiles=tiles, gm=gm))


FAMILY = Family(families.BY_NAME["transport"], complete)
