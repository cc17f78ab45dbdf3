"""Ordinary layouts ND/DN/ZN/NZ (pj.layouts.nd_to_ordinary, ordinary_to_nd,
ordinary_index): the payload index against a spec oracle written here from
the formulas of the model's TileLinearIndex (state-and-transport.md A.4 and
the relayout digest's worked table), round trips, misuse, and the kernels
against what a relayout TLOAD leaves in a tile on the JAX executor.

Compile budget: the kernels compile once per (batch, shape, layout, dtype
width); shapes come from a short table and hypothesis draws few examples.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptojax as pj

L = pj.layouts
LAYOUTS = ("RowMajor", "ColumnMajor", "ZN", "NZ")
WIDTH = {"FP64": 4, "FP32": 8, "FP16": 16, "U8": 32, "U4X2": 64}   # elements per 32 bytes


def oracle_index(layout, dt, rows, cols, r, c):
    """The spec's index, fractal by fractal: a fractal is 16 rows x WIDTH[dt]."""
    w = WIDTH[dt]
    if layout == "RowMajor":
        return r * cols + c
    if layout == "ColumnMajor":
        return c * rows + r
    fractal = 16 * w
    if layout == "ZN":      # fractals along each row of fractals first; inside, down the columns
        return ((r // 16) * (cols // w) + c // w) * fractal + (c % w) * 16 + r % 16
    return ((c // w) * (rows // 16) + r // 16) * fractal + (r % 16) * w + c % w


@pytest.mark.parametrize("layout,expect", [
    ("RowMajor", [0, 5, 123, 128, 132, 135]),
    ("ColumnMajor", [0, 160, 111, 16, 144, 240]),
    ("ZN", [0, 80, 63, 128, 192, 240]),
    ("NZ", [0, 129, 63, 64, 192, 195]),
])
def test_worked_fp64_32x8_table(layout, expect):
    at = [(0, 0), (0, 5), (15, 3), (16, 0), (16, 4), (16, 7)]
    assert [L.ordinary_index(layout, "FP64", 32, 8, r, c) for r, c in at] == expect


@pytest.mark.parametrize("dt", sorted(WIDTH))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_index_is_the_oracle_and_a_bijection(layout, dt):
    rows, cols = 32, 2 * WIDTH[dt]
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    got = L.ordinary_index(layout, dt, rows, cols, r, c)
    assert (got == oracle_index(layout, dt, rows, cols, r, c)).all()
    assert sorted(got.ravel().tolist()) == list(range(rows * cols))
    assert L.fractal_width(dt) == WIDTH[dt]


def test_fractal_grid():
    assert L.ordinary_indexable("ZN", "FP64", 16, 4) and L.ordinary_indexable("NZ", "FP16", 32, 16)
    assert not L.ordinary_indexable("ZN", "FP64", 8, 4)          # 8 rows
    assert not L.ordinary_indexable("NZ", "FP64", 16, 2)         # 2 x 8 bytes < 32
    assert L.ordinary_indexable("ColumnMajor", "FP64", 1, 1)
    with pytest.raises(ValueError, match="whole NZ fractals"):
        L.ordinary_index("NZ", "FP64", 16, 2, 0, 0)


SHAPES = [(16, 4, "FP64"), (32, 8, "FP64"), (16, 16, "FP16"), (48, 64, "U8")]


@pytest.mark.parametrize("rows,cols,dt", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS + ("ND", "DN"))
def test_kernels_place_by_the_index_and_round_trip(layout, rows, cols, dt):
    # raw element bits in a uint64 container: every value fits the element (layouts/words.py)
    hi = 1 << min(63, pj.tables.dtype(dt).bits)
    x = np.random.default_rng(rows * cols).integers(0, hi, (3, rows, cols), dtype=np.uint64)
    w = np.asarray(L.nd_to_ordinary(x, layout, dt))
    assert w.shape == (3, rows * cols)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    name = L.ordinary_layout(layout)
    assert (w[:, oracle_index(name, dt, rows, cols, r, c)] == x).all()
    back = np.asarray(L.ordinary_to_nd(w, layout, dt, rows, cols))
    assert back.dtype == x.dtype and (back == x).all()
    one = np.asarray(L.nd_to_ordinary(x[1], layout, dt))           # a single tile
    assert (one == w[1]).all()


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(LAYOUTS), st.sampled_from(SHAPES), st.integers(0, 2**32 - 1))
def test_round_trip_hypothesis(layout, shape, seed):
    rows, cols, dt = shape
    bits = pj.tables.dtype(dt).bits         # the natural container, every raw value of the element
    container = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    x = np.random.default_rng(seed).integers(0, 1 << bits, (2, rows, cols), dtype=np.uint64).astype(container)
    w = L.nd_to_ordinary(x, layout, dt)
    assert (np.asarray(L.ordinary_to_nd(w, layout, dt, rows, cols)) == x).all()


def test_misuse_is_a_clear_error():
    x = np.zeros((16, 4), np.uint64)
    with pytest.raises(ValueError, match="unknown ordinary layout"):
        L.nd_to_ordinary(x, "CUBE_M16", "FP64")
    with pytest.raises(TypeError, match="layout must be a name"):
        L.nd_to_ordinary(x, 3, "FP64")
    with pytest.raises(TypeError, match="integer array"):
        L.nd_to_ordinary(x.astype(np.float32), "NZ", "FP64")
    with pytest.raises(ValueError, match="whole fractals"):
        L.nd_to_ordinary(np.zeros((8, 4), np.uint64), "NZ", "FP64")
    with pytest.raises(ValueError, match=r"\[batch, rows, cols\]"):
        L.nd_to_ordinary(np.zeros(4, np.uint64), "ND", "FP64")
    with pytest.raises(ValueError, match=r"\[64\] or \[batch, 64\]"):
        L.ordinary_to_nd(np.zeros(63, np.uint64), "ZN", "FP64", 16, 4)
    with pytest.raises(TypeError, match="rows must be an int"):
        L.ordinary_to_nd(np.zeros(64, np.uint64), "ZN", "FP64", 16.0, 4)
    with pytest.raises(ValueError, match="unknown dtype|DataType"):
        L.nd_to_ordinary(x, "NZ", "FP65")


@pytest.mark.parametrize("code,layout", [(1, "ColumnMajor"), (3, "ZN"), (4, "NZ"), (27, "RowMajor")])
def test_kernels_match_a_relayout_tload(code, layout):
    # a 16 x 4 FP64 tile loaded by TLOAD with this code on the JAX executor: its
    # payload is nd_to_ordinary of the GM matrix, and read_tile reads it back
    x = np.arange(1, 65, dtype=np.uint64).reshape(16, 4) * 0x0101010101
    s = pj.write_memory(pj.reset(pj.preset("small")), 0x100, x.view(np.uint8).reshape(-1))
    s = pj.write_gpr(pj.write_gpr(s, "a0", 0x100), "a1", 32)
    name = pj.tables.LAYOUT_CODES[code]
    r = pj.run(s, pj.asm.assemble(f"""BSTART.TLOAD FP64
        B.DATR {{{name}, FP64, Zero}}
        B.DIM zero, 4, ->LB0
        B.DIM zero, 16, ->LB1
        B.IOR a0, a1
        B.IOT mask=1000, last, ->T<3>
        BSTOP"""))
    assert r.fault == "Fault_None"
    t = pj.read_tile(r.state, 0)
    assert (t.layout, t.rows, t.columns) == (layout, 16, 4)
    assert (t.words[:64] == np.asarray(L.nd_to_ordinary(x, layout, "FP64"))).all()
    assert (t.to_nd() == x).all()


def test_read_shared_in_the_registers_layout():
    # a Shared NZ register (FP16 2 x 32 of a 16 x 32 record): read_shared marks the
    # valid elements at their NZ slots, and to_nd gives the matrix back
    x = (np.arange(64, dtype=np.uint64).reshape(2, 32) + 0x100)
    s = pj.write_memory(pj.reset(pj.preset("small")), 0x100, x.astype(np.uint16).view(np.uint8).reshape(-1))
    for pe in range(4):
        s = pj.write_gpr(pj.write_gpr(s, "a0", 0x100, pe=pe), "a1", 64, pe=pe)
    r = pj.reference.run(s, pj.asm.assemble("""BSTART.TLOAD FP16
        B.DATR {ND2NZ, FP64, Zero}
        B.DIM zero, 32, ->LB0
        B.DIM zero, 2, ->LB1
        B.DIM zero, 32, ->LB2
        B.IOS mask=1111, ->S7<4>
        B.IOR a0, a1
        BSTOP"""), cfg=pj.preset("small"))
    assert r.fault == "Fault_None"
    v = pj.read_shared(r.state, 7)
    assert (v.layout, v.rows, v.columns) == ("NZ", 16, 32)
    slots = {L.ordinary_index("NZ", "FP16", 16, 32, rr, c) for rr in range(2) for c in range(32)}
    assert set(np.flatnonzero(v.defined).tolist()) == slots
    assert v.defined_valid_elements == 64 and (v.to_nd() == x).all()

