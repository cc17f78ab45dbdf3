"""BSTART.MGATHER.CAS completion: per-lane atomic compare-and-swap gather (S D).

Checks are booleans in the record's order; lanes run in the configured
order (`MachineConfig.cas_lane_order`, see ptojax.cas_order) inside one
`fori_loop`, so duplicate-address lanes see memory as earlier lanes left it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, cast

import jax
import jax.numpy as jnp

from .. import cas_order, families, tables
from ..indexing import row
from ..state import MachineConfig, State, pool_extent
from ..storage import PeFile
from . import memory
from .common import (DEST_LAYOUT, DT_BITS, DT_INT, DT_SIGNED, PAD_WORDS, U64, carrier_elements, destination, div,
                     elem_bytes, fractal_ok, gpr_value, install, lane_count, ordered_fault,
                     ordinary_index, ordinary_shape, ordinary_source_legal, payload_word,
                     mod, source, take)
from .family import Completion, Context, Family
from .lowering import settle, trip_count
from .header import Header

LAY = tables.TILE_LAYOUT_CODE
LOC = tables.TILE_LOCATION_CODE
MAX_LANES = 32768
# common.source's (slot, allocated, descriptor fields, contents defined)
_Source = tuple[jax.Array, jax.Array, dict[str, jax.Array], jax.Array]


def permuted_keys(lane: jax.Array, seed: jax.Array | int) -> jax.Array:
    """cas_order.lane_key on traced lane indices and a traced seed (mod 2^32)."""
    seed32 = jnp.asarray(seed).astype(jnp.int64) & 0xFFFFFFFF
    base = (seed32 * cas_order.SEED_MULTIPLIER + cas_order.KEY_OFFSET) & 0xFFFFFFFF
    return (lane.astype(jnp.int64) * cas_order.KEY_MULTIPLIER + base) & 0xFFFFFFFF


def _extend(word: jax.Array, bits: jax.Array, signed: jax.Array) -> jax.Array:
    """Low `bits` of a carrier, sign- or zero-extended to 64 bits."""
    b = bits.astype(U64)
    low = jnp.where(b >= 64, ~U64(0), (U64(1) << jnp.minimum(b, U64(63))) - U64(1))
    v = word & low
    neg = signed & (b < 64) & (((v >> jnp.maximum(b, U64(1)) - U64(1)) & U64(1)) == 1)
    return jnp.where(neg, v | ~low, v)


def resolved_dimensions(h: Header) -> tuple[jax.Array, jax.Array, jax.Array]:
    """D.1: (ValidCol = LB0, ValidRow = LB1 else 1, Col = LB2 else ValidCol)."""
    vc = h.lb[0]
    return vc, jnp.where(h.lb_present[1], h.lb[1], 1), jnp.where(h.lb_present[2], h.lb[2], vc)


def dimensions_legal(h: Header) -> jax.Array:
    """D.4 step 3 dims: LB0 given, no given LB zero, ValidCol <= Col, Col a power
    of two, ValidRow * ValidCol <= PTO_MODEL_TILE_ELEMENTS."""
    vc, vr, col = resolved_dimensions(h)
    return h.lb_present[0] & ~jnp.any(h.lb_present & (h.lb == 0)) & (vc <= col) \
        & ((col & (col - 1)) == 0) & (vr * vc <= MAX_LANES)


def bindings_legal(h: Header) -> jax.Array:
    """D.4 step 3 bindings: one destination and three sources in exactly two B.IOTs
    (Index, Expected; then Replacement with the destination, L=1); B.IOR RegDst,
    RegSrc1 and RegSrc2 zero."""
    two = (h.iot_count == 2) & h.iot_closed \
        & ~h.has_dst[0] & h.has_src0[0] & h.has_src1[0] & h.has_dst[1] & h.has_src0[1] & ~h.has_src1[1]
    return (h.n_dst == 1) & (h.n_src == 3) & two \
        & (h.reg_dst == 0) & (h.reg_src1 == 0) & (h.reg_src2 == 0)


def schema_legal(h: Header) -> jax.Array:
    """D.4 step 3: no B.IOS, B.IOR present, the bindings, the dimensions."""
    return (h.ios_count == 0) & h.ior_present & bindings_legal(h) & dimensions_legal(h)


def datr_legal(h: Header) -> jax.Array:
    """D.4 step 4: only Layout and PadValue may be nonzero (DataType raw 0)."""
    return ~h.datr_present | ((h.datr_dtype == 0) & ~h.conversion_attrs)


def sources_legal(srcs: _Source, tile_capacity: jax.Array, W: int, tdt: jax.Array, vr: jax.Array,
                  vc: jax.Array) -> jax.Array:
    """D.4 step 5: Index/Expected/Replacement legal ordinary sources of VR x VC;
    Index any integer type; the transfer type not 4-bit and Expected's and
    Replacement's type."""
    _, allocated, s, defined = srcs            # each field: [Index, Expected, Replacement]
    tbits = take(DT_BITS, tdt)
    each = jax.vmap(lambda s, a, d: ordinary_source_legal(s, a, d, tile_capacity, W))(
        s, allocated, defined)
    return take(DT_INT, s["dtype"][0]) & (tbits != 4) & (tbits != 0) \
        & (s["dtype"][1] == tdt) & (s["dtype"][2] == tdt) \
        & jnp.all(each & (s["valid_rows"] == vr) & (s["valid_cols"] == vc))


def _lane_sequence(cfg: MachineConfig, W: int, n_lanes: jax.Array, cas_seed: jax.Array | int) -> jax.Array:
    """The lanes 0..W-1 in the configured order (`MachineConfig.cas_lane_order`):
    the first n_lanes entries are the region's lanes."""
    j = jnp.arange(W, dtype=jnp.int32)
    if cfg.cas_lane_order == "row-major":
        return j
    if cfg.cas_lane_order == "reverse":
        return jnp.maximum(n_lanes - 1 - j, 0)
    # ml_dtypes' iinfo (jnp.iinfo) has an unannotated __init__
    keys = jnp.where(j < n_lanes, permuted_keys(j, cas_seed),
                     jnp.iinfo(jnp.int64).max)  # type: ignore[no-untyped-call]
    return jnp.lexsort((j, keys)).astype(jnp.int32)


class _Lanes(NamedTuple):
    """What the lane loop reads: the sources' slots and descriptor fields
    (stacked: Index, Expected, Replacement), the destination's geometry."""
    slots: jax.Array
    layout: jax.Array
    rows: jax.Array
    cols: jax.Array
    bits: jax.Array
    per_word: jax.Array                 # elements a payload Word holds (common.carrier_elements)
    held: jax.Array                     # elements held: rows x cols, within the tile's pool slots
    index_signed: jax.Array
    base: jax.Array                     # GPR[RegSrc0]
    dst: tuple[jax.Array, jax.Array, jax.Array]     # destination layout, rows, cols


def _lanes(state: State, cfg: MachineConfig, tdt: jax.Array, tbits: jax.Array, legal: jax.Array,
           enable: jax.Array, vr: jax.Array, vc: jax.Array, ln: _Lanes, cas_seed: jax.Array | int,
           words: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """D.4 step 8 and D.5, one loop over the lanes in the configured order.

    Each iteration reads its lane's Index, Expected and Replacement Words
    from the sources (common.payload_word: a few scalar operations, no
    lane-wide gather, which XLA:CPU runs one index at a time), probes its
    address (keeping the first faulting lane in row-major order: D.4 step
    8), then does its atomic read/compare/write (D.5) and puts the old value,
    extended to 64 bits, at the lane's slot of the destination `words`. The
    writes run before the probes of later lanes are known: where a lane
    faults, GM is given back whole afterwards, and the destination is not
    installed (the caller's ok). Returns (GM, words, fault, fault address)."""
    W = words.shape[0]
    n_lanes = jnp.where(legal, vr * vc, 0)
    seq = _lane_sequence(cfg, W, n_lanes, cas_seed)
    low = jnp.where(tbits >= 64, ~U64(0), (U64(1) << jnp.minimum(tbits, 63).astype(U64)) - U64(1))
    signed = take(DT_SIGNED, tdt)
    nbytes = elem_bytes(tbits)
    n = state.gm.shape[0]
    tiles = cast(PeFile, state.tiles)       # PE `pe`'s storage.PeFile (dispatch._complete)
    at: Callable[..., jax.Array] = lambda lay, rows, cols, bits, r, c: ordinary_index(lay, rows, cols, bits, r, c)
    read: Callable[[jax.Array, jax.Array], jax.Array] = \
        jax.vmap(lambda slot, i: payload_word(tiles, slot, i, cfg.tile_words))
    no_fault = jnp.int32(jnp.iinfo(jnp.int32).max)  # type: ignore[no-untyped-call]  # ml_dtypes.iinfo

    def lane_step(p: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        gm, words, first, code, where = carry
        k = seq[p]
        r, c = div(k, vc), mod(k, vc)
        run = p < n_lanes
        e = jax.vmap(at, in_axes=(0, 0, 0, 0, None, None))(ln.layout, ln.rows, ln.cols, ln.bits, r, c)
        # the model reads each source's raw payload Word e (atomics.asl): of a
        # packed source, carrier e, whose low lane is element k*e (zero lanes
        # past the elements held); only the low bits are used
        first_el = e * ln.per_word
        words_e = read(ln.slots, first_el)
        index, expected, replacement = jnp.where((ln.per_word == 1) | (first_el < ln.held), words_e, U64(0))
        addr = ln.base + _extend(index, ln.bits[0], ln.index_signed)
        bad = memory.probe(addr, nbytes, cfg.gm_bytes)
        earliest = run & (bad != 0) & (k < first)
        first, code, where = (jnp.where(earliest, k, first), jnp.where(earliest, bad, code),
                              jnp.where(earliest, addr, where))
        a = jnp.minimum(addr, U64(max(n - 8, 0))).astype(jnp.int32)
        shift = ((addr - a.astype(U64)) * U64(8)).astype(U64)
        win = jax.lax.dynamic_slice(gm, (a,), (min(8, n),))
        word = jax.lax.bitcast_convert_type(jnp.pad(win, (0, 8 - win.shape[0])), U64)
        value = (word >> shift) & low
        hit = run & enable & (value == (expected & low))
        new = (word & ~(low << shift)) | ((replacement & low) << shift)
        new_win = jax.lax.bitcast_convert_type(jnp.where(hit, new, word), jnp.uint8)[: win.shape[0]]
        gm = jax.lax.dynamic_update_slice(gm, new_win, (a,))
        dslot = jnp.clip(ordinary_index(*ln.dst, tbits, r, c), 0, W - 1)
        old = jnp.where(run, _extend(value, tbits, signed), words[dslot])
        return gm, jax.lax.dynamic_update_index_in_dim(words, old, dslot, 0), first, code, where

    gm, words, _, code, where = jax.lax.fori_loop(
        0, trip_count(n_lanes), lane_step, (state.gm, words, no_fault, jnp.int32(0), U64(0)))
    # a batch where some State's lane faulted gives those States their GM back
    undo = trip_count((enable & (code != 0)).astype(jnp.int32)) > 0
    gm = jax.lax.cond(undo, lambda: jnp.where(code != 0, state.gm, gm), lambda: gm)
    return gm, words, code, where


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """The completion of the MGATHER.CAS block with header `h`.

    `ctx.cas_seed` (traced) seeds the "permuted" lane order; cfg.cas_seed is
    not read here, so seeds share one compiled function.
    """
    # the named scopes label the compiled program's kernels by phase (benchmarks/profile.py)
    with jax.named_scope("checks"):
        cas_seed = ctx.cas_seed
        W, HS = cfg.tile_words, cfg.hand_slots
        tiles = cast(PeFile, state.tiles)      # PE `pe`'s storage.PeFile (dispatch._complete)
        mask = h.mask
        vc, vr, col = resolved_dimensions(h)
        tdt = h.dtype
        tbits = take(DT_BITS, tdt)

        # D.4 step 5: sources Index, Expected (first B.IOT), Replacement (second)
        srcs = source(tiles, jnp.stack([h.src0[0], h.src1[0], h.src0[1]]), HS)

        # D.4 step 6: destination as C.7 step 4 with shape (VR, VC, Col); the pad
        # fill covers the whole physical region, so rows * Col must fit the payload
        dslot, found, tsize, budget_ok = destination(state, h.dst_hand[1], h.size_code[1], mask, cfg)
        dshape_ok, drows = ordinary_shape(tsize, col, vr, vc, tbits, W)
        destination_shape = dshape_ok & (drows * col <= W)

        # D.4 step 7: the destination layout comes from the B.DATR Layout (the
        # model's destination-layout map) and is re-checked on the new descriptor
        dlay = take(DEST_LAYOUT, jnp.where(h.datr_present, h.layout, 0))

        fault = settle(ordered_fault(
            ("CAS.3 schema", ~schema_legal(h), "Fault_TileLegality"),
            ("CAS.4 datr", ~datr_legal(h), "Fault_TileLegality"),
            ("CAS.5 sources", ~sources_legal(srcs, state.tile_capacity, W, tdt, vr, vc),
             "Fault_TileLegality"),
            ("CAS.6 destination", ~found | ~budget_ok | ~destination_shape, "Fault_TileAllocation"),
            ("CAS.7 destination_indexable", ~fractal_ok(dlay, drows, col, tbits),
             "Fault_TileLegality")))
        legal = fault == 0

    with jax.named_scope("elements"):
        slots, _, srcs_d, _ = srcs
        sbits = take(DT_BITS, srcs_d["dtype"])
        held = jnp.minimum(srcs_d["rows"] * srcs_d["cols"],
                           pool_extent(srcs_d["capacity"], srcs_d["dtype"], W, s64=tiles.words.dtype == U64))
        ln = _Lanes(slots, srcs_d["layout"], srcs_d["rows"], srcs_d["cols"], sbits,
                    carrier_elements(srcs_d["layout"], srcs_d["rows"], srcs_d["cols"], sbits), held,
                    take(DT_SIGNED, srcs_d["dtype"][0]), gpr_value(row(state.gpr, pe), h.reg_src0),
                    (dlay, drows, col))
        # publication: whole physical destination padded and defined (F.5),
        # the lanes' old values written into it by the lane loop
        padw = row(row(PAD_WORDS, tdt), h.pad)
        physical = jnp.arange(lane_count(tiles)) < drows * col
        pad = jnp.where(physical, padw, U64(0))
        gm, words, mfault, maddr = _lanes(state, cfg, tdt, tbits, legal, enable, vr, vc, ln, cas_seed, pad)
        fault = jnp.where(legal, mfault, fault)
        fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
        ok = enable & legal & (mfault == 0)

    with jax.named_scope("writes"):
        fields: dict[str, jax.Array | int] = dict(
            dtype=tdt, layout=dlay, location=LOC["Any"], capacity=tsize,
            rows=drows, cols=col, valid_rows=vr, valid_cols=vc, k_repeat=0, n_repeat=0,
            cell_count=0, storage_bytes=0, mask=mask, defined_valid=vr * vc)
        tiles = install(tiles, dslot, ok, fields, words, physical, physical, W)
    return Completion(fault, fault_addr, state.replace(tiles=tiles, gm=gm))


FAMILY = Family(families.BY_NAME["mgather_cas"], complete,
                selects=lambda h: h.op == tables.OP_ID["MGATHER.CAS"])
