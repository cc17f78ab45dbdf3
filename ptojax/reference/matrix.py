"""TMATMUL / TGEMV completion of the reference model: All-Local operands and
Shared (B.IOS) operands with ADR 0100's cooperative group-M (the last section).

`matmul(m, b, op_name, pe)` runs the ordered completion checks of
docs/matmul-decisions.md (spec/matrix.md B.6, the ASL's
ExecuteBundleTMATMULOperation) and, when they pass, computes D, post-processes
it (postprocess.py: B.FPATR's conversion, activation and reductions) and
publishes D with its RowMax / GroupMax outputs.
Like transport.py it returns None or a Fault and installs nothing before the
last check passed, so a fault leaves every tile untouched.

Two numeric profiles (MachineConfig.profile, kept by the Machine):
- "portable": spec/matrix.md C.1, raw 64-bit carrier words mod 2^64;
- "ieee": decoded values, exact products rounded once to binary32, binary32
  accumulation over ascending k (matmul-decisions.md "Profile ieee"); integer
  classes wrap mod 2^32.
Plain Python per-element loops: clarity over speed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, cast

import numpy as np

from .. import families, numerics, tables
from . import layouts, minifloat
from .family import Family
from . import postprocess as pp
from .state import MASK64, Binding, Block, Machine, Tile
from .shared import ALL_PES, ROW_MAJOR, cooperative_ready, ios_well_formed, read_word
from .transport import (BUNDLE_CONTROL, TILE_ALLOCATION, TILE_LEGALITY, Fault,
                        allocate, binding_well_formed, cube_descriptor_legal, derived_rows, gpr,
                        ordinary_source_legal, pe_count)

# ----------------------------------------------------------------- type classes (matrix.md A.5)

FLOATING_INPUTS = frozenset({"FP32", "TF32", "HF32", "FP16", "BF16", "HiF8", "E4M3", "E5M2",
                             "E3M2", "E2M3", "E2M1X2", "E1M2X2"})
SIGNED_INPUTS = frozenset({"S16", "S8", "S4X2"})
UNSIGNED_INPUTS = frozenset({"U16", "U8", "U4X2"})
MX_INPUTS = frozenset({"FP16", "BF16", "E4M3", "E5M2", "E2M1X2", "E1M2X2"})
MX_SCALED = frozenset({"E4M3", "E5M2", "E2M1X2", "E1M2X2"})     # need an E8M0 scale tile

SCALE_BLOCK = 32           # MX: one E8M0 scale per 32 consecutive k
MASK32 = (1 << 32) - 1


# ----------------------------------------------------------------- block fields


@dataclass(frozen=True)
class Form:
    """One of the 12 matrix operations (matrix.md A.1)."""
    name: str
    bias: bool
    acc: bool
    mx: bool
    gemv: bool


def form_of(op_name: str) -> Form:
    return Form(name=op_name, bias=op_name.endswith(".BIAS"), acc=op_name.endswith(".ACC"),
                mx="MX" in op_name, gemv=op_name.startswith("TGEMV"))


@dataclass(frozen=True)
class Fpatr:
    """B.FPATR fields (encoding.md 4.8)."""
    trans_a: bool
    trans_b: bool
    max_abs: bool
    row_max_init: bool
    group_max: bool
    row_max: bool
    group_n: int
    relu: int
    pre_quant: int

    @staticmethod
    def of(word: int) -> "Fpatr":
        return Fpatr(trans_a=bool(word >> 7 & 1), trans_b=bool(word >> 8 & 1),
                     max_abs=bool(word >> 15 & 1), row_max_init=bool(word >> 16 & 1),
                     group_max=bool(word >> 17 & 1), row_max=bool(word >> 18 & 1),
                     group_n=word >> 19 & 0xF, relu=word >> 23 & 0x7, pre_quant=word >> 26 & 0x3F)


def source_stream(b: Block) -> list[int]:
    """Local sources in stream order: each binding's SrcTile0 then SrcTile1."""
    out = []
    for x in b.iots:
        if x.src0_valid:
            out.append(x.src0)
        if x.src1_valid:
            out.append(x.src1)
    return out


def destinations(b: Block) -> list[Binding]:
    """Bindings carrying a destination, in stream order."""
    return [x for x in b.iots if x.dst_valid]


def operand_types(b: Block) -> tuple[Optional[tables.DataType], Optional[tables.DataType]]:
    """AType = BSTART DataType; BType = B.DATR DataType when present and not
    DTYPE_NONE (31 keeps the BSTART type: matrix.md F.9), else AType."""
    a = tables.DTYPE_BY_CODE.get(b.dtype)
    if b.datr_present and b.datr[1] != tables.DTYPE_NONE:
        return a, tables.DTYPE_BY_CODE.get(b.datr[1])
    return a, a


def types_legal(f: Form, a: Optional[tables.DataType], bt: Optional[tables.DataType]) -> bool:
    """MX: each side in the MX set; ordinary: both in one class (A.5)."""
    if a is None or bt is None:
        return False
    if f.mx:
        return a.name in MX_INPUTS and bt.name in MX_INPUTS
    return any(a.name in c and bt.name in c for c in (FLOATING_INPUTS, SIGNED_INPUTS,
                                                      UNSIGNED_INPUTS))


def accumulator_type(f: Form, a: tables.DataType) -> tables.DataType:
    """S32 for a signed AType, U32 for unsigned, else FP32; MX always FP32."""
    if not f.mx and a.name in SIGNED_INPUTS:
        return tables.DTYPE_BY_NAME["S32"]
    if not f.mx and a.name in UNSIGNED_INPUTS:
        return tables.DTYPE_BY_NAME["U32"]
    return tables.DTYPE_BY_NAME["FP32"]


def scaled(f: Form, d: tables.DataType) -> bool:
    """An MX side of this type has an E8M0 scale tile in the stream (A.7)."""
    return f.mx and d.name in MX_SCALED


def mathematical_sources(f: Form, a: tables.DataType, bt: tables.DataType) -> int:
    """[C] + A + [sA] + B + [sB] + [Bias] (all Local)."""
    return int(f.acc) + 1 + int(scaled(f, a)) + 1 + int(scaled(f, bt)) + int(f.bias)


def post_process_sources(p: Fpatr) -> int:
    """RowMaxIn + vector quant parameters + vector PReLU parameters."""
    return (int(p.row_max and p.row_max_init) + int(p.pre_quant in pp.VECTOR_MODES)
            + int(p.relu == 3))


def dimensions(b: Block) -> Optional[tuple[int, int, int]]:
    """(M, N, K) = LB0, LB1, LB2; absent = 1; a present value outside 1..65535 is illegal."""
    out = []
    for n in range(3):
        if not b.lb_present[n]:
            out.append(1)
        elif 1 <= b.lb[n] <= 65535:
            out.append(b.lb[n])
        else:
            return None
    return out[0], out[1], out[2]


# ----------------------------------------------------------------- step 3


def stream_legal(f: Form, b: Block, p: Fpatr, a: tables.DataType, bt: tables.DataType) -> bool:
    """Step 3 stream: no B.IOS for TGEMV; Local source count = mathematical +
    post-process; destination count = 1 + RowMaxEn + GroupMaxEn; closed."""
    if b.ios:
        return False
    if len(source_stream(b)) != mathematical_sources(f, a, bt) + post_process_sources(p):
        return False
    if len(destinations(b)) != 1 + int(p.row_max) + int(p.group_max):
        return False
    return b.iot_closed


def scalar_count(p: Fpatr) -> int:
    """B.IOR sources the post-processing reads: quant parameter, then LReLU parameter."""
    return int(p.pre_quant in pp.SCALAR_MODES) + int(p.relu == 2)


def ior_legal(m: Machine, b: Block, p: Fpatr, pe: int) -> bool:
    """Step 3 B.IOR: RegDst 0; RegSrc_i 0 for i >= the scalar parameter count;
    each parameter GPR's Word legal for its use (BundleOperationGPRBindingValuesLegal)."""
    if not b.ior_present:
        return True
    n_scalar = scalar_count(p)
    reg_dst, *reg_src = b.ior
    if reg_dst != 0 or any(r != 0 for r in reg_src[n_scalar:]):
        return False
    quant, relu = scalar_parameters(m, b, p, pe)
    return ((p.pre_quant not in pp.SCALAR_MODES or pp.quant_parameter_legal(p.pre_quant, quant))
            and (p.relu != 2 or pp.relu_parameter_legal(relu)))


def scalar_parameters(m: Machine, b: Block, p: Fpatr, pe: int) -> tuple[int, int]:
    """(quant, LReLU) parameter Words from PE `pe`'s GPRs (zero without a B.IOR)."""
    regs = [gpr(m, pe, r) for r in b.ior[1:3]] if b.ior_present else None
    return pp.scalar_parameters(regs, p.pre_quant, p.relu)


def datr_legal(b: Block) -> bool:
    """Step 3 B.DATR: Layout, PadValue, CMode, Canonicalize zero (RMode, Sat free)."""
    if not b.datr_present:
        return True
    layout, _dtype, pad, cmode, _rmode, _sat, canon = b.datr
    return layout == 0 and pad == 0 and cmode == 0 and canon == 0


def masks_legal(b: Block) -> bool:
    """Step 3 masks: at least one binding, all masks equal (and encodable fields)."""
    return (bool(b.iots) and len({x.mask for x in b.iots}) == 1
            and all(binding_well_formed(x) for x in b.iots))


def gate_legal(m: Machine, f: Form, b: Block, p: Fpatr, pe: int) -> bool:
    """Step 3: the one combined TileLegality gate."""
    a, bt = operand_types(b)
    if not types_legal(f, a, bt):
        return False
    assert a is not None and bt is not None     # types_legal
    return (stream_legal(f, b, p, a, bt) and ior_legal(m, b, p, pe) and datr_legal(b)
            and dimensions(b) is not None and masks_legal(b))


# ----------------------------------------------------------------- step 6


U64 = tables.DTYPE_BY_NAME["U64"]


def post_source_legal(m: Machine, index: int, vr: int, vc: int, d: tables.DataType) -> bool:
    """A post-process source (TileMatrixAuxiliarySourceSchemaLegal): a legal,
    fully defined RowMajor tile at location Any of this valid shape and dtype."""
    return (auxiliary_legal(m, index, vr, vc, d)
            and m.tile_at(index).location == tables.TILE_LOCATION_CODE["Any"])


def vector_words(m: Machine, index: int, n: int) -> list[int]:
    """Row 0's n Words of a RowMajor vector source."""
    words, _ = m.payload(cast(int, m.slot_of(index)))      # a legal source: materialized
    return words[:n]


def post_sources_legal(m: Machine, b: Block, p: Fpatr, n_math: int, M: int, N: int,
                       acc: tables.DataType) -> bool:
    """Step 6: PreQuantMode against the accumulator class, then the post-process
    sources after the n_math mathematical ones: RowMaxIn (M x 1, accumulator
    type), the vector quant parameters and the vector PReLU parameters (1 x N
    U64, every Word legal for its use)."""
    if not pp.mode_matches_accumulator(p.pre_quant, acc.name):
        return False
    stream = iter(source_stream(b)[n_math:])
    if p.row_max and p.row_max_init and not post_source_legal(m, next(stream), M, 1, acc):
        return False
    if p.pre_quant in pp.VECTOR_MODES:
        quant = next(stream)
        if not post_source_legal(m, quant, 1, N, U64) or not all(
                pp.quant_parameter_legal(p.pre_quant, w) for w in vector_words(m, quant, N)):
            return False
    if p.relu == 3:
        relu = next(stream)
        if not post_source_legal(m, relu, 1, N, U64) or not all(
                pp.relu_parameter_legal(w) for w in vector_words(m, relu, N)):
            return False
    return True


# ----------------------------------------------------------------- step 7


@dataclass
class Operands:
    """TileIndices of the Local mathematical sources (None when absent)."""
    c: Optional[int]
    a: int
    sa: Optional[int]
    b: int
    sb: Optional[int]
    bias: Optional[int]


def operands_of(f: Form, b: Block, a: tables.DataType, bt: tables.DataType) -> Operands:
    """Walk the source stream: C, A, sA, B, sB, Bias (matrix.md A.3)."""
    stream = iter(source_stream(b))
    c = next(stream) if f.acc else None
    ai = next(stream)
    sa = next(stream) if scaled(f, a) else None
    bi = next(stream)
    sb = next(stream) if scaled(f, bt) else None
    bias = next(stream) if f.bias else None
    return Operands(c, ai, sa, bi, sb, bias)


def m_layout_legal(layout: Optional[str], rows: int) -> bool:
    """CUBE_M16 holds M <= 16 rows, CUBE_M32 M <= 32."""
    return (layout == "CUBE_M16" and rows <= 16) or (layout == "CUBE_M32" and rows <= 32)


def primary_legal(m: Machine, index: int, vr: int, vc: int, d: tables.DataType,
                  layout: Optional[str]) -> bool:
    """A, B, C: a legal CUBE descriptor (B.6, Matrix location, derived fields
    consistent), contents defined, valid shape, dtype and layout exact."""
    t = m.tile_at(index)
    return (m.slot_of(index) is not None and cube_descriptor_legal(m, t) and t.contents_defined
            and (t.valid_rows, t.valid_cols) == (vr, vc) and t.dtype == d.code
            and t.layout_name == layout)


def auxiliary_legal(m: Machine, index: int, vr: int, vc: int, d: tables.DataType) -> bool:
    """Bias and scales: an ordinary RowMajor source (the ASL's
    TileSourceContentsDefined: configured, generically indexable, defined)
    of the exact valid shape and dtype; location is not checked."""
    t = m.tile_at(index)
    return (m.slot_of(index) is not None and ordinary_source_legal(m, t)
            and t.layout_name == "RowMajor" and (t.valid_rows, t.valid_cols) == (vr, vc)
            and t.dtype == d.code)


def c_capacity_legal(m: Machine, c: int, p: Fpatr, d_tsize: int) -> bool:
    """Without a conversion (PreQuantMode 0) C's capacity must be D's."""
    return p.pre_quant != 0 or m.tile_at(c).capacity == d_tsize


def sources_legal(m: Machine, ops: Operands, p: Fpatr, a: tables.DataType, bt: tables.DataType,
                  acc: tables.DataType, dims: tuple[int, int, int], d_tsize: int) -> bool:
    """Step 7, stream order C, A, sA, B, sB, Bias (all Fault_TileLegality)."""
    M, N, K = dims
    kb = -(-K // SCALE_BLOCK)
    a_layout = m.tile_at(ops.a).layout_name
    e8m0 = tables.DTYPE_BY_NAME["E8M0"]
    if ops.c is not None:
        if not primary_legal(m, ops.c, M, N, acc, a_layout) or not c_capacity_legal(m, ops.c, p,
                                                                                   d_tsize):
            return False
    if not m_layout_legal(a_layout, M) or not primary_legal(m, ops.a, M, K, a, a_layout):
        return False
    if ops.sa is not None and not auxiliary_legal(m, ops.sa, M, kb, e8m0):
        return False
    if not primary_legal(m, ops.b, K, N, bt, "CUBE_N8"):
        return False
    if ops.sb is not None and not auxiliary_legal(m, ops.sb, kb, N, e8m0):
        return False
    if ops.bias is not None and not auxiliary_legal(m, ops.bias, 1, N, acc):
        return False
    return True


# ----------------------------------------------------------------- operand reads


def cube_reader(m: Machine, index: int) -> Callable[[int, int], int]:
    """(row, col) -> the raw 64-bit Word of a CUBE source at logical (row, col)."""
    t = m.tile_at(index)
    # a legal CUBE source: materialized, with a CUBE layout
    words, _ = m.payload(cast(int, m.slot_of(index)))
    # cached: a product reads each (row, col) once per output row or column
    at = functools.cache(layouts.index_function(cast(str, t.layout_name), tables.DTYPE_BY_CODE[t.dtype],
                                                t.valid_rows, t.valid_cols))
    return lambda r, c: words[at(r, c)]


def row_major_reader(m: Machine, index: int) -> Callable[[int, int], int]:
    """(row, col) -> the raw Word of an ordinary RowMajor source."""
    t = m.tile_at(index)
    words, _ = m.payload(cast(int, m.slot_of(index)))      # a legal source: materialized
    return lambda r, c: words[r * t.cols + c]


@dataclass
class Readers:
    a: Callable[[int, int], int]
    b: Callable[[int, int], int]
    c: Optional[Callable[[int, int], int]] = None
    sa: Optional[Callable[[int, int], int]] = None
    sb: Optional[Callable[[int, int], int]] = None
    bias: Optional[Callable[[int, int], int]] = None


def readers_of(m: Machine, ops: Operands) -> Readers:
    return Readers(a=cube_reader(m, ops.a), b=cube_reader(m, ops.b),
                   c=cube_reader(m, ops.c) if ops.c is not None else None,
                   sa=row_major_reader(m, ops.sa) if ops.sa is not None else None,
                   sb=row_major_reader(m, ops.sb) if ops.sb is not None else None,
                   bias=row_major_reader(m, ops.bias) if ops.bias is not None else None)


# ----------------------------------------------------------------- arithmetic: portable


def portable_element(rd: Readers, i: int, j: int, K: int) -> int:
    """matrix.md C.1: acc = C or 0; acc += A*B (MX: (A*sA)*(B*sB)) mod 2^64 over
    ascending k on the raw carrier words; Bias once at the end."""
    acc = rd.c(i, j) if rd.c is not None else 0
    for k in range(K):
        left, right = rd.a(i, k), rd.b(k, j)
        if rd.sa is not None:
            left = (left * rd.sa(i, k // SCALE_BLOCK)) & MASK64
        if rd.sb is not None:
            right = (right * rd.sb(k // SCALE_BLOCK, j)) & MASK64
        acc = (acc + left * right) & MASK64
    if rd.bias is not None:
        acc = (acc + rd.bias(0, j)) & MASK64
    return acc


# ----------------------------------------------------------------- arithmetic: ieee


def float_value(name: str, word: int) -> float:
    """Exact value of a floating element (or E8M0 scale 2^(e-127), 0xFF NaN)
    from the low bits of its carrier word. The 8-bit and 4-bit formats use the
    reference's own decoder (minifloat.py), not the executor's ptojax.numerics,
    so the differential tests check the executor's decoding; FP32/TF32/HF32/
    FP16/BF16 are numpy/ml_dtypes reinterpretations in numerics, which the
    executor does not use (it decodes those from bit fields, ops/binary32.py)."""
    if name in minifloat.FORMATS:
        return minifloat.value(name, word)
    return float(numerics.decode_float(name, np.array([word], np.uint64))[0])


def int_value(name: str, word: int) -> int:
    """S16/S8/S4X2 sign-extended from their width, U* unsigned (ptojax.numerics)."""
    return int(numerics.decode_int(name, np.array([word], np.uint64))[0])


def binary32(word: int) -> np.float32:
    """The low 32 bits of a Word (C, Bias) as a binary32 value."""
    return np.float32(numerics.fp32_value(np.array([word & MASK32], np.uint64))[0])


def ieee_float_element(rd: Readers, i: int, j: int, K: int, a: tables.DataType,
                       bt: tables.DataType) -> int:
    """FP32 accumulator: p = round32(exact product) (MX: the scaled operands,
    an absent scale side = 1); acc = round32(acc + p) over ascending k from C
    (binary32) or +0.0; Bias added with one rounding; NaN results canonical.
    The Word is the binary32 pattern zero-extended."""
    with np.errstate(all="ignore"):
        acc = binary32(rd.c(i, j)) if rd.c is not None else np.float32(0.0)
        for k in range(K):
            left, right = float_value(a.name, rd.a(i, k)), float_value(bt.name, rd.b(k, j))
            if rd.sa is not None:
                left *= float_value("E8M0", rd.sa(i, k // SCALE_BLOCK))
            if rd.sb is not None:
                right *= float_value("E8M0", rd.sb(k // SCALE_BLOCK, j))
            # every factor and both partial products are exact in float64, so
            # the float32 conversion is the one rounding of the exact product
            product = np.float32(np.float64(left) * np.float64(right))
            acc = np.float32(acc + product)                     # binary32 add, RNE
        if rd.bias is not None:
            acc = np.float32(acc + binary32(rd.bias(0, j)))
        return int(numerics.round_fp32_bits(np.float64(acc)))


def ieee_int_element(rd: Readers, i: int, j: int, K: int, a: tables.DataType,
                     bt: tables.DataType, acc_type: tables.DataType) -> int:
    """S32/U32 accumulator: exact products, sums wrapped mod 2^32 after each add;
    C and Bias from their low 32 bits. Word: S32 sign-extended, U32 zero-extended."""
    acc = rd.c(i, j) & MASK32 if rd.c is not None else 0
    for k in range(K):
        acc = (acc + int_value(a.name, rd.a(i, k)) * int_value(bt.name, rd.b(k, j))) & MASK32
    if rd.bias is not None:
        acc = (acc + rd.bias(0, j)) & MASK32
    if acc_type.signed and acc >> 31:
        return acc | (MASK64 ^ MASK32)
    return acc


def compute(m: Machine, rd: Readers, dims: tuple[int, int, int], a: tables.DataType,
            bt: tables.DataType, acc: tables.DataType) -> list[list[int]]:
    """The M x N accumulator Words under the Machine's profile."""
    M, N, K = dims
    out = []
    for i in range(M):
        row = []
        for j in range(N):
            if m.profile == "ieee" and acc.name == "FP32":
                row.append(ieee_float_element(rd, i, j, K, a, bt))
            elif m.profile == "ieee":
                row.append(ieee_int_element(rd, i, j, K, a, bt, acc))
            else:
                row.append(portable_element(rd, i, j, K))
        out.append(row)
    return out


# ----------------------------------------------------------------- post-processing


def post_parameters(m: Machine, b: Block, p: Fpatr, n_math: int, pe: int,
                    N: int) -> Callable[[int], tuple[int, int]]:
    """column -> (quant, LReLU/PReLU) parameter Words: a vector source's Word of
    that column, else the B.IOR scalar (zero without a B.IOR)."""
    quant, relu = scalar_parameters(m, b, p, pe)
    stream = iter(source_stream(b)[n_math + int(p.row_max and p.row_max_init):])
    quant_row = vector_words(m, next(stream), N) if p.pre_quant in pp.VECTOR_MODES else None
    relu_row = vector_words(m, next(stream), N) if p.relu == 3 else None
    return lambda j: (quant_row[j] if quant_row else quant, relu_row[j] if relu_row else relu)


def post_process(m: Machine, b: Block, p: Fpatr, n_math: int, pe: int, acc: tables.DataType,
                 result: list[list[int]]) -> tuple[list[list[int]], int]:
    """D's Words: each accumulator Word through B.FPATR's conversion and
    activation (postprocess.py; the identity for PreQuantMode = ReluMode = 0),
    and the flags they raise (MatrixPostProcessResult)."""
    params = post_parameters(m, b, p, n_math, pe, len(result[0]))
    control = pp.control_of(p.pre_quant, b.datr[4], b.datr[5])
    flags = 0
    out = []
    for row in result:
        words = []
        for j, w in enumerate(row):
            word, f = pp.post_process(w, p.pre_quant, p.relu, acc.name, *params(j), control)
            words.append(word)
            flags |= f
        out.append(words)
    return out, flags


def publish_group(m: Machine, b: Block, p: Fpatr, n_math: int, pe: int, slots: list[int],
                  layout: str, out: tables.DataType, acc: tables.DataType, M: int, N: int,
                  mask: int, result: list[list[int]]) -> None:
    """CommitMatrixResult: D from the post-processed Words; RowMaxOut and
    GroupMaxOut from the raw accumulator Words (RowMaxIn read before any write);
    the flags of all three ORed into the sticky numeric status."""
    outputs: list[list[list[int]]] = []
    flags = 0
    if p.row_max:
        initial = None
        if p.row_max_init:
            words, _ = m.payload(cast(int, m.slot_of(source_stream(b)[n_math])))     # RowMaxIn: legal (step 6)
            initial = [words[i] for i in range(M)]          # M x 1 RowMajor: row i is Word i
        row_words, f = pp.row_max(result, initial, p.max_abs, acc.name)
        outputs.append([[w] for w in row_words])
        flags |= f
    if p.group_max:
        group_words, f = pp.group_max(result, p.group_n, p.max_abs, acc.name)
        outputs.append(group_words)
        flags |= f
    d_words, f = post_process(m, b, p, n_math, pe, acc, result)
    m.numeric_flags |= flags | f
    sizes = [tables.size_code_bytes(x.size_code) for x in destinations(b)]
    publish(m, slots[0], layout, out, M, N, sizes[0], mask, d_words)
    for slot, tsize, aux_words in zip(slots[1:], sizes[1:], outputs):
        publish_row_major(m, slot, acc, tsize, mask, aux_words)


def publish_row_major(m: Machine, slot: int, d: tables.DataType, tsize: int, mask: int,
                      words: list[list[int]]) -> None:
    """An auxiliary output: a new RowMajor tile at location Any, rows derived
    from its capacity, valid region the Words given (defined)."""
    vr, vc = len(words), len(words[0])
    allocate(m, slot, dtype=d.code, layout=tables.TILE_LAYOUT_CODE["RowMajor"],
             location=tables.TILE_LOCATION_CODE["Any"], capacity=tsize,
             rows=derived_rows(tsize, vc, d), cols=vc, valid_rows=vr, valid_cols=vc,
             mask=mask & 0xF, defined_valid=vr * vc)
    payload, defined = m.payload(slot)
    for i, row in enumerate(words):
        for j, w in enumerate(row):
            payload[i * vc + j] = w
            defined[i * vc + j] = True


# ----------------------------------------------------------------- destination group


def destination_group(m: Machine, b: Block, p: Fpatr, layout: str, out: tables.DataType,
                      acc: tables.DataType, M: int, N: int,
                      charge_pes: Optional[int] = None) -> Optional[list[int]]:
    """Step 10 (ResolveBundleTMATMULCubeDestinationGroup): D, [RowMaxOut,]
    [GroupMaxOut,] each the lowest free slot of its hand not taken by an
    earlier one; the Core budget for all of them; then D's CUBE geometry for
    its element type and each auxiliary output's RowMajor shape (M x 1, M x
    ceil(N / GroupN), accumulator type). The slots, or None (Fault_TileAllocation)."""
    slots, charge = [], 0
    for x in destinations(b):
        slot = next((x.dst_hand * m.hand_slots + k for k in range(m.hand_slots)
                     if not m.tiles[x.dst_hand * m.hand_slots + k].allocated
                     and x.dst_hand * m.hand_slots + k not in slots), None)
        if slot is None:
            return None
        slots.append(slot)
        charge += (pe_count(x.mask) if charge_pes is None else charge_pes) \
            * tables.size_code_bytes(x.size_code)
    if m.capacity_in_use() + charge > m.tile_capacity:
        return None
    sizes = [tables.size_code_bytes(x.size_code) for x in destinations(b)]
    if not layouts.legal(layout, out, M, N, sizes[0], m.tile_capacity, m.tile_words):
        return None
    for tsize, cols in zip(sizes[1:], auxiliary_columns(p, N)):
        rows = derived_rows(tsize, cols, acc)
        if (rows == 0 or M > rows or M * cols > tsize * 8 // acc.bits
                or rows * cols > layouts.MODEL_TILE_ELEMENTS or M * cols > m.tile_words):
            return None
    return slots


def auxiliary_columns(p: Fpatr, N: int) -> list[int]:
    """Columns of RowMaxOut (1) and GroupMaxOut (ceil(N / GroupN)), in destination order."""
    group = tables.FPATR_GROUP_N[p.group_n] if p.group_n <= 9 else 0
    return [1] * p.row_max + [-(-N // group) if group else N] * p.group_max


# ----------------------------------------------------------------- completion


def matmul(m: Machine, b: Block, op_name: str, pe: int) -> Optional[Fault]:
    """The ordered checks of docs/matmul-decisions.md, then compute and publish D.
    (The CUBE-transport dispatch and the zero-mask no-op, steps "pre" and 0,
    run before this in run.tile_operation.)"""
    f = form_of(op_name)
    # MM.1 fpatr_present: B.FPATR is mandatory
    if not b.fpatr_present:
        return BUNDLE_CONTROL
    # Shared (B.IOS) operands of TMATMUL*: the cooperative path
    # (docs/shared-decisions.md 5); TGEMV* with a B.IOS fails the gate below
    if b.ios and not f.gemv:
        return cooperative_matmul(m, b, f)
    p = Fpatr.of(b.fpatr)
    # MM.3 gate: types, stream, B.IOR (with its parameter Words), B.DATR,
    # dimensions, masks
    if not gate_legal(m, f, b, p, pe):
        return TILE_LEGALITY
    a, bt = operand_types(b)
    dims = dimensions(b)
    assert a is not None and bt is not None and dims is not None     # gate_legal
    M, N, K = dims
    # MM.4 gemv_rows: TGEMV is M = 1
    if f.gemv and M != 1:
        return TILE_LEGALITY
    # MM.5 transpose: TransA/TransB need a Shared primary (never, All-Local)
    if p.trans_a or p.trans_b:
        return TILE_LEGALITY
    # MM.6 post_sources: PreQuantMode vs the accumulator class, the post-process sources
    acc = accumulator_type(f, a)
    n_math = mathematical_sources(f, a, bt)
    if not post_sources_legal(m, b, p, n_math, M, N, acc):
        return TILE_LEGALITY
    # MM.7 local_sources: C, A, sA, B, sB, Bias
    ops = operands_of(f, b, a, bt)
    dest = destinations(b)[0]
    tsize = tables.size_code_bytes(dest.size_code)
    if not sources_legal(m, ops, p, a, bt, acc, dims, tsize):
        return TILE_LEGALITY
    # MM.8 acc_hand: C's raw 6-bit source index against D's 2-bit hand
    if f.acc and ops.c == dest.dst_hand:
        return TILE_LEGALITY
    # (9. D's M layout = A's layout, legal for M: established by step 7)
    layout = m.tile_at(ops.a).layout_name
    assert layout is not None
    # MM.10 destination: the group's slots, Core budget, D's geometry for its element type
    out = tables.DTYPE_BY_NAME[pp.output_type(p.pre_quant, acc.name)]
    slots = destination_group(m, b, p, layout, out, acc, M, N)
    if slots is None:
        return TILE_ALLOCATION
    # 11. compute from the sources, post-process, then publish the group
    result = compute(m, readers_of(m, ops), dims, a, bt, acc)
    publish_group(m, b, p, n_math, pe, slots, layout, out, acc, M, N, dest.mask, result)
    return None


def publish(m: Machine, slot: int, layout: str, d: tables.DataType, M: int, N: int,
            tsize: int, mask: int, result: list[list[int]]) -> Tile:
    """A new CUBE Matrix descriptor as a CUBE TLOAD derives it for (M, N); the
    valid Words get the results and are defined. Every other payload Word
    keeps its old value and is undefined (the ASL configures D without
    touching its payload and writes only the valid region)."""
    g = layouts.geometry(layout, d, M, N)
    tile = allocate(m, slot, dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout],
                    location=tables.TILE_LOCATION_CODE["Matrix"], capacity=tsize,
                    rows=g["storage_rows"], cols=g["storage_cols"], valid_rows=M, valid_cols=N,
                    k_repeat=g["k_repeat"], n_repeat=g["n_repeat"], cell_count=g["cell_count"],
                    storage_bytes=g["required_bytes"], mask=mask & 0xF, defined_valid=M * N)
    words, defined = m.payload(slot)
    at = layouts.index_function(layout, d, M, N)
    for i in range(M):
        for j in range(N):
            words[at(i, j)] = result[i][j]
            defined[at(i, j)] = True
    return tile


# ----------------------------------------------------------------- Shared (B.IOS) operands
#
# Cooperative group-M execution (docs/shared-decisions.md section 5, spec/matrix.md
# D, ADR 0100), on the All-Local helpers and arithmetic above. `cooperative_matmul`
# is one PE's completion (PE m.cur): the collective checks every PE applies (the
# gate, the Shared sources, the ACC index), then, only on a PE with rows to compute,
# its own Local sources, its D fragment and the arithmetic.
#
# Shared ordinals follow B.IOS order: [A, sA,] B, sB. C, Bias and D stay Local.
# semantics "adr0100": LB0 = group_M (G) in 1..128, mask 1111, PE i computes
# valid_M[i] = clamp(G - i*M_per_PE, 0, M_per_PE) rows (M_per_PE = 16 when
# G <= 64, else 32) from Shared A rows i*M_per_PE.. (or its own Local A), and
# publishes a private fragment (mask = its own bit, charge 1 x TSize).
# semantics "0.58.3": every PE computes the same G rows (rows 0.. of Shared A)
# into a D with the binding mask.

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

    def __init__(self, f: Form, a: tables.DataType, bt: tables.DataType, shared: int):
        self.right = 1 + int(scaled(f, bt))
        self.left = 1 + int(scaled(f, a))
        self.shared = shared
        self.both = shared == self.left + self.right        # Shared A[, sA], B[, sB]
        self.right_only = shared == self.right              # Local A[, sA], Shared B[, sB]

    def local_sources(self, f: Form, a: tables.DataType) -> int:
        """Local mathematical sources: [C] + (right-only: A + [sA]) + [Bias]."""
        left = 0 if self.both else 1 + int(scaled(f, a))
        return int(f.acc) + left + int(f.bias)


# ----------------------------------------------------------------- Shared operands: step 3


def cooperative_gate_legal(m: Machine, f: Form, b: Block, p: Fpatr) -> bool:
    """Step 3, the one TileLegality gate with the Shared additions."""
    a, bt = operand_types(b)
    if not types_legal(f, a, bt):
        return False
    assert a is not None and bt is not None     # types_legal
    g = Groups(f, a, bt, len(b.ios))
    dims = dimensions(b)
    if dims is None:
        return False
    G, N, K = dims
    # stream: Local sources, destinations, closed
    if len(source_stream(b)) != g.local_sources(f, a) + post_process_sources(p):
        return False
    if len(destinations(b)) != 1 + int(p.row_max) + int(p.group_max) or not b.iot_closed:
        return False
    if not (ior_legal(m, b, p, m.cur) and datr_legal(b)):
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


# ----------------------------------------------------------------- Shared operands: step 7s


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


def shared_sources_legal(m: Machine, f: Form, b: Block, p: Fpatr, g: Groups,
                         a: tables.DataType, bt: tables.DataType, dims: tuple[int, int, int]) -> bool:
    """Step 7s, in B.IOS order: [A, sA,] B, sB (scales never transposed)."""
    G, N, K = dims
    kb = -(-K // SCALE_BLOCK)
    sids = iter(r[0] for r in b.ios)
    if g.both:
        if not shared_primary_legal(m, next(sids), G, K, a, p.trans_a):
            return False
        if scaled(f, a) and not shared_source_legal(m, next(sids), G, kb, kb, E8M0):
            return False
    if not shared_primary_legal(m, next(sids), K, N, bt, p.trans_b):
        return False
    if scaled(f, bt) and not shared_source_legal(m, next(sids), kb, N, N, E8M0):
        return False
    return True


# ----------------------------------------------------------------- Shared operands: Local ones


class LocalOperands:
    """TileIndices of the Local sources, stream order C, [A, sA,] Bias."""

    def __init__(self, f: Form, b: Block, g: Groups, a: tables.DataType):
        stream = iter(source_stream(b))
        self.c = next(stream) if f.acc else None
        self.a = next(stream) if g.right_only else None
        self.sa = next(stream) if g.right_only and scaled(f, a) else None
        self.bias = next(stream) if f.bias else None


def d_layout(m: Machine, f: Form, g: Groups, ops: LocalOperands, G: int) -> Optional[str]:
    """D's layout on PE cur: right-only: its A's; both Shared + ACC: its C's;
    both Shared: adr0100 M16/M32 by M_per_PE, 0.58.3 M16/M32 by G (None above 32)."""
    if g.right_only:
        assert ops.a is not None                # right-only: a Local A
        return m.tile_at(ops.a).layout_name
    if f.acc:
        assert ops.c is not None                # ACC: a Local C
        return m.tile_at(ops.c).layout_name
    if m.semantics == "adr0100":
        return "CUBE_M16" if rows_per_pe(G) == 16 else "CUBE_M32"
    if G <= 16:
        return "CUBE_M16"
    return "CUBE_M32" if G <= 32 else None


def local_sources_legal(m: Machine, f: Form, ops: LocalOperands, p: Fpatr,
                        layout: Optional[str], a: tables.DataType, acc: tables.DataType, M: int,
                        N: int, K: int, d_tsize: int) -> bool:
    """Step 7 on an active PE: its C, A, sA, Bias for its M rows."""
    kb = -(-K // SCALE_BLOCK)
    if ops.c is not None:
        if not m_layout_legal(m.tile_at(ops.c).layout_name, M):
            return False
        if not primary_legal(m, ops.c, M, N, acc, layout) or not c_capacity_legal(m, ops.c, p,
                                                                                 d_tsize):
            return False
    if ops.a is not None:
        a_layout = m.tile_at(ops.a).layout_name
        if not m_layout_legal(a_layout, M) or not primary_legal(m, ops.a, M, K, a, a_layout):
            return False
    if ops.sa is not None and not auxiliary_legal(m, ops.sa, M, kb, E8M0):
        return False
    if ops.bias is not None and not auxiliary_legal(m, ops.bias, 1, N, acc):
        return False
    return True


# ----------------------------------------------------------------- Shared operands: readers


def shared_reader(m: Machine, sid: int, row0: int = 0, transpose: bool = False) -> Callable[[int, int], int]:
    """(row, col) -> the Word of logical (row0 + row, col) of a Shared source;
    transposed: stored[col][row0 + row]."""
    cols = m.shared[cast(int, m.record_of(sid))].cols        # a legal source has a record
    if transpose:
        return lambda r, c: read_word(m, sid, c * cols + row0 + r)
    return lambda r, c: read_word(m, sid, (row0 + r) * cols + c)


def readers(m: Machine, f: Form, b: Block, p: Fpatr, g: Groups, ops: LocalOperands,
            a: tables.DataType, bt: tables.DataType, row0: int) -> Readers:
    """PE cur's operands: A rows from row0 (Shared) or its Local A; B, sB shared
    by every PE; C and Bias its own Local tiles."""
    sids = iter(r[0] for r in b.ios)
    if g.both:
        a_rd = shared_reader(m, next(sids), row0, p.trans_a)
        sa_rd = shared_reader(m, next(sids), row0) if scaled(f, a) else None
    else:
        assert ops.a is not None                # right-only: a Local A
        a_rd = cube_reader(m, ops.a)
        sa_rd = row_major_reader(m, ops.sa) if ops.sa is not None else None
    b_rd = shared_reader(m, next(sids), 0, p.trans_b)
    sb_rd = shared_reader(m, next(sids)) if scaled(f, bt) else None
    return Readers(a=a_rd, b=b_rd, sa=sa_rd, sb=sb_rd,
                      c=cube_reader(m, ops.c) if ops.c is not None else None,
                      bias=row_major_reader(m, ops.bias) if ops.bias is not None else None)


# ----------------------------------------------------------------- Shared operands: completion


def cooperative_matmul(m: Machine, b: Block, f: Form) -> Optional[Fault]:
    """shared-decisions.md 5 for PE m.cur (steps 0 and 1 already ran)."""
    p = Fpatr.of(b.fpatr)
    # MM.3 gate (the cooperative one)
    if f.gemv or not cooperative_gate_legal(m, f, b, p):
        return TILE_LEGALITY
    a, bt = operand_types(b)
    assert a is not None and bt is not None     # cooperative_gate_legal
    g = Groups(f, a, bt, len(b.ios))
    G, N, K = cast(tuple[int, int, int], dimensions(b))     # cooperative_gate_legal
    # MM.5 transpose: TransA needs a Shared A (B is always Shared here)
    if p.trans_a and not g.both:
        return TILE_LEGALITY
    # MM.6 post_sources: PreQuantMode vs the accumulator class (the post-process
    # sources are Local: checked with the others, on a PE with rows)
    acc = accumulator_type(f, a)
    if not pp.mode_matches_accumulator(p.pre_quant, acc.name):
        return TILE_LEGALITY
    # MM.7s shared_sources: collectively
    if not shared_sources_legal(m, f, b, p, g, a, bt, (G, N, K)):
        return TILE_LEGALITY
    pe = m.cur
    if m.semantics == "adr0100":
        M, row0 = valid_m(G, pe), pe * rows_per_pe(G)
    else:
        M, row0 = G, 0
    ops = LocalOperands(f, b, g, a)
    dest = destinations(b)[0]
    tsize = tables.size_code_bytes(dest.size_code)
    active = M > 0
    # MM.7 local_sources: post-process ones first, only on a PE with rows to compute
    layout = d_layout(m, f, g, ops, G) if active else None
    n_math = g.local_sources(f, a)
    if active and not (post_sources_legal(m, b, p, n_math, M, N, acc)
                       and local_sources_legal(m, f, ops, p, layout, a, acc, M, N, K, tsize)):
        return TILE_LEGALITY
    # MM.8 acc_hand: C's raw source index against D's hand (every PE)
    if f.acc and ops.c == dest.dst_hand:
        return TILE_LEGALITY
    if not active:
        return None                 # an idle PE: no Local work, no D
    # MM.7 local_sources (step 9, D's M layout must hold the fragment's rows: the
    # executor checks it with the Local sources, the same TileLegality)
    if not m_layout_legal(layout, M):
        return TILE_LEGALITY
    assert layout is not None                   # m_layout_legal
    # MM.10 destination: the group in PE cur's file: slots, pool, geometry
    # (adr0100: a private fragment, its own mask bit, charged once)
    out = tables.DTYPE_BY_NAME[pp.output_type(p.pre_quant, acc.name)]
    adr0100 = m.semantics == "adr0100"
    mask = tables.pe_bit(pe) if adr0100 else dest.mask
    slots = destination_group(m, b, p, layout, out, acc, M, N, charge_pes=1 if adr0100 else None)
    if slots is None:
        return TILE_ALLOCATION
    # 11. compute the fragment, post-process, publish the group
    rd = readers(m, f, b, p, g, ops, a, bt, row0)
    result = compute(m, rd, (M, N, K), a, bt, acc)
    publish_group(m, b, p, n_math, pe, slots, layout, out, acc, M, N, mask, result)
    return None


FAMILY = Family(families.BY_NAME["matrix"], lambda m, b, op, pe: matmul(m, b, op[0], pe),
                lambda b, op: op[1] == "CUBE")      # TMATMUL* / TGEMV* (matmul-decisions.md)
