"""The cooperative bundle sequence of `pj.golden.gemm(..., core=True)`: one
product of group_M rows on the Core's four PEs (ADR 0100's cooperative
TMATMUL, docs/shared-decisions.md sections 3 and 5).

For a group of G = group_M rows (1..128), N columns and K deep (N, K and the
Shared registers' columns powers of two, the Shared paths' rule):

1. Shared TLOADs (mask 1111) of A [G, K] into S0 and B [K, N] into S2 (MX:
   sA [G, Kb] into S1, sB [Kb, N] into S3); each PE fills its own quarter
   through its own GPRs, which all hold the same base and stride;
2. on each active PE p (valid_M[p] > 0), Local TLOADs with PE p's mask bit
   alone of its rows of C (in D's layout) and of the row-cut post-process
   source RowMaxIn, and of the whole Bias and parameter vectors; every PE's
   GPR holds its own base address, so one register pair serves all four;
3. the cooperative TMATMUL(MX)(.ACC/.BIAS): LB0 = G, one B.IOS a Shared
   source, the Local sources and D (and RowMaxOut / GroupMaxOut) on B.IOTs,
   every binding mask 1111;
4. on each active PE, TSTOREs of its D fragment (and reduction outputs)
   with its own mask bit to its own rows of one [G, N] GM area.

So the GM image has the non-cooperative sequence's shape (each operand one
row-major matrix of G rows): pj.golden.gemm writes and reads it the same way.
"""

from __future__ import annotations

from .. import tables
from .bundle import (Epilogue, Operands, Part, Program, Sequence, operand_loads, output_codes, pack_nd,
                     store_outputs)

__all__ = ["GROUP_M_MAX", "build_cooperative", "m_per_pe", "valid_m"]

GROUP_M_MAX = 128                       # group_M is 1..128 (shared-decisions 5, check 3)
SHARED_IDS = {"A": 0, "sA": 1, "B": 2, "sB": 3}     # B.IOS order: A, sA, B, sB
_ROW_CUT = ("C", "RowMaxIn")            # Local sources of G rows: each PE loads its own rows
_ALL_PES = "1111"


def m_per_pe(group_m: int) -> int:
    """M_per_PE: 16 rows for group_M <= 64, else 32."""
    return 16 if group_m <= 64 else 32


def valid_m(group_m: int) -> list[int]:
    """valid_M[i] = clamp(group_M - i * M_per_PE, 0, M_per_PE) for PE0..PE3."""
    per = m_per_pe(group_m)
    return [max(0, min(group_m - i * per, per)) for i in range(tables.NUM_PES)]


def fragments(group_m: int) -> list[Part]:
    """The active PEs' rows of the group."""
    per = m_per_pe(group_m)
    return [Part(p, p * per, m) for p, m in enumerate(valid_m(group_m)) if m]


def shared_load(prog: Program, name: str, dt: tables.DataType, codes, sid: int) -> None:
    """A Shared TLOAD (mask 1111) of `codes` [rows, cols] into S<sid>: LB0 valid
    columns, LB1 valid rows, LB2 columns (a power of two); TSize the least
    power of two (at least 128 bytes) that holds it, so its derived rows
    (TSize * 8 / (cols * bits)) are at least `rows`."""
    rows, cols = codes.shape
    data, stride = pack_nd(codes, dt.bits)
    at = prog.place(data)
    prog.placed[name] = (at, stride)
    tsize = max(128, 1 << (-(-rows * cols * dt.bits // 8) - 1).bit_length())
    prog.shared_words_needed = max(prog.shared_words_needed, tsize * 8 // dt.bits)
    code = (tsize // 64).bit_length() - 1
    prog.bundle(f"Shared TLOAD of {name}",
                [f"BSTART.TLOAD {dt.name}", f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {rows}, ->LB1",
                 f"B.DIM zero, {cols}, ->LB2", prog.gpr_pair(at, stride),
                 f"B.IOS mask={_ALL_PES}, ->S{sid}<{code}>"])


def build_cooperative(op: Operands, ep: Epilogue) -> Sequence:
    """The bundles of one group's product (op.M = group_M rows), steps 1-4 above."""
    G, N, K = op.M, op.N, op.K
    parts = fragments(G)
    # D's layout: by M_per_PE (check 10, both Shared); C is loaded in it (check 7)
    layout = "CUBE_M16" if m_per_pe(G) == 16 else "CUBE_M32"
    prog = Program()
    loads = operand_loads(op, layout, ep)
    for name, _, dt, codes, _, _ in loads:
        if name in SHARED_IDS:
            shared_load(prog, name, dt, codes, SHARED_IDS[name])
    tiles = [prog.load(name, lay, dt, codes, hand, kind,
                       parts=parts if name in _ROW_CUT else [p._replace(row0=0, rows=1) for p in parts])
             for name, lay, dt, codes, hand, kind in loads if name not in SHARED_IDS]
    # D and the reduction outputs at the size of the largest fragment, on every PE
    codes, aux = output_codes(prog, layout, ep, max(p.rows for p in parts), N)
    shared = tuple(SHARED_IDS[name] for name, *_ in loads if name in SHARED_IDS)
    prog.matrix(op, ep, (G, N, K), tiles, codes, mask=_ALL_PES, shared=shared, label="cooperative ")
    return store_outputs(prog, op, ep, layout, G, N, aux, parts=parts)
