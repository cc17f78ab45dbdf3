"""TMATMUL* with Shared (B.IOS) operands: cooperative group-M execution.

Written from docs/shared-decisions.md section 5 (spec/matrix.md D, ADR 0100),
on top of matmul.py's All-Local helpers and arithmetic. `cooperative_matmul`
is one PE's completion (PE m.cur): the collective checks every PE applies
(the gate, the Shared sources, the ACC index), then, only on a PE with rows to
compute, its own Local sources, its D fragment and the arithmetic.

Shared ordinals follow B.IOS order: [A, sA,] B, sB. C, Bias and D stay Local.
semantics "adr0100": LB0 = group_M (G) in 1..128, mask 1111, PE i computes
valid_M[i] = clamp(G - i*M_per_PE, 0, M_per_PE) rows (M_per_PE = 16 when
G <= 64, else 32) from Shared A rows i*M_per_PE.. (or its own Local A), and
publishes a private fragment (mask = its own bit, charge 1 x TSize).
semantics "0.58.3": every PE computes the same G rows (rows 0.. of Shared A)
into a D with the binding mask.
"""

from __future__ import annotations

from typing import Optional

from .. import tables
from . import layouts, matmul as mm
from .machine import Block, Machine
from .shared import ALL_PES, ROW_MAJOR, cooperative_ready, ios_well_formed, read_word
from .transport import (TILE_ALLOCATION, TILE_LEGALITY, UNIMPLEMENTED, Fault,
                        binding_well_formed, budget_ok, free_slot)

E8M0 = tables.DTYPE_BY_NAME["E8M0"]


def power_of_two(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def rows_per_pe(G: int) -> int:
    """ADR 0100: M_per_PE = 16 for group_M <= 64, else 32."""
    return 16 if G <= 64 else 32


def valid_m(G: int, pe: int) -> int:
    """ADR 0100: valid_M[i] = clamp(G - i*M_per_PE, 0, M_per_PE)."""
    per = rows_per_pe(G)
    return max(0, min(G - pe * per, per))


class Groups:
    """Sizes of the Shared groups for this form and these types."""

    def __init__(self, f: mm.Form, a: tables.DataType, bt: tables.DataType, shared: int):
        self.right = 1 + int(mm.scaled(f, bt))
        self.left = 1 + int(mm.scaled(f, a))
        self.shared = shared
        self.both = shared == self.left + self.right        # Shared A[, sA], B[, sB]
        self.right_only = shared == self.right              # Local A[, sA], Shared B[, sB]

    def local_sources(self, f: mm.Form, a: tables.DataType) -> int:
        """Local mathematical sources: [C] + (right-only: A + [sA]) + [Bias]."""
        left = 0 if self.both else 1 + int(mm.scaled(f, a))
        return int(f.acc) + left + int(f.bias)


# ----------------------------------------------------------------- step 3


def gate_legal(m: Machine, f: mm.Form, b: Block, p: mm.Fpatr) -> bool:
    """Step 3, the one TileLegality gate with the Shared additions."""
    a, bt = mm.operand_types(b)
    if not mm.types_legal(f, a, bt):
        return False
    g = Groups(f, a, bt, len(b.ios))
    dims = mm.dimensions(b)
    if dims is None:
        return False
    G, N, K = dims
    # stream: Local sources, destinations, closed
    if len(mm.source_stream(b)) != g.local_sources(f, a) + mm.post_process_sources(p):
        return False
    if len(mm.destinations(b)) != 1 + int(p.row_max) + int(p.group_max) or not b.iot_closed:
        return False
    if not (mm.ior_legal(b, p) and mm.datr_legal(b)):
        return False
    # masks: one common mask over every B.IOT and B.IOS, encodable fields
    if not b.iots or not all(binding_well_formed(x) for x in b.iots) or not ios_well_formed(b):
        return False
    masks = {x.mask for x in b.iots} | {r[2] for r in b.ios}
    if len(masks) != 1:
        return False
    mask = masks.pop()
    # Shared count, source B.IOS, cooperative mask and dimensions
    if not (g.both or g.right_only):
        return False
    if any(size != 0 for _, size, _ in b.ios):
        return False
    if not (power_of_two(N) and power_of_two(K)):
        return False
    if m.semantics == "adr0100":
        return mask == ALL_PES and 1 <= G <= 128
    return power_of_two(G)


# ----------------------------------------------------------------- step 7s


def shared_source_legal(m: Machine, sid: int, vr: int, vc: int, cols: int,
                        d: tables.DataType) -> bool:
    """A Shared source: the record exists, is cooperative-matrix ready, and its
    read schema holds: exact stored columns, valid region inside the record's,
    dtype, RowMajor."""
    i = m.record_of(sid)
    if i is None or not cooperative_ready(m, i):
        return False
    r = m.shared[i]
    return (r.cols == cols and vr <= r.valid_rows and vc <= r.valid_cols
            and r.dtype == d.code and r.layout == ROW_MAJOR)


def shared_primary_legal(m: Machine, sid: int, rows: int, cols: int, d: tables.DataType,
                         transpose: bool) -> bool:
    """A or B: stored [rows, cols], or [cols, rows] with its Trans bit."""
    sr, sc = (cols, rows) if transpose else (rows, cols)
    return shared_source_legal(m, sid, sr, sc, sc, d)


def shared_sources_legal(m: Machine, f: mm.Form, b: Block, p: mm.Fpatr, g: Groups,
                         a: tables.DataType, bt: tables.DataType, dims) -> bool:
    """Step 7s, in B.IOS order: [A, sA,] B, sB (scales never transposed)."""
    G, N, K = dims
    kb = -(-K // mm.SCALE_BLOCK)
    sids = iter(r[0] for r in b.ios)
    if g.both:
        if not shared_primary_legal(m, next(sids), G, K, a, p.trans_a):
            return False
        if mm.scaled(f, a) and not shared_source_legal(m, next(sids), G, kb, kb, E8M0):
            return False
    if not shared_primary_legal(m, next(sids), K, N, bt, p.trans_b):
        return False
    if mm.scaled(f, bt) and not shared_source_legal(m, next(sids), kb, N, N, E8M0):
        return False
    return True


# ----------------------------------------------------------------- Local operands


class LocalOperands:
    """TileIndices of the Local sources, stream order C, [A, sA,] Bias."""

    def __init__(self, f: mm.Form, b: Block, g: Groups, a: tables.DataType):
        stream = iter(mm.source_stream(b))
        self.c = next(stream) if f.acc else None
        self.a = next(stream) if g.right_only else None
        self.sa = next(stream) if g.right_only and mm.scaled(f, a) else None
        self.bias = next(stream) if f.bias else None


def d_layout(m: Machine, f: mm.Form, g: Groups, ops: LocalOperands, G: int) -> Optional[str]:
    """D's layout on PE cur: right-only: its A's; both Shared + ACC: its C's;
    both Shared: adr0100 M16/M32 by M_per_PE, 0.58.3 M16/M32 by G (None above 32)."""
    if g.right_only:
        return m.tile_at(ops.a).layout_name
    if f.acc:
        return m.tile_at(ops.c).layout_name
    if m.semantics == "adr0100":
        return "CUBE_M16" if rows_per_pe(G) == 16 else "CUBE_M32"
    if G <= 16:
        return "CUBE_M16"
    return "CUBE_M32" if G <= 32 else None


def local_sources_legal(m: Machine, f: mm.Form, ops: LocalOperands, layout: Optional[str],
                        a: tables.DataType, acc: tables.DataType, M: int, N: int, K: int,
                        d_tsize: int) -> bool:
    """Step 7 on an active PE: its C, A, sA, Bias for its M rows."""
    kb = -(-K // mm.SCALE_BLOCK)
    if ops.c is not None:
        if not mm.m_layout_legal(m.tile_at(ops.c).layout_name, M):
            return False
        if not mm.primary_legal(m, ops.c, M, N, acc, layout) or m.tile_at(ops.c).capacity != d_tsize:
            return False
    if ops.a is not None:
        a_layout = m.tile_at(ops.a).layout_name
        if not mm.m_layout_legal(a_layout, M) or not mm.primary_legal(m, ops.a, M, K, a, a_layout):
            return False
    if ops.sa is not None and not mm.auxiliary_legal(m, ops.sa, M, kb, E8M0):
        return False
    if ops.bias is not None and not mm.auxiliary_legal(m, ops.bias, 1, N, acc):
        return False
    return True


# ----------------------------------------------------------------- readers


def shared_reader(m: Machine, sid: int, row0: int = 0, transpose: bool = False):
    """(row, col) -> the Word of logical (row0 + row, col) of a Shared source;
    transposed: stored[col][row0 + row]."""
    cols = m.shared[m.record_of(sid)].cols
    if transpose:
        return lambda r, c: read_word(m, sid, c * cols + row0 + r)
    return lambda r, c: read_word(m, sid, (row0 + r) * cols + c)


def readers(m: Machine, f: mm.Form, b: Block, p: mm.Fpatr, g: Groups, ops: LocalOperands,
            a: tables.DataType, bt: tables.DataType, row0: int) -> mm.Readers:
    """PE cur's operands: A rows from row0 (Shared) or its Local A; B, sB shared
    by every PE; C and Bias its own Local tiles."""
    sids = iter(r[0] for r in b.ios)
    if g.both:
        a_rd = shared_reader(m, next(sids), row0, p.trans_a)
        sa_rd = shared_reader(m, next(sids), row0) if mm.scaled(f, a) else None
    else:
        a_rd = mm.cube_reader(m, ops.a)
        sa_rd = mm.row_major_reader(m, ops.sa) if ops.sa is not None else None
    b_rd = shared_reader(m, next(sids), 0, p.trans_b)
    sb_rd = shared_reader(m, next(sids)) if mm.scaled(f, bt) else None
    return mm.Readers(a=a_rd, b=b_rd, sa=sa_rd, sb=sb_rd,
                      c=mm.cube_reader(m, ops.c) if ops.c is not None else None,
                      bias=mm.row_major_reader(m, ops.bias) if ops.bias is not None else None)


# ----------------------------------------------------------------- completion


def cooperative_matmul(m: Machine, b: Block, f: mm.Form) -> Optional[Fault]:
    """shared-decisions.md 5 for PE m.cur (steps 0 and 1 already ran)."""
    p = mm.Fpatr.of(b.fpatr)
    # 3. the gate
    if f.gemv or not gate_legal(m, f, b, p):
        return TILE_LEGALITY
    a, bt = mm.operand_types(b)
    g = Groups(f, a, bt, len(b.ios))
    G, N, K = mm.dimensions(b)
    # 5. TransA needs a Shared A (B is always Shared here)
    if p.trans_a and not g.both:
        return TILE_LEGALITY
    # 6. PreQuantMode vs the accumulator, then post-processing is not modelled
    acc = mm.accumulator_type(f, a)
    if not mm.mode_matches_accumulator(p.pre_quant, acc):
        return TILE_LEGALITY
    if mm.post_processing(p):
        return UNIMPLEMENTED
    # 7s. Shared sources, collectively
    if not shared_sources_legal(m, f, b, p, g, a, bt, (G, N, K)):
        return TILE_LEGALITY
    pe = m.cur
    if m.semantics == "adr0100":
        M, row0 = valid_m(G, pe), pe * rows_per_pe(G)
    else:
        M, row0 = G, 0
    ops = LocalOperands(f, b, g, a)
    dest = mm.destinations(b)[0]
    tsize = tables.size_code_bytes(dest.size_code)
    active = M > 0
    # 7. Local sources, only on a PE with rows to compute
    layout = d_layout(m, f, g, ops, G) if active else None
    if active and not local_sources_legal(m, f, ops, layout, a, acc, M, N, K, tsize):
        return TILE_LEGALITY
    # 8. ACC: C's raw source index against D's hand (every PE)
    if f.acc and ops.c == dest.dst_hand:
        return TILE_LEGALITY
    if not active:
        return None                 # an idle PE: no Local work, no D
    # 9. D's M layout must hold the fragment's rows
    if not mm.m_layout_legal(layout, M):
        return TILE_LEGALITY
    # 10. D in PE cur's file: slot, pool, geometry
    slot = free_slot(m, dest.dst_hand)
    if m.semantics == "adr0100":
        mask, pool_ok = tables.pe_bit(pe), budget_ok(m, dest.mask, tsize, charge_pes=1)
    else:
        mask, pool_ok = dest.mask, budget_ok(m, dest.mask, tsize)
    if slot is None or not pool_ok:
        return TILE_ALLOCATION
    if not layouts.legal(layout, acc, M, N, tsize, m.tile_capacity, m.tile_words):
        return TILE_ALLOCATION
    # 11. compute the fragment, publish it
    rd = readers(m, f, b, p, g, ops, a, bt, row0)
    result = mm.compute(m, rd, (M, N, K), a, bt, acc)
    mm.publish(m, slot, layout, acc, M, N, tsize, mask, result)
    return None
