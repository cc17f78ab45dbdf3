"""Raw element words at the Python API (issue 53): the rule of
ptojax/layouts/words.py at every pj.layouts entry point and at pj.golden's
raw codes.

- A container narrower than the element: TypeError naming both.
- A value that does not fit the element's width, going into a tile
  (nd_to_cube, nd_to_ordinary, golden raw codes and scales): ValueError
  naming the first offending index (a tuple index into the input), the value
  and the width. Unsigned containers hold 0..2^bits-1, signed ones
  -2^(bits-1)..2^bits-1 (a negative value is its two's complement bits).
- Payload Words read out of a tile (cube_to_nd, ordinary_to_nd) are the
  model's carriers and pass through whole.

Compile budget: the layout kernels compile once per (shape, container,
layout, width); the shapes here are few and tiny. The golden refusals raise
before any program is built; legal golden inputs are checked at the encoder.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ptojax as pj
from ptojax.golden import bundle
from ptojax.layouts.words import raw_words, word_range

L = pj.layouts
INTS = (np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64)


def _np(a):
    return np.asarray(a)


# ----------------------------------------------------------------- container narrower than the element

ENTRY_POINTS = {
    "nd_to_cube": lambda x, dt: L.nd_to_cube(x.reshape(2, -1), "CUBE_M16", dt),
    "cube_to_nd": lambda x, dt: L.cube_to_nd(x.reshape(-1), "CUBE_M16", dt, 1, 1),
    "nd_to_ordinary": lambda x, dt: L.nd_to_ordinary(x.reshape(16, -1), "NZ", dt),
    "ordinary_to_nd": lambda x, dt: L.ordinary_to_nd(x.reshape(-1), "ND", dt, 16, x.size // 16),
}


def test_issue_example_uint16_for_fp32_is_a_type_error():
    with pytest.raises(TypeError, match=r"uint16.*FP32|FP32.*uint16") as e:
        L.nd_to_cube(np.zeros((16, 16), np.uint16), "CUBE_M16", dtype="FP32")
    assert "narrower than the element" in str(e.value)


@pytest.mark.parametrize("fn", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("container,dt", [
    (np.uint16, "FP32"), (np.uint8, "FP16"), (np.int8, "BF16"), (np.uint32, "S64"), (np.int16, "U32"),
])
def test_narrow_container_refused_everywhere(fn, container, dt):
    if fn.endswith("cube") or fn == "cube_to_nd":
        if pj.tables.dtype(dt).cube_class is None:
            pytest.skip("not a CUBE type")
    x = np.zeros(16 * 64, container)
    name = np.dtype(container).name
    with pytest.raises(TypeError, match=rf"{name}.*{dt}") as e:
        ENTRY_POINTS[fn](x, dt)
    assert f"{pj.tables.dtype(dt).bits} bits" in str(e.value)


@pytest.mark.parametrize("fn", sorted(ENTRY_POINTS))
def test_jax_narrow_container_refused(fn):
    with pytest.raises(TypeError, match="uint16.*FP32"):
        ENTRY_POINTS[fn](jnp.zeros(16 * 64, jnp.uint16), "FP32")


def test_golden_narrow_raw_codes_refused():
    with pytest.raises(TypeError, match="uint8.*FP16"):
        pj.golden.matmul(np.ones((2, 2), np.uint8), np.ones((2, 2), np.uint16), dtype="FP16")
    with pytest.raises(TypeError, match="uint16.*FP32"):
        pj.golden.gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.uint16), dtype="FP32")
    with pytest.raises(TypeError, match="uint16.*FP32"):
        pj.golden.matmul(np.ones((2, 2), np.float16), np.ones((2, 2), np.float16), dtype="FP16",
                         acc=np.zeros((2, 2), np.uint16))


# ----------------------------------------------------------------- values wider than the element


def test_issue_example_high_half_is_refused():
    x = np.zeros((16, 16), np.uint32)
    x[3, 5] = 0xFFFF0000
    with pytest.raises(ValueError, match=re.escape("index (3, 5)")) as e:
        L.nd_to_cube(x, "CUBE_M16", "FP16")
    msg = str(e.value)
    assert "4294901760" in msg and "0xffff0000" in msg and "16-bit FP16" in msg and "0..0xffff" in msg


def test_first_offending_index_row_major_in_a_batch():
    x = np.zeros((3, 4, 8), np.uint64)
    x[2, 0, 0] = 1 << 40
    x[1, 3, 7] = 0x100
    x[1, 2, 6] = 0x1FF                   # the first, row-major
    with pytest.raises(ValueError, match=re.escape("511 (0x1ff) at index (1, 2, 6)")):
        L.nd_to_cube(x, "CUBE_N8", "E4M3")
    with pytest.raises(ValueError, match=re.escape("index (1, 2, 6)")):
        L.nd_to_cube(jnp.asarray(x), "CUBE_N8", "E4M3")        # a jax array: the same index


@pytest.mark.parametrize("x,dt,idx", [
    (np.array([[0, 1, 0x10]], np.uint8), "U4X2", (0, 2)),          # one nibble per value
    (np.array([[15, -9]], np.int8), "S4X2", (0, 1)),
    (np.array([[0x20, 0]], np.uint16), "E2M1X2", (0, 0)),
    (np.array([[-129, 0]], np.int16), "S8", (0, 0)),
    (np.array([[0, 256]], np.int32), "U8", (0, 1)),
    (np.array([[0, 1 << 32]], np.int64), "FP32", (0, 1)),
    (np.array([[-(1 << 31) - 1]], np.int64), "S32", (0, 0)),
    (np.array([[0, 0], [65536, 0]], np.int32), "FP16", (1, 0)),
    (np.array([[0, -32769]], np.int32), "BF16", (0, 1)),
])
def test_misfit_values_name_their_index(x, dt, idx):
    bits = pj.tables.dtype(dt).bits
    with pytest.raises(ValueError, match=re.escape(f"at index {idx}")) as e:
        L.nd_to_cube(x, "CUBE_M16", dt)
    assert f"{bits}-bit {dt}" in str(e.value) and str(int(x[idx])) in str(e.value)


def test_nd_to_ordinary_refuses_misfit_values():
    x = np.zeros((16, 16), np.uint32)
    x[15, 15] = 0x10000
    with pytest.raises(ValueError, match=re.escape("index (15, 15)")):
        L.nd_to_ordinary(x, "NZ", "FP16")
    x8 = np.zeros((2, 16, 32), np.uint16)
    x8[1, 0, 1] = 0x100
    with pytest.raises(ValueError, match=re.escape("index (1, 0, 1)")):
        L.nd_to_ordinary(x8, "ZN", "U8")


def test_golden_refuses_misfit_raw_codes_and_values():
    a = np.zeros((2, 3), np.uint32)
    a[1, 2] = 0x10000
    with pytest.raises(ValueError, match=re.escape("index (1, 2)")):
        pj.golden.matmul(a, np.zeros((3, 2), np.uint16), dtype="FP16")
    with pytest.raises(ValueError, match=re.escape("index (0, 1)")):
        pj.golden.gemm(np.zeros((1, 1), np.uint8), np.array([[0, 16]], np.uint8), dtype="E2M1X2")
    # integer types take values: the first value outside the type's range is named
    with pytest.raises(ValueError, match=re.escape("200 at index (0, 1)")):
        pj.golden.matmul(np.array([[1, 200]]), np.ones((2, 1), int), dtype="S8")
    with pytest.raises(ValueError, match=r"18446744073709551615 at index \(0, 0\)"):  # never wraps to -1
        pj.golden.matmul(np.array([[2**64 - 1]], np.uint64), np.ones((1, 1), int), dtype="S8")


def test_golden_scales_never_wrap():
    a, b = np.ones((1, 32)), np.ones((32, 1))
    with pytest.raises(ValueError, match=re.escape("300 (0x12c) at index (0, 0)")):
        pj.golden.matmul(a, b, dtype="E4M3", scales=(np.full((1, 1), 300), np.full((1, 1), 127)))
    with pytest.raises(ValueError, match=re.escape("0x100")):
        pj.golden.matmul(a, b, dtype="E4M3", scales=(np.full((1, 1), 127, np.uint16),
                                                     np.full((1, 1), 256, np.uint16)))
    with pytest.raises(ValueError, match="whole numbers 0..255"):
        pj.golden.matmul(a, b, dtype="E4M3", scales=(np.full((1, 1), 127.5), np.full((1, 1), 127)))


# ----------------------------------------------------------------- legal inputs at the edges


@pytest.mark.parametrize("container,dt,value,word", [
    (np.uint32, "FP16", 0xFFFF, 0xFFFF), (np.uint64, "FP32", 0xFFFFFFFF, 0xFFFFFFFF),
    (np.uint8, "U4X2", 0xF, 0xF), (np.uint64, "S4X2", 0xF, 0xF), (np.uint16, "U8", 0xFF, 0xFF),
    (np.int8, "S8", -128, 0x80), (np.int8, "S8", 127, 0x7F), (np.int16, "FP16", -1, 0xFFFF),
    (np.int32, "FP16", -32768, 0x8000), (np.int32, "FP16", 65535, 0xFFFF), (np.int32, "FP16", -1, 0xFFFF),
    (np.int8, "S4X2", -8, 0x8), (np.int8, "U4X2", 15, 0xF), (np.int64, "S32", -1, 0xFFFFFFFF),
    (np.int64, "U32", 0xFFFFFFFF, 0xFFFFFFFF),
])
def test_edge_values_pass(container, dt, value, word):
    x = np.array([[value, 0]], container)
    words = _np(L.nd_to_cube(x, "CUBE_M16", dt, defined=False))
    width = 8 * np.dtype(container).itemsize
    assert words.dtype == np.dtype(f"uint{width}") and int(words[0]) == word
    back = _np(L.cube_to_nd(words, "CUBE_M16", dt, 1, 2))
    assert int(back[0, 0]) == word


def test_edge_values_pass_nd_to_ordinary():
    x = np.full((16, 4), -1, np.int64)
    w = _np(L.nd_to_ordinary(x, "ZN", "FP64"))
    assert w.dtype == np.uint64 and (w == np.uint64(2**64 - 1)).all()
    x16 = np.full((16, 16), 0xFFFF, np.uint64)
    assert (_np(L.nd_to_ordinary(x16, "NZ", "FP16")) == 0xFFFF).all()


def test_jax_signed_container_and_traced_input():
    x = jnp.array([[-1, 5, 65535]], jnp.int32)
    w = _np(L.nd_to_cube(x, "CUBE_M16", "FP16", defined=False))
    assert w.dtype == np.uint32 and list(w[:3]) == [0xFFFF, 5, 0xFFFF]
    # inside jit the values are not known: not checked, negatives still their element's bits
    f = jax.jit(lambda v: L.nd_to_cube(v, "CUBE_M16", "FP16", defined=False))
    assert list(_np(f(x))[:3]) == [0xFFFF, 5, 0xFFFF]


def test_readers_pass_carrier_words_through():
    # S8 -128 as the model's sign-extended carrier, in a valid slot: read back whole
    words = np.zeros(128, np.uint64)
    words[0] = 0xFFFFFFFFFFFFFF80
    assert int(_np(L.cube_to_nd(words, "CUBE_M16", "S8", 1, 1))[0, 0]) == 0xFFFFFFFFFFFFFF80
    w = np.full(64, 0xFFFF0000FFFF, np.uint64)
    assert (_np(L.ordinary_to_nd(w, "ND", "FP16", 16, 4)) == 0xFFFF0000FFFF).all()
    # nd_to_cube's own full-carrier pad words round trip
    x = np.array([[1, 2, 3]], np.uint64)
    words, _ = L.nd_to_cube(x, "CUBE_M16", "S4X2", pad="Max")
    assert int(_np(words)[3]) == 2**64 - 1
    np.testing.assert_array_equal(_np(L.cube_to_nd(words, "CUBE_M16", "S4X2", 1, 3)), x)
    # a signed words array is read as its bits
    assert int(_np(L.cube_to_nd(np.full(64, -1, np.int16), "CUBE_M16", "FP16", 1, 1))[0, 0]) == 0xFFFF


def test_golden_encoder_edges():
    fp16, e8, fp32 = (pj.tables.dtype(n) for n in ("FP16", "E8M0", "FP32"))
    codes = bundle.encode(np.array([[0, 0xFFFF]], np.uint64), fp16, "a")
    assert codes.dtype == np.uint64 and list(codes[0]) == [0, 0xFFFF]
    assert list(bundle.encode(np.array([0xFFFFFFFF], np.uint32), fp32, "acc")) == [0xFFFFFFFF]
    assert list(bundle.scale_codes(np.array([[0, 255]], np.int64), "sa")[0]) == [0, 255]
    assert list(bundle.scale_codes(np.array([[127.0, 255.0]]), "sa")[0]) == [127, 255]
    assert list(bundle.scale_codes(np.array([[0xFF]], np.uint8), "sa")[0]) == [255]
    s8 = pj.tables.dtype("S8")
    assert list(bundle.encode(np.array([-128, 127], np.int8), s8, "a")) == [0x80, 0x7F]
    assert bundle.encode(np.array([0.5], np.float32), e8, "sa")[0] == 126    # values still convert


# ----------------------------------------------------------------- the rule as a property

DTS = ("FP32", "FP16", "E4M3", "S8", "U4X2", "S4X2", "U32", "FP64")


@st.composite
def word_case(draw):
    container = np.dtype(draw(st.sampled_from(INTS)))
    dt = pj.tables.dtype(draw(st.sampled_from(DTS)))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    info = np.iinfo(container)
    bits = dt.bits
    # values near the edges of the rule, and anything the container holds
    edges = [v for v in (0, 1, -1, (1 << bits) - 1, 1 << bits, -(1 << (bits - 1)), -(1 << (bits - 1)) - 1,
                         int(info.min), int(info.max)) if info.min <= v <= info.max]
    elements = st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max)))
    x = draw(hnp.arrays(container, shape, elements=elements))
    return x, dt


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(word_case())
def test_raw_words_property(case):
    """raw_words refuses exactly what the rule refuses, names the row-major first
    misfit, and returns every accepted value's element bits (value mod 2^bits)."""
    x, dt = case
    cbits = 8 * x.dtype.itemsize
    if cbits < dt.bits:
        with pytest.raises(TypeError, match=f"{x.dtype}.*{dt.name}"):
            raw_words(x, dt, "x")
        return
    lo, hi = (0, (1 << dt.bits) - 1) if x.dtype.kind == "u" else (-(1 << (dt.bits - 1)), (1 << dt.bits) - 1)
    assert word_range(x.dtype, dt.bits) == (max(lo, int(np.iinfo(x.dtype).min)),
                                            min(hi, int(np.iinfo(x.dtype).max)))
    flat = [int(v) for v in x.reshape(-1)]
    bad = [i for i, v in enumerate(flat) if not lo <= v <= hi]
    if bad:
        idx = tuple(int(i) for i in np.unravel_index(bad[0], x.shape))
        with pytest.raises(ValueError, match=re.escape(f"at index {idx}")):
            raw_words(x, dt, "x")
        return
    out = raw_words(x, dt, "x")
    assert out.dtype == np.dtype(f"uint{cbits}") and out.shape == x.shape
    assert [int(v) for v in out.reshape(-1)] == [v % (1 << dt.bits) if v < 0 else v for v in flat]
    carried = raw_words(x, dt, "x", carriers=True)          # readers: the bits, untouched
    assert [int(v) for v in carried.reshape(-1)] == [v % (1 << cbits) for v in flat]
