"""BSTART.MGATHER.CAS completion of the reference model (state-and-transport.md D).

`mgather_cas(m, b, pe)` runs the ordered checks of D.4 and, when they pass,
the per-lane compare-and-swap of D.5. Like transport.py it returns None or a
Fault and installs nothing before the last check passed, so a fault leaves
tiles and GM untouched (the rollback of D.4 steps 7-8 is implicit).

The order in which lanes execute is MachineConfig.cas_lane_order
(ptojax/cas_order.py); only duplicate-address lanes can observe it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

from .. import families, tables
from ..cas_order import lane_order
from . import layouts
from .carriers import raw_slot
# the trace's records (cas_trace.py, which state.py names too); cas_check names them here
from .cas_trace import CasRecord as CasRecord, Lane as Lane
from .family import Family
from .state import MASK64, Block, Machine, Tile
from .transport import (DESTINATION_LAYOUT, TILE_ALLOCATION, TILE_LEGALITY, Fault, allocate,
                        binding_well_formed, budget_ok, derived_rows, free_slot,
                        generic_indexable, gpr, linear_index, load_element,
                        ordinary_source_legal, probe, store_element)


# ----------------------------------------------------------------- D.4 step 3


def dimensions_legal(b: Block) -> bool:
    """D.4 step 3 dims (the model's BundleMGATHERDimensionsLegal): LB0 present;
    every present LB in 1..65535; ValidCol <= Col; Col a power of two;
    ValidRow*ValidCol <= PTO_MODEL_TILE_ELEMENTS."""
    if not b.lb_present[0]:
        return False
    if any(p and not 1 <= v <= 65535 for v, p in zip(b.lb, b.lb_present)):
        return False
    vc, vr, cols = resolved_dimensions(b)
    return vc <= cols and cols & (cols - 1) == 0 and vr * vc <= layouts.MODEL_TILE_ELEMENTS


def resolved_dimensions(b: Block) -> tuple[int, int, int]:
    """D.1: (ValidCol = LB0, ValidRow = LB1 else 1, Col = LB2 else ValidCol)."""
    vc = b.lb[0]
    vr = b.lb[1] if b.lb_present[1] else 1
    cols = b.lb[2] if b.lb_present[2] else vc
    return vc, vr, cols


def bindings_legal(b: Block) -> bool:
    """D.4 step 3 bindings: 1 destination and 3 sources, stream closed by L=1,
    B.IOR RegSrc1/RegSrc2/RegDst zero (only the base is consumed), and the
    exact two-B.IOT shape of D.1: (Index, Expected; no destination, SizeCode 0,
    L=0) then (Replacement; destination; L=1)."""
    dests = sum(1 for x in b.iots if x.dst_valid)
    srcs = sum(int(x.src0_valid) + int(x.src1_valid) for x in b.iots)
    if (dests, srcs) != (1, 3) or not b.iot_closed:
        return False
    if b.ior[0] != 0 or b.ior[2] != 0 or b.ior[3] != 0:
        return False
    if len(b.iots) != 2 or not all(binding_well_formed(x) for x in b.iots):
        return False
    first, second = b.iots
    return (not first.dst_valid and first.src0_valid and first.src1_valid and not first.last
            and first.size_code == 0
            and second.dst_valid and second.src0_valid and not second.src1_valid and second.last)


def schema_legal(b: Block) -> bool:
    """D.4 step 3: no B.IOS, B.IOR present, bindings, equal masks, dimensions."""
    if b.ios or not b.ior_present or b.fpatr_present:
        return False
    if not bindings_legal(b):
        return False
    if len({x.mask for x in b.iots}) != 1:
        return False
    return dimensions_legal(b)


# ----------------------------------------------------------------- D.4 step 4


def datr_legal(b: Block) -> bool:
    """D.4 step 4 / encoding.md 4.3: only Layout and PadValue may be nonzero
    (the raw DataType field included: the op always uses the BSTART type)."""
    if not b.datr_present:
        return True
    _layout, dtype, _pad, cmode, rmode, sat, canon = b.datr
    return not (dtype or cmode or rmode or sat or canon)


# ----------------------------------------------------------------- D.4 step 5


def sources_legal(m: Machine, b: Block, d: tables.DataType, vr: int, vc: int) -> bool:
    """D.4 step 5: Index/Expected/Replacement allocated, generically indexable
    and fully defined; index dtype any integer (F.4); transfer dtype not 4-bit;
    Expected and Replacement of the transfer dtype; all three valid VR x VC."""
    first, second = b.iots
    index, expected, replacement = (m.tile_at(first.src0), m.tile_at(first.src1),
                                    m.tile_at(second.src0))
    for src in (first.src0, first.src1, second.src0):
        if m.slot_of(src) is None or not ordinary_source_legal(m, m.tile_at(src)):
            return False
    if not tables.DTYPE_BY_CODE[index.dtype].is_integer:
        return False
    if d.bits == 4:
        return False                       # no nibble selector (D.2)
    if expected.dtype != d.code or replacement.dtype != d.code:
        return False
    return all((t.valid_rows, t.valid_cols) == (vr, vc) for t in (index, expected, replacement))


# ----------------------------------------------------------------- D.4 steps 6-7


def destination_shape(m: Machine, tsize: int, vr: int, vc: int, cols: int,
                      d: tables.DataType) -> int:
    """D.4 step 6 shape (C.7 step 4 with the explicit shape): derived rows, or 0
    when illegal (rows not derivable, VR > rows, VC > Col, VR*VC over the
    capacity). The whole physical region is written (pad fill), so rows*Col
    must also fit the model's payload bound (tile_words)."""
    rows = derived_rows(tsize, cols, d)
    if rows == 0 or vr > rows or vc > cols or vr * vc > tsize * 8 // d.bits:
        return 0
    if rows * cols > m.tile_words:
        return 0
    return rows


# ----------------------------------------------------------------- D.3 / D.4 step 8


def displacement(word: int, index_dtype: tables.DataType) -> int:
    """D.3: the index element's low `bits` bits, sign-extended (signed dtype)
    or zero-extended (unsigned) to 64 bits; a byte count, never scaled."""
    bits = index_dtype.bits
    v = word & ((1 << bits) - 1)
    if index_dtype.signed and v >> (bits - 1):
        v -= 1 << bits
    return v & MASK64


def lanes_of(m: Machine, b: Block, base: int, vr: int, vc: int, dest_layout: str, rows: int,
             cols: int, d: tables.DataType) -> list[Lane]:
    """D.3/D.5: one Lane per valid (r, c), row-major."""
    first, second = b.iots
    slots = [m.slot_of(i) for i in (first.src0, first.src1, second.src0)]
    tiles = [m.tile_at(i) for i in (first.src0, first.src1, second.src0)]
    words = [m.payload(cast(int, s))[0] for s in slots]       # materialized (sources_legal)
    dtypes = [tables.DTYPE_BY_CODE[t.dtype] for t in tiles]
    mask = (1 << d.bits) - 1
    dest = _layout_probe(dest_layout, rows, cols, d)
    out = []
    for r in range(vr):
        for c in range(vc):
            # legal sources and destination are generically indexable: every index is an int
            # the model reads each source's raw payload Word at the lane's index (atomics.asl):
            # a packed source's carrier (carriers.raw_slot)
            idx, exp, rep = (raw_slot(w, cast(str, t.layout_name), dt, t.rows, t.cols,
                                      cast(int, linear_index(t, dt, r, c)))
                             for w, t, dt in zip(words, tiles, dtypes))
            out.append(Lane(lane=r * vc + c,
                            address=(base + displacement(idx, dtypes[0])) & MASK64,
                            expected=exp & mask, replacement=rep & mask,
                            slot_word=cast(int, linear_index(dest, d, r, c))))
    return out


def _layout_probe(layout: str, rows: int, cols: int, d: tables.DataType) -> Tile:
    """A descriptor stand-in for linear_index over the destination."""
    return Tile(allocated=True, dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout],
                rows=rows, cols=cols)


def lane_preflight(m: Machine, lanes: Sequence[Lane], d: tables.DataType) -> Optional[Fault]:
    """D.4 step 8: row-major over the lanes, probe the read then the write of
    each lane (A.8: alignment, then range); the first failure is the fault."""
    size = d.element_bytes
    for lane in lanes:
        for _access in ("read", "write"):
            f = probe(len(m.gm), lane.address, size)
            if f is not None:
                return f
    return None


# ----------------------------------------------------------------- D.5


def execution_order(m: Machine, n: int) -> list[int]:
    """D.5 lane order: forced by the checker, else MachineConfig.cas_lane_order."""
    if m.cas_forced_order is not None:
        order = [int(i) for i in m.cas_forced_order]
        if sorted(order) != list(range(n)):
            raise ValueError(f"forced MGATHER.CAS order {order} is not a permutation of 0..{n - 1}")
        return order
    return lane_order(n, m.cas_lane_order, m.cas_seed)


def compare_and_swap(m: Machine, lane: Lane, d: tables.DataType, words: list[int]) -> None:
    """D.5, one lane, atomically: read the old element; its carrier (S8/S16/S32
    sign-extended, A.4) goes to the lane's destination Word; raw low-bit
    equality with Expected stores Replacement's low element bytes."""
    n = d.element_bytes
    old_raw = int.from_bytes(m.gm[lane.address:lane.address + n], "little")
    words[lane.slot_word] = load_element(m.gm, lane.address, 0, d)
    if old_raw == lane.expected:
        store_element(m.gm, lane.address, 0, d, lane.replacement)


# ----------------------------------------------------------------- completion


def mgather_cas(m: Machine, b: Block, pe: int) -> Optional[Fault]:
    """D.4 ordered checks, then D.5. (Step 1, the zero-mask no-op, and the
    CUBE-Layout dispatch run before this in run.tile_operation; step 2, the
    selector, always decodes for Function 8.)"""
    # CAS.3 schema: schema, bindings, B.IOR, masks, dimensions
    if not schema_legal(b):
        return TILE_LEGALITY
    # CAS.4 datr: B.DATR applicability
    if not datr_legal(b):
        return TILE_LEGALITY
    # CAS.5 sources: sources and types
    d = tables.DTYPE_BY_CODE.get(b.dtype)
    if d is None:
        return TILE_LEGALITY
    vc, vr, cols = resolved_dimensions(b)
    if not sources_legal(m, b, d, vr, vc):
        return TILE_LEGALITY
    # CAS.6 destination: free slot, Core budget, shape -> Fault_TileAllocation
    bind = b.iots[1]
    tsize = tables.size_code_bytes(bind.size_code)
    slot = free_slot(m, bind.dst_hand)
    if slot is None or not budget_ok(m, bind.mask, tsize):
        return TILE_ALLOCATION
    rows = destination_shape(m, tsize, vr, vc, cols, d)
    if rows == 0:
        return TILE_ALLOCATION
    # CAS.7 destination_indexable: layout from B.DATR, location Any -> rollback + TileLegality
    layout = DESTINATION_LAYOUT.get(b.datr[0] if b.datr_present else 0)
    if layout is None or not generic_indexable(layout, rows, cols, d):
        return TILE_LEGALITY
    # 8. lane preflight (base: the current PE's GPR[RegSrc0]) -> memory fault + rollback
    base = gpr(m, pe, b.ior[1])
    lanes = lanes_of(m, b, base, vr, vc, layout, rows, cols, d)
    f = lane_preflight(m, lanes, d)
    if f is not None:
        return f
    order = execution_order(m, len(lanes))
    # D.5: allocate, pad the whole physical region, run the lanes, publish
    allocate(m, slot, dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout],
             location=tables.TILE_LOCATION_CODE["Any"], capacity=tsize, rows=rows, cols=cols,
             valid_rows=vr, valid_cols=vc, mask=bind.mask & 0xF, defined_valid=vr * vc)
    words, defined = m.payload(slot)
    pad = b.datr[2] if b.datr_present else tables.PAD_NULL
    pad_word = tables.pad_word(d, pad)
    # the linear indices of all physical (r, c) of a legal RowMajor/ColumnMajor/
    # ZN/NZ tile are exactly 0..rows*Col-1; all defined, Null padding included (F.5)
    for i in range(rows * cols):
        words[i] = pad_word
        defined[i] = True
    gm_before = bytes(m.gm) if m.cas_trace is not None else b""
    for i in order:
        compare_and_swap(m, lanes[i], d, words)
    if m.cas_trace is not None:
        m.cas_trace.append(CasRecord(slot=slot, tile_index=_tile_index(m, slot), dtype=d,
                                     lanes=lanes, order=order, gm_before=gm_before,
                                     gm_after=bytes(m.gm), pe=m.cur))
    return None


def _tile_index(m: Machine, slot: int) -> int:
    hand, k = divmod(slot, m.hand_slots)
    return hand * tables.HAND_SLOTS + k


FAMILY = Family(families.BY_NAME["mgather_cas"], lambda m, b, op, pe: mgather_cas(m, b, pe),
                lambda b, op: op[0] == "MGATHER.CAS")
