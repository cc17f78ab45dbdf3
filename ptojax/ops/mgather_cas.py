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
from ..state import MachineConfig, State
from ..storage import PeFile
from . import memory
from .common import (DEST_LAYOUT, DT_BITS, DT_INT, DT_SIGNED, PAD_WORDS, U64, destination, div,
                     elem_bytes, fractal_ok, gpr_value, install, lane_count, ordered_fault,
                     ordinary_index, ordinary_shape, ordinary_source_legal, payload,
                     mod, source, take, valid_lanes)
from .family import Completion, Context, Family
from .lowering import batch_all, once_per_batch, settle, trip_count
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


class _Lanes(NamedTuple):
    """D.4 step 8: the lanes, row-major over the valid region (lane l = r*VC + c)."""
    j: jax.Array                    # payload slot / lane number
    lane: jax.Array                 # inside the valid region
    order: jax.Array
    expected: jax.Array
    replacement: jax.Array
    addr: jax.Array


def _slots(W: int, vr: jax.Array, vc: jax.Array, layout: jax.Array, rows: jax.Array, cols: jax.Array,
           bits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(lane, [W, tiles]: each lane's payload slot in each tile of these
    stacked fields, W where no lane)."""
    r, c, lane = valid_lanes(vr, vc, W)
    index: Callable[..., jax.Array] = lambda lay, rows, cols, bits: ordinary_index(lay, rows, cols, bits, r, c)
    return lane, jnp.where(lane[:, None], jax.vmap(index)(layout, rows, cols, bits).T, W)


def _lane_operands(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, vr: jax.Array, vc: jax.Array,
                   srcs: _Source, enable: jax.Array) -> _Lanes:
    """D.4 step 8 (lane preflight): each lane's Index, Expected and Replacement
    elements and its GM address (base GPR + Index).

    Where every lane's Word sits at its lane number in the three sources
    (`direct`: a row-major tile whose Col is ValidCol, the common case), the
    payloads are the operands as they stand; else each is a
    gather, which XLA:CPU runs one index at a time (a third of a batched
    MGATHER.CAS's kernel time, benchmarks/profile.py). The choice is
    batch-uniform, and the test runs once for a batch whose enabled States
    share the dozen scalars it reads (lowering.once_per_batch)."""
    # the view's tiles: PE `pe`'s storage.PeFile (dispatch._complete)
    W, tiles = lane_count(cast(PeFile, state.tiles)), cast(PeFile, state.tiles)
    slots, _, s, _ = srcs                  # each field: [Index, Expected, Replacement]
    fields = (s["layout"], s["rows"], s["cols"], take(DT_BITS, s["dtype"]))
    j = jnp.arange(W, dtype=jnp.int32)

    def lane_map(vr: jax.Array, vc: jax.Array, *fields: jax.Array) -> tuple[jax.Array, jax.Array]:
        lane, at = _slots(W, vr, vc, *fields)
        return lane, jnp.all(at == jnp.where(lane, j, W)[:, None])

    lane, direct = once_per_batch(lane_map, vr, vc, *fields, active=enable)
    direct = batch_all(direct)
    words = [payload(tiles, slots[k], cfg.tile_words) for k in range(3)]

    def gather(ws: list[jax.Array]) -> list[jax.Array]:
        at = jnp.clip(_slots(W, vr, vc, *fields)[1], 0, W - 1)
        return [w[at[:, k]] for k, w in enumerate(ws)]
    index, expected, replacement = jax.lax.cond(direct, list, gather, words)
    index = _extend(index, take(DT_BITS, s["dtype"][0]), take(DT_SIGNED, s["dtype"][0]))
    base = gpr_value(row(state.gpr, pe), h.reg_src0)
    return _Lanes(j, lane, j, expected, replacement, base + index)


def _lane_sequence(cfg: MachineConfig, ln: _Lanes, n_lanes: jax.Array, cas_seed: jax.Array | int) -> jax.Array:
    """The lanes in the configured order (`MachineConfig.cas_lane_order`)."""
    if cfg.cas_lane_order == "row-major":
        return ln.j
    if cfg.cas_lane_order == "reverse":
        return jnp.maximum(n_lanes - 1 - ln.j, 0)
    # ml_dtypes' iinfo (jnp.iinfo) has an unannotated __init__
    keys = jnp.where(ln.lane, permuted_keys(ln.order, cas_seed),
                     jnp.iinfo(jnp.int64).max)  # type: ignore[no-untyped-call]
    return jnp.lexsort((ln.order, keys)).astype(jnp.int32)


def _atomic_lanes(state: State, cfg: MachineConfig, tdt: jax.Array, tbits: jax.Array, ok: jax.Array,
                  vr: jax.Array, vc: jax.Array, ln: _Lanes, cas_seed: jax.Array | int,
                  words: jax.Array, dst: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """D.5: lanes in the configured order, each an atomic read/compare/write:
    (new GM, `words` with each lane's old value, extended to 64 bits, at its
    slot of the destination (layout, rows, cols `dst`)). The slot is a few
    scalar operations an iteration: no lane-wide array of old values or
    destination slots is built and scattered afterwards."""
    W = ln.j.shape[0]
    addr, lane, expected, replacement = ln.addr, ln.lane, ln.expected, ln.replacement
    # the loop runs VR*VC times (under vmap: the batch's largest lane count)
    n_lanes = jnp.where(ok, vr * vc, 0)
    seq = _lane_sequence(cfg, ln, n_lanes, cas_seed)
    low = jnp.where(tbits >= 64, ~U64(0), (U64(1) << jnp.minimum(tbits, 63).astype(U64)) - U64(1))
    signed = take(DT_SIGNED, tdt)
    n = state.gm.shape[0]

    def lane_step(p: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        gm, words = carry
        k = seq[p]
        a = jnp.minimum(addr[k], U64(max(n - 8, 0))).astype(jnp.int32)
        shift = ((addr[k] - a.astype(U64)) * U64(8)).astype(U64)
        win = jax.lax.dynamic_slice(gm, (a,), (min(8, n),))
        word = jax.lax.bitcast_convert_type(jnp.pad(win, (0, 8 - win.shape[0])), U64)
        value = (word >> shift) & low
        run = ok & lane[k] & (p < n_lanes)
        hit = run & (value == (expected[k] & low))
        new = (word & ~(low << shift)) | ((replacement[k] & low) << shift)
        new_win = jax.lax.bitcast_convert_type(jnp.where(hit, new, word), jnp.uint8)[: win.shape[0]]
        gm = jax.lax.dynamic_update_slice(gm, new_win, (a,))
        slot = jnp.clip(ordinary_index(*dst, tbits, div(k, vc), mod(k, vc)), 0, W - 1)
        old = jnp.where(run, _extend(value, tbits, signed), words[slot])
        return gm, jax.lax.dynamic_update_index_in_dim(words, old, slot, 0)

    # jax.lax.fori_loop returns Any: its result is lane_step's carry
    return cast(tuple[jax.Array, jax.Array],
                jax.lax.fori_loop(0, trip_count(n_lanes), lane_step, (state.gm, words)))


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
        ln = _lane_operands(state, h, pe, cfg, vr, vc, srcs, enable)
        nbytes = elem_bytes(tbits)
        probe = memory.probe(ln.addr, nbytes, cfg.gm_bytes)
        mfault, maddr = memory.first_fault(probe, ln.addr, ln.order, ln.lane & legal)
        fault = jnp.where(legal, mfault, fault)
        fault_addr = jnp.where(legal & (mfault != 0), maddr, U64(0))
        ok = enable & legal & (mfault == 0)

        # publication: whole physical destination padded and defined (F.5),
        # the lanes' old values written into it by the lane loop
        padw = row(row(PAD_WORDS, tdt), h.pad)
        physical = ln.j < drows * col
        pad = jnp.where(physical, padw, U64(0))
        gm, words = _atomic_lanes(state, cfg, tdt, tbits, ok, vr, vc, ln, cas_seed, pad, (dlay, drows, col))

    with jax.named_scope("writes"):
        fields: dict[str, jax.Array | int] = dict(
            dtype=tdt, layout=dlay, location=LOC["Any"], capacity=tsize,
            rows=drows, cols=col, valid_rows=vr, valid_cols=vc, k_repeat=0, n_repeat=0,
            cell_count=0, storage_bytes=0, mask=mask, defined_valid=vr * vc)
        tiles = install(tiles, dslot, ok, fields, words, physical, physical, W)
    return Completion(fault, fault_addr, state.replace(tiles=tiles, gm=gm))


FAMILY = Family(families.BY_NAME["mgather_cas"], complete,
                selects=lambda h: h.op == tables.OP_ID["MGATHER.CAS"])
