"""TLOAD / TSTORE completion: ordinary Local (C.7/C.8) and CUBE (C.5/C.6).

`complete(state, blk, pe, cfg, enable)` computes every check of block `blk`
as a boolean, picks the first failing one in the spec's order
(a fault code, never an exception) and applies the effects only when
`enable` holds and nothing failed. Writes touch one tile row or the GM bytes
of the valid elements, so a batch step stays O(tile + GM), not O(state).
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import tables
from . import memory
from .common import (CODE_TO_CUBE, CUBE_TILE_LAYOUT, DT_BITS, DT_CLASS, DT_SIGNED, PAD_WORDS,
                     U64, capacity_register, cube_descriptor, cube_geometry, destination,
                     elem_bytes, gpr_value, install, ordered_fault, ordinary_shape, ordinary_slot,
                     ordinary_source_ok, source, take, tile_coords, valid_lanes)

OP = tables.OP_ID
LAY = tables.TILE_LAYOUT_CODE
LOC = tables.TILE_LOCATION_CODE


def complete(state, blk, pe, cfg, enable, effects=frozenset({"TLOAD", "TSTORE"})):
    """Complete block `blk` on `state`: (fault, fault address, new state).

    `effects` (static) names the operations whose effects can occur in this
    stream; the host derives it from the words, so the effect code of an
    operation that cannot complete is not traced at all.
    """
    tiles = state.tiles
    W, HS = cfg.tile_words, cfg.hand_slots
    op = blk.op
    is_load, is_store = op == OP["TLOAD"], op == OP["TSTORE"]
    code = blk.datr[0]
    cube = blk.datr_present & (code >= 21) & (code <= 26)
    rows = jnp.arange(blk.iot.shape[0]) < blk.iot_count
    iot0 = blk.iot[0]
    n_dst = jnp.sum(jnp.where(rows, blk.iot[:, 0], 0))
    n_src = jnp.sum(jnp.where(rows, blk.iot[:, 4] + blk.iot[:, 5], 0))
    bind_mask = iot0[3]
    ior_extra = blk.ior_present & ((blk.ior[0] != 0) | (blk.ior[3] != 0))
    lb, lbp = blk.lb, blk.lb_present
    bdt = blk.dtype
    gpr = state.gpr[pe]
    base = jnp.where(blk.ior_present, gpr_value(gpr, blk.ior[1]), U64(0))
    stride_reg = gpr_value(gpr, blk.ior[2])
    datr_extra = (blk.datr[3] != 0) | (blk.datr[4] != 0) | (blk.datr[5] != 0) | (blk.datr[6] != 0)
    zero_mask = blk.zero_seen & (blk.iot_count == 0) & (blk.ios_count == 0)

    # ---------------- CUBE path (C.5 / C.6 step 3-4): Fault_TileLegality
    cube_lay = take(CODE_TO_CUBE, code)
    direction_ok = (is_load & (code <= 23)) | (is_store & (code >= 24))
    cube_bind_ok = (blk.iot_count == 1) & blk.iot_closed & jnp.where(
        is_load, (n_dst == 1) & (n_src == 0), (n_dst == 0) & (iot0[4] == 1) & (iot0[5] == 0))
    cube_schema_bad = (~lbp[0] | ~lbp[1] | (lb[0] == 0) | (lb[1] == 0) | lbp[2]
                       | (blk.datr[1] != tables.DTYPE_NONE) | datr_extra | ~direction_ok
                       | (blk.ios_count > 0) | ~cube_bind_ok | ior_extra)
    cls = take(DT_CLASS, bdt)
    cube_dtype_bad = cls < 0

    # ---------------- ordinary path (C.7 / C.8 steps 2-3)
    ord_bind_ok = blk.iot_closed & jnp.where(is_load, (n_dst == 1) & (n_src == 0),
                                             (n_dst == 0) & (n_src == 1))
    ord_bc = blk.fpatr_present | ~ord_bind_ok | ior_extra
    ord_tl = blk.datr_present & ((blk.datr[1] != 0) | (blk.datr[2] != 0) | datr_extra)
    relayout = blk.datr_present & (code != 0)

    # ---------------- TLOAD destination (both paths)
    dslot, found, tsize, budget_ok = destination(state, iot0[1], iot0[2], bind_mask, cfg)

    # CUBE destination geometry: VR = LB1, VC = LB0
    vr_c, vc_c = lb[1], lb[0]
    cr, cc, g, shape_ok = cube_geometry(cube_lay, cls, vr_c, vc_c, tsize,
                                         capacity_register(state.tile_capacity), W)

    # ordinary destination: effective dtype (F.3), dims with defaults (C.2)
    edt = jnp.where(blk.datr_present & (blk.datr[1] != tables.DTYPE_NONE), blk.datr[1], bdt)
    ebits = take(DT_BITS, edt)
    vc_o = jnp.where(lb[0] == 0, 1, lb[0])
    vr_o = jnp.where(lb[1] == 0, 1, lb[1])
    col_o = jnp.where(lb[2] == 0, vc_o, lb[2])
    ord_shape_ok, rows_o = ordinary_shape(tsize, col_o, vr_o, vc_o, ebits, W)

    load_alloc_bad = ~found | ~budget_ok | ~jnp.where(cube, shape_ok, ord_shape_ok)

    # ---------------- TSTORE source
    sslot, s_alloc, s, s_defined = source(tiles, iot0[6], HS)
    s_cube_legal, s_lay, scr, scc = cube_descriptor(s, state.tile_capacity, W)
    cube_src_bad = ~(s_alloc & s_cube_legal & s_defined & (s["dtype"] == bdt)
                     & (s_lay == cube_lay) & (s["valid_rows"] == lb[1])
                     & (s["valid_cols"] == lb[0]) & ((s["mask"] & bind_mask) == bind_mask))
    # C.8 step 4: an allocated, configured, generically indexable, fully defined source
    ord_src_bad = ~ordinary_source_ok(s, s_alloc, s_defined, state.tile_capacity, W)

    # ---------------- the ordered check list
    tl_op = is_load | is_store
    # the CUBE path decodes the block's Function as a TLSU selector: TGEMV*
    # Functions (16..22) have none (C.5 step 2)
    no_tlsu_selector = op >= OP["TGEMV"]
    fault = ordered_fault(
        (zero_mask, "Fault_None"),
        (cube & no_tlsu_selector, "Fault_IllegalInstruction"),
        # CUBE path: whatever the BSTART (C.5 "selection")
        (cube & (~tl_op | cube_schema_bad | cube_dtype_bad), "Fault_TileLegality"),
        (cube & is_load & load_alloc_bad, "Fault_TileAllocation"),
        (cube & is_store & cube_src_bad, "Fault_TileLegality"),
        # operations and forms not modelled yet
        (~cube & (~tl_op | (blk.ios_count > 0)), "Fault_Unimplemented"),
        (~cube & ord_bc, "Fault_BundleControl"),
        (~cube & ord_tl, "Fault_TileLegality"),
        (~cube & relayout, "Fault_Unimplemented"),
        (~cube & is_load & load_alloc_bad, "Fault_TileAllocation"),
        (~cube & is_store & ord_src_bad, "Fault_TileLegality"),
    )
    legal = (fault == 0) & ~zero_mask     # the zero-mask entry ends the list with no effect
    if not effects & {"TLOAD", "TSTORE"}:
        # no TLOAD/TSTORE can complete in this stream, so no block reaches the
        # memory checks: skip the element map (a matrix-only stream's cost)
        return fault, U64(0), state

    # ---------------- element map of the tile filled (TLOAD) or read (TSTORE)
    l_vr, l_vc = jnp.where(cube, vr_c, vr_o), jnp.where(cube, vc_c, vc_o)
    m_dtype = jnp.where(is_load, jnp.where(cube, bdt, edt), s["dtype"])
    bits = take(DT_BITS, m_dtype)
    # payload slot j -> (r, c) for the CUBE tiles and the RowMajor TLOAD
    # destination; an ordinary TSTORE source (any ordinary layout) is read
    # lane by lane over its valid region instead
    r, c = tile_coords(cube, jnp.where(is_load, cube_lay, s_lay), jnp.where(is_load, cr, scr),
                       jnp.where(is_load, cc, scc), bits == 4,
                       jnp.where(is_load, g["k_repeat"], s["k_repeat"]), col_o, W)
    vr = jnp.where(is_load, l_vr, s["valid_rows"])
    vc = jnp.where(is_load, l_vc, s["valid_cols"])
    cells = jnp.where(is_load, g["cell_count"], s["cell_count"])
    storage = jnp.where(cube, jnp.arange(W) < cells * cr * cc, True)
    lane_r, lane_c, lane_in = valid_lanes(vr, vc, W)
    by_lane = is_store & ~cube
    r, c = jnp.where(by_lane, lane_r, r), jnp.where(by_lane, lane_c, c)
    valid = jnp.where(by_lane, lane_in, (r < vr) & (c < vc) & storage)
    value_slot = jnp.where(by_lane, jnp.clip(ordinary_slot(s, r, c), 0, W - 1), jnp.arange(W))

    # base and row stride (C.3): dense default from the BSTART dtype
    bst_bits = take(DT_BITS, bdt)
    dense_cols = jnp.where(cube, lb[0],
                           jnp.where(is_load, col_o, jnp.where(lb[2] != 0, lb[2], s["cols"])))
    dense = ((dense_cols.astype(jnp.int64) * bst_bits + 7) // 8).astype(U64)
    stride = jnp.where(blk.ior_present, stride_reg, dense)
    four = bits == 4
    nbytes = elem_bytes(bits)
    col_off = jnp.where(four, c >> 1, c * nbytes).astype(U64)
    addr = base + r.astype(U64) * stride + col_off
    order = r * jnp.maximum(vc, 1) + c
    probe = memory.probe(addr, nbytes, cfg.gm_bytes)
    mfault, maddr = memory.first_fault(probe, addr, order, valid & legal)
    fault = jnp.where(legal, mfault, fault)
    fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
    ok = enable & legal & (mfault == 0)

    # ---------------- effects
    loaded = memory.read_elements(state.gm, addr, nbytes, (c % 2) == 1, four,
                                  take(DT_SIGNED, jnp.where(cube, bdt, edt)))
    do_load = ok & is_load
    pad = blk.datr[2]
    padw = jnp.asarray(PAD_WORDS)[jnp.clip(bdt, 0, 31), jnp.clip(pad, 0, 3)]
    old_words = tiles.words[dslot]
    pad_area = cube & storage & ~valid
    new_words = jnp.where(valid, loaded, jnp.where(pad_area, padw, old_words))
    new_def = valid | (pad_area & (pad != tables.PAD_NULL))
    vals = dict(
        dtype=jnp.where(cube, bdt, edt),
        layout=jnp.where(cube, take(CUBE_TILE_LAYOUT, cube_lay), LAY["RowMajor"]),
        location=jnp.where(cube, LOC["Matrix"], LOC["Any"]), capacity=tsize,
        rows=jnp.where(cube, g["storage_rows"], rows_o), cols=jnp.where(cube, g["storage_cols"], col_o),
        valid_rows=l_vr, valid_cols=l_vc,
        k_repeat=jnp.where(cube, g["k_repeat"], 0), n_repeat=jnp.where(cube, g["n_repeat"], 0),
        cell_count=jnp.where(cube, g["cell_count"], 0),
        storage_bytes=jnp.where(cube, g["required_bytes"], 0), mask=bind_mask,
        defined_valid=l_vr * l_vc)
    if "TLOAD" in effects:
        tiles = install(tiles, dslot, do_load, vals, new_words, new_def)
    if "TSTORE" not in effects:
        return fault, fault_addr, state.replace(tiles=tiles)

    src_words = tiles.words[sslot][value_slot]
    gm = memory.write_elements(state.gm, addr, src_words, nbytes, (c % 2) == 1, four,
                               memory.overwritten_later(r, c, vr, vc, stride, nbytes, four),
                               valid & ok & is_store)
    return fault, fault_addr, state.replace(tiles=tiles, gm=gm)
