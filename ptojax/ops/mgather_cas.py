"""BSTART.MGATHER.CAS completion: per-lane atomic compare-and-swap gather (S D).

Checks are booleans in the record's order; lanes run in the configured
order (`MachineConfig.cas_lane_order`, see ptojax.cas_order) inside one
`fori_loop`, so duplicate-address lanes see memory as earlier lanes left it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import cas_order, tables
from . import memory
from .common import (DT_BITS, DT_INT, DT_SIGNED, PAD_WORDS, U64, destination, elem_bytes,
                     ordered_fault,
                     fractal_ok, gpr_value, install, ordinary_index, ordinary_shape, ordinary_slot,
                     ordinary_source_ok, valid_lanes,
                     source, take)

LAY = tables.TILE_LAYOUT_CODE
LOC = tables.TILE_LOCATION_CODE
# B.DATR Layout -> layout of the new destination (CUBE codes never get here)
DEST_LAYOUT = np.full(32, LAY["RowMajor"], np.int32)
for _codes, _name in (((1, 18, 28), "ColumnMajor"), ((3, 8, 30), "ZN"), ((4, 9, 20), "NZ")):
    for _code in _codes:
        DEST_LAYOUT[_code] = LAY[_name]
MAX_LANES = 32768


def permuted_keys(lane, seed):
    """cas_order.lane_key on traced lane indices and a traced seed (mod 2^32)."""
    seed32 = jnp.asarray(seed).astype(jnp.int64) & 0xFFFFFFFF
    base = (seed32 * cas_order.SEED_MULTIPLIER + cas_order.KEY_OFFSET) & 0xFFFFFFFF
    return (lane.astype(jnp.int64) * cas_order.KEY_MULTIPLIER + base) & 0xFFFFFFFF


def _extend(word, bits, signed):
    """Low `bits` of a carrier, sign- or zero-extended to 64 bits."""
    b = bits.astype(U64)
    low = jnp.where(b >= 64, ~U64(0), (U64(1) << jnp.minimum(b, U64(63))) - U64(1))
    v = word & low
    neg = signed & (b < 64) & (((v >> jnp.maximum(b, U64(1)) - U64(1)) & U64(1)) == 1)
    return jnp.where(neg, v | ~low, v)


def complete(state, blk, pe, cfg, enable, cas_seed=0):
    """(fault, fault address, new state) of the MGATHER.CAS block `blk`.

    `cas_seed` (traced) seeds the "permuted" lane order; cfg.cas_seed is not
    read here, so seeds share one compiled function.
    """
    W, HS = cfg.tile_words, cfg.hand_slots
    tiles = state.tiles
    rows = jnp.arange(blk.iot.shape[0]) < blk.iot_count
    b0, b1 = blk.iot[0], blk.iot[1]
    n_dst = jnp.sum(jnp.where(rows, blk.iot[:, 0], 0))
    n_src = jnp.sum(jnp.where(rows, blk.iot[:, 4] + blk.iot[:, 5], 0))
    mask = b0[3]
    lb, lbp = blk.lb, blk.lb_present
    vc = lb[0]
    vr = jnp.where(lbp[1], lb[1], 1)
    col = jnp.where(lbp[2], lb[2], vc)
    tdt = blk.dtype
    tbits = take(DT_BITS, tdt)

    # D.4 step 3: schema (Fault_TileLegality)
    two_iot_shape = (blk.iot_count == 2) & blk.iot_closed \
        & (b0[0] == 0) & (b0[4] == 1) & (b0[5] == 1) \
        & (b1[0] == 1) & (b1[4] == 1) & (b1[5] == 0)
    schema_bad = (blk.ios_count > 0) | ~blk.ior_present | (n_dst != 1) | (n_src != 3) \
        | ~two_iot_shape | (blk.ior[0] != 0) | (blk.ior[2] != 0) | (blk.ior[3] != 0)
    dims_bad = ~lbp[0] | (lbp[0] & (lb[0] == 0)) | (lbp[1] & (lb[1] == 0)) \
        | (lbp[2] & (lb[2] == 0)) | (vc > col) | ((col & (col - 1)) != 0) | (vr * vc > MAX_LANES)
    # D.4 step 4: B.DATR fields other than PadValue/Layout (DataType raw 0, F.13)
    d = blk.datr
    datr_bad = blk.datr_present & ((d[1] != 0) | (d[3] != 0) | (d[4] != 0) | (d[5] != 0) | (d[6] != 0))

    # D.4 step 5: sources
    srcs = [source(tiles, i, HS) for i in (b0[6], b0[7], b1[6])]
    (islot, _, si, _), (eslot, _, se, _), (rslot, _, sr, _) = srcs
    src_ok = [ordinary_source_ok(s, a, df, state.tile_capacity, W) for _, a, s, df in srcs]
    shape_ok = [(s["valid_rows"] == vr) & (s["valid_cols"] == vc) for _, _, s, _ in srcs]
    src_bad = ~(src_ok[0] & src_ok[1] & src_ok[2]) | ~take(DT_INT, si["dtype"]) | (tbits == 4) \
        | (tbits == 0) | (se["dtype"] != tdt) | (sr["dtype"] != tdt) \
        | ~(shape_ok[0] & shape_ok[1] & shape_ok[2])

    # D.4 step 6: destination as C.7 step 4 with shape (VR, VC, Col)
    dslot, found, tsize, budget_ok = destination(state, b1[1], b1[2], mask, cfg)
    dshape_ok, drows = ordinary_shape(tsize, col, vr, vc, tbits, W)
    whole_ok = drows * col <= W      # the pad fill covers the whole physical region
    alloc_bad = ~found | ~budget_ok | ~dshape_ok | ~whole_ok

    # the destination layout comes from the B.DATR Layout (the model's
    # destination-layout map); D.4 step 7 re-checks the new descriptor
    dlay = take(DEST_LAYOUT, jnp.where(blk.datr_present, d[0], 0))
    recheck_bad = ~fractal_ok(dlay, drows, col, tbits)

    fault = ordered_fault((schema_bad | dims_bad | datr_bad, "Fault_TileLegality"),
                   (src_bad, "Fault_TileLegality"),
                   (alloc_bad, "Fault_TileAllocation"),
                   (recheck_bad, "Fault_TileLegality"))
    legal = fault == 0

    # D.4 step 8: lane preflight, row-major over the valid region (lane l = r*VC + c)
    j = jnp.arange(W, dtype=jnp.int32)
    r, c, lane = valid_lanes(vr, vc, W)
    order = j
    ibits = take(DT_BITS, si["dtype"])
    index = _extend(tiles.words[islot][jnp.clip(ordinary_slot(si, r, c), 0, W - 1)], ibits,
                    take(DT_SIGNED, si["dtype"]))
    expected = tiles.words[eslot][jnp.clip(ordinary_slot(se, r, c), 0, W - 1)]
    replacement = tiles.words[rslot][jnp.clip(ordinary_slot(sr, r, c), 0, W - 1)]
    base = gpr_value(state.gpr[pe], blk.ior[1])
    addr = base + index
    nbytes = elem_bytes(tbits)
    probe = memory.probe(addr, nbytes, cfg.gm_bytes)
    mfault, maddr = memory.first_fault(probe, addr, order, lane & legal)
    fault = jnp.where(legal, mfault, fault)
    fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
    ok = enable & legal & (mfault == 0)

    # D.5: lanes in the configured order, each an atomic read/compare/write;
    # the loop runs VR*VC times (under vmap: the batch's largest lane count)
    n_lanes = jnp.where(ok, vr * vc, 0)
    if cfg.cas_lane_order == "row-major":
        seq = j
    elif cfg.cas_lane_order == "reverse":
        seq = jnp.maximum(n_lanes - 1 - j, 0)
    else:
        keys = jnp.where(lane, permuted_keys(order, cas_seed), jnp.iinfo(jnp.int64).max)
        seq = jnp.lexsort((order, keys)).astype(jnp.int32)
    low = jnp.where(tbits >= 64, ~U64(0), (U64(1) << jnp.minimum(tbits, 63).astype(U64)) - U64(1))
    signed = take(DT_SIGNED, tdt)
    n = state.gm.shape[0]

    def lane_step(p, carry):
        gm, old = carry
        k = seq[p]
        a = jnp.minimum(addr[k], U64(max(n - 8, 0))).astype(jnp.int32)
        shift = ((addr[k] - a.astype(U64)) * U64(8)).astype(U64)
        win = jax.lax.dynamic_slice(gm, (a,), (min(8, n),))
        word = jax.lax.bitcast_convert_type(jnp.pad(win, (0, 8 - win.shape[0])), U64)
        value = (word >> shift) & low
        run = ok & lane[k]
        hit = run & (value == (expected[k] & low))
        new = (word & ~(low << shift)) | ((replacement[k] & low) << shift)
        new_win = jax.lax.bitcast_convert_type(jnp.where(hit, new, word), jnp.uint8)[: win.shape[0]]
        gm = jax.lax.dynamic_update_slice(gm, new_win, (a,))
        old = old.at[k].set(jnp.where(run, _extend(value, tbits, signed), old[k]))
        return gm, old

    gm, old = jax.lax.fori_loop(0, n_lanes, lane_step, (state.gm, jnp.zeros(W, U64)))

    # publication: whole physical destination padded and defined (F.5)
    padw = jnp.asarray(PAD_WORDS)[jnp.clip(tdt, 0, 31), jnp.clip(blk.datr[2], 0, 3)]
    physical = j < drows * col
    slot = jnp.where(lane, ordinary_index(dlay, drows, col, tbits, r, c), W)
    words = jnp.where(physical, padw, tiles.words[dslot]).at[slot].set(old, mode="drop")
    fields = dict(dtype=tdt, layout=dlay, location=LOC["Any"], capacity=tsize,
                  rows=drows, cols=col, valid_rows=vr, valid_cols=vc, k_repeat=0, n_repeat=0,
                  cell_count=0, storage_bytes=0, mask=mask, defined_valid=vr * vc)
    tiles = install(tiles, dslot, ok, fields, words, physical)
    return fault, fault_addr, state.replace(tiles=tiles, gm=gm)
