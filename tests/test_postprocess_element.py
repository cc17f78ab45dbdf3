"""The executor's B.FPATR element conversion (ptojax/ops/postprocess.py,
float64 lanes) against the reference model's (reference/postprocess.py,
exact Fractions, written from the ASL independently): hypothesis draws
accumulator Words, modes, legal parameter Words, rounding modes and the
saturation bit; every 8-bit-float midpoint is checked too. Each case
compares the Word and the numeric flags it raises. One compiled function of
128 lanes serves every example."""

import struct
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ptojax import tables
from ptojax._x64 import x64
from ptojax.ops import postprocess as J
from ptojax.reference import minifloat
from ptojax.reference import postprocess as R

LANES = 128
MODES = [0, 1, 2, 3, 4, 5, 12, 13, 16, 17, 18, 19, 20, 23, 24, 25, 26, 27, 28, 32, 33, 34, 35, 36,
         37, 38, 39]
SPECIAL = [0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0, 1, 0x7F800001, 0xFF800001,
           0x80000001,
           0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x80000000 | 0x12345]


@jax.jit
def _element(w, mode, relu, acc, quant, alpha, rmode, sat):
    return J.element(w, mode, relu, acc, quant, alpha, J.rounding(mode, rmode), sat)


@x64
def executor(cases):
    """J.element on up to LANES cases (padded): (Word, flags) Python ints."""
    pad = cases + [cases[0]] * (LANES - len(cases))
    col = lambda i, dt: jnp.asarray(np.array([c[i] for c in pad], dt))
    acc = jnp.asarray(np.array([tables.DTYPE_BY_NAME[c[3]].code for c in pad], np.int32))
    out, flags = _element(col(0, np.uint64), col(1, np.int32), col(2, np.int32), acc,
                          col(4, np.uint64), col(5, np.uint64), col(6, np.int32),
                          col(7, np.int32) == 1)
    return [(int(x), int(f)) for x, f in zip(np.asarray(out)[: len(cases)],
                                             np.asarray(flags)[: len(cases)])]


def reference(cases):
    return [R.post_process(w, m, r, a, q, p, R.control_of(m, rm, s))
            for w, m, r, a, q, p, rm, s in cases]


fp19 = st.one_of(st.builds(lambda e, f: e << 10 | f, st.integers(110, 145), st.integers(0, 1023)),
                 st.builds(lambda e, f: e << 10 | f, st.integers(1, 254), st.integers(0, 1023)))
word = st.one_of(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 32) - 1), st.sampled_from(SPECIAL),
                 st.builds(lambda s, e, f: s << 31 | e << 23 | f, st.integers(0, 1),
                           st.integers(100, 160), st.integers(0, (1 << 23) - 1)))


@st.composite
def case(draw):
    mode = draw(st.sampled_from(MODES))
    acc = (draw(st.sampled_from(["FP32", "S32", "U32"])) if mode == 0
           else "S32" if mode in R.S32_MODES else "FP32")
    width = R.offset_width(mode)
    if mode in R.SHIFT_MODES:
        quant = draw(st.integers(0, 15)) << 32
    else:
        quant = draw(fp19) << 13 | (draw(st.integers(0, (1 << width) - 1)) << 37 if width else 0)
    alpha = draw(st.one_of(st.just(0), fp19))
    return (draw(word), mode, draw(st.integers(0, 3)), acc, quant, alpha, draw(st.integers(0, 7)),
            draw(st.integers(0, 1)))


@settings(max_examples=40, deadline=None)
@given(st.lists(case(), min_size=1, max_size=LANES))
def test_executor_element_equals_the_reference(cases):
    assert executor(cases) == reference(cases)


def test_fp8_midpoints_and_neighbours():
    # every midpoint of two adjacent E4M3 / HiF8 values that binary32 holds, and one
    # binary32 ulp either side, under each of the four 8-bit modes (RNE or RHB)
    cases = []
    for name, modes in (("E4M3", (26, 37)), ("HiF8", (25, 28))):
        vals = sorted({minifloat.decompose(name, c).exact() for c in range(256)
                       if minifloat.decompose(name, c).kind == minifloat.FINITE})
        for lo, hi in zip(vals, vals[1:]):
            mid = (lo + hi) / 2
            bits = struct.unpack("<I", struct.pack("<f", float(mid)))[0]
            if Fraction(struct.unpack("<f", struct.pack("<I", bits))[0]) != mid:
                continue
            cases += [(w, m, 0, "FP32", (0x3F800000 >> 13) << 13, 0, 0, 0)
                      for w in (bits, bits + 1, bits - 1) for m in modes]
    assert len(cases) > 1000
    for k in range(0, len(cases), LANES):
        chunk = cases[k:k + LANES]
        assert executor(chunk) == reference(chunk)


# The spec's hardware-numeric vectors, group matrix_postprocess
# (spec/evidence/pto-isa-0583-hardware-numeric-vectors.json at e599a3d): source
# Word, PreQuantMode, ReluMode, FP19 scale (bits of the FP32 value), LReLU alpha,
# signed offset, Sat, the destination's raw bits and the flags raised (a vector
# without expected_flags raises none).
FP19 = lambda fp32_bits: fp32_bits >> 13
SPEC_VECTORS = [
    ("req8-scalar-affine", 3, 3, 0, 0x40000000, 0, -1, 0, "S8", 0x05, []),
    ("req8-wrap", 70, 3, 0, 0x40000000, 0, 0, 0, "S8", 0x8C, ["OF", "NX"]),
    ("req8-saturate", 70, 3, 0, 0x40000000, 0, 0, 1, "S8", 0x7F, ["OF", "NX"]),
    ("f32-e4m3-exact", 0x3FC00000, 26, 0, 0x3F800000, 0, 0, 0, "E4M3", 0x3C, []),
    ("f32-hif8-exact", 0x3FC00000, 25, 0, 0x3F800000, 0, 0, 0, "HiF8", 0x0C, []),
    ("post-conversion-lrelu", 0xC0800000, 24, 2, 0x3F800000, 0x3F000000, 0, 0, "S8", 0xFE, []),
    ("nan-indefinite", 0x7FC00000, 24, 0, 0x3F800000, 0, 0, 0, "S8", 0x80, ["NV"]),
    ("nan-saturating-zero", 0x7FC00000, 24, 0, 0x3F800000, 0, 0, 1, "S8", 0x00, ["NV"]),
]


def test_spec_hardware_numeric_vectors_on_both_models():
    cases, wants = [], []
    for vid, word, mode, relu, scale, alpha, offset, sat, out, raw, names in SPEC_VECTORS:
        width = R.offset_width(mode)
        quant = FP19(scale) << 13 | ((offset & ((1 << width) - 1)) << 37 if width else 0)
        acc = "S32" if mode in R.S32_MODES else "FP32"
        assert R.output_type(mode, acc) == out, vid
        cases.append((word, mode, relu, acc, quant, FP19(alpha), 0, sat))
        wants.append((vid, raw, tables.flag_bits(names)))
    bits = {"S8": 8, "E4M3": 8, "HiF8": 8}
    for name, got in (("reference", reference(cases)), ("executor", executor(cases))):
        for (vid, raw, fl), (w, f), case in zip(wants, got, cases):
            out = R.output_type(case[1], case[3])
            assert (w & ((1 << bits[out]) - 1), f) == (raw, fl), (name, vid)


# The flag assertions of the spec's own executable tests (e599a3d):
# tests/asl/block/attributes/B.FPATR/block-exec-b-fpatr-{quant-002,activation-004,
# formats-003}.asl and tests/asl/arch/profile/matrix-postprocess/
# arch-exec-matrix-postprocess-{001,pipeline-002}.asl, as
# (source Word, mode, relu, accumulator, quant Word, relu Word, RMode, Sat, Word, flags).
Q = lambda fp32_bits, offset=0, width=0: (FP19(fp32_bits) << 13
                                          | ((offset & ((1 << width) - 1)) << 37 if width else 0))
ASL_FLAG_VECTORS = [
    (3, 3, 0, "S32", Q(0x40000000, -1, 9), 0, 0, 0, 5, 0),
    (70, 3, 0, "S32", Q(0x40000000, 0, 9), 0, 0, 0, 0xFFFFFFFFFFFFFF8C, 0x14),
    (70, 3, 0, "S32", Q(0x40000000, 0, 9), 0, 0, 1, 127, 0x14),
    (0xFFFFFFFFFFFFFFDF, 13, 0, "S32", 0, 0, 0, 0, 0xFFFFFFFFFFFFFFEF, 0),
    (0x7FFFFFFF, 13, 0, "S32", 0, 0, 0, 1, 0x7FFF, 0x14),
    (0xC0000000, 24, 1, "FP32", Q(0x3F800000, 0, 9), 0, 0, 0, 0, 0),
    (0xC0800000, 24, 2, "FP32", Q(0x3F800000, 0, 9), FP19(0x3F000000), 0, 0,
     0xFFFFFFFFFFFFFFFE, 0),
    (0x3FC00000, 1, 0, "FP32", 0, 0, 0, 0, 0x3E00, 0),
    (0x3FC00000, 16, 0, "FP32", 0, 0, 0, 0, 0x3FC0, 0),
    (0x3FC00000, 26, 0, "FP32", Q(0x3F800000), 0, 0, 0, 0x3C, 0),
    (0x3FC00000, 25, 0, "FP32", Q(0x3F800000), 0, 0, 0, 0x0C, 0),
    (0x3FC00000, 27, 0, "FP32", Q(0x3F000000), 0, 0, 0, 0x3F400000, 0),
    (0xBF000BB0, 32, 2, "FP32", Q(0x3F800000), FP19(0x3F400000), 0, 0, 0xB601, 0x10),
]


def test_spec_flag_vectors_on_both_models():
    cases = [v[:8] for v in ASL_FLAG_VECTORS]
    want = [v[8:] for v in ASL_FLAG_VECTORS]
    assert reference(cases) == want
    assert executor(cases) == want


@x64
def test_spec_reduction_flag_vectors_on_both_models():
    # arch-exec-matrix-postprocess-001: MAX(3, 7) raises nothing; MaxAbs of -2^31 is
    # 0x7FFFFFFF with OF
    vectors = [(3, 7, False, 7, 0), (0xFFFFFFFF80000000, 0xFFFFFFFF80000000, True, 0x7FFFFFFF, 4)]
    s32 = tables.DTYPE_BY_NAME["S32"].code
    for current, candidate, max_abs, word, flags in vectors:
        assert R.reduction_step(current, candidate, max_abs, "S32") == (word, flags)
        w, f = J.reduction_step(jnp.uint64(current), jnp.uint64(candidate), max_abs, s32)
        assert (int(w), int(f)) == (word, flags)
