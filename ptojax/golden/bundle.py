"""`pj.golden.matmul` (also `pj.ops.matmul`, the name it had first): golden matrix
products computed by running the real bundles.

For compiler pipelines: numpy matrices in, numpy result out. The helper
writes the operands to global memory, runs the instruction sequence a
program would (CUBE TLOAD ND2M16/ND2M32 of A and C, ND2N8 of B, ordinary
TLOADs of Bias, E8M0 scales and the B.FPATR epilogue's vectors, one
TMATMUL*/TGEMV* bundle, TSTORE of D back to ND and of the RowMax/GroupMax
outputs) on a private machine, and reads them from memory. Any
architectural fault raises MatmulFault carrying the fault; the numbers are
exactly what `pj.run` computes (docs/numerics.md).

The private machine's sizes come from a fixed size class (SIZE_CLASSES),
never from the operands: every shape up to M = 32, K and N = 64 (and many
larger ones) runs one compiled program per profile, so after the first call
a new shape costs milliseconds. Operands no tile can hold raise ValueError.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from .. import numerics, tables
from .._x64 import x64
from ..isa.asm import assemble
from ..layouts.geometry import geometry as cube_geometry
from ..layouts.words import first_outside, first_true, raw_words
from ..machine import run_stream
from ..state import MachineConfig, reset

__all__ = ["matmul", "MatmulFault", "MatmulResult"]

# operand hands (a TLOAD takes the hand's lowest free register): A, its MX scales and the
# quant vector -> T; B, its scales and the PReLU alphas -> N; C, Bias, RowMaxIn -> U; D,
# RowMaxOut, GroupMaxOut -> M. C's TileIndex then never equals D's hand number, and a
# plain product loads one tile a hand, so a tiled GEMM's States need one slot a hand
# (golden.tiling sizes their pools by the most a hand takes)
_A = _SA = _QUANT = "T"
_B = _SB = _ALPHA = "N"
_C = _BIAS = _RIN = "U"
D_HAND = "M"
_ML = {"FP16": np.float16, "BF16": ml_dtypes.bfloat16, "E4M3": ml_dtypes.float8_e4m3fn,
       "E5M2": ml_dtypes.float8_e5m2, "FP32": np.float32}
ACC_NP = {"FP32": np.float32, "S32": np.int32, "U32": np.uint32}
# D's numpy type by its DataType (HiF8 has none: its raw codes as uint8)
OUT_NP = {"FP32": np.float32, "S32": np.int32, "U32": np.uint32, "FP16": np.float16,
           "BF16": ml_dtypes.bfloat16, "E4M3": ml_dtypes.float8_e4m3fn, "HiF8": np.uint8,
           "S8": np.int8, "S16": np.int16, "S4X2": np.int8}
_ROUNDING = {"RNE": "Default", "RTZ": "RTZ", "RTM": "RTM", "RTP": "RTP", "RNA": "RNA", "RTO": "RTO",
             "RHB": "RHB"}


class MatmulResult(NamedTuple):
    """pj.ops.matmul with a reduction or flags=True: D, RowMax (M, or None) and
    GroupMax (M x ceil(N / group_max), or None), the last two in the
    accumulator type, and the numeric flags the bundle raised (names, in NV,
    DZ, OF, UF, NX order: the epilogue's and the reductions'; the raw
    accumulation raises none)."""
    d: np.ndarray
    row_max: np.ndarray | None
    group_max: np.ndarray | None
    flags: list
MX_TYPES = ("FP16", "BF16", "E4M3", "E5M2", "E2M1X2", "E1M2X2")


class MatmulFault(RuntimeError):
    """The bundle sequence faulted: .fault (name), .address, .bundle (which step)."""

    def __init__(self, fault: str, address, bundle: str):
        super().__init__(f"{bundle} raised {fault} (address {address:#x})" if address is not None
                         else f"{bundle} raised {fault}")
        self.fault, self.address, self.bundle = fault, address, bundle


def dtype_arg(name, what):
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a DataType name such as 'FP16', got {type(name).__name__}")
    try:
        return tables.dtype(name)
    except (KeyError, ValueError):
        raise ValueError(f"unknown {what} {name!r}; expected a spec DataType name "
                         f"({', '.join(d.name for d in tables.DATATYPES)})") from None


def matrix_arg(x, what, ndim=2):
    arr = np.asarray(x)
    if arr.ndim != ndim or 0 in arr.shape:
        raise ValueError(f"{what} must be a non-empty {ndim}-D array, got shape {arr.shape}")
    return arr


def encode(x, dt: tables.DataType, what: str) -> np.ndarray:
    """Raw element codes (uint64) of `x` in DataType `dt`.

    Integer types take integer values (range-checked, the first offending
    index named). Floating types take unsigned-integer arrays as raw codes,
    checked by pj.layouts' rule (layouts/words.py: a container narrower than
    the element is a TypeError, a code wider than the element a ValueError
    naming its index), or real values that the format represents exactly
    (never rounded silently).
    """
    arr = np.asarray(x)
    mask = (1 << dt.bits) - 1
    if dt.is_integer:
        if arr.dtype.kind not in "iub":
            raise TypeError(f"{what}: {dt.name} takes integer values, got dtype {arr.dtype}")
        lo, hi = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.signed else (0, mask)
        bad = first_outside(arr.astype(np.uint8) if arr.dtype.kind == "b" else arr, lo, hi)
        if bad is not None:
            raise ValueError(f"{what}: values must be in {lo}..{hi} for {dt.name}; "
                             f"{what} holds {bad[1]} at index {bad[0]}")
        return (arr.astype(np.int64) & mask).astype(np.uint64)
    if arr.dtype.kind == "u":        # raw codes: pj.layouts' rule (layouts/words.py)
        return np.asarray(raw_words(arr, dt, what)).astype(np.uint64)
    if arr.dtype.kind not in "fV" and arr.dtype not in _ML.values():
        raise TypeError(f"{what}: {dt.name} takes real values (a float array) or raw codes "
                        f"(an unsigned integer array), got dtype {arr.dtype}")
    vals = arr.astype(np.float64)
    if dt.bits <= 8:
        table = numerics.value_table(dt.name)
        codes = np.zeros(vals.shape, np.uint64)
        for code in range(len(table) - 1, -1, -1):       # lowest code wins (+0 before -0)
            codes[(table[code] == vals) & ~((vals == 0) & (np.signbit(vals) != np.signbit(table[code])))] = code
        found = np.isin(vals, table) | np.isnan(vals)
        nan_code = np.flatnonzero(np.isnan(table))
        if nan_code.size:
            codes[np.isnan(vals)] = nan_code[0]
        exact = found & (~np.isnan(vals) | bool(nan_code.size))
    else:
        np_t = _ML.get(dt.name, np.float32)
        conv = vals.astype(np_t)
        codes = conv.view(np.uint16 if np.dtype(np_t).itemsize == 2 else np.uint32).astype(np.uint64)
        keep = {"TF32": 0xFFFFE000, "HF32": 0xFFFFF000}.get(dt.name)
        exact = (conv.astype(np.float64) == vals) | np.isnan(vals)
        if keep is not None:
            exact &= (codes & np.uint64(~keep & 0xFFFFFFFF)) == 0
    if not np.all(exact):
        bad = vals[~exact].ravel()[0]
        raise ValueError(f"{what}: {bad!r} is not exactly representable in {dt.name}; "
                         f"round it first or pass raw codes as an unsigned integer array")
    return codes


def scale_codes(x, what: str) -> np.ndarray:
    """E8M0 scale codes (uint64): an integer array of raw codes (pj.layouts' rule:
    0..255, or -128..255 in a signed array), or a float array of whole codes
    0..255; nothing wraps silently."""
    e8 = tables.dtype("E8M0")
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        bad = ~((arr >= 0) & (arr <= 255) & (arr == np.floor(arr)))
        if bad.any():
            idx = first_true(bad)
            raise ValueError(f"{what}: E8M0 scale codes are whole numbers 0..255; {what} holds "
                             f"{float(arr[idx])!r} at index {idx}")
        arr = arr.astype(np.uint8)
    return encode(np.asarray(raw_words(arr, e8, what)), e8, what)


def pack_nd(codes: np.ndarray, bits: int) -> tuple[bytes, int]:
    """Row-major ND bytes of a 2-D code array and the row stride in bytes."""
    rows, cols = codes.shape
    if bits == 4:
        stride = (cols + 1) // 2
        out = np.zeros((rows, stride), np.uint8)
        for c in range(cols):
            nib = (codes[:, c] & np.uint64(0xF)).astype(np.uint8)
            out[:, c // 2] |= nib << (4 * (c % 2))
        return out.tobytes(), stride
    width = bits // 8
    raw = codes.astype(np.uint64).astype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width])
    return raw.astype(raw.dtype.newbyteorder("<")).tobytes(), cols * width


def size_code(nbytes: int, what: str) -> int:
    code = max(1, math.ceil(math.log2(max(nbytes, 128) / 64)))
    if code > 10:
        raise ValueError(f"{what} needs {nbytes} bytes per PE; one tile holds at most 64 KiB "
                         f"(split the matrix)")
    return code


def matmul(a, b, *, dtype: str, b_dtype: str | None = None, acc=None, bias=None, scales=None,
           layout: str = "CUBE_M16", profile: str = "ieee", gemv: bool = False,
           pre_quant: int = 0, quant_scale=None, quant_offset=None, shift=None, relu=None,
           row_max: bool = False, row_max_init=None, group_max: int | None = None,
           max_abs: bool = False, rounding: str = "RNE", saturate: bool = False,
           flags: bool = False):
    """D = epilogue([acc +] A @ B [+ bias]) on the model, as numpy (M x N).

    a: M x K, b: K x N in `dtype` / `b_dtype` (default `dtype`): real values
    exactly representable in the format, or raw codes as unsigned ints.
    acc (M x N, ACC form) and bias (length N, BIAS form) are accumulator
    typed (FP32 / S32 / U32). scales=(sa, sb) selects the MX form: E8M0 raw
    codes, sa M x ceil(K/32) and sb ceil(K/32) x N, None for an FP16/BF16 side.
    gemv=True uses the TGEMV form (M must be 1). profile: "ieee" (real
    values; the default here, for golden results) or "portable" (the ASL
    model's raw-word arithmetic).

    The epilogue (B.FPATR, docs/numerics.md "Post-processing"):
    - pre_quant: the PreQuantMode code (0: none; the spec's table, e.g. 1
      FP32->FP16, 3 S32->S8 with scale and offset, 13 S32->S16 shift);
      quant_scale / quant_offset: its scale (a positive FP19 value) and
      offset, scalars for a scalar mode, scalars or length-N vectors for a
      vector one; shift: the shift modes' 1..16 (a vector for mode 12);
    - relu: None, "relu", a scalar alpha (LReLU) or a length-N alpha vector
      (PReLU), each alpha zero or a positive FP19 value;
    - row_max (with row_max_init: a length-M initial vector) and group_max
      (GroupN: 8, 16, 32, 48, ..., 128 columns), max_abs: reductions of the
      raw accumulators;
    - rounding (RNE, RTZ, RTM, RTP, RNA, RTO, RHB) and saturate: B.DATR's
      RMode and Sat, for the modes that read them.
    Returns D as the output type's numpy array (float32 / int32 / uint32
    for no conversion; float16, bfloat16, float8_e4m3fn, int8, int16; S4X2 as
    int8 values; HiF8 as raw uint8 codes), or a MatmulResult when a reduction
    or flags=True is asked for (its .flags: the numeric status flags the
    bundle raised, e.g. ["OF", "NX"] for a saturated quantization). Raises MatmulFault on an architectural fault,
    ValueError/TypeError on misuse.
    """
    if layout not in ("CUBE_M16", "CUBE_M32"):
        raise ValueError(f"layout must be 'CUBE_M16' or 'CUBE_M32', got {layout!r}")
    op = operands(a, b, dtype, b_dtype, profile, acc, bias, scales)
    limit = 16 if layout == "CUBE_M16" else 32
    if op.M > limit:
        raise ValueError(f"{layout} holds at most {limit} rows; a has {op.M} "
                         f"(split the rows or use CUBE_M32, or pj.golden.gemm)")
    if gemv and op.M != 1:
        raise ValueError(f"gemv=True needs a single row (M = 1), got M = {op.M}")
    ep = epilogue(op.acc_t, op.M, op.N, pre_quant, quant_scale, quant_offset, shift, relu, row_max,
                  row_max_init, group_max, max_abs, rounding, saturate)
    if not isinstance(flags, bool):
        raise TypeError(f"flags must be True or False, got {type(flags).__name__}")
    return _execute(op, layout, profile, gemv, ep, flags)


class Operands(NamedTuple):
    """A product's operands, checked and encoded (raw element codes, uint64)."""
    at: tables.DataType        # A's type (the matrix bundle's DataType)
    bt: tables.DataType
    acc_t: tables.DataType     # FP32 / S32 / U32
    a: np.ndarray              # M x K
    b: np.ndarray              # K x N
    c: np.ndarray | None       # M x N (the ACC form's C)
    sa: np.ndarray | None      # M x ceil(K/32) E8M0 (MX forms)
    sb: np.ndarray | None      # ceil(K/32) x N
    bias: np.ndarray | None    # 1 x N (the BIAS form)
    mx: bool

    @property
    def M(self) -> int:
        return int(self.a.shape[0])

    @property
    def K(self) -> int:
        return int(self.a.shape[1])

    @property
    def N(self) -> int:
        return int(self.b.shape[1])


def operands(a, b, dtype, b_dtype, profile, acc, bias, scales) -> Operands:
    """Check and encode a product's operands (shared by matmul and gemm)."""
    at = dtype_arg(dtype, "dtype")
    bt = dtype_arg(b_dtype if b_dtype is not None else dtype, "b_dtype")
    if profile not in ("ieee", "portable"):
        raise ValueError(f"profile must be 'ieee' or 'portable', got {profile!r}")
    if acc is not None and bias is not None:
        raise ValueError("no matrix form takes both acc (ACC) and bias (BIAS)")
    A, B = matrix_arg(a, "a"), matrix_arg(b, "b")
    M, K = A.shape
    if B.shape[0] != K:
        raise ValueError(f"a is {M}x{K} but b is {B.shape[0]}x{B.shape[1]}: inner dimensions differ")
    N = B.shape[1]
    mx = scales is not None
    cls = "S32" if at.is_integer and at.signed else "U32" if at.is_integer else "FP32"
    acc_t = tables.dtype("FP32" if mx else cls)
    c = None
    if acc is not None:
        C = matrix_arg(acc, "acc")
        if C.shape != (M, N):
            raise ValueError(f"acc must be {M}x{N}, got {C.shape}")
        c = encode(C, acc_t, "acc")
    kb = (K + 31) // 32
    sa = sb = None
    if mx:
        if not (isinstance(scales, tuple) and len(scales) == 2):
            raise TypeError("scales must be a (sa, sb) tuple of E8M0 codes (None for an unscaled side)")
        sa, sb = scales
        for side, s, t, shape in (("a", sa, at, (M, kb)), ("b", sb, bt, (kb, N))):
            needs = t.name in ("E4M3", "E5M2", "E2M1X2", "E1M2X2")
            if t.name not in MX_TYPES:
                raise ValueError(f"MX forms take {', '.join(MX_TYPES)}; {side} is {t.name}")
            if needs != (s is not None):
                raise ValueError(f"{t.name} side {side} {'needs' if needs else 'takes no'} E8M0 scales")
            if s is not None and np.asarray(s).shape != shape:
                raise ValueError(f"scales for {side} must be {shape[0]}x{shape[1]}, got {np.asarray(s).shape}")
        sa = None if sa is None else scale_codes(sa, "sa")
        sb = None if sb is None else scale_codes(sb, "sb")
    bias_codes = None
    if bias is not None:
        v = np.asarray(bias)
        if v.ndim != 1 or v.shape[0] != N:
            raise ValueError(f"bias must be a length-{N} vector, got shape {v.shape}")
        bias_codes = encode(v.reshape(1, N), acc_t, "bias")
    return Operands(at, bt, acc_t, encode(A, at, "a"), encode(B, bt, "b"), c, sa, sb, bias_codes, mx)


def operand_loads(op: Operands, layout: str, ep: "Epilogue") -> list:
    """The operand tiles' TLOADs in stream order: (name, TLOAD layout, dtype,
    codes, hand, kind): C, A, sA, B, sB, Bias, then the epilogue's sources."""
    m_lay = "ND2M16" if layout == "CUBE_M16" else "ND2M32"
    e8 = tables.dtype("E8M0")
    loads = []
    if op.c is not None:
        loads.append(("C", m_lay, op.acc_t, op.c, _C, "cube"))
    loads.append(("A", m_lay, op.at, op.a, _A, "cube"))
    if op.sa is not None:
        loads.append(("sA", "ordinary", e8, op.sa, _SA, "row"))
    loads.append(("B", "ND2N8", op.bt, op.b, _B, "cube"))
    if op.sb is not None:
        loads.append(("sB", "ordinary", e8, op.sb, _SB, "row"))
    if op.bias is not None:
        loads.append(("Bias", "ordinary", op.acc_t, op.bias, _BIAS, "row"))
    return loads + list(ep.loads)


# ---------------------------------------------------------------- the epilogue (B.FPATR)


class Epilogue(NamedTuple):
    fields: tuple              # B.FPATR's nine fields (PreQuantMode, ReLU, GroupN code, RowMax,
                               # GroupMax, RowMaxIn, MaxAbs, 0, 0)
    loads: list                # post-process source tiles, stream order
    scalars: list              # B.IOR parameter Words (quant first)
    out: tables.DataType       # D's element type
    row_cols: int              # 0, or RowMaxOut's 1
    group_cols: int            # 0, or GroupMaxOut's ceil(N / GroupN)
    rmode: str                 # B.DATR RMode name
    sat: int

    @property
    def fpatr(self) -> str:
        """The B.FPATR line."""
        return "B.FPATR " + ", ".join(str(v) for v in self.fields)


def _fp19(x, what: str, zero_ok: bool) -> int:
    """The FP19 code of a real value it holds exactly: positive normal (or 0)."""
    try:
        f = np.float32(x)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a real number, got {type(x).__name__}") from None
    bits = int(f.view(np.uint32))
    e = bits >> 23 & 0xFF
    if zero_ok and bits == 0:
        return 0
    if float(f) != float(x) or bits & 0x1FFF or bits >> 31 or e == 0 or e == 0xFF:
        raise ValueError(f"{what} must be {'zero or ' if zero_ok else ''}a positive normal FP19 "
                         f"value (8-bit exponent, 10-bit fraction) held exactly, got {x!r}")
    return bits >> 13


def _per_column(x, N: int, what: str) -> list:
    arr = np.asarray(x)
    if arr.ndim == 0:
        return [arr.item()] * N
    if arr.shape != (N,):
        raise ValueError(f"{what} must be a scalar or a length-{N} vector, got shape {arr.shape}")
    return arr.tolist()


def _quant_words(mode: int, N: int, scale, offset, shift, vector: bool) -> list:
    """Quant parameter Words (one, or one per column) for PreQuantMode `mode`."""
    from ..ops.postprocess import OFFSET_WIDTH, SHIFT_MODES
    n = N if vector else 1
    if mode in SHIFT_MODES:
        if shift is None or scale is not None or offset is not None:
            raise ValueError(f"PreQuantMode {mode} shifts: give shift (1..16), no quant_scale/offset")
        shifts = _per_column(shift, n, "shift") if vector else [shift]
        if not all(isinstance(v, (int, np.integer)) and 1 <= v <= 16 for v in shifts):
            raise ValueError(f"shift must be an integer 1..16 (or {N} of them), got {shift!r}")
        return [(int(v) - 1) << 32 for v in shifts]
    if shift is not None:
        raise ValueError(f"shift is for PreQuantMode 12 and 13, not {mode}")
    if scale is None:
        raise ValueError(f"PreQuantMode {mode} needs quant_scale")
    width = int(OFFSET_WIDTH[mode])
    scales = _per_column(scale, n, "quant_scale") if vector else [scale]
    if not vector and np.ndim(scale) != 0:
        raise ValueError(f"PreQuantMode {mode} takes one scalar quant_scale")
    offsets = [0] * n if offset is None else (_per_column(offset, n, "quant_offset") if vector
                                              else [offset])
    if not vector and offset is not None and np.ndim(offset) != 0:
        raise ValueError(f"PreQuantMode {mode} takes one scalar quant_offset")
    words = []
    for s_, o in zip(scales, offsets):
        code = _fp19(s_, "quant_scale", zero_ok=False)
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if width else (0, 0)
        if not isinstance(o, (int, np.integer)) or not lo <= o <= hi:
            raise ValueError(f"quant_offset must be an integer in {lo}..{hi} for PreQuantMode "
                             f"{mode}, got {o!r}")
        words.append(code << 13 | ((int(o) & ((1 << width) - 1)) << 37 if width else 0))
    return words


def epilogue(acc_t, M: int, N: int, pre_quant, quant_scale, quant_offset, shift, relu, row_max,
              row_max_init, group_max, max_abs, rounding, saturate) -> Epilogue:
    from ..ops.postprocess import OUTPUT_TYPE, SCALAR_MODES, VECTOR_MODES, S32_MODES, FP32_MODES
    if not isinstance(pre_quant, (int, np.integer)) or not (
            pre_quant == 0 or pre_quant in S32_MODES or pre_quant in FP32_MODES):
        raise ValueError(f"pre_quant must be a PreQuantMode code (0-5, 12, 13, 16-20, 23-28, "
                         f"32-39), got {pre_quant!r}")
    if pre_quant in S32_MODES and acc_t.name != "S32" or pre_quant in FP32_MODES and acc_t.name != "FP32":
        raise ValueError(f"PreQuantMode {pre_quant} takes an "
                         f"{'S32' if pre_quant in S32_MODES else 'FP32'} accumulator; "
                         f"these operands accumulate in {acc_t.name}")
    if rounding not in _ROUNDING:
        raise ValueError(f"rounding must be one of {', '.join(_ROUNDING)}, got {rounding!r}")
    loads, scalars = [], []
    u64 = tables.dtype("U64")
    if pre_quant == 0 and any(x is not None for x in (quant_scale, quant_offset, shift)):
        raise ValueError("quant_scale, quant_offset and shift need a pre_quant mode")
    if pre_quant in (1, 16) and any(x is not None for x in (quant_scale, quant_offset, shift)):
        raise ValueError(f"PreQuantMode {pre_quant} takes no parameters")
    # post-process sources in stream order: RowMaxIn, quant vector, PReLU vector
    if row_max_init is not None:
        if not row_max:
            raise ValueError("row_max_init needs row_max=True")
        init = np.asarray(row_max_init)
        if init.shape != (M,):
            raise ValueError(f"row_max_init must be a length-{M} vector, got shape {init.shape}")
        loads.append(("RowMaxIn", "ordinary", acc_t, encode(init.reshape(M, 1), acc_t,
                                                            "row_max_init"), _RIN, "row"))
    if pre_quant in VECTOR_MODES:
        words = _quant_words(int(pre_quant), N, quant_scale, quant_offset, shift, True)
        loads.append(("quant", "ordinary", u64, np.array([words], np.uint64), _QUANT, "row"))
    elif pre_quant in SCALAR_MODES:
        scalars += _quant_words(int(pre_quant), N, quant_scale, quant_offset, shift, False)
    relu_mode = 0
    if relu is not None:
        if isinstance(relu, str):
            if relu != "relu":
                raise ValueError(f"relu must be None, 'relu', an alpha or a length-{N} alpha "
                                 f"vector, got {relu!r}")
            relu_mode = 1
        elif np.ndim(relu) == 0:
            relu_mode = 2
            scalars.append(_fp19(relu, "relu alpha", zero_ok=True))
        else:
            relu_mode = 3
            alphas = [_fp19(v, "relu alpha", zero_ok=True) for v in _per_column(relu, N, "relu")]
            loads.append(("alpha", "ordinary", u64, np.array([alphas], np.uint64), _ALPHA, "row"))
    group_code = 0
    if group_max is not None:
        if group_max not in tables.FPATR_GROUP_N[1:]:
            raise ValueError(f"group_max must be one of {tables.FPATR_GROUP_N[1:]} columns, "
                             f"got {group_max!r}")
        group_code = tables.FPATR_GROUP_N.index(group_max)
    if max_abs and not (row_max or group_max):
        raise ValueError("max_abs needs row_max or group_max")
    out = acc_t if pre_quant == 0 else tables.DTYPE_BY_CODE[int(OUTPUT_TYPE[pre_quant])]
    fields = (int(pre_quant), relu_mode, group_code, int(bool(row_max)), int(group_code > 0),
              int(row_max_init is not None), int(bool(max_abs)), 0, 0)
    return Epilogue(fields, loads, scalars, out, 1 if row_max else 0,
                     -(-N // group_max) if group_max else 0, _ROUNDING[rounding], int(bool(saturate)))


# The private machines. Compiles cost seconds, so nothing about the work may
# reach a static shape: a call picks the first size class its operands fit
# (payload Words per tile, GM bytes), and every call of one class and profile
# pads its words to one length and bounds its commits by one number, so all
# of them run one compiled program. The small class holds every shape up to
# M = 32 rows and K, N up to 64 (the 64x64 B of a 16/32-bit type is 4096
# Words, its ND bytes with A, C, D and the scales well under 64 KiB); the
# large one anything a tile can hold (64 KiB per PE, the model's 32768-Word
# bound), with up to six 64 KiB GM blocks (C or Bias, A, sA, B, sB, D).
SIZE_CLASSES = (("small", 4096, 64 << 10), ("large", 32768, 512 << 10))
STREAM_WORDS = 128     # the longest sequence (MX.ACC, eight TLOADs, three TSTOREs) is about 110 words
MAX_COMMITS = 12       # bundles: at most eight TLOADs, the matrix bundle, three TSTOREs
_CONFIGS: dict = {}    # (class, profile) -> (MachineConfig, reset State)


def _machine(words_needed: int, gm_needed: int, profile: str):
    """The class config and its reset State (cached: States are immutable)."""
    for name, tile_words, gm_bytes in SIZE_CLASSES:   # noqa: B007 (the class found is used below)
        if words_needed <= tile_words and gm_needed <= gm_bytes:
            break
    else:
        raise ValueError(f"the operands need {words_needed} payload Words in one tile and "
                         f"{gm_needed} bytes of GM; pj.ops.matmul holds at most {tile_words} "
                         f"Words per tile (the model's tile bound) and {gm_bytes} bytes "
                         f"(split the matrix)")
    key = (name, profile)
    if key not in _CONFIGS:
        cfg = MachineConfig(gm_bytes=gm_bytes, tile_words=tile_words, hand_slots=4,
                            tile_capacity=(1 << 31) - 1, profile=profile)
        _CONFIGS[key] = (cfg, reset(cfg))
    return _CONFIGS[key]


def _run(template, cfg, gm: bytes, gprs: dict, words):
    """Run `words` from `template` with `gm` at address 0 and the GPRs set;
    returns (fault name, fault address or None, executed, final GM as numpy,
    the numeric flags raised: the template's are clear)."""
    if len(words) > STREAM_WORDS:
        raise AssertionError(f"matmul sequence of {len(words)} words exceeds {STREAM_WORDS}")
    mem = np.zeros(cfg.gm_bytes, np.uint8)
    mem[: len(gm)] = np.frombuffer(bytes(gm), np.uint8)
    gpr = np.zeros(template.gpr.shape, np.uint64)
    for r, v in gprs.items():
        gpr[0, tables.gpr_index(r)] = v
    padded = np.zeros(STREAM_WORDS, np.uint32)
    padded[: len(words)] = words

    @x64
    def go():
        st = template.replace(gm=jnp.asarray(mem), gpr=jnp.asarray(gpr))
        out, executed = run_stream(st, jnp.asarray(padded), jnp.int32(len(words)), jnp.int32(0),
                                   jnp.bool_(False), cfg, MAX_COMMITS, _EFFECTS, jnp.int64(0))
        fault = tables.FAULTS[int(out.fault)]
        addr = int(out.fault_address) if fault in tables.MEMORY_FAULTS else None
        return fault, addr, int(executed), np.asarray(out.gm), int(out.numeric_flags)
    return go()


_EFFECTS = frozenset({"TLOAD", "TSTORE", "MATMUL"})
# the GPRs a sequence may set (zero, sp and ra stay untouched); a value is given
# one register, however many B.IORs name it
_REGS = ("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "s0", "s1", "s2", "s3", "s4", "s5", "s6",
         "s7", "s8", "x0", "x1", "x2", "x3")
MATRIX_OPS = {(False, False, False): "TMATMUL", (False, False, True): "TMATMUL.BIAS",
              (False, True, False): "TMATMUL.ACC", (True, False, False): "TMATMULMX",
              (True, False, True): "TMATMULMX.BIAS", (True, True, False): "TMATMULMX.ACC"}


class Part(NamedTuple):
    """One PE's share of a per-PE TLOAD or TSTORE on the Core: rows row0 ..
    row0 + rows - 1 of the operand, moved by PE `pe` alone (its own mask bit,
    its own GPRs)."""
    pe: int
    row0: int
    rows: int


def pe_mask(pe: int) -> str:
    """The B.IOT/B.IOS mask that selects PE `pe` alone."""
    return tables.mask_str(tables.pe_bit(pe))


def _bases(at: int, stride: int, parts: list) -> tuple:
    """Each PE's base address of its rows of an area at `at` (PEs with no part: `at`)."""
    base = [at] * tables.NUM_PES
    for p in parts:
        base[p.pe] = at + p.row0 * stride
    return tuple(base)


class Program:
    """The bundle sequence being built: its assembly text (one list of lines a
    bundle), the GM image its operands and outputs live in, the GPRs its
    B.IORs name (a value, the same in every PE's file, or four, one a PE),
    and the payload Words its largest Local tile (and Shared register) needs."""

    def __init__(self):
        self.regs = iter(_REGS)
        self.gm = bytearray()
        self.gprs = {}                   # register name -> int, or a tuple of 4 (PE0..PE3)
        self.text = []
        self.steps = []                  # (first word index, bundle name)
        self.words_needed = 1
        self.shared_words_needed = 0
        self.used = {}                   # hand -> tiles allocated in it (loads, D and outputs)
        self.placed = {}                 # operand name -> (GM address, row stride in bytes)

    def place(self, data: bytes) -> int:
        """GM address of `data`, 64-byte aligned after what is there."""
        base = (len(self.gm) + 63) // 64 * 64
        self.gm.extend(b"\0" * (base - len(self.gm)))
        self.gm.extend(data)
        return base

    def reg(self, value) -> str:
        """A GPR holding `value` (an int, or one int a PE): the one that already
        holds it, else a fresh one."""
        if isinstance(value, tuple) and len(set(value)) == 1:
            value = value[0]
        for r, v in self.gprs.items():
            if v == value:
                return r
        r = next(self.regs)
        self.gprs[r] = value
        return r

    def gpr_pair(self, base, stride: int) -> str:
        """'B.IOR base, stride' with GPRs holding them (base: an int, or one a PE)."""
        return f"B.IOR {self.reg(base)}, {self.reg(stride)}"

    def gpr_values(self) -> list:
        """(GPR index, [PE0's value, .., PE3's]) for every register the sequence sets."""
        return [(tables.gpr_index(r), list(v) if isinstance(v, tuple) else [v] * tables.NUM_PES)
                for r, v in self.gprs.items()]

    def bundle(self, name: str, lines: list) -> None:
        self.steps.append((sum(len(t) for t in self.text), name))
        self.text.append(lines + ["BSTOP"])

    def load(self, name, lay, dt, codes, hand, kind, parts=None) -> str:
        """A TLOAD of `codes` into the hand's next tile; its TileIndex name (e.g. 'T#1').

        parts=None: one TLOAD on PE0 (mask 1000). Otherwise one TLOAD a Part,
        each of its rows on its PE alone; every PE takes the tile at the same
        TileIndex and at the size its largest part needs."""
        self.used[hand] = self.used.get(hand, 0) + 1
        rows, cols = codes.shape
        data, stride = pack_nd(codes, dt.bits)
        at = self.place(data)
        self.placed[name] = (at, stride)
        on_core = parts is not None
        parts = parts if on_core else [Part(0, 0, rows)]
        most = max(p.rows for p in parts)
        ior = self.gpr_pair(_bases(at, stride, parts), stride)
        if kind == "cube":
            g = cube_geometry(tables.cube_layout({"ND2M16": "CUBE_M16", "ND2M32": "CUBE_M32",
                                                       "ND2N8": "CUBE_N8"}[lay]), dt.name, most, cols)
            size, need = g.required_bytes, g.storage_elements
            head = [f"B.DATR {{{lay}, DTYPE_NONE, Null}}"]
            col_dims = []
        else:
            col = 1 << (cols - 1).bit_length()
            size = max(128, 1 << (most * col * dt.bits // 8 - 1).bit_length())
            need, head = size * 8 // dt.bits, []
            col_dims = [f"B.DIM zero, {col}, ->LB2"]
        self.words_needed = max(self.words_needed, need)
        code = size_code(size, name)
        for p in parts:
            self.bundle(f"TLOAD of {name}" + (f" on PE{p.pe}" if on_core else ""),
                        [f"BSTART.TLOAD {dt.name}"] + head
                        + [f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {p.rows}, ->LB1"] + col_dims
                        + [ior, f"B.IOT mask={pe_mask(p.pe)}, last, ->{hand}<{code}>"])
        return f"{hand}#{self.used[hand]}"

    def source(self) -> str:
        """The sequence's assembly text."""
        return "\n".join(line for t in self.text for line in t)

    def step_at(self, executed: int) -> str:
        """The name of the bundle that word `executed` belongs to."""
        return [name for first, name in self.steps if first <= executed][-1]

    def store(self, name: str, dt: str, index: str, rows: int, cols: int, row_bytes: int,
              datr=None, parts=None) -> int:
        """A TSTORE of tile `index` (rows x cols) to a fresh GM area; its address.
        parts: as `load`'s, each PE storing its own rows of the area."""
        at = self.place(bytes(rows * row_bytes))
        on_core = parts is not None
        parts = parts if on_core else [Part(0, 0, rows)]
        ior = self.gpr_pair(_bases(at, row_bytes, parts), row_bytes)
        for p in parts:
            self.bundle(f"TSTORE of {name}" + (f" on PE{p.pe}" if on_core else ""),
                        [f"BSTART.TSTORE {dt}"] + ([datr] if datr else [])
                        + [f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {p.rows}, ->LB1", ior,
                           f"B.IOT {index}, mask={pe_mask(p.pe)}, last"])
        return at

    def matrix(self, op: "Operands", ep: "Epilogue", dims: tuple, tiles: list, codes: list,
               mask: str = "1000", shared: tuple = (), gemv: bool = False, label: str = "") -> None:
        """The matrix bundle: `dims` (LB0 M or group_M, LB1 N, LB2 K), the
        epilogue's B.FPATR and scalar B.IOR, one B.IOS a Shared source, the
        Local sources two a B.IOT, then D and the reduction outputs (SizeCodes
        `codes`) each alone, every binding with `mask`."""
        name = MATRIX_OPS[(op.mx, op.c is not None, op.bias is not None)]
        if gemv:
            name = name.replace("TMATMUL", "TGEMV")
        lines = [f"BSTART.{name} {op.at.name}"]
        if op.bt.code != op.at.code or ep.rmode != "Default" or ep.sat:
            b_name = op.bt.name if op.bt.code != op.at.code else "DTYPE_NONE"
            lines.append(f"B.DATR {{NORM, {b_name}, Zero, EQ, {ep.rmode}, {ep.sat}, 0}}")
        lines += [ep.fpatr] + [f"B.DIM zero, {v}, ->LB{i}" for i, v in enumerate(dims)]
        if ep.scalars:
            lines.append(f"B.IOR {', '.join(self.reg(v) for v in ep.scalars)}")
        lines += [f"B.IOS S{sid}, mask={mask}" for sid in shared]
        # sources in stream order two a binding, then D and the reduction outputs alone
        bindings = [f"B.IOT {', '.join(tiles[i:i + 2])}, mask={mask}" for i in range(0, len(tiles), 2)]
        bindings += [f"B.IOT mask={mask}, ->{D_HAND}<{code}>" for code in codes]
        self.used[D_HAND] = self.used.get(D_HAND, 0) + len(codes)
        bindings[-1] = bindings[-1].replace(f"mask={mask}", f"mask={mask}, last")
        self.bundle(f"{label}{name}", lines + bindings)


class Sequence(NamedTuple):
    """One product's bundle sequence, built: the program and where its outputs land."""
    prog: "Program"
    out: tables.DataType       # D's element type
    d_at: int                  # D's GM address (ND, row_bytes a row)
    row_bytes: int
    aux: list                  # (name, columns) of RowMax / GroupMax
    aux_at: list               # their GM addresses (4 bytes an element)


def build_sequence(op: Operands, layout: str, gemv: bool, ep: Epilogue) -> Sequence:
    """The bundles of one product: TLOADs of the operands, the matrix bundle,
    TSTOREs of D and the reduction outputs."""
    M, N, K = op.M, op.N, op.K
    prog = Program()
    tiles = [prog.load(*ld) for ld in operand_loads(op, layout, ep)]
    codes, aux = output_codes(prog, layout, ep, M, N)
    prog.matrix(op, ep, (M, N, K), tiles, codes, gemv=gemv)
    return store_outputs(prog, op, ep, layout, M, N, aux)


def output_codes(prog: Program, layout: str, ep: Epilogue, rows: int, N: int) -> tuple[list, list]:
    """(SizeCodes of D and the reduction outputs, their (name, columns)) for D of
    `rows` x N in `layout` and the epilogue's element type, RowMaxOut and
    GroupMaxOut RowMajor; the program's payload need grows to hold them."""
    d_geom = cube_geometry(layout, ep.out.name, rows, N)
    aux = [(name, c) for name, c in (("RowMax", ep.row_cols), ("GroupMax", ep.group_cols)) if c]
    codes = [size_code(d_geom.required_bytes, "D")] + [
        size_code(4 * rows * (1 << (c - 1).bit_length()), name) for name, c in aux]
    prog.words_needed = max([prog.words_needed, d_geom.storage_elements] + [rows * c for _, c in aux])
    return codes, aux


def store_outputs(prog: Program, op: Operands, ep: Epilogue, layout: str, rows: int, N: int, aux: list,
                  parts=None) -> Sequence:
    """TSTOREs of D (layout -> ND) and the reduction outputs, `rows` rows of
    each (parts: as Program.store's); the built Sequence."""
    store = "M162ND" if layout == "CUBE_M16" else "M322ND"
    row_bytes = -(-N * ep.out.bits // 8)
    d_at = prog.store("D", ep.out.name, f"{D_HAND}#1", rows, N, row_bytes,
                      datr=f"B.DATR {{{store}, DTYPE_NONE, Null}}", parts=parts)
    aux_at = [prog.store(name, op.acc_t.name, f"{D_HAND}#{k + 2}", rows, c, c * 4, parts=parts)
              for k, (name, c) in enumerate(aux)]
    return Sequence(prog, ep.out, d_at, row_bytes, aux, aux_at)

def _execute(op: Operands, layout: str, profile: str, gemv: bool, ep: Epilogue, with_flags: bool):
    seq = build_sequence(op, layout, gemv, ep)
    prog, M, N = seq.prog, op.M, op.N
    cfg, template = _machine(prog.words_needed, len(prog.gm), profile)
    words = assemble(prog.source())
    fault, address, executed, mem, raised = _run(template, cfg, prog.gm, prog.gprs, words)
    if fault != "Fault_None":
        raise MatmulFault(fault, address, prog.step_at(executed))
    d = read_d(mem[seq.d_at: seq.d_at + M * seq.row_bytes], seq.out, M, N)
    if not seq.aux:
        return MatmulResult(d, None, None, tables.flag_names(raised)) if with_flags else d
    reads = {name: read_acc(mem[a: a + M * c * 4], op.acc_t, M, c)
             for (name, c), a in zip(seq.aux, seq.aux_at)}
    rmax = reads["RowMax"][:, 0] if "RowMax" in reads else None
    return MatmulResult(d, rmax, reads.get("GroupMax"), tables.flag_names(raised))


def read_acc(raw: np.ndarray, acc_t: tables.DataType, rows: int, cols: int) -> np.ndarray:
    """Accumulator-typed ND bytes (4 a Word) as int32 / uint32 / float32."""
    return raw.view("<u4").reshape(rows, cols).view(ACC_NP[acc_t.name]).copy()


def read_d(raw: np.ndarray, out: tables.DataType, M: int, N: int) -> np.ndarray:
    """D's ND bytes as the output type's numpy array (S4X2: nibbles, sign-extended)."""
    if out.bits == 4:
        packed = raw.reshape(M, -1)
        nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(M, -1)[:, :N].astype(np.int8)
        return np.where(nib > 7, nib - 16, nib).astype(np.int8)
    view = {8: "<u1", 16: "<u2", 32: "<u4"}[out.bits]
    return raw.view(view).reshape(M, N).view(OUT_NP[out.name]).copy()
