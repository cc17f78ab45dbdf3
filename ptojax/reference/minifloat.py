"""The reference model's own decoders of the 8-bit and 4-bit floating formats.

HiF8, E4M3, E5M2, E3M2, E2M3, E2M1X2, E1M2X2 and the MX scale E8M0, written
from the pto-spec format units ``asl/arch/data-types/formats/<fmt>.asl``
(rendered as ``docs/arch/data-types/formats/<fmt>.md``) and independent of
:mod:`ptojax.numerics`, which the JAX executor decodes through: a differential
test of the two executors can catch a decoding error only if they do not share
the decoder. This module imports no numerics, numpy or JAX code.

Like the spec's ``<Fmt>FiniteDecomposition``
(``asl/arch/data-types/numeric-formats.asl``, PTO-NUMERIC-FINITE-DECOMPOSITION-001),
:func:`decompose` gives a finite code as (sign, integer significand, integer
exponent) with value (-1)^sign * significand * 2^exponent, so every value is
exact; the specials are the explicit kinds NAN, POS_INF and NEG_INF.
:func:`value` turns that into the float64 the reference arithmetic consumes
(every value of these formats is a float64 exactly; -0 keeps its sign).

Carrier words: ``TileNumericFiniteDecomposition`` reads value[7:0] of the
64-bit carrier Word for the 8-bit formats and the low nibble value[3:0] for
the X2 formats (one logical lane per carrier; in GM an even column is a byte's
low nibble, an odd column its high nibble, which TLOAD resolves:
``asl/arch/memory-model/global-memory-access.asl``, ADR 0033). Bits above are
never read.

One documented deviation (docs/numerics.md, "Number formats"): E3M2 and E2M3
require carrier bits 7:6 to be zero (``E3M2EncodingValid``), and the spec's
decomposition reports such a code unavailable (InvalidEncoding). The ASL
matrix path does not check this; ptojax decodes such a code as its low 6 bits
(the lane), as :func:`encoding_valid` reports separately.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import cast

FORMATS: tuple[str, ...] = ("HiF8", "E4M3", "E5M2", "E3M2", "E2M3", "E2M1X2", "E1M2X2", "E8M0")

# Low carrier bits a decoder reads (the descriptors' carrier_bits, lane_bits
# for the packed X2 formats whose carrier Word holds one nibble).
CODE_BITS = {"HiF8": 8, "E4M3": 8, "E5M2": 8, "E3M2": 8, "E2M3": 8,
             "E2M1X2": 4, "E1M2X2": 4, "E8M0": 8}

FINITE, NAN, POS_INF, NEG_INF = "finite", "NaN", "+Inf", "-Inf"


@dataclass(frozen=True)
class Decoded:
    """A code's value: kind FINITE with (-1)^sign * significand * 2^exponent,
    or NAN / POS_INF / NEG_INF (significand 0)."""
    kind: str
    sign: int = 0
    significand: int = 0
    exponent: int = 0

    def exact(self) -> Fraction:
        """The exact rational value of a finite code (a zero loses its sign here)."""
        assert self.kind == FINITE, self
        scale = Fraction(2) ** self.exponent
        return cast(Fraction, (-1) ** self.sign * self.significand * scale)   # int ** int is Any to mypy


def _finite(sign: int, significand: int, exponent: int) -> Decoded:
    return Decoded(FINITE, sign, significand, exponent)


def _fixed_binary(lane: int, exp_bits: int, frac_bits: int, bias: int) -> Decoded:
    """The FixedBinary decomposition shared by E4M3, E5M2, E3M2, E2M3, E2M1X2 and
    E1M2X2 (specials handled by the caller): sign above the exponent field;
    exponent 0 is fraction * 2^(1 - bias - frac_bits) (zero or subnormal), else
    (2^frac_bits + fraction) * 2^(exponent - bias - frac_bits)."""
    sign = lane >> (exp_bits + frac_bits) & 1
    exponent = lane >> frac_bits & ((1 << exp_bits) - 1)
    fraction = lane & ((1 << frac_bits) - 1)
    if exponent == 0:
        return _finite(sign, fraction, 1 - bias - frac_bits)
    return _finite(sign, (1 << frac_bits) + fraction, exponent - bias - frac_bits)


def _e4m3(code: int) -> Decoded:
    # e4m3.asl: 1/4/3, bias 7; no infinity; S.1111.111 is the NaN (both signs).
    if (code & 0x7F) == 0x7F:
        return Decoded(NAN)
    return _fixed_binary(code, 4, 3, 7)


def _e5m2(code: int) -> Decoded:
    # e5m2.asl: 1/5/2, bias 15; exponent 11111 is +-Inf (fraction 0) or NaN
    # (quiet when fraction[1] is set, signaling otherwise: both are NaN here).
    if (code >> 2 & 0x1F) == 0x1F:
        if code & 0x3:
            return Decoded(NAN)
        return Decoded(NEG_INF if code & 0x80 else POS_INF)
    return _fixed_binary(code, 5, 2, 15)


def _e3m2(code: int) -> Decoded:
    # e3m2.asl: 6-bit lane 1/3/2 (sign bit 5), bias 3; no Inf, no NaN.
    # Bits 7:6 must be zero; ignored (module docstring).
    return _fixed_binary(code & 0x3F, 3, 2, 3)


def _e2m3(code: int) -> Decoded:
    # e2m3.asl: 6-bit lane 1/2/3 (sign bit 5), bias 1; no Inf, no NaN. Bits 7:6 ignored.
    return _fixed_binary(code & 0x3F, 2, 3, 1)


def _e2m1x2(code: int) -> Decoded:
    # e2m1x2.asl: nibble 1/2/1 (sign bit 3), bias 1; exponent 0 with fraction 1
    # is 1 * 2^-1 (the spec calls nothing subnormal); no Inf, no NaN.
    return _fixed_binary(code, 2, 1, 1)


def _e1m2x2(code: int) -> Decoded:
    # e1m2x2.asl: nibble 1/1/2 (sign bit 3), bias 1: exponent 0 -> fraction * 2^-2,
    # exponent 1 -> (4 + fraction) * 2^-2; no Inf, no NaN.
    return _fixed_binary(code, 1, 2, 1)


def _e8m0(code: int) -> Decoded:
    # e8m0.asl: no sign, no zero: 1 * 2^(code - 127); 0xFF is the NaN.
    if code == 0xFF:
        return Decoded(NAN)
    return _finite(0, 1, code - 127)


def _hif8(code: int) -> Decoded:
    """hif8.asl, HiF8FiniteDecomposition / ClassifyHiF8: sign bit 7, then the
    dot field (HiF8DecodeDotField) picks the split of bits 6:0. D1..D4 carry a
    sign-magnitude exponent whose first bit is its sign and whose magnitude has
    an implicit leading one; the significand has an implicit leading one."""
    if code == 0x80:                      # the would-be -0: the only NaN
        return Decoded(NAN)
    if code == 0x6F:                      # the would-be +1.5 * 2^15
        return Decoded(POS_INF)
    if code == 0xEF:
        return Decoded(NEG_INF)
    sign = code >> 7
    body = code & 0x7F
    if body >> 3 == 0b0000:               # Denormal: mantissa m in 1..7 is 2^(m - 23)
        mantissa = body & 0x7
        if mantissa == 0:
            return _finite(0, 0, 0)       # 0x00, the only zero (no signed zero)
        return _finite(sign, 1, mantissa - 23)
    if body >> 3 == 0b0001:               # D0: exponent 0, 3 fraction bits
        return _finite(sign, 8 + (body & 0x7), -3)
    if body >> 4 == 0b001:                # D1: exponent +-1 (bit 3 its sign), 3 fraction bits
        exponent = -1 if body >> 3 & 1 else 1
        return _finite(sign, 8 + (body & 0x7), exponent - 3)
    if body >> 5 == 0b01:                 # D2: +-(2 + bit 3), sign bit 4, 3 fraction bits
        magnitude = 2 + (body >> 3 & 0x1)
        exponent = -magnitude if body >> 4 & 1 else magnitude
        return _finite(sign, 8 + (body & 0x7), exponent - 3)
    if body >> 5 == 0b10:                 # D3: +-(4 + bits 3:2), sign bit 4, 2 fraction bits
        magnitude = 4 + (body >> 2 & 0x3)
        exponent = -magnitude if body >> 4 & 1 else magnitude
        return _finite(sign, 4 + (body & 0x3), exponent - 2)
    # D4 (dot 11): +-(8 + bits 3:1), sign bit 4, 1 fraction bit
    magnitude = 8 + (body >> 1 & 0x7)
    exponent = -magnitude if body >> 4 & 1 else magnitude
    return _finite(sign, 2 + (body & 0x1), exponent - 1)


_DECODERS = {"HiF8": _hif8, "E4M3": _e4m3, "E5M2": _e5m2, "E3M2": _e3m2, "E2M3": _e2m3,
             "E2M1X2": _e2m1x2, "E1M2X2": _e1m2x2, "E8M0": _e8m0}


def code_of(fmt: str, word: int) -> int:
    """The code a decoder reads from a carrier Word: its low CODE_BITS[fmt] bits."""
    return word & ((1 << CODE_BITS[fmt]) - 1)


def decompose(fmt: str, code: int) -> Decoded:
    """The exact value of one code (0 <= code < 2^CODE_BITS[fmt]) of `fmt`."""
    if not 0 <= code < 1 << CODE_BITS[fmt]:
        raise ValueError(f"{fmt} code out of range: {code:#x}")
    return _DECODERS[fmt](code)


def encoding_valid(fmt: str, code: int) -> bool:
    """The spec's EncodingValid: False only for E3M2/E2M3 with bit 7 or 6 set."""
    return not (fmt in ("E3M2", "E2M3") and code & 0xC0)


def to_float(d: Decoded) -> float:
    """The float64 of a decoded value: exact (checked), -0 kept, NaN/+-Inf as floats."""
    if d.kind == NAN:
        return math.nan
    if d.kind in (POS_INF, NEG_INF):
        return math.inf if d.kind == POS_INF else -math.inf
    magnitude = math.ldexp(float(d.significand), d.exponent)
    assert Fraction(magnitude) == abs(d.exact()), d      # no rounding anywhere
    return -magnitude if d.sign else magnitude


@functools.lru_cache(maxsize=None)
def _float_of_code(fmt: str, code: int) -> float:
    return to_float(decompose(fmt, code))


def value(fmt: str, word: int) -> float:
    """Exact float64 value of a `fmt` element from its 64-bit carrier Word."""
    # int(): a numpy uint64 Word would make E8M0's `code - 127` wrap
    return _float_of_code(fmt, code_of(fmt, int(word)))
