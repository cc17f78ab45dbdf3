"""The reference model's own 8-bit / 4-bit float decoders (ptojax/reference/minifloat.py).

Every code of every format is checked: against ml_dtypes where it has the
format (and the spec's format is exactly that ml_dtypes variant, pinned
below), against hand-computed codes for HiF8 and E1M2X2 (ml_dtypes has
neither), and against ptojax.numerics, the executor's decoder: the two were
written separately from the same spec, so any disagreement is a finding.

Spec: PTO-ISA/pto-spec asl/arch/data-types/formats/<fmt>.asl (rendered as
docs/arch/data-types/formats/<fmt>.md), read at commit e599a3d.
"""

from __future__ import annotations

import ast
import inspect
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ptojax import numerics, tables
from ptojax.reference import matrix as mm
from ptojax.reference import minifloat as mf

F = Fraction
NAN, POS_INF, NEG_INF, FINITE = mf.NAN, mf.POS_INF, mf.NEG_INF, mf.FINITE


def _key_of_decoded(d: mf.Decoded):
    """(kind, sign, |value|) of a decoded code; sign and magnitude only when finite."""
    if d.kind != FINITE:
        return (d.kind, None, None)
    return (FINITE, d.sign, abs(d.exact()))


def _key_of_float(x: float):
    """The same key for a float64 (exact: Fraction(x) is x's exact value)."""
    if math.isnan(x):
        return (NAN, None, None)
    if math.isinf(x):
        return (POS_INF if x > 0 else NEG_INF, None, None)
    return (FINITE, int(math.copysign(1.0, x) < 0), abs(Fraction(x)))


def _ml_value(ml_type, code: int) -> float:
    with np.errstate(invalid="ignore"):
        return float(np.array([code], np.uint8).view(ml_type).astype(np.float64)[0])


def _codes(fmt):
    return range(1 << mf.CODE_BITS[fmt])


# ---------------------------------------------------------------- scope


def test_formats_and_code_bits_match_the_dtype_table():
    assert mf.FORMATS == ("HiF8", "E4M3", "E5M2", "E3M2", "E2M3", "E2M1X2", "E1M2X2", "E8M0")
    for fmt in mf.FORMATS:
        d = tables.dtype(fmt)
        assert d.kind == "float" and d.bits == mf.CODE_BITS[fmt]
        assert len(_codes(fmt)) == (16 if d.packed4 else 256)
    with pytest.raises(ValueError):
        mf.decompose("E2M1X2", 16)
    with pytest.raises(ValueError):
        mf.decompose("E4M3", -1)


def test_reference_decoder_is_independent_of_the_executor():
    # The module imports nothing but the standard library ...
    tree = ast.parse(inspect.getsource(mf))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." if node.level else node.module.split(".")[0])
    assert imported == {"__future__", "functools", "math", "dataclasses", "fractions", "typing"}


def test_reference_matmul_does_not_decode_through_numerics(monkeypatch):
    # ... and the reference matmul reads these formats through it alone.
    def refuse(*_args, **_kwargs):
        raise AssertionError("reference decoded a <= 8-bit float through ptojax.numerics")
    monkeypatch.setattr(numerics, "decode_float", refuse)
    monkeypatch.setattr(numerics, "value_table", refuse)
    for fmt in mf.FORMATS:
        for code in _codes(fmt):
            got, want = mm.float_value(fmt, code), mf.value(fmt, code)
            assert _key_of_float(got) == _key_of_float(want), (fmt, hex(code))


# ---------------------------------------------------------------- exactness, carriers


@pytest.mark.parametrize("fmt", mf.FORMATS)
def test_float_value_is_the_exact_decomposition(fmt):
    for code in _codes(fmt):
        d = mf.decompose(fmt, code)
        assert _key_of_float(mf.value(fmt, code)) == _key_of_decoded(d), hex(code)
        if d.kind != FINITE:
            assert (d.sign, d.significand, d.exponent) == (0, 0, 0)


@pytest.mark.parametrize("fmt", mf.FORMATS)
def test_only_the_low_code_bits_of_the_carrier_are_read(fmt):
    # TileNumericFiniteDecomposition reads value[7:0], or value[3:0] (the lane
    # of an X2 carrier, whose GM nibble TLOAD has already selected).
    bits = mf.CODE_BITS[fmt]
    for junk in (0xDEADBEEFCAFEF00D, (1 << 64) - 1, 1 << bits, 1 << 63):
        high = junk & ~((1 << bits) - 1)
        for code in _codes(fmt):
            assert _key_of_float(mf.value(fmt, high | code)) == \
                _key_of_float(mf.value(fmt, code)), (hex(high), hex(code))


# ---------------------------------------------------------------- against ml_dtypes

# (format, ml_dtypes type, lane codes): the spec's E4M3 is the "fn" variant
# (no Inf, S.1111.111 NaN), E5M2 the IEEE-style one, E3M2/E2M3/E2M1 the finite
# "fn" ones, E8M0 the unsigned finite-with-NaN "fnu" one.
_ML = [("E4M3", ml_dtypes.float8_e4m3fn, 256), ("E5M2", ml_dtypes.float8_e5m2, 256),
       ("E3M2", ml_dtypes.float6_e3m2fn, 64), ("E2M3", ml_dtypes.float6_e2m3fn, 64),
       ("E2M1X2", ml_dtypes.float4_e2m1fn, 16), ("E8M0", ml_dtypes.float8_e8m0fnu, 256)]


@pytest.mark.parametrize("fmt,ml_type,lanes", _ML, ids=[m[0] for m in _ML])
def test_every_lane_code_matches_ml_dtypes(fmt, ml_type, lanes):
    for code in range(lanes):
        assert _key_of_decoded(mf.decompose(fmt, code)) == \
            _key_of_float(_ml_value(ml_type, code)), hex(code)


def test_other_ml_dtypes_variants_would_differ():
    # Pins which variant each spec format is: the ones it is not disagree.
    e4m3, e5m2 = mf.decompose("E4M3", 0x78), mf.decompose("E5M2", 0x80)
    assert e4m3.exact() == 256 and math.isinf(_ml_value(ml_dtypes.float8_e4m3, 0x78))
    assert _key_of_decoded(mf.decompose("E4M3", 0x80)) == (FINITE, 1, 0)       # -0
    assert math.isnan(_ml_value(ml_dtypes.float8_e4m3fnuz, 0x80))
    assert _key_of_decoded(e5m2) == (FINITE, 1, 0)
    assert math.isnan(_ml_value(ml_dtypes.float8_e5m2fnuz, 0x80))


def test_e5m2_signaling_nans_are_nan():
    # e5m2.asl ClassifyE5M2: exponent 11111 with fraction[1] = 0 (0x7D, 0xFD) is a
    # signaling NaN, with fraction[1] = 1 a quiet NaN; ml_dtypes (and the matmul,
    # whose NaN results are canonical) make no difference: all are NaN.
    nans = {c for c in _codes("E5M2") if mf.decompose("E5M2", c).kind == NAN}
    assert nans == {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}
    assert mf.decompose("E5M2", 0x7C).kind == POS_INF
    assert mf.decompose("E5M2", 0xFC).kind == NEG_INF


@pytest.mark.parametrize("fmt", ["E3M2", "E2M3"])
def test_six_bit_formats_decode_invalid_codes_as_their_lane(fmt):
    # e3m2.asl / e2m3.asl: bits 7:6 must be zero (EncodingValid), the spec's
    # decomposition reports such a code unavailable; ptojax decodes its low 6
    # bits (docs/numerics.md). ml_dtypes has only the 64 lane codes.
    for code in _codes(fmt):
        assert mf.encoding_valid(fmt, code) == (code < 64)
        assert mf.decompose(fmt, code) == mf.decompose(fmt, code & 0x3F), hex(code)
    assert all(mf.encoding_valid(f, c) for f in mf.FORMATS if f not in ("E3M2", "E2M3")
               for c in _codes(f))


# ---------------------------------------------------------------- HiF8 and E1M2X2 by hand

# hif8.asl (HiF8DecodeDotField, HiF8FiniteDecomposition, ClassifyHiF8), decoded
# by hand: sign bit 7; dot 0000 denormal 2^(m-23); 0001 D0 (1.fff); 001 D1
# exponent +-1 (bit 3 the sign); 01 D2 +-(2 + bit 3); 10 D3 +-(4 + bits 3:2);
# 11 D4 +-(8 + bits 3:1), exponent sign bit 4 in D2..D4; fraction 3,3,3,2,1 bits.
_HIF8 = {
    0x00: (FINITE, 0, F(0)),
    0x01: (FINITE, 0, F(1, 2**22)),          # minimum subnormal (ADR 0049)
    0x07: (FINITE, 0, F(1, 2**16)),          # maximum subnormal (ADR 0049)
    0x85: (FINITE, 1, F(1, 2**18)),
    0x08: (FINITE, 0, F(1)),                 # D0, minimum normal (ADR 0049)
    0x0B: (FINITE, 0, F(11, 8)),
    0x88: (FINITE, 1, F(1)),
    0x10: (FINITE, 0, F(2)),                 # D1 +1
    0x13: (FINITE, 0, F(11, 4)),
    0x18: (FINITE, 0, F(1, 2)),              # D1 -1
    0x1F: (FINITE, 0, F(15, 16)),
    0x20: (FINITE, 0, F(4)),                 # D2 +2
    0x2D: (FINITE, 0, F(13)),                # D2 +3, fraction 101
    0x30: (FINITE, 0, F(1, 4)),              # D2 -2
    0x3F: (FINITE, 0, F(15, 64)),            # D2 -3, fraction 111
    0x40: (FINITE, 0, F(16)),                # D3 +4
    0x4E: (FINITE, 0, F(192)),               # D3 +7, fraction 10
    0x4F: (FINITE, 0, F(224)),
    0x53: (FINITE, 0, F(7, 64)),             # D3 -4, fraction 11
    0x5D: (FINITE, 0, F(5, 512)),            # D3 -7, fraction 01
    0x60: (FINITE, 0, F(256)),               # D4 +8
    0x6B: (FINITE, 0, F(12288)),             # D4 +13, fraction 1
    0x6E: (FINITE, 0, F(32768)),             # largest finite
    0x6F: (POS_INF, None, None),
    0x70: (FINITE, 0, F(1, 256)),            # D4 -8
    0x7E: (FINITE, 0, F(1, 2**15)),
    0x7F: (FINITE, 0, F(3, 2**16)),
    0x80: (NAN, None, None),                 # the only NaN (HiF8CanonicalNaN)
    0xEE: (FINITE, 1, F(32768)),
    0xEF: (NEG_INF, None, None),
    0xFF: (FINITE, 1, F(3, 2**16)),
}


def test_hif8_hand_decoded_codes():
    for code, want in _HIF8.items():
        assert _key_of_decoded(mf.decompose("HiF8", code)) == want, hex(code)


def test_hif8_every_code_structure():
    # has_signed_zero FALSE, one NaN, two infinities; every other code a distinct
    # finite value, the negative half mirroring the positive one.
    keys = {c: _key_of_decoded(mf.decompose("HiF8", c)) for c in range(256)}
    assert [c for c, k in keys.items() if k[0] == NAN] == [0x80]
    assert [c for c, k in keys.items() if k[0] in (POS_INF, NEG_INF)] == [0x6F, 0xEF]
    assert [c for c, k in keys.items() if k[0] == FINITE and k[2] == 0] == [0x00]
    positive = [keys[c][2] for c in range(1, 0x80) if c != 0x6F]
    assert len(set(positive)) == 126 and min(positive) == F(1, 2**22)
    assert max(positive) == 32768
    for c in range(1, 0x80):
        if c != 0x6F:
            assert keys[c | 0x80] == (FINITE, 1, keys[c][2]), hex(c)


def test_e1m2x2_every_code():
    # e1m2x2.asl: exponent 0 -> fraction * 2^-2, exponent 1 -> (4 + fraction) * 2^-2,
    # sign bit 3 (0x8 is -0); no Inf, no NaN.
    magnitudes = [F(0), F(1, 4), F(1, 2), F(3, 4), F(1), F(5, 4), F(3, 2), F(7, 4)]
    for code in range(16):
        want = (FINITE, code >> 3, magnitudes[code & 7])
        assert _key_of_decoded(mf.decompose("E1M2X2", code)) == want, hex(code)


def test_e2m1x2_by_hand():
    # e2m1x2.asl: exponent 0 fraction 1 is 1 * 2^-1; largest 6.
    assert [mf.value("E2M1X2", c) for c in range(8)] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


# ---------------------------------------------------------------- against the executor's decoder


def test_agrees_with_numerics_on_every_code():
    disagreements = []
    for fmt in mf.FORMATS:
        table = numerics.value_table(fmt)
        for code in _codes(fmt):
            ours = _key_of_decoded(mf.decompose(fmt, code))
            theirs = _key_of_float(float(table[code]))
            if ours != theirs:
                disagreements.append((fmt, hex(code), ours, theirs))
    assert disagreements == []
