"""TLOAD / TSTORE completion: ordinary Local (C.7/C.8) and CUBE (C.5/C.6).

`complete(state, h, pe, cfg, enable)` computes every check of the block with header `h`
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
                     elem_bytes, gpr_value, install, payload, ordered_fault, ordinary_shape, ordinary_slot,
                     ordinary_source_legal, row, settle, source, take, tile_coords, valid_lanes)
from .header import Header

OP = tables.OP_ID
LAY = tables.TILE_LAYOUT_CODE
LOC = tables.TILE_LOCATION_CODE


def tlsu_decodable(h: Header):
    """C.5 step 2: the CUBE path decodes the block's Function as a TLSU
    selector; the TGEMV* Functions (16..22) have none."""
    return h.op < OP["TGEMV"]


def cube_schema_legal(h: Header, is_load, is_store):
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


def ordinary_bindings_complete(h: Header, is_load):
    """C.7/C.8 step 2: TLOAD one destination and no source, TSTORE no destination
    and one source; terminated; no B.IOR surplus."""
    counts = jnp.where(is_load, (h.n_dst == 1) & (h.n_src == 0), (h.n_dst == 0) & (h.n_src == 1))
    return h.iot_closed & counts & ~h.ior_surplus


def ordinary_datr_legal(h: Header):
    """C.7 step 3: only Layout may be nonzero (DataType raw 0, PadValue 0)."""
    return ~h.datr_present | ((h.datr_dtype == 0) & (h.pad == 0) & ~h.conversion_attrs)


def complete(state, h: Header, pe, cfg, enable, effects=frozenset({"TLOAD", "TSTORE"})):
    """Complete the TLOAD/TSTORE block with header `h` on `state`: (fault, fault
    address, new state).

    `effects` (static) names the operations whose effects can occur in this
    stream; the host derives it from the words, so the effect code of an
    operation that cannot complete is not traced at all.
    """
    tiles = state.tiles
    W, HS = cfg.tile_words, cfg.hand_slots
    # a TLOAD (TSTORE) block reaches completion only in a stream whose effects
    # name it: elsewhere the op is known not to be one, and its checks fold away
    is_load = (h.op == OP["TLOAD"]) & ("TLOAD" in effects)
    is_store = (h.op == OP["TSTORE"]) & ("TSTORE" in effects)
    cube, code = h.cube, h.layout
    bind_mask = h.mask
    lb = h.lb
    bdt = h.dtype
    gpr = row(state.gpr, pe)
    base = jnp.where(h.ior_present, gpr_value(gpr, h.reg_src0), U64(0))
    stride_reg = gpr_value(gpr, h.reg_src1)

    # ---------------- CUBE path (C.5 / C.6): the layout and CELL class
    cube_lay = take(CODE_TO_CUBE, code)
    cls = take(DT_CLASS, bdt)

    # ---------------- TLOAD destination (both paths)
    dslot, found, tsize, budget_ok = destination(state, h.dst_hand[0], h.size_code[0], bind_mask, cfg)

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
    ord_shape_ok, rows_o = ordinary_shape(tsize, col_o, vr_o, vc_o, ebits, W)

    load_alloc_bad = ~found | ~budget_ok | ~jnp.where(cube, shape_ok, ord_shape_ok)

    # ---------------- TSTORE source
    sslot, s_alloc, s, s_defined = source(tiles, h.src0[0], HS)
    s_cube_legal, s_lay, scr, scc = cube_descriptor(s, state.tile_capacity, W)
    cube_src_bad = ~(s_alloc & s_cube_legal & s_defined & (s["dtype"] == bdt)
                     & (s_lay == cube_lay) & (s["valid_rows"] == lb[1])
                     & (s["valid_cols"] == lb[0]) & ((s["mask"] & bind_mask) == bind_mask))
    # C.8 step 4: an allocated, configured, generically indexable, fully defined source
    ord_src_bad = ~ordinary_source_legal(s, s_alloc, s_defined, state.tile_capacity, W)

    # ---------------- the ordered check list
    tl_op = is_load | is_store
    fault = settle(ordered_fault(
        (h.zero_mask, "Fault_None"),
        (cube & ~tlsu_decodable(h), "Fault_IllegalInstruction"),
        # CUBE path: whatever the BSTART (C.5 "selection")
        (cube & (~tl_op | ~cube_schema_legal(h, is_load, is_store) | (cls < 0)),
         "Fault_TileLegality"),
        (cube & is_load & load_alloc_bad, "Fault_TileAllocation"),
        (cube & is_store & cube_src_bad, "Fault_TileLegality"),
        # operations and forms not modelled yet
        (~cube & (~tl_op | (h.ios_count > 0)), "Fault_Unimplemented"),
        (~cube & (h.fpatr_present | ~ordinary_bindings_complete(h, is_load)),
         "Fault_BundleControl"),
        (~cube & ~ordinary_datr_legal(h), "Fault_TileLegality"),
        (~cube & h.datr_present & (code != 0), "Fault_Unimplemented"),   # relayouts
        (~cube & is_load & load_alloc_bad, "Fault_TileAllocation"),
        (~cube & is_store & ord_src_bad, "Fault_TileLegality"),
    ))
    legal = (fault == 0) & ~h.zero_mask     # the zero-mask entry ends the list with no effect
    if not effects & {"TLOAD", "TSTORE"}:
        # no TLOAD/TSTORE can complete in this stream, so no block reaches the
        # memory checks: skip the element map (a matrix-only stream's cost)
        return fault, U64(0), state

    # ---------------- element map of the tile filled (TLOAD) or read (TSTORE).
    # Its scalar parameters are settled first: each lane-wide kernel below
    # would otherwise re-derive them from the header on its own.
    bits = take(DT_BITS, jnp.where(is_load, jnp.where(cube, bdt, edt), s["dtype"]))
    # base and row stride (C.3): dense default from the BSTART dtype
    dense_cols = jnp.where(cube, lb[0],
                           jnp.where(is_load, col_o, jnp.where(lb[2] != 0, lb[2], s["cols"])))
    dense = ((dense_cols.astype(jnp.int64) * take(DT_BITS, bdt) + 7) >> 3).astype(U64)
    p = settle(dict(
        cube=cube, by_lane=is_store & ~cube, legal=legal, bits=bits,
        lay=jnp.where(is_load, cube_lay, s_lay), cr=jnp.where(is_load, cr, scr),
        cc=jnp.where(is_load, cc, scc), k_repeat=jnp.where(is_load, g["k_repeat"], s["k_repeat"]),
        cells=jnp.where(is_load, g["cell_count"], s["cell_count"]), col=col_o,
        vr=jnp.where(is_load, jnp.where(cube, vr_c, vr_o), s["valid_rows"]),
        vc=jnp.where(is_load, jnp.where(cube, vc_c, vc_o), s["valid_cols"]),
        src={k: s[k] for k in ("layout", "rows", "cols", "dtype")},
        base=base, stride=jnp.where(h.ior_present, stride_reg, dense)))
    vr, vc, stride, four = p["vr"], p["vc"], p["stride"], p["bits"] == 4
    # payload slot j -> (r, c) for the CUBE tiles and the RowMajor TLOAD
    # destination; an ordinary TSTORE source (any ordinary layout) is read
    # lane by lane over its valid region instead
    r, c = tile_coords(p["cube"], p["lay"], p["cr"], p["cc"], four, p["k_repeat"], p["col"], W)
    storage = jnp.where(p["cube"], jnp.arange(W) < p["cells"] * p["cr"] * p["cc"], True)
    lane_r, lane_c, lane_in = valid_lanes(vr, vc, W)
    by_lane = p["by_lane"]
    r, c = jnp.where(by_lane, lane_r, r), jnp.where(by_lane, lane_c, c)
    valid = jnp.where(by_lane, lane_in, (r < vr) & (c < vc) & storage)
    r, c, valid = settle((r, c, valid))
    value_slot = jnp.where(by_lane, jnp.clip(ordinary_slot(p["src"], r, c), 0, W - 1), jnp.arange(W))
    nbytes = elem_bytes(p["bits"])
    col_off = jnp.where(four, c >> 1, c * nbytes).astype(U64)
    addr = p["base"] + r.astype(U64) * stride + col_off
    order = r * jnp.maximum(vc, 1) + c
    probe = memory.probe(addr, nbytes, cfg.gm_bytes)
    mfault, maddr = memory.first_fault(probe, addr, order, valid & p["legal"])
    fault = jnp.where(legal, mfault, fault)
    fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
    ok = enable & legal & (mfault == 0)

    # ---------------- effects (their scalar parameters settled too)
    e = settle(dict(load=ok & is_load, store=ok & is_store, dslot=dslot, sslot=sslot,
                    pad_word=row(row(PAD_WORDS, bdt), h.pad),
                    pad_defined=h.pad != tables.PAD_NULL,
                    signed=take(DT_SIGNED, jnp.where(cube, bdt, edt))))
    loaded = memory.read_elements(state.gm, addr, nbytes, (c & 1) == 1, four, e["signed"])
    pad_area = p["cube"] & storage & ~valid
    new_words = jnp.where(valid, loaded, jnp.where(pad_area, e["pad_word"], payload(tiles, e["dslot"])))
    new_def = valid | (pad_area & e["pad_defined"])
    l_vr, l_vc = jnp.where(cube, vr_c, vr_o), jnp.where(cube, vc_c, vc_o)
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
        tiles = install(tiles, e["dslot"], e["load"], vals, new_words, new_def)
    if "TSTORE" not in effects:
        return fault, fault_addr, state.replace(tiles=tiles)

    src_words = payload(tiles, e["sslot"])[value_slot]
    gm = memory.write_elements(state.gm, addr, src_words, nbytes, (c & 1) == 1, four,
                               memory.overwritten_later(r, c, vr, vc, stride, nbytes, four),
                               valid & e["store"])
    return fault, fault_addr, state.replace(tiles=tiles, gm=gm)
