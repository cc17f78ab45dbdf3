"""Exact value codecs of the matrix family's ``ieee`` numeric profile.

Pure numpy + ml_dtypes (no JAX): the JAX executor and the reference model both
build on these. Every decoder returns the *exact* real value of a raw element
encoding as float64 (every value of every format here is a float64 exactly),
NaN for NaN encodings and +-inf for infinities.

Formats follow the pto-spec format pages ``docs/arch/data-types/formats/<fmt>.md``
(generated from ``asl/arch/data-types/formats/<fmt>.asl``); each decoder below
names its page. Bit widths and type codes come from :mod:`ptojax.tables`.

Decisions (see docs/numerics.md, "Number formats (ieee profile)"):

* Bits a format requires to be zero are ignored when decoding, i.e. the element
  is decoded as if they were zero. The spec classifies such encodings as
  ``InvalidEncoding`` (``TileNumericEncodingValid`` in
  ``docs/arch/features/mx-formats.md``): TF32 with any of bits 12..0 set, HF32
  with any of bits 11..0 set, E3M2 / E2M3 with bit 7 or 6 set. Element-wise
  operations reject those; the ASL matrix path does not check them, and
  docs/matmul-decisions.md (profile ieee) decodes TF32/HF32 "with the bits
  below their mantissa width ignored". The same rule is applied to E3M2/E2M3.
  :func:`encoding_valid` reports the spec's validity for callers that care.
  Consequence: an FP32-style NaN pattern whose only nonzero fraction bits lie
  below the TF32/HF32 width (e.g. 0x7F800001) decodes to an infinity.
* Carrier words: only the low ``tables.dtype(name).bits`` bits are read.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

from . import tables

__all__ = [
    "FLOAT_INPUTS", "MATRIX_FLOAT_OPERANDS", "SCALE_FORMAT", "INT_INPUTS",
    "value_table", "decode_float", "decode_int", "encoding_valid",
    "round_fp32_bits", "fp32_value", "FP32_CANONICAL_NAN",
]

# Floating element types of the matrix family (ordinary and MX operands) ...
MATRIX_FLOAT_OPERANDS: tuple[str, ...] = (
    "FP32", "TF32", "HF32", "FP16", "BF16", "HiF8",
    "E4M3", "E5M2", "E3M2", "E2M3", "E2M1X2", "E1M2X2",
)
# ... and the MX block-scale type.
SCALE_FORMAT = "E8M0"
# Every floating type decode_float handles for the matrix family.
FLOAT_INPUTS: tuple[str, ...] = MATRIX_FLOAT_OPERANDS + (SCALE_FORMAT,)

INT_INPUTS: tuple[str, ...] = ("S32", "S16", "S8", "S4X2", "U32", "U16", "U8", "U4X2")

FP32_CANONICAL_NAN = 0x7FC00000

_U64_MASK = (1 << 64) - 1

# Kept fraction bits of the binary32-layout formats (tf32.md: 10, hf32.md: 11).
_WIDE_FRACTION_BITS = {"FP32": 23, "TF32": 10, "HF32": 11}


# ---------------------------------------------------------------- helpers


def _as_u64(raw: Any) -> NDArray[np.uint64]:
    """Raw carrier words as a uint64 array (negative ints wrap two's-complement).

    Python ints and sequences of them are taken modulo 2**64 exactly (numpy
    would turn a list mixing small ints and ints >= 2**63 into float64).
    """
    if isinstance(raw, (np.ndarray, np.generic)):
        a = np.asarray(raw)
    else:
        a = np.asarray(raw, dtype=object)
    if a.dtype == object:
        def word(v: object) -> int:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"raw encodings must be integers, got {type(v).__name__}")
            return int(v) & _U64_MASK
        return np.asarray(np.vectorize(word, otypes=[np.uint64])(a), dtype=np.uint64).reshape(a.shape)
    if a.dtype.kind not in "iu":
        raise TypeError(f"raw encodings must be an integer array, got dtype {a.dtype}")
    return a.astype(np.uint64)  # int64 -> uint64 wraps modulo 2**64


def _low(raw: Any, bits: int) -> NDArray[np.uint64]:
    return np.asarray(_as_u64(raw) & np.uint64((1 << bits) - 1))


def _float_dtype(name: tables.DataType | int | str) -> tables.DataType:
    d = tables.dtype(name)
    if d.kind != "float":
        raise ValueError(f"{d.name} is not a floating type")
    return d


# ---------------------------------------------------------------- small formats


def _ieee_like(code: int, exp_bits: int, frac_bits: int, bias: int) -> float:
    """Sign-magnitude binary value of `code` with no special encodings.

    Exponent field 0 is the subnormal range (fraction * 2^(1-bias-frac_bits)),
    otherwise (2^frac_bits + fraction) * 2^(e-bias-frac_bits).
    """
    width = 1 + exp_bits + frac_bits
    sign = -1.0 if (code >> (width - 1)) & 1 else 1.0
    e = (code >> frac_bits) & ((1 << exp_bits) - 1)
    f = code & ((1 << frac_bits) - 1)
    if e == 0:
        return sign * float(np.ldexp(float(f), 1 - bias - frac_bits))
    return sign * float(np.ldexp(float((1 << frac_bits) | f), e - bias - frac_bits))


def _table_e4m3() -> NDArray[np.float64]:
    # e4m3.md: 1/4/3, bias 7, no infinity; S.1111.111 is the (only) NaN.
    t = np.array([_ieee_like(c, 4, 3, 7) for c in range(256)])
    t[[0x7F, 0xFF]] = np.nan
    return t


def _table_e5m2() -> NDArray[np.float64]:
    # e5m2.md: 1/5/2, bias 15, IEEE specials: exponent 31 is inf (fraction 0) or NaN.
    t = np.array([_ieee_like(c, 5, 2, 15) for c in range(256)])
    for c in range(256):
        if (c >> 2) & 0x1F == 0x1F:
            t[c] = (np.inf if c & 3 == 0 else np.nan) * (-1.0 if c & 0x80 else 1.0)
    return t


def _table_e3m2() -> NDArray[np.float64]:
    # e3m2.md: 6-bit lane 1/3/2 in an 8-bit carrier, bias 3, no inf/NaN.
    # Bits 7:6 must be zero (invalid otherwise): ignored here.
    return np.array([_ieee_like(c & 0x3F, 3, 2, 3) for c in range(256)])


def _table_e2m3() -> NDArray[np.float64]:
    # e2m3.md: 6-bit lane 1/2/3 in an 8-bit carrier, bias 1, no inf/NaN. Bits 7:6 ignored.
    return np.array([_ieee_like(c & 0x3F, 2, 3, 1) for c in range(256)])


def _table_e2m1x2() -> NDArray[np.float64]:
    # e2m1x2.md: 4-bit lane 1/2/1, bias 1, no inf/NaN; exponent 0 with fraction 1 is 0.5.
    return np.array([_ieee_like(c, 2, 1, 1) for c in range(16)])


def _table_e1m2x2() -> NDArray[np.float64]:
    # e1m2x2.md: 4-bit lane 1/1/2, bias 1, no inf/NaN: exponent 0 -> fraction/4,
    # exponent 1 -> 1 + fraction/4 (0, .25, .5, .75, 1, 1.25, 1.5, 1.75).
    return np.array([_ieee_like(c, 1, 2, 1) for c in range(16)])


def _table_e8m0() -> NDArray[np.float64]:
    # e8m0.md: unsigned power of two 2^(code-127); 0xFF is NaN; no zero, no inf.
    t = np.array([float(np.ldexp(1.0, c - 127)) for c in range(256)])
    t[0xFF] = np.nan
    return t


# HiF8 (hif8.md): sign bit 7, then a prefix-coded "dot" field selecting how many
# of the remaining bits are exponent and how many fraction:
#   prefix   class     exponent bits  fraction bits
#   11       D4        4              1
#   10       D3        3              2
#   01       D2        2              3
#   001      D1        1              3
#   0001     D0        0              3
#   0000     denormal  -              3
# The exponent field is sign-magnitude with an implicit leading one: its first
# bit is the exponent's sign (1 = negative), the other n-1 bits follow a 1, so
# D1 gives +-1, D2 +-{2,3}, D3 +-{4..7}, D4 +-{8..15}; D0 has exponent 0.
# Value = (1 + fraction / 2^fbits) * 2^exponent. Denormal codes with fraction m
# in 1..7 are 2^(m-23) (2^-22 .. 2^-16); fraction 0 is zero. Specials: 0x80 (the
# would-be negative zero) is the only NaN, 0x6F / 0xEF (the would-be
# +-1.5 * 2^15) are +-inf. There is no negative zero.
_HIF8_DOTS = (  # (prefix value, prefix length, exponent bits, fraction bits)
    (0b11, 2, 4, 1),
    (0b10, 2, 3, 2),
    (0b01, 2, 2, 3),
    (0b001, 3, 1, 3),
    (0b0001, 4, 0, 3),
)


def _hif8_value(code: int) -> float:
    if code == 0x80:
        return float("nan")
    if code in (0x6F, 0xEF):
        return float("-inf") if code & 0x80 else float("inf")
    sign = -1.0 if code & 0x80 else 1.0
    body = code & 0x7F
    if body < 8:  # dot field 0000: denormal
        return 0.0 if body == 0 else sign * float(np.ldexp(1.0, body - 23))
    for prefix, plen, ebits, fbits in _HIF8_DOTS:
        if body >> (7 - plen) == prefix:
            rest = body & ((1 << (7 - plen)) - 1)          # exponent bits then fraction bits
            frac = rest & ((1 << fbits) - 1)
            efield = rest >> fbits
            if ebits == 0:
                exponent = 0
            else:
                magnitude = (1 << (ebits - 1)) | (efield & ((1 << (ebits - 1)) - 1))
                exponent = -magnitude if efield >> (ebits - 1) else magnitude
            return sign * float(np.ldexp(float((1 << fbits) | frac), exponent - fbits))
    raise AssertionError(f"HiF8 code {code:#04x} matched no dot field")  # pragma: no cover


def _table_hif8() -> NDArray[np.float64]:
    return np.array([_hif8_value(c) for c in range(256)])


_TABLE_BUILDERS = {
    "HiF8": _table_hif8, "E4M3": _table_e4m3, "E5M2": _table_e5m2,
    "E3M2": _table_e3m2, "E2M3": _table_e2m3, "E2M1X2": _table_e2m1x2,
    "E1M2X2": _table_e1m2x2, "E8M0": _table_e8m0,
}


@functools.lru_cache(maxsize=None)
def _value_table(name: str) -> NDArray[np.float64]:
    t = _TABLE_BUILDERS[name]().astype(np.float64)
    assert t.shape == (1 << tables.dtype(name).bits,)
    t.setflags(write=False)
    return t


def value_table(name: tables.DataType | int | str) -> NDArray[np.float64]:
    """float64 table (read-only, cached) of the exact value of every raw code.

    For the floating formats of at most 8 bits: HiF8, E4M3, E5M2, E3M2, E2M3,
    E8M0 (256 entries) and E2M1X2, E1M2X2 (16 entries, one 4-bit lane). Pages:
    docs/arch/data-types/formats/{hif8,e4m3,e5m2,e3m2,e2m3,e8m0,e2m1x2,e1m2x2}.md.
    NaN codes hold NaN, infinity codes +-inf. E3M2/E2M3 codes with bit 7 or 6
    set (invalid encodings in the spec) hold the value of their low 6 bits.
    """
    d = _float_dtype(name)
    if d.name not in _TABLE_BUILDERS:
        raise ValueError(f"value_table covers the <=8-bit matrix float formats "
                         f"{', '.join(_TABLE_BUILDERS)}; got {d.name}")
    return _value_table(d.name)


# ---------------------------------------------------------------- decoders


def fp32_value(bits: Any) -> NDArray[np.float64]:
    """Exact float64 value of binary32 bit patterns (fp32.md); NaN stays NaN."""
    b = np.asarray(_as_u64(bits) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaNs quieten silently
        return np.asarray(b.view(np.float32).astype(np.float64))


def decode_float(name: tables.DataType | int | str, raw: Any) -> NDArray[np.float64]:
    """Exact float64 value of raw floating encodings of type `name`.

    Reads the low ``bits`` bits of each (uint64) carrier word.

    * FP32 (fp32.md), FP16 (fp16.md), BF16 (bf16.md), FP64 (fp64.md): IEEE-style
      binary reinterpretation (BF16 = the high half of a binary32).
    * TF32 (tf32.md): binary32 layout, 8-bit exponent bias 127, 10 fraction
      bits (22..13); HF32 (hf32.md): same with 11 fraction bits (22..12).
      Subnormals, signed zeros, inf (exponent 255, kept fraction 0) and NaN
      (exponent 255, kept fraction != 0) as in binary32. The spec requires the
      bits below the kept fraction to be zero (otherwise InvalidEncoding); they
      are ignored here (decoded as zero), per docs/matmul-decisions.md.
    * HiF8, E4M3, E5M2, E3M2, E2M3, E2M1X2, E1M2X2, E8M0: :func:`value_table`.
    """
    d = _float_dtype(name)
    if d.name in _WIDE_FRACTION_BITS:
        drop = 23 - _WIDE_FRACTION_BITS[d.name]
        keep = (0xFFFFFFFF >> drop) << drop
        return fp32_value(np.asarray(_low(raw, 32) & np.uint64(keep)))
    if d.name == "FP16":
        with np.errstate(invalid="ignore"):
            return np.asarray(_low(raw, 16).astype(np.uint16).view(np.float16).astype(np.float64))
    if d.name == "BF16":
        with np.errstate(invalid="ignore"):
            return np.asarray(
                _low(raw, 16).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64))
    if d.name == "FP64":
        return np.asarray(_as_u64(raw)).view(np.float64).copy()
    if d.name in _TABLE_BUILDERS:
        codes = _low(raw, d.bits).astype(np.intp)
        return np.asarray(value_table(d.name)[codes])
    raise ValueError(f"decode_float does not handle {d.name}")


def decode_int(name: tables.DataType | int | str, raw: Any) -> NDArray[np.int64]:
    """int64 value of raw integer encodings (spec NormalizeTileInteger,
    asl/tile/model/numeric/formats.asl): S32/S16/S8/S4X2 (and S64) are
    sign-extended from their width (S4X2: one 4-bit lane, -8..7), U32/U16/U8/
    U4X2 zero-extended from the low bits. U64 does not fit int64 and is refused.
    """
    d = tables.dtype(name)
    if not d.is_integer:
        raise ValueError(f"{d.name} is not an integer type")
    if d.name == "U64":
        raise ValueError("U64 values do not fit int64; read the uint64 carrier directly")
    v = np.asarray(_low(raw, d.bits)).view(np.int64)
    if d.signed and d.bits < 64:
        shift = np.int64(64 - d.bits)
        v = (v << shift) >> shift  # arithmetic shift right sign-extends
    return np.asarray(v)


def encoding_valid(name: tables.DataType | int | str, raw: Any) -> NDArray[np.bool_]:
    """bool array: the spec's TileNumericEncodingValid for the low bits of `raw`.

    False only for TF32 with bits 12..0 nonzero, HF32 with bits 11..0 nonzero,
    E3M2 / E2M3 with bit 7 or 6 set (mx-formats.md); True for everything else.
    """
    d = tables.dtype(name)
    masks = {"TF32": 0x1FFF, "HF32": 0xFFF, "E3M2": 0xC0, "E2M3": 0xC0}
    v = _as_u64(raw)
    if d.name not in masks:
        return np.ones(v.shape, dtype=bool)
    return np.asarray((v & np.uint64(masks[d.name])) == 0)


# ---------------------------------------------------------------- rounding


def round_fp32_bits(x: Any) -> NDArray[np.uint32]:
    """binary32 bits of round-to-nearest-even(x) for float64 `x`.

    IEEE 754 binary32 RNE: subnormal results kept (no flush), magnitudes that
    round past the largest finite value become +-inf, signed zeros preserved,
    every NaN becomes the canonical 0x7FC00000. numpy's float64 -> float32 cast
    is exactly this rounding (verified against an exact rational rounding in
    tests/test_numerics.py); only NaN needs canonicalising.
    """
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        bits = a.astype(np.float32).view(np.uint32)
    return np.asarray(np.where(np.isnan(a), np.uint32(FP32_CANONICAL_NAN), bits), dtype=np.uint32)
