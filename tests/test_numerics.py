"""ptojax.numerics: exact value codecs of the ieee matrix profile.

Expected values are checked three ways: against ml_dtypes for every code of the
formats it has, against independent formulas / encoders written here from the
pto-spec format pages (docs/arch/data-types/formats/<fmt>.md), and against the
spec's own stated encodings (largest finite, subnormal boundaries, specials).
"""

from __future__ import annotations

import math
import random
import struct
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from ptojax import numerics as nx
from ptojax import tables


def _same(a, b) -> bool:
    """Elementwise identical float64 values: NaN == NaN, and zeros' signs agree."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    eq = (a == b) & (np.signbit(a) == np.signbit(b))
    return bool(np.all(both_nan | eq))


# ---------------------------------------------------------------- names


def test_float_inputs_names():
    assert nx.MATRIX_FLOAT_OPERANDS == (
        "FP32", "TF32", "HF32", "FP16", "BF16", "HiF8", "E4M3", "E5M2",
        "E3M2", "E2M3", "E2M1X2", "E1M2X2")
    assert nx.FLOAT_INPUTS == nx.MATRIX_FLOAT_OPERANDS + ("E8M0",)
    for n in nx.FLOAT_INPUTS:
        d = tables.dtype(n)
        assert d.name == n and d.kind == "float"
        out = nx.decode_float(n, np.arange(16, dtype=np.uint64))
        assert out.dtype == np.float64 and out.shape == (16,)
    for n in nx.INT_INPUTS:
        assert tables.dtype(n).is_integer


# ---------------------------------------------------------------- against ml_dtypes

_ML = [  # (ptojax name, ml_dtypes type, number of codes, storage uint type)
    ("E4M3", ml_dtypes.float8_e4m3fn, 256, np.uint8),
    ("E5M2", ml_dtypes.float8_e5m2, 256, np.uint8),
    ("E3M2", ml_dtypes.float6_e3m2fn, 64, np.uint8),
    ("E2M3", ml_dtypes.float6_e2m3fn, 64, np.uint8),
    ("E2M1X2", ml_dtypes.float4_e2m1fn, 16, np.uint8),
    ("E8M0", ml_dtypes.float8_e8m0fnu, 256, np.uint8),
    ("FP16", np.float16, 65536, np.uint16),
    ("BF16", ml_dtypes.bfloat16, 65536, np.uint16),
]


@pytest.mark.parametrize("name,mld,n,store", _ML, ids=[m[0] for m in _ML])
def test_matches_ml_dtypes_every_code(name, mld, n, store):
    codes = np.arange(n, dtype=np.uint64)
    with np.errstate(invalid="ignore"):
        theirs = codes.astype(store).view(mld).astype(np.float64)
    ours = nx.decode_float(name, codes)
    assert _same(ours, theirs)
    # Only the low `bits` bits of the carrier word are read.
    bits = tables.dtype(name).bits
    junk = np.uint64(0xDEADBEEFCAFEF00D) & ~np.uint64((1 << bits) - 1)
    assert _same(nx.decode_float(name, codes | junk), theirs)
    if bits <= 8:
        assert _same(nx.value_table(name)[:n], theirs)


@pytest.mark.parametrize("name", ["E3M2", "E2M3"])
def test_six_bit_formats_ignore_must_be_zero_bits(name):
    # e3m2.md / e2m3.md: 6-bit lane in an 8-bit carrier, bits 7:6 must be zero
    # (else InvalidEncoding). Decision: decoded from the low 6 bits.
    t = nx.value_table(name)
    assert t.shape == (256,)
    codes = np.arange(256)
    assert _same(t, t[codes & 0x3F])
    valid = nx.encoding_valid(name, codes)
    assert valid.tolist() == [c < 64 for c in range(256)]


# ---------------------------------------------------------------- FP32


def test_fp32_decode_matches_struct():
    rng = random.Random(1)
    pats = [rng.getrandbits(32) for _ in range(20000)] + [
        0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
        0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x3F800000]
    want = np.array([struct.unpack("<f", struct.pack("<I", p))[0] for p in pats])
    assert _same(nx.decode_float("FP32", np.array(pats, dtype=np.uint64)), want)
    assert _same(nx.fp32_value(np.array(pats, dtype=np.uint32)), want)
    # high carrier bits ignored (e.g. a sign-extended S32-style carrier)
    hi = np.array(pats, dtype=np.uint64) | np.uint64(0xFFFFFFFF00000000)
    assert _same(nx.decode_float("FP32", hi), want)


def test_fp64_decode():
    xs = np.array([0.0, -0.0, 1.5, -2.0**-1074, np.inf, 1e308])
    assert _same(nx.decode_float("FP64", xs.view(np.uint64)), xs)


# ---------------------------------------------------------------- TF32 / HF32


def _binary32_layout_reference(bits: np.ndarray, frac_bits: int) -> np.ndarray:
    """Value from the fields, as tf32.md / hf32.md decompose them.

    Sign bit 31, exponent 30..23 (bias 127), fraction = the top `frac_bits` bits of
    22..0. Exponent 0: fraction * 2^(-126 - frac_bits); 255: inf (fraction 0) or NaN;
    otherwise (2^frac_bits + fraction) * 2^(exponent - 127 - frac_bits).
    """
    b = bits.astype(np.int64)
    sign = np.where(b >> 31 & 1, -1.0, 1.0)
    e = b >> 23 & 0xFF
    f = (b & 0x7FFFFF) >> (23 - frac_bits)
    sub = np.ldexp(f.astype(np.float64), -126 - frac_bits)
    nor = np.ldexp((f + (1 << frac_bits)).astype(np.float64), (e - 127 - frac_bits).astype(np.int32))
    special = np.where(f == 0, np.inf, np.nan)
    return sign * np.where(e == 0, sub, np.where(e == 255, special, nor))


@pytest.mark.parametrize("name,frac_bits", [("TF32", 10), ("HF32", 11)])
def test_tf32_hf32_every_valid_encoding(name, frac_bits):
    drop = 23 - frac_bits
    fields = np.arange(1 << (9 + frac_bits), dtype=np.uint64)  # sign|exponent|fraction
    bits = fields << np.uint64(drop)
    want = _binary32_layout_reference(bits, frac_bits)
    assert _same(nx.decode_float(name, bits), want)
    assert nx.encoding_valid(name, bits).all()
    # Bits below the kept fraction: invalid per spec, ignored (decoded as zero) here.
    rng = np.random.default_rng(7)
    junk = rng.integers(1, 1 << drop, size=bits.shape, dtype=np.uint64)
    assert _same(nx.decode_float(name, bits | junk), want)
    assert not nx.encoding_valid(name, bits | junk).any()


def test_tf32_hf32_spec_points():
    # Subnormal boundaries: docs/arch/features/mx-formats.md
    # (HardwareNumericSubnormalBoundaries): TF32 0x00002000 / 0x007FE000 /
    # 0x00800000, HF32 0x00001000 / 0x007FF000 / 0x00800000.
    tf = nx.decode_float("TF32", [0x00002000, 0x007FE000, 0x00800000])
    assert tf.tolist() == [2.0**-136, (2**10 - 1) * 2.0**-136, 2.0**-126]
    hf = nx.decode_float("HF32", [0x00001000, 0x007FF000, 0x00800000])
    assert hf.tolist() == [2.0**-137, (2**11 - 1) * 2.0**-137, 2.0**-126]
    # Largest finite (the pad Max words), canonical NaN 0x7FC00000 and signed zeros
    # (tf32.md / hf32.md TF32CanonicalNaN, *SignedZeroEncodings).
    assert nx.decode_float("TF32", 0x7F7FE000) == (2 - 2.0**-10) * 2.0**127
    assert nx.decode_float("HF32", 0x7F7FF000) == (2 - 2.0**-11) * 2.0**127
    for n in ("TF32", "HF32"):
        assert np.isnan(nx.decode_float(n, 0x7FC00000))
        assert nx.decode_float(n, 0x7F800000) == np.inf
        assert nx.decode_float(n, 0xFF800000) == -np.inf
        assert _same(nx.decode_float(n, [0, 0x80000000]), [0.0, -0.0])
        assert nx.decode_float(n, 0x3F800000) == 1.0
    # 1 + 2^-10 is a TF32 value, 1 + 2^-11 is only an HF32 value
    assert nx.decode_float("TF32", 0x3F802000) == 1 + 2.0**-10
    assert nx.decode_float("HF32", 0x3F801000) == 1 + 2.0**-11
    assert nx.decode_float("TF32", 0x3F801000) == 1.0
    # Documented consequence of ignoring the low bits: an FP32 NaN whose fraction
    # lies entirely below the kept width decodes as infinity.
    assert nx.decode_float("TF32", 0x7F800001) == np.inf


# ---------------------------------------------------------------- HiF8


def _hif8_by_encoding() -> dict[int, float]:
    """Build every HiF8 finite code from its fields (the encoding direction).

    From hif8.md: sign bit 7; dot prefix 11 (D4) / 10 (D3) / 01 (D2) / 001 (D1)
    / 0001 (D0) / 0000 (denormal); D1..D4 carry a sign-magnitude exponent of
    1..4 bits (sign first, implicit leading one: |e| = 1, 2-3, 4-7, 8-15), D0 has
    exponent 0; fraction bits 3,3,3,2,1 for D0..D4. Denormal fraction m>0 is 2^(m-23).
    """
    out = {}
    for s in (0, 1):
        sg = -1.0 if s else 1.0
        for m in range(1, 8):
            out[s << 7 | m] = sg * 2.0 ** (m - 23)
        for e in range(-15, 16):
            mag = abs(e)
            if mag == 0:
                prefix, plen, ebits, fb = 0b0001, 4, 0, 3
            elif mag == 1:
                prefix, plen, ebits, fb = 0b001, 3, 1, 3
            elif mag <= 3:
                prefix, plen, ebits, fb = 0b01, 2, 2, 3
            elif mag <= 7:
                prefix, plen, ebits, fb = 0b10, 2, 3, 2
            else:
                prefix, plen, ebits, fb = 0b11, 2, 4, 1
            efield = 0
            if ebits:
                efield = (1 if e < 0 else 0) << (ebits - 1) | (mag - (1 << (ebits - 1)))
            for f in range(1 << fb):
                code = s << 7 | prefix << (7 - plen) | efield << fb | f
                assert 7 - plen == ebits + fb
                out[code] = sg * (1 + f / (1 << fb)) * 2.0**e
    out[0x00] = 0.0
    return out


def test_hif8_every_code_against_encoder():
    t = nx.value_table("HiF8")
    ref = _hif8_by_encoding()
    assert sorted(ref) == [c for c in range(256) if c != 0x80]  # 255 codes, 0x80 is NaN
    for code, v in ref.items():
        if code in (0x6F, 0xEF):
            continue  # would be +-1.5 * 2^15: the infinity encodings
        assert t[code] == v, hex(code)


def test_hif8_spec_points():
    t = nx.value_table("HiF8")
    # hif8.md ClassifyHiF8 / HiF8CanonicalNaN: 0x80 is the only NaN, 0x6F / 0xEF
    # are +-inf, 0x00 is the only zero (has_signed_zero = FALSE).
    assert [c for c in range(256) if np.isnan(t[c])] == [0x80]
    assert t[0x6F] == np.inf and t[0xEF] == -np.inf
    assert [c for c in range(256) if t[c] == 0] == [0x00]
    # Largest finite: docs/arch/profile/matrix-postprocess.md
    # MatrixFloatingLargestFinite(HiF8) = 0x6E / 0xEE.
    assert t[0x6E] == 32768.0 and t[0xEE] == -32768.0
    assert np.nanmax(t[np.isfinite(t)]) == 32768.0
    # Subnormal boundaries: mx-formats.md HardwareNumericSubnormalBoundaries(HiF8)
    # = 0x01 / 0x07 / 0x08: min subnormal 2^-22, max subnormal 2^-16, then 1.0.
    assert (t[0x01], t[0x07], t[0x08]) == (2.0**-22, 2.0**-16, 1.0)
    pos = t[1:0x80][np.isfinite(t[1:0x80])]
    assert pos.min() == 2.0**-22
    # Hand-decoded examples (one per dot class) from hif8.md:
    examples = {
        0x0F: 1.875,                  # D0, fraction 111
        0x10: 2.0, 0x18: 0.5,         # D1, exponent +1 / -1
        0x20: 4.0, 0x28: 8.0, 0x3F: 1.875 * 2**-3,   # D2
        0x40: 16.0, 0x4F: 224.0, 0x5C: 2.0**-7,      # D3
        0x60: 256.0, 0x6D: 24576.0, 0x7E: 2.0**-15, 0x7F: 1.5 * 2**-15,  # D4
        0x81: -(2.0**-22), 0x88: -1.0, 0xE0: -256.0,
    }
    for code, v in examples.items():
        assert t[code] == v, hex(code)


def test_hif8_not_monotone_but_distinct_and_symmetric():
    # The exponent's sign sits inside the code, so code order is not value order
    # (e.g. 0x18 = 0.5 < 0x10 = 2.0): check distinctness and sign symmetry instead.
    t = nx.value_table("HiF8")
    pos = [t[c] for c in range(1, 0x80) if c != 0x6F]
    assert len(set(pos)) == len(pos) == 126 and min(pos) > 0
    for c in range(1, 0x80):
        assert _same(t[c | 0x80], -t[c])


# ---------------------------------------------------------------- E1M2X2, E2M1X2, E8M0


def test_e1m2x2_spec_values():
    # e1m2x2.md: 1/1/2, exponent 0 -> fraction * 2^-2, exponent 1 -> (4 + fraction) * 2^-2;
    # signed zeros 0x0 / 0x8; no inf, no NaN. Max 1.75 (0x7), min positive 0.25 (0x1).
    t = nx.value_table("E1M2X2")
    assert t.shape == (16,)
    assert t[:8].tolist() == [0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert _same(t[8:], -t[:8])
    assert np.signbit(t[8]) and t[8] == 0
    # decode_float reads the low 4 bits of the carrier (one lane)
    assert nx.decode_float("E1M2X2", [0xF7, 0x3C]).tolist() == [1.75, -1.0]


def test_e2m1x2_spec_values():
    # e2m1x2.md: 1/2/1 bias 1, exponent 0 fraction 1 = 0.5; max 6.0.
    t = nx.value_table("E2M1X2")
    assert t[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert nx.decode_float("E2M1X2", 0x35) == 3.0


def test_e8m0_spec_values():
    # e8m0.md: 2^(code - 127), 0xFF is NaN, no zero, no sign.
    t = nx.value_table("E8M0")
    assert t[0] == 2.0**-127 and t[127] == 1.0 and t[0xFE] == 2.0**127
    assert [c for c in range(256) if np.isnan(t[c])] == [0xFF]


# ---------------------------------------------------------------- specials, order, pads

# (NaN codes, +inf codes, -inf codes) per format page.
_SPECIALS = {
    "HiF8": ({0x80}, {0x6F}, {0xEF}),
    "E4M3": ({0x7F, 0xFF}, set(), set()),                       # e4m3.md: no inf
    "E5M2": ({0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}, {0x7C}, {0xFC}),
    "E3M2": (set(), set(), set()),
    "E2M3": (set(), set(), set()),
    "E2M1X2": (set(), set(), set()),
    "E1M2X2": (set(), set(), set()),
    "E8M0": ({0xFF}, set(), set()),
}


@pytest.mark.parametrize("name", sorted(_SPECIALS))
def test_value_table_specials(name):
    t = nx.value_table(name)
    assert t.shape == (1 << tables.dtype(name).bits,) and t.dtype == np.float64
    nan, pinf, ninf = _SPECIALS[name]
    assert {c for c in range(len(t)) if np.isnan(t[c])} == nan
    assert {c for c in range(len(t)) if t[c] == np.inf} == pinf
    assert {c for c in range(len(t)) if t[c] == -np.inf} == ninf


def test_value_table_cached_read_only_and_scope():
    t = nx.value_table("E4M3")
    assert nx.value_table("e4m3") is t
    with pytest.raises(ValueError):
        t[0] = 1.0
    for bad in ("FP16", "FP32", "S8"):
        with pytest.raises(ValueError):
            nx.value_table(bad)


# sign-magnitude formats: (name, number of positive codes = sign bit position)
_SIGN_MAG = [("E4M3", 0x80), ("E5M2", 0x80), ("E3M2", 0x20), ("E2M3", 0x20),
             ("E2M1X2", 0x8), ("E1M2X2", 0x8), ("FP16", 0x8000), ("BF16", 0x8000)]


@pytest.mark.parametrize("name,half", _SIGN_MAG, ids=[s[0] for s in _SIGN_MAG])
def test_monotone_positive_codes_and_sign_symmetry(name, half):
    codes = np.arange(half, dtype=np.uint64)
    v = nx.decode_float(name, codes)
    ok = ~np.isnan(v)
    first_nan = int(np.argmin(ok)) if not ok.all() else half
    assert ok[:first_nan].all() and not ok[first_nan:].any()   # NaNs only at the top
    assert np.all(np.diff(v[:first_nan]) > 0)                   # strictly increasing
    neg = nx.decode_float(name, codes | np.uint64(half))
    assert _same(neg, -v)


def test_e8m0_monotone():
    t = nx.value_table("E8M0")
    assert np.all(np.diff(t[:0xFF]) > 0) and np.all(t[:0xFF] > 0)


def _largest_finite(name):
    d = tables.dtype(name)
    if d.is_integer:
        if d.signed:
            return 2 ** (d.bits - 1) - 1, -(2 ** (d.bits - 1))
        return 2**d.bits - 1, 0
    mx = {
        "FP64": float(np.finfo(np.float64).max),
        "FP32": float(np.finfo(np.float32).max),
        "TF32": (2 - 2.0**-10) * 2.0**127,     # tf32.md
        "HF32": (2 - 2.0**-11) * 2.0**127,     # hf32.md
        "FP16": float(np.finfo(np.float16).max),
        "BF16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    }.get(name)
    if mx is None:
        t = nx.value_table(name)
        mx = float(t[np.isfinite(t)].max())
    return mx, -mx


@pytest.mark.parametrize("name", sorted(tables._PAD_MAX_MIN))
def test_pad_max_min_decode_to_extremes(name):
    mx_word, mn_word = tables._PAD_MAX_MIN[name]
    d = tables.dtype(name)
    if name == "U64":
        assert (mx_word, mn_word) == (2**64 - 1, 0)  # not representable as int64
        return
    dec = nx.decode_int if d.is_integer else nx.decode_float
    got = dec(name, np.array([mx_word, mn_word], dtype=np.uint64)).tolist()
    assert got == list(_largest_finite(name))


def test_largest_finite_values():
    assert _largest_finite("E4M3")[0] == 448.0      # e4m3.md: S.1111.110
    assert _largest_finite("E5M2")[0] == 57344.0    # e5m2.md: S.11110.11
    assert _largest_finite("E3M2")[0] == 28.0       # e3m2.md: 1.75 * 2^4
    assert _largest_finite("E2M3")[0] == 7.5        # e2m3.md: 1.875 * 2^2
    assert _largest_finite("HiF8")[0] == 32768.0


# ---------------------------------------------------------------- integers


@pytest.mark.parametrize("name,bits,signed", [
    ("S4X2", 4, True), ("U4X2", 4, False), ("S8", 8, True), ("U8", 8, False),
    ("S16", 16, True), ("U16", 16, False)])
def test_decode_int_exhaustive(name, bits, signed):
    codes = np.arange(1 << bits, dtype=np.uint64)
    want = np.array([c - (1 << bits) if signed and c >> (bits - 1) else c
                     for c in range(1 << bits)], dtype=np.int64)
    got = nx.decode_int(name, codes)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    junk = np.uint64(0xA5A5A5A5A5A5A5A5) & ~np.uint64((1 << bits) - 1)
    assert np.array_equal(nx.decode_int(name, codes | junk), want)


def test_decode_int_32_and_input_kinds():
    words = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFF80000000, 2**64 - 1]
    assert nx.decode_int("S32", words).tolist() == [0, 1, 2**31 - 1, -2**31, -1, -2**31, -1]
    assert nx.decode_int("U32", words).tolist() == [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**31, 2**32 - 1]
    # signed int64 carriers (sign-extended words) are read two's-complement
    assert nx.decode_int("S8", np.array([-1, -128, 127], dtype=np.int64)).tolist() == [-1, -128, 127]
    assert nx.decode_int("S4X2", np.int64(-8)).item() == -8
    assert nx.decode_int("S64", [2**63]).tolist() == [-2**63]
    with pytest.raises(ValueError):
        nx.decode_int("U64", [1])
    with pytest.raises(ValueError):
        nx.decode_int("FP32", [1])
    with pytest.raises(ValueError):
        nx.decode_float("S8", [1])
    with pytest.raises(TypeError):
        nx.decode_float("FP32", np.array([1.0]))
    with pytest.raises(TypeError):
        nx.decode_float("FP32", [1, 2.0])
    with pytest.raises(TypeError):
        nx.decode_int("U8", np.array([True]))


def test_shapes_preserved():
    raw = np.arange(24, dtype=np.uint64).reshape(2, 3, 4)
    for n in nx.FLOAT_INPUTS:
        assert nx.decode_float(n, raw).shape == (2, 3, 4)
    assert nx.decode_int("S8", raw).shape == (2, 3, 4)
    assert nx.round_fp32_bits(raw.astype(np.float64)).shape == (2, 3, 4)
    # scalars give 0-d arrays
    for out in (nx.decode_float("HiF8", 0x6E), nx.decode_int("S8", 0xFF),
                nx.fp32_value(0x3F800000), nx.round_fp32_bits(1.0)):
        assert isinstance(out, np.ndarray) and out.shape == ()


# ---------------------------------------------------------------- binary32 rounding


def _rne_fp32_exact(x: float) -> int:
    """binary32 bits of x under IEEE round-to-nearest-even, in exact rationals."""
    if math.isnan(x):
        return 0x7FC00000
    sign = 0x80000000 if math.copysign(1.0, x) < 0 else 0
    if math.isinf(x):
        return sign | 0x7F800000
    a = Fraction(abs(x))
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = max(e, -126) - 23                      # exponent of one unit in the last place
    n = round(a / Fraction(2) ** q)            # Fraction rounding: ties to even
    if n == 1 << 24:                           # rounded up into the next binade
        n, q = n >> 1, q + 1
    if n == 0:
        return sign
    if q + 23 > 127:
        return sign | 0x7F800000               # |rounded| >= 2^128: overflow
    if n < 1 << 23:
        assert q == -149
        return sign | n                        # subnormal
    return sign | (q + 23 + 127) << 23 | (n - (1 << 23))


def _rounding_cases() -> list[float]:
    rng = random.Random(20240601)
    xs = [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 1.0, -1.0,
          1e300, -1e300, 1e-300, -1e-300, 5e-324]
    f32max = float(np.finfo(np.float32).max)
    xs += [f32max, 2.0**128 - 2.0**104 + 2.0**103,           # max + half ulp: tie -> inf
           math.nextafter(2.0**128 - 2.0**103, 0.0),          # just below the tie -> max
           2.0**128 - 2.0**103, 2.0**128, -(2.0**128 - 2.0**103),
           2.0**-149, 2.0**-150, math.nextafter(2.0**-150, 1.0), 3 * 2.0**-150,
           2.0**-151, 5 * 2.0**-150, 2.0**-126 - 2.0**-150, 2.0**-126 - 2.0**-149,
           math.nextafter(2.0**-126 - 2.0**-150, 0.0), -(2.0**-150), -(3 * 2.0**-150)]
    # a payload NaN
    xs.append(np.array([0x7FF0000000000123], dtype=np.uint64).view(np.float64)[0].item())
    for _ in range(3000):   # random float64 across (and beyond) the binary32 range
        e = rng.randint(-160, 130)
        xs.append(rng.choice((-1, 1)) * math.ldexp(1 + rng.random(), e))
    for _ in range(1500):   # exact ties and their float64 neighbours
        e = rng.randint(-149, 127)
        m = rng.getrandbits(24) | (1 << 23)
        ulp = 2.0 ** max(e - 23, -149)
        base = m * ulp if e >= -126 else rng.getrandbits(23) * 2.0**-149
        tie = base + ulp / 2
        for v in (tie, math.nextafter(tie, 0.0), math.nextafter(tie, math.inf)):
            xs.append(v if rng.random() < 0.5 else -v)
    return xs


def test_round_fp32_bits_is_exact_rne():
    xs = _rounding_cases()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = nx.round_fp32_bits(np.array(xs, dtype=np.float64))
    assert got.dtype == np.uint32
    want = np.array([_rne_fp32_exact(x) for x in xs], dtype=np.uint32)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(xs[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_round_fp32_bits_boundaries():
    r = lambda x: int(nx.round_fp32_bits(np.float64(x)))
    assert r(2.0**128 - 2.0**103) == 0x7F800000                # tie at max -> even -> inf
    assert r(math.nextafter(2.0**128 - 2.0**103, 0)) == 0x7F7FFFFF
    assert r(-1e39) == 0xFF800000
    assert r(2.0**-150) == 0                                    # tie -> even (zero)
    assert r(math.nextafter(2.0**-150, 1)) == 1
    assert r(3 * 2.0**-150) == 2                                # tie -> even
    assert r(-(2.0**-151)) == 0x80000000                        # signed zero kept
    assert r(2.0**-126 - 2.0**-150) == 0x00800000               # rounds up to min normal
    assert r(float("nan")) == 0x7FC00000 and r(-float("nan")) == 0x7FC00000


def test_fp32_value_round_trip():
    rng = np.random.default_rng(3)
    pats = rng.integers(0, 2**32, size=50000, dtype=np.uint64).astype(np.uint32)
    v = nx.fp32_value(pats)
    assert v.dtype == np.float64
    finite = ~np.isnan(v)
    assert np.array_equal(nx.round_fp32_bits(v)[finite], pats[finite])
    assert np.all(nx.round_fp32_bits(v[~finite]) == 0x7FC00000)
