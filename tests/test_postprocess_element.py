"""The executor's B.FPATR element conversion (ptojax/ops/postprocess.py,
float64 lanes) against the reference model's (reference/postprocess.py,
exact Fractions, written from the ASL independently): hypothesis draws
accumulator Words, modes, legal parameter Words, rounding modes and the
saturation bit; every 8-bit-float midpoint is checked too. One compiled
function of 128 lanes serves every example."""

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
SPECIAL = [0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0, 1, 0x7F800001, 0x80000001,
           0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x80000000 | 0x12345]


@jax.jit
def _element(w, mode, relu, acc, quant, alpha, rmode, sat):
    return J.element(w, mode, relu, acc, quant, alpha, J.rounding(mode, rmode), sat)


@x64
def executor(cases):
    """J.element on up to LANES cases (padded), as Python ints."""
    pad = cases + [cases[0]] * (LANES - len(cases))
    col = lambda i, dt: jnp.asarray(np.array([c[i] for c in pad], dt))
    acc = jnp.asarray(np.array([tables.DTYPE_BY_NAME[c[3]].code for c in pad], np.int32))
    out = _element(col(0, np.uint64), col(1, np.int32), col(2, np.int32), acc, col(4, np.uint64),
                   col(5, np.uint64), col(6, np.int32), col(7, np.int32) == 1)
    return [int(x) for x in np.asarray(out)[: len(cases)]]


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
