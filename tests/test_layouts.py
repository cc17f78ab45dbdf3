"""CUBE CELL layouts (ADR 0069; state-and-transport.md B.1-B.6, E1-E6).

The expected values here come from a small spec oracle written in this file
from the digest's formulas (cell shapes, B.2 geometry, B.3 index, B.4
interleave, B.5 pad words), independently of ptojax.layouts; the golden
vectors of section E are checked literally. The JAX-vs-reference tests compare
with the independent plain-Python model ptojax.reference.layouts and are
skipped while it is absent.

Compile budget: every nd_to_cube/cube_to_nd call with a new static key (batch,
bound, container, layout, dtype class, pad) compiles once. Bounds come from
the small BOUNDS table and hypothesis runs few examples, so the file stays
well under two minutes on two CPU cores.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptojax as pj
from ptojax.layouts.geometry import shape_legal

L = pj.layouts

# ----------------------------------------------------------------- spec oracle

LAYOUTS = ("CUBE_M16", "CUBE_M32", "CUBE_N8")
WIDTHS = ("b32", "b16", "b8", "b4")
BITS = {"b32": 32, "b16": 16, "b8": 8, "b4": 4}

# ADR 0069 CELL table: (layout, width) -> (cell rows, cell cols).
# N8: K rows x 8 N columns; M32/M16: M rows x X columns.
CELL = {
    ("CUBE_N8", "b32"): (4, 8), ("CUBE_N8", "b16"): (8, 8),
    ("CUBE_N8", "b8"): (16, 8), ("CUBE_N8", "b4"): (32, 8),
    ("CUBE_M32", "b32"): (32, 1), ("CUBE_M32", "b16"): (32, 2),
    ("CUBE_M32", "b8"): (32, 4), ("CUBE_M32", "b4"): (32, 8),
    ("CUBE_M16", "b32"): (16, 2), ("CUBE_M16", "b16"): (16, 4),
    ("CUBE_M16", "b8"): (16, 8), ("CUBE_M16", "b4"): (16, 16),
}
ROWS = sorted(CELL)

# Every CUBE-legal dtype by width class (A.3 element sizes, less HiF4X2 and b64).
DTYPES = {
    "b32": ("FP32", "TF32", "HF32", "S32", "U32"),
    "b16": ("FP16", "BF16", "S16", "U16"),
    "b8": ("HiF8", "E4M3", "E5M2", "E3M2", "E2M3", "E8M0", "S8", "U8"),
    "b4": ("E2M1X2", "E1M2X2", "S4X2", "U4X2"),
}
ILLEGAL_DTYPES = ("HiF4X2", "FP64", "S64", "U64")

PADS = ("Zero", "Max", "Min", "Null")
ALL64 = (1 << 64) - 1
TOP64 = 1 << 63
# B.5 (Max, Min) carrier words.
PAD_MAX_MIN = {
    "FP32": (0x7F7FFFFF, 0xFF7FFFFF), "TF32": (0x7F7FE000, 0xFF7FE000),
    "HF32": (0x7F7FF000, 0xFF7FF000), "FP16": (0x7BFF, 0xFBFF), "BF16": (0x7F7F, 0xFF7F),
    "E4M3": (0x7E, 0xFE), "E5M2": (0x7B, 0xFB),
    "U8": (0xFF, 0), "U16": (0xFFFF, 0), "U32": (0xFFFFFFFF, 0),
    "S8": (0x7F, 0x80), "S16": (0x7FFF, 0x8000), "S32": (0x7FFFFFFF, 0x80000000),
    "U4X2": (ALL64, 0),
    **{n: (ALL64, TOP64) for n in ("HiF8", "E3M2", "E2M3", "E8M0", "E2M1X2", "E1M2X2", "S4X2")},
}

CONTAINERS = (np.uint8, np.uint16, np.uint32, np.uint64)
NATURAL = {"b32": np.uint32, "b16": np.uint16, "b8": np.uint8, "b4": np.uint8}

# B.4: physical inner positions 0..15 hold these logical inner columns.
M16_B4_PHYS_HOLDS = (0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15)


def width_of(dt: str) -> str:
    return next(w for w, names in DTYPES.items() if dt in names)


def spec_pad(dt: str, pad: str) -> tuple[int, bool]:
    """(carrier word, defined) of a padding slot."""
    if pad in ("Zero", "Null"):
        return 0, pad == "Zero"
    mx, mn = PAD_MAX_MIN[dt]
    return (mx if pad == "Max" else mn), True


def cdiv(a, b):
    return -(-a // b)


def spec_geom(layout, width, vr, vc):
    cr, cc = CELL[(layout, width)]
    if layout == "CUBE_N8":
        sr, sc = cdiv(vr, cr) * cr, cdiv(vc, 8) * 8
        kr, nr = sr // cr, sc // 8
    else:
        assert vr <= cr
        sr, sc = cr, cdiv(vc, cc) * cc
        kr, nr = sc // cc, 1
    return dict(cell_rows=cr, cell_cols=cc, storage_rows=sr, storage_cols=sc,
                k_repeat=kr, n_repeat=nr, cell_count=kr * nr, required_bytes=128 * kr * nr)


def spec_index(layout, width, vr, vc, r, c):
    g = spec_geom(layout, width, vr, vc)
    cr, cc = g["cell_rows"], g["cell_cols"]
    if layout == "CUBE_N8":
        cell = (c // 8) * g["k_repeat"] + r // cr
        inner = (c % 8) * cr + r % cr
    else:
        j = c % cc
        if layout == "CUBE_M16" and width == "b4":
            j = M16_B4_PHYS_HOLDS.index(j)
        cell = c // cc
        inner = r * cc + j
    return cell * cr * cc + inner


def spec_words(tile, layout, dt, vr, vc, pad, nslots, container_bits=64):
    """Expected (words, defined) of one tile over `nslots` payload slots.

    tile[r][c] for r < vr, c < vc are the valid elements.
    """
    width = width_of(dt)
    g = spec_geom(layout, width, vr, vc)
    padw, pdef = spec_pad(dt, pad)
    padw &= (1 << container_bits) - 1
    words = np.zeros(nslots, np.uint64)
    dfn = np.zeros(nslots, bool)
    seen = set()
    for r in range(g["storage_rows"]):
        for c in range(g["storage_cols"]):
            i = spec_index(layout, width, vr, vc, r, c)
            assert i not in seen
            seen.add(i)
            if r < vr and c < vc:
                words[i], dfn[i] = int(tile[r][c]), True
            else:
                words[i], dfn[i] = padw, pdef
    assert seen == set(range(g["cell_count"] * g["cell_rows"] * g["cell_cols"]))
    return words, dfn


def spec_nd(words, layout, dt, vr, vc, R, C):
    """Expected cube_to_nd of one tile: valid elements, 0 elsewhere."""
    out = np.zeros((R, C), np.uint64)
    for r in range(vr):
        for c in range(vc):
            out[r, c] = int(words[spec_index(layout, width_of(dt), vr, vc, r, c)])
    return out


# Static bounds reused across tests (each bound x container x batch compiles once).
BOUNDS = {"CUBE_N8": (37, 19), "CUBE_M16": (16, 37), "CUBE_M32": (32, 19)}

# A batch of per-tile valid shapes inside BOUNDS: full, 1x1, partial K/N tails.
SHAPES = {
    "CUBE_N8": [(37, 19), (1, 1), (13, 19), (9, 8), (32, 17)],
    "CUBE_M16": [(16, 37), (1, 1), (2, 3), (16, 16), (7, 33)],
    "CUBE_M32": [(32, 19), (1, 1), (13, 19), (31, 8), (2, 1)],
}


def _np(a):
    return np.asarray(a)


def rand_tiles(rng, layout, width, container, B=None, bound=None):
    R, C = bound or BOUNDS[layout]
    B = B or len(SHAPES[layout])
    hi = min(1 << BITS[width], 1 << (8 * np.dtype(container).itemsize))
    return rng.integers(0, hi, size=(B, R, C), dtype=np.uint64).astype(container)


# ----------------------------------------------------------------- B.1 CELL table


@pytest.mark.parametrize("layout,width", ROWS)
def test_cell_table_row_every_dtype(layout, width):
    cr, cc = CELL[(layout, width)]
    assert cr * cc * BITS[width] == 128 * 8          # one CELL is 128 bytes
    assert L.CELL_SHAPES[(layout, width)] == (cr, cc)
    for dt in DTYPES[width]:
        assert L.cell_shape(layout, dt) == (cr, cc), dt
        assert L.cell_shape(layout, pj.tables.dtype(dt).code) == (cr, cc), dt
        g = L.geometry(layout, dt, 1, 1)
        assert (g.cell_rows, g.cell_cols) == (cr, cc)
        assert (g.cell_count, g.required_bytes, g.k_repeat, g.n_repeat) == (1, 128, 1, 1)
        assert (g.storage_rows, g.storage_cols) == ((cr, 8) if layout == "CUBE_N8" else (cr, cc))
        assert g.storage_elements == cr * cc


def test_cell_table_covers_every_cube_dtype():
    legal = {d.name for d in pj.tables.DATATYPES if d.cube_class is not None}
    assert legal == {n for names in DTYPES.values() for n in names}
    for d in pj.tables.DATATYPES:
        if d.name in ILLEGAL_DTYPES:
            assert d.cube_class is None


# ----------------------------------------------------------------- B.2 geometry


@pytest.mark.parametrize("layout,dt,vr,vc,expect", [
    ("CUBE_N8", "FP16", 13, 19, dict(storage_rows=16, storage_cols=24, k_repeat=2, n_repeat=3,
                                     cell_count=6, required_bytes=768)),
    ("CUBE_M16", "FP32", 3, 5, dict(storage_rows=16, storage_cols=6, k_repeat=3, n_repeat=1,
                                    cell_count=3, required_bytes=384)),
    ("CUBE_M32", "FP16", 13, 19, dict(storage_rows=32, storage_cols=20, k_repeat=10, n_repeat=1,
                                      cell_count=10, required_bytes=1280)),
    # E1/E3/E6 descriptors
    ("CUBE_M16", "FP16", 2, 3, dict(storage_rows=16, storage_cols=4, k_repeat=1, n_repeat=1,
                                    cell_count=1, required_bytes=128)),
    ("CUBE_N8", "E4M3", 2, 9, dict(storage_rows=16, storage_cols=16, k_repeat=1, n_repeat=2,
                                   cell_count=2, required_bytes=256)),
    ("CUBE_N8", "U4X2", 2, 9, dict(storage_rows=32, storage_cols=16, k_repeat=1, n_repeat=2,
                                   cell_count=2, required_bytes=256)),
    ("CUBE_M16", "U4X2", 2, 16, dict(storage_rows=16, storage_cols=16, k_repeat=1, n_repeat=1,
                                     cell_count=1, required_bytes=128)),
])
def test_b2_worked_geometry(layout, dt, vr, vc, expect):
    g = L.geometry(layout, dt, vr, vc)
    for k, v in expect.items():
        assert getattr(g, k) == v, k
    assert (g.layout, g.dtype, g.valid_rows, g.valid_cols) == (layout, dt, vr, vc)
    assert g.required_bytes == 128 * g.cell_count
    assert L.storage_words(layout, dt, vr, vc) == g.storage_elements


@pytest.mark.parametrize("layout,width", ROWS)
def test_geometry_matches_spec_formulas(layout, width):
    cr, _ = CELL[(layout, width)]
    dt = DTYPES[width][0]
    vrs = range(1, 70, 7) if layout == "CUBE_N8" else sorted({1, 2, cr - 1, cr})
    for vr, vc in itertools.product(vrs, (1, 2, 7, 8, 9, 16, 17, 33, 100)):
        g = L.geometry(layout, dt, vr, vc)
        e = spec_geom(layout, width, vr, vc)
        assert {k: getattr(g, k) for k in e} == e, (vr, vc)


# ----------------------------------------------------------------- B.3 index


@pytest.mark.parametrize("layout,dt,vr,vc,pos,idx", [
    ("CUBE_N8", "FP16", 13, 19, (0, 0), 0),
    ("CUBE_N8", "FP16", 13, 19, (7, 7), 63),
    ("CUBE_N8", "FP16", 13, 19, (8, 0), 64),
    ("CUBE_N8", "FP16", 13, 19, (0, 8), 128),
    ("CUBE_N8", "FP16", 13, 19, (12, 18), 340),
    ("CUBE_N8", "FP16", 13, 19, (13, 0), 69),
    ("CUBE_N8", "FP16", 13, 19, (0, 19), 280),
    ("CUBE_N8", "FP16", 13, 19, (15, 23), 383),
    ("CUBE_M16", "FP16", 2, 5, (1, 4), 68),
    ("CUBE_N8", "E4M3", 2, 9, (1, 8), 129),
    ("CUBE_N8", "U4X2", 2, 9, (0, 1), 32),
    ("CUBE_N8", "U4X2", 2, 9, (0, 0), 0),
    ("CUBE_M32", "FP32", 2, 2, (0, 0), 0),
    ("CUBE_M16", "FP16", 2, 3, (1, 0), 4),
    ("CUBE_M16", "FP16", 2, 3, (2, 0), 8),
])
def test_b3_index_checks(layout, dt, vr, vc, pos, idx):
    assert L.payload_index(layout, dt, vr, vc, *pos) == idx
    g = L.geometry(layout, dt, vr, vc)
    assert g.payload_index(*pos) == idx
    assert g.logical_position(idx) == pos


@pytest.mark.parametrize("layout,width", ROWS)
def test_payload_index_bijection_and_inverse(layout, width):
    """Every storage position maps to the spec slot; the map is a bijection onto
    0..cells*CR*CC-1 and logical_position is its inverse."""
    cr, cc = CELL[(layout, width)]
    shapes = ([(1, 1), (13, 19), (cr + 1, 9), (2 * cr, 17)] if layout == "CUBE_N8"
              else [(1, 1), (cr, 3 * cc + 1), (cr - 1, cc), (2, 2 * cc)])
    for dt in DTYPES[width]:
        for vr, vc in shapes:
            g = L.geometry(layout, dt, vr, vc)
            slots = []
            for r in range(g.storage_rows):
                for c in range(g.storage_cols):
                    i = g.payload_index(r, c)
                    assert i == spec_index(layout, width, vr, vc, r, c), (dt, vr, vc, r, c)
                    assert g.logical_position(i) == (r, c)
                    slots.append(i)
            assert sorted(slots) == list(range(g.storage_elements))


def test_payload_index_outside_storage_region_rejected():
    g = L.geometry("CUBE_N8", "FP16", 13, 19)
    for pos in [(16, 0), (0, 24), (-1, 0), (0, -1)]:
        with pytest.raises(ValueError, match="storage region"):
            g.payload_index(*pos)
    for idx in (-1, 384):
        with pytest.raises(ValueError, match="outside"):
            g.logical_position(idx)


def test_n8_multicell_k_fast_n_slow():
    """B: cell_index(n_cell, k_cell) = n_cell * K_repeat + k_cell, partial tails."""
    for dt, width in (("FP16", "b16"), ("U8", "b8"), ("FP32", "b32"), ("U4X2", "b4")):
        cr, _ = CELL[("CUBE_N8", width)]
        vr, vc = 2 * cr + 3, 19                       # K_repeat 3 (tail), N_repeat 3 (tail)
        g = L.geometry("CUBE_N8", dt, vr, vc)
        assert (g.k_repeat, g.n_repeat, g.cell_count) == (3, 3, 9)
        for n, k in itertools.product(range(3), range(3)):
            r, c = k * cr, n * 8
            assert g.payload_index(r, c) == (n * 3 + k) * cr * 8
            # column-major inside a cell: K fastest
            assert g.payload_index(r + 1, c) == (n * 3 + k) * cr * 8 + 1
            assert g.payload_index(r, c + 1) == (n * 3 + k) * cr * 8 + cr


def test_m_multicell_one_cell_per_cc_columns():
    for layout in ("CUBE_M16", "CUBE_M32"):
        for width in ("b32", "b16", "b8"):
            cr, cc = CELL[(layout, width)]
            dt = DTYPES[width][0]
            g = L.geometry(layout, dt, cr, 3 * cc + 1)
            assert (g.k_repeat, g.n_repeat, g.cell_count) == (4, 1, 4)
            for cell in range(4):
                assert g.payload_index(0, cell * cc) == cell * cr * cc
                assert g.payload_index(1, cell * cc) == cell * cr * cc + cc  # row-major


# ----------------------------------------------------------------- B.4 interleave

E3_SLOTS = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15]


def test_m16_b4_position_map():
    assert [L.m16_b4_position(j) for j in range(16)] == E3_SLOTS
    assert [L.m16_b4_position(L.m16_b4_position(j)) for j in range(16)] == list(range(16))


@pytest.mark.parametrize("dt", DTYPES["b4"])
def test_e3_m16_b4_interleave(dt):
    """E3: U4X2 M16 2x16, row 0 nibbles 0..15, row 1 zero."""
    x = np.zeros((2, 16), np.uint8)
    x[0] = np.arange(16)
    words, dfn = L.nd_to_cube(x, "CUBE_M16", dt, pad="Null")
    words, dfn = _np(words), _np(dfn)
    assert words.shape == (256,)
    assert list(words[:16]) == E3_SLOTS
    assert (words[4], words[8], words[12]) == (8, 4, 12)
    assert list(words[16:32]) == [0] * 16
    assert dfn[:32].all() and not dfn[32:].any() and not words[32:].any()
    back = _np(L.cube_to_nd(words, "CUBE_M16", dt, 2, 16))
    np.testing.assert_array_equal(back, x)
    # row 1 with distinct values: same interleave one row down
    x[1] = 15 - np.arange(16)
    words = _np(L.nd_to_cube(x, "CUBE_M16", dt, defined=False))
    assert list(words[16:32]) == [15 - j for j in E3_SLOTS]


@pytest.mark.parametrize("layout", ["CUBE_M32", "CUBE_N8"])
def test_b4_no_interleave_outside_m16(layout):
    x = np.arange(16, dtype=np.uint8)[None, :]
    words = _np(L.nd_to_cube(x, layout, "U4X2", defined=False))
    if layout == "CUBE_M32":      # 32 x 8 cells, row-major: cell 0 row 0 then cell 1
        assert list(words[:8]) == list(range(8))
        assert list(words[256:264]) == list(range(8, 16))
    else:                          # 32 x 8 cells, column-major: (0, c) at c*32
        assert [words[c * 32] for c in range(8)] == list(range(8))
        assert [words[256 + c * 32] for c in range(8)] == list(range(8, 16))


# ----------------------------------------------------------------- section E vectors


def test_e1_m16_fp16_2x3_pad_max():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.uint16)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, "CUBE_M16", "FP16", pad="Max"))
    assert words.shape == (64,)
    expect = {0: 1, 1: 2, 2: 3, 4: 4, 5: 5, 6: 6}
    for i in range(64):
        assert words[i] == expect.get(i, 0x7BFF), i
    assert dfn.all()
    assert L.payload_index("CUBE_M16", "FP16", 2, 3, 2, 0) == 8


def test_e2_n8_fp16_13x19_null_and_reverse():
    r, c = np.meshgrid(np.arange(13), np.arange(19), indexing="ij")
    x = (r * 32 + c + 1).astype(np.uint16)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, "CUBE_N8", "FP16"))
    assert words.shape == (384,)
    assert (words[0], words[63], words[64], words[340]) == (1, 232, 257, 403)
    assert (words[69], words[280], dfn[69], dfn[280]) == (0, 0, False, False)
    assert dfn.sum() == 247                        # defined_valid 247, padding undefined
    back = _np(L.cube_to_nd(words, "CUBE_N8", "FP16", 13, 19))
    np.testing.assert_array_equal(back, x)
    assert (back[0, 0], back[7, 7], back[12, 18]) == (1, 232, 403)


def test_e3_width_vectors():
    x = np.zeros((2, 2), np.uint32)
    x[0, 0] = 0x89ABCDEF
    assert _np(L.nd_to_cube(x, "CUBE_M32", "FP32", defined=False))[0] == 0x89ABCDEF
    x = np.zeros((2, 5), np.uint16)
    x[1, 4] = 0xBEEF
    assert _np(L.nd_to_cube(x, "CUBE_M16", "FP16", defined=False))[68] == 0xBEEF
    x = np.zeros((2, 9), np.uint8)
    x[1, 8] = 0x7E
    assert _np(L.nd_to_cube(x, "CUBE_N8", "E4M3", defined=False))[129] == 0x7E
    x = np.zeros((2, 9), np.uint8)
    x[0, 0], x[0, 1] = 0xA, 0xB                     # byte 0xba: low nibble first
    w = _np(L.nd_to_cube(x, "CUBE_N8", "U4X2", defined=False))
    assert (w[0], w[32]) == (0xA, 0xB)


def test_e4_m16_fp16_2x3_cube_to_nd():
    words = np.zeros(64, np.uint16)
    for r in range(2):
        for c in range(3):
            words[r * 4 + c] = r * 3 + c + 1
    back = _np(L.cube_to_nd(words, "CUBE_M16", "FP16", 2, 3))
    np.testing.assert_array_equal(back, [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("pad,word,defined", [
    ("Zero", 0, True), ("Max", 0x7BFF, True), ("Min", 0xFBFF, True), ("Null", 0, False)])
def test_e6_padding_n8_fp16_2x3(pad, word, defined):
    x = np.arange(1, 7, dtype=np.uint16).reshape(2, 3)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, "CUBE_N8", "FP16", pad=pad))
    for i in (2, 24):                              # tails (2, 0) and (0, 3)
        assert (words[i], dfn[i]) == (word, defined)
    valid = [L.payload_index("CUBE_N8", "FP16", 2, 3, r, c) for r in range(2) for c in range(3)]
    assert dfn[valid].all() and list(words[valid]) == [1, 2, 3, 4, 5, 6]
    assert dfn.sum() == (64 if defined else 6)


# ----------------------------------------------------------------- B.5 padding, batched


def _check_batch(layout, dt, pad, container, seed, defined=True):
    width = width_of(dt)
    rng = np.random.default_rng(seed)
    x = rand_tiles(rng, layout, width, container)
    R, C = BOUNDS[layout]
    vr = np.array([s[0] for s in SHAPES[layout]])
    vc = np.array([s[1] for s in SHAPES[layout]])
    out = L.nd_to_cube(x, layout, dt, vr, vc, pad=pad, defined=defined)
    words, dfn = (_np(out[0]), _np(out[1])) if defined else (_np(out), None)
    W = L.storage_words(layout, dt, R, C)
    assert words.shape == (len(vr), W) and words.dtype == container
    bits = 8 * np.dtype(container).itemsize
    for b in range(len(vr)):
        ew, ed = spec_words(x[b], layout, dt, vr[b], vc[b], pad, W, bits)
        np.testing.assert_array_equal(words[b].astype(np.uint64), ew, err_msg=f"tile {b}")
        if defined:
            np.testing.assert_array_equal(dfn[b], ed, err_msg=f"tile {b}")
    return words


@pytest.mark.parametrize("layout,width", ROWS)
@pytest.mark.parametrize("pad", PADS)
def test_padvalue_every_position_uint64(layout, width, pad):
    """Full 64-bit carrier pad word and definedness in every non-valid storage
    position; 0/undefined past the tile's storage region (bound slots)."""
    names = DTYPES[width]
    dt = names[(PADS.index(pad) + ROWS.index((layout, width))) % len(names)]
    _check_batch(layout, dt, pad, np.uint64, seed=4 * ROWS.index((layout, width)) + PADS.index(pad))


@pytest.mark.parametrize("layout,width", ROWS)
@pytest.mark.parametrize("pad", ["Max", "Min"])
def test_padvalue_natural_container_truncates(layout, width, pad):
    names = DTYPES[width]
    dt = names[(ROWS.index((layout, width)) + 1) % len(names)]
    _check_batch(layout, dt, pad, NATURAL[width], seed=7)


@pytest.mark.parametrize("dt,container,pad,word", [
    ("S8", np.uint8, "Min", 0x80), ("S16", np.uint16, "Min", 0x8000),
    ("S32", np.uint64, "Min", 0x80000000),          # not sign-extended
    ("HiF8", np.uint64, "Min", TOP64), ("HiF8", np.uint8, "Min", 0),
    ("S4X2", np.uint64, "Max", ALL64), ("U4X2", np.uint8, "Max", 0xFF),
    ("TF32", np.uint32, "Max", 0x7F7FE000), ("BF16", np.uint16, "Min", 0xFF7F),
])
def test_pad_word_examples(dt, container, pad, word):
    x = np.zeros((1, 1), container)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, "CUBE_M16", dt, pad=pad))
    assert words[1] == word and dfn[1]
    assert pj.tables.pad_word(dt, pad) & ((1 << (8 * np.dtype(container).itemsize)) - 1) == word


def test_defined_false_returns_same_words():
    w_true = _check_batch("CUBE_N8", "E5M2", "Min", np.uint64, seed=3)
    w_false = _check_batch("CUBE_N8", "E5M2", "Min", np.uint64, seed=3, defined=False)
    np.testing.assert_array_equal(w_true, w_false)


def test_n8_bound_larger_than_tile_compacts_cells():
    """A tile whose K_repeat is below the bound's: cells packed at n*K_rep+k."""
    r, c = np.meshgrid(np.arange(40), np.arange(40), indexing="ij")
    x = (r * 64 + c + 1).astype(np.uint16)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, "CUBE_N8", "FP16", 13, 19, pad="Max"))
    single, sdfn = (_np(a) for a in L.nd_to_cube(x[:13, :19], "CUBE_N8", "FP16", pad="Max"))
    assert words.shape == (L.storage_words("CUBE_N8", "FP16", 40, 40),)
    np.testing.assert_array_equal(words[:384], single)
    np.testing.assert_array_equal(dfn[:384], sdfn)
    assert not words[384:].any() and not dfn[384:].any()
    back = _np(L.cube_to_nd(words, "CUBE_N8", "FP16", 13, 19, shape=(40, 40)))
    np.testing.assert_array_equal(back[:13, :19], x[:13, :19])
    assert not back[13:].any() and not back[:, 19:].any()


# ----------------------------------------------------------------- cube_to_nd


@pytest.mark.parametrize("layout,width", ROWS)
def test_cube_to_nd_reads_spec_slots_zero_outside(layout, width):
    """Random payload words (padding slots too): valid region read from the spec
    slot, every other position 0."""
    dt = DTYPES[width][-1]
    R, C = BOUNDS[layout]
    W = L.storage_words(layout, dt, R, C)
    rng = np.random.default_rng(11)
    words = rng.integers(1, 1 << 63, size=(len(SHAPES[layout]), W), dtype=np.uint64)
    vr = np.array([s[0] for s in SHAPES[layout]])
    vc = np.array([s[1] for s in SHAPES[layout]])
    out = _np(L.cube_to_nd(words, layout, dt, vr, vc, shape=(R, C)))
    assert out.shape == (len(vr), R, C) and out.dtype == np.uint64
    for b in range(len(vr)):
        np.testing.assert_array_equal(out[b], spec_nd(words[b], layout, dt, vr[b], vc[b], R, C))
    # default shape: the largest valid extents
    assert _np(L.cube_to_nd(words, layout, dt, vr, vc)).shape == (len(vr), vr.max(), vc.max())


# ----------------------------------------------------------------- rejection

FNS = {
    "cell_shape": lambda lay, dt: L.cell_shape(lay, dt),
    "geometry": lambda lay, dt: L.geometry(lay, dt, 2, 3),
    "payload_index": lambda lay, dt: L.payload_index(lay, dt, 2, 3, 0, 0),
    "storage_words": lambda lay, dt: L.storage_words(lay, dt, 2, 3),
    "nd_to_cube": lambda lay, dt: L.nd_to_cube(np.zeros((2, 3), np.uint16), lay, dt),
    "cube_to_nd": lambda lay, dt: L.cube_to_nd(np.zeros(1024, np.uint16), lay, dt, 2, 3),
}


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dt", ILLEGAL_DTYPES)
def test_reject_hif4x2_and_b64(fn, dt):
    with pytest.raises(ValueError, match=rf"{dt}.*expected a 32/16/8/4-bit dtype other than HiF4X2"):
        FNS[fn]("CUBE_M16", dt)
    assert L.descriptor_legal("CUBE_M16", dt, 2, 3, 65536) is False


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("layout", ["CUBE_M8", "RowMajor", "ND2M16", "NZ", ""])
def test_reject_unknown_layout(fn, layout):
    with pytest.raises(ValueError, match="expected one of CUBE_M16, CUBE_M32, CUBE_N8"):
        FNS[fn](layout, "FP16")
    with pytest.raises(ValueError, match="expected one of"):
        L.descriptor_legal(layout, "FP16", 2, 3, 128)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dt", ["FP8", "INT8", "float16", "", 15, 99])
def test_reject_unknown_dtype(fn, dt):
    with pytest.raises(ValueError, match="expected one of|assigned codes are"):
        FNS[fn]("CUBE_N8", dt)


@pytest.mark.parametrize("vr,vc", [(0, 3), (3, 0), (-1, 3), (3, -5), (0, 0)])
def test_reject_zero_negative_dims(vr, vc):
    with pytest.raises(ValueError, match="positive"):
        L.geometry("CUBE_N8", "FP16", vr, vc)
    with pytest.raises(ValueError, match="positive"):
        L.payload_index("CUBE_M16", "FP16", vr, vc, 0, 0)
    assert L.descriptor_legal("CUBE_N8", "FP16", vr, vc, 65536) is False
    x = np.zeros((1, 4, 4), np.uint16)
    with pytest.raises(ValueError, match=r"must (be in|lie in) 1\.\.4"):
        L.nd_to_cube(x, "CUBE_N8", "FP16", vr if vr < 1 else 4, vc if vc < 1 else 4)
    with pytest.raises(ValueError, match=r"1\.\.4"):
        L.nd_to_cube(x, "CUBE_N8", "FP16", np.array([vr if vr < 1 else 4]),
                     np.array([vc if vc < 1 else 4]))
    with pytest.raises(ValueError, match=r"1\.\.4"):
        L.cube_to_nd(np.zeros((1, 1024), np.uint16), "CUBE_N8", "FP16",
                     vr if vr < 1 else 4, vc if vc < 1 else 4, shape=(4, 4))


def test_reject_empty_arrays_and_bad_shapes():
    with pytest.raises(ValueError, match="at least one row and column"):
        L.nd_to_cube(np.zeros((2, 0, 4), np.uint16), "CUBE_N8", "FP16")
    with pytest.raises(ValueError, match=r"\[rows, cols\] or \[batch, rows, cols\]"):
        L.nd_to_cube(np.zeros(4, np.uint16), "CUBE_N8", "FP16")
    with pytest.raises(ValueError, match="shape must be positive"):
        L.cube_to_nd(np.zeros(64, np.uint16), "CUBE_N8", "FP16", 1, 1, shape=(0, 4))
    with pytest.raises(ValueError, match=r"\[W\] or \[batch, W\]"):
        L.cube_to_nd(np.zeros((1, 1, 64), np.uint16), "CUBE_N8", "FP16", 1, 1)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        L.nd_to_cube(np.zeros((2, 4, 4), np.uint16), "CUBE_N8", "FP16", np.array([1, 2, 3]), 4)
    with pytest.raises(TypeError, match="integer"):
        L.nd_to_cube(np.zeros((2, 4, 4), np.uint16), "CUBE_N8", "FP16", np.array([1.0, 2.0]), 4)
    with pytest.raises(TypeError, match="int"):
        L.geometry("CUBE_N8", "FP16", 2.0, 3)


@pytest.mark.parametrize("layout,rows", [("CUBE_M16", 17), ("CUBE_M32", 33)])
def test_reject_m_layout_too_many_rows(layout, rows):
    cap = 32 if layout == "CUBE_M32" else 16
    for dt in ("FP32", "FP16", "U8", "U4X2"):
        with pytest.raises(ValueError, match=f"at most {cap} valid rows"):
            L.geometry(layout, dt, rows, 4)
        with pytest.raises(ValueError, match=f"at most {cap} valid rows"):
            L.payload_index(layout, dt, rows, 4, 0, 0)
        assert L.descriptor_legal(layout, dt, rows, 4, 65536) is False
        assert L.descriptor_legal(layout, dt, rows - 1, 4, 65536) is True
    with pytest.raises(ValueError, match=f"at most {cap} valid rows"):
        L.nd_to_cube(np.zeros((rows, 4), np.uint16), layout, "FP16")
    with pytest.raises(ValueError, match=f"at most {cap} valid rows"):
        L.cube_to_nd(np.zeros(8192, np.uint16), layout, "FP16", rows, 4)
    # N8 has no row limit
    assert L.geometry("CUBE_N8", "FP16", rows, 4).k_repeat == cdiv(rows, 8)


def test_reject_beyond_static_bound():
    x = np.zeros((3, 8, 8), np.uint16)
    with pytest.raises(ValueError, match=r"valid_rows=9 must be in 1\.\.8"):
        L.nd_to_cube(x, "CUBE_N8", "FP16", 9, 8)
    with pytest.raises(ValueError, match=r"valid_cols must lie in 1\.\.8"):
        L.nd_to_cube(x, "CUBE_N8", "FP16", 8, np.array([8, 9, 1]))
    w = np.zeros((3, 64), np.uint16)
    with pytest.raises(ValueError, match="needs 128"):
        L.cube_to_nd(w, "CUBE_N8", "FP16", 8, 9)      # 8x9 bound needs 2 cells
    with pytest.raises(ValueError, match=r"1\.\.8"):
        L.cube_to_nd(w, "CUBE_N8", "FP16", 9, 8, shape=(8, 8))
    with pytest.raises(ValueError, match="aligned storage extent exceeds 65535"):
        L.geometry("CUBE_N8", "FP16", 65535, 1)        # aligned to 65536
    assert L.descriptor_legal("CUBE_N8", "FP16", 65535, 1, 65536) is False


@pytest.mark.parametrize("bad", [
    np.zeros((2, 3), np.float32), np.zeros((2, 3), np.bool_), [[1.0, 2.0, 3.0]],
    jnp.zeros((2, 3), jnp.float16), np.zeros((2, 3), np.float16),
])
def test_reject_non_integer_input(bad):
    with pytest.raises(TypeError, match="integer array"):
        L.nd_to_cube(bad, "CUBE_M16", "FP16")
    flat = np.asarray(bad).reshape(-1)
    words = np.zeros(64, flat.dtype)
    with pytest.raises(TypeError, match="integer array"):
        L.cube_to_nd(words, "CUBE_M16", "FP16", 2, 3)


@pytest.mark.parametrize("good", [
    np.zeros((2, 3), np.int32), np.zeros((2, 3), np.int16), np.zeros((2, 3), np.int64),
    [[1, 2, 3], [4, 5, 6]], jnp.zeros((2, 3), jnp.int32),
])
def test_signed_containers_hold_raw_bits(good):
    # signed arrays at least as wide as the element are accepted (layouts/words.py); the
    # words come back in the unsigned container of the same width
    words = _np(L.nd_to_cube(good, "CUBE_M16", "FP16", defined=False))
    width = np.dtype(np.asarray(good).dtype).itemsize
    assert words.dtype == np.dtype(f"uint{8 * width}")
    back = _np(L.cube_to_nd(words, "CUBE_M16", "FP16", 2, 3))
    np.testing.assert_array_equal(back, np.asarray(good))


# ----------------------------------------------------------------- B.6 capacity


@pytest.mark.parametrize("layout,dt,vr,vc,need", [
    ("CUBE_N8", "FP16", 13, 19, 768),
    ("CUBE_M16", "FP32", 3, 5, 384),
    ("CUBE_M32", "FP16", 13, 19, 1280),
    ("CUBE_M16", "FP16", 2, 3, 128),
    ("CUBE_N8", "U4X2", 65, 9, 768),
    ("CUBE_M32", "FP32", 32, 512, 65536),
])
def test_descriptor_capacity_exact_boundary(layout, dt, vr, vc, need):
    g = L.geometry(layout, dt, vr, vc)
    assert g.required_bytes == need
    assert L.descriptor_legal(layout, dt, vr, vc, need) is True
    assert g.legal(need) is True
    if need > 128:
        assert L.descriptor_legal(layout, dt, vr, vc, need - 128) is False
        assert g.legal(need - 128) is False
    # unused capacity is legal; TSize need not be a power of two or equal need
    for ts in (need + 128, 65536):
        if ts <= 65536:
            assert L.descriptor_legal(layout, dt, vr, vc, ts) is True
    # illegal TSize values whatever the need
    for ts in (need + 64, 0, -128, 65536 + 128, 131072):
        assert L.descriptor_legal(layout, dt, vr, vc, ts) is False, ts
    # Core budget and the model element bound
    assert L.descriptor_legal(layout, dt, vr, vc, need, tile_capacity=need) is True
    if need > 128:
        assert L.descriptor_legal(layout, dt, vr, vc, need, tile_capacity=need - 128) is False
    assert L.descriptor_legal(layout, dt, vr, vc, need, tile_elements=g.storage_elements) is True
    assert L.descriptor_legal(layout, dt, vr, vc, need,
                              tile_elements=g.storage_elements - 1) is False


def test_n8_fp16_13x19_tsize_768_vs_640():
    assert L.descriptor_legal("CUBE_N8", "FP16", 13, 19, 768) is True
    assert L.descriptor_legal("CUBE_N8", "FP16", 13, 19, 640) is False
    assert L.geometry("CUBE_N8", "FP16", 13, 19).legal(640) is False


def test_shape_legal_traced_in_jit():
    """B.6 legality on traced ints: a boolean array, never an exception."""
    cases = [  # (layout, dt, vr, vc, tsize)
        ("CUBE_N8", "FP16", 13, 19, 768), ("CUBE_N8", "FP16", 13, 19, 640),
        ("CUBE_N8", "FP16", 0, 19, 768), ("CUBE_N8", "FP16", 13, -1, 768),
        ("CUBE_N8", "FP16", 13, 19, 700), ("CUBE_N8", "FP16", 1, 1, 131072),
        ("CUBE_N8", "FP16", 70000, 1, 65536),
    ]
    f = jax.jit(lambda vr, vc, ts: shape_legal("CUBE_N8", 8, 8, vr, vc, ts))
    for lay, dt, vr, vc, ts in cases:
        got = f(vr, vc, ts)
        assert isinstance(got, jax.Array) and got.dtype == jnp.bool_ and got.shape == ()
        assert bool(got) == L.descriptor_legal(lay, dt, vr, vc, ts), (vr, vc, ts)
    # vectorised, M16 FP16 with too many rows / zero / negative
    vr = jnp.array([16, 17, 0, -3, 2, 16])
    vc = jnp.array([4, 4, 4, 4, 0, 64])
    ts = jnp.array([128, 65536, 128, 128, 128, 2048])
    g = jax.jit(lambda a, b, c: shape_legal("CUBE_M16", 16, 4, a, b, c))(vr, vc, ts)
    assert g.dtype == jnp.bool_ and g.shape == (6,)
    assert list(np.asarray(g)) == [True, False, False, False, False, True]
    assert list(np.asarray(jax.vmap(lambda a, b, c: shape_legal("CUBE_M16", 16, 4, a, b, c))(
        vr, vc, ts))) == list(np.asarray(g))


def test_nd_to_cube_inside_jit_with_traced_valid_dims():
    x = np.arange(2 * 13 * 19, dtype=np.uint16).reshape(2, 13, 19)
    vr, vc = np.array([13, 5]), np.array([19, 9])
    f = jax.jit(lambda x, a, b: L.nd_to_cube(x, "CUBE_N8", "FP16", a, b, pad="Max"))
    w, d = f(x, jnp.asarray(vr), jnp.asarray(vc))
    w2, d2 = L.nd_to_cube(x, "CUBE_N8", "FP16", vr, vc, pad="Max")
    np.testing.assert_array_equal(_np(w), _np(w2))
    np.testing.assert_array_equal(_np(d), _np(d2))
    g = jax.jit(lambda w, a, b: L.cube_to_nd(w, "CUBE_N8", "FP16", a, b, shape=(13, 19)))
    y = _np(g(w, jnp.asarray(vr), jnp.asarray(vc)))
    np.testing.assert_array_equal(y[0], x[0])
    np.testing.assert_array_equal(y[1, :5, :9], x[1, :5, :9])
    assert not y[1, 5:].any() and not y[1, :, 9:].any()


# ----------------------------------------------------------------- hypothesis

HSET = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def batch_case(draw, containers=CONTAINERS, batches=(1, 3)):
    layout, width = draw(st.sampled_from(ROWS))
    dt = draw(st.sampled_from(DTYPES[width]))
    container = draw(st.sampled_from([c for c in containers
                                      if 8 * np.dtype(c).itemsize >= BITS[width]]))
    B = draw(st.sampled_from(batches))
    R, C = BOUNDS[layout]
    vr = draw(st.lists(st.integers(1, R), min_size=B, max_size=B))
    vc = draw(st.lists(st.integers(1, C), min_size=B, max_size=B))
    seed = draw(st.integers(0, 2**32 - 1))
    pad = draw(st.sampled_from(PADS))
    return layout, width, dt, container, np.array(vr), np.array(vc), seed, pad


@settings(max_examples=30, **HSET)
@given(batch_case())
def test_round_trip_hypothesis(case):
    layout, width, dt, container, vr, vc, seed, pad = case
    rng = np.random.default_rng(seed)
    R, C = BOUNDS[layout]
    hi = 1 << min(BITS[width], 8 * np.dtype(container).itemsize)
    x = rng.integers(0, hi, size=(len(vr), R, C), dtype=np.uint64).astype(container)
    words, dfn = L.nd_to_cube(x, layout, dt, vr, vc, pad=pad)
    back = _np(L.cube_to_nd(words, layout, dt, vr, vc, shape=(R, C)))
    assert back.dtype == container
    dfn = _np(dfn)
    for b in range(len(vr)):
        np.testing.assert_array_equal(back[b, :vr[b], :vc[b]], x[b, :vr[b], :vc[b]])
        assert not back[b, vr[b]:].any() and not back[b, :, vc[b]:].any()
        g = spec_geom(layout, width, int(vr[b]), int(vc[b]))
        ndef = vr[b] * vc[b] if pad == "Null" else g["storage_rows"] * g["storage_cols"]
        assert dfn[b].sum() == ndef


@settings(max_examples=15, **HSET)
@given(batch_case(batches=(2,)))
def test_nd_to_cube_matches_spec_oracle_hypothesis(case):
    layout, width, dt, container, vr, vc, seed, pad = case
    rng = np.random.default_rng(seed)
    R, C = BOUNDS[layout]
    # every raw value of the element (values wider than the element are refused: layouts/words.py)
    x = rng.integers(0, 1 << min(BITS[width], 63), size=(len(vr), R, C), dtype=np.uint64).astype(container)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, layout, dt, vr, vc, pad=pad))
    W = words.shape[1]
    for b in range(len(vr)):
        ew, ed = spec_words(x[b], layout, dt, vr[b], vc[b], pad, W, 8 * np.dtype(container).itemsize)
        np.testing.assert_array_equal(words[b].astype(np.uint64), ew)
        np.testing.assert_array_equal(dfn[b], ed)


# ----------------------------------------------------------------- vs reference


def _ref():
    return pytest.importorskip("ptojax.reference.layouts")


@st.composite
def shape_position(draw):
    layout, width = draw(st.sampled_from(ROWS))
    dt = draw(st.sampled_from(DTYPES[width]))
    cr, _ = CELL[(layout, width)]
    vr = draw(st.integers(1, 200 if layout == "CUBE_N8" else cr))
    vc = draw(st.integers(1, 200))
    g = spec_geom(layout, width, vr, vc)
    r = draw(st.integers(0, g["storage_rows"] - 1))
    c = draw(st.integers(0, g["storage_cols"] - 1))
    return layout, dt, vr, vc, r, c


@settings(max_examples=300, **HSET)
@given(shape_position())
def test_payload_index_and_geometry_vs_reference(case):
    ref = _ref()
    layout, dt, vr, vc, r, c = case
    assert L.payload_index(layout, dt, vr, vc, r, c) == ref.payload_index(layout, dt, vr, vc, r, c)
    assert L.cell_shape(layout, dt) == tuple(ref.cell_shape(layout, dt))
    g = L.geometry(layout, dt, vr, vc)
    rg = ref.geometry(layout, dt, vr, vc)
    for k in ("cell_rows", "cell_cols", "storage_rows", "storage_cols", "k_repeat",
              "n_repeat", "cell_count", "required_bytes"):
        assert getattr(g, k) == rg[k], k
    need = g.required_bytes
    for ts in (need - 128, need, need + 64, need + 128, 65536):
        assert g.legal(ts) == bool(ref.legal(layout, dt, vr, vc, ts)), ts
        assert L.descriptor_legal(layout, dt, vr, vc, ts) == bool(ref.legal(layout, dt, vr, vc, ts))


def _ref_tile(ref, x, layout, dt, vr, vc, pad):
    rows = [[int(v) for v in x[r, :vc]] for r in range(vr)]
    words, dfn = ref.nd_to_cube(rows, layout, dt, vr, vc, pad)
    return np.array([int(w) for w in words], np.uint64), np.array(dfn, bool)


def _check_vs_reference(case):
    """Whole payload vs the reference: words (full carrier for uint64 inputs,
    carrier truncated to the container otherwise) and definedness on the
    storage region; 0/undefined past it."""
    ref = _ref()
    layout, width, dt, container, vr, vc, seed, pad = case
    rng = np.random.default_rng(seed)
    R, C = BOUNDS[layout]
    hi = 1 << min(BITS[width], 8 * np.dtype(container).itemsize)
    x = rng.integers(0, hi, size=(len(vr), R, C), dtype=np.uint64).astype(container)
    words, dfn = (_np(a) for a in L.nd_to_cube(x, layout, dt, vr, vc, pad=pad))
    mask = np.uint64((1 << (8 * np.dtype(container).itemsize)) - 1)
    for b in range(len(vr)):
        rw, rd = _ref_tile(ref, x[b], layout, dt, int(vr[b]), int(vc[b]), pad)
        n = len(rw)
        assert n == L.geometry(layout, dt, int(vr[b]), int(vc[b])).storage_elements
        np.testing.assert_array_equal(words[b, :n].astype(np.uint64), rw & mask)
        np.testing.assert_array_equal(dfn[b, :n], rd)
        assert not words[b, n:].any() and not dfn[b, n:].any()


@settings(max_examples=15, **HSET)
@given(batch_case(batches=(3,)))
def test_nd_to_cube_vs_reference(case):
    _check_vs_reference(case)


@settings(max_examples=15, **HSET)
@given(batch_case(containers=(np.uint64,), batches=(3,)))
def test_nd_to_cube_vs_reference_uint64_full_carrier(case):
    _check_vs_reference(case)


@settings(max_examples=15, **HSET)
@given(batch_case(batches=(3,)))
def test_cube_to_nd_vs_reference(case):
    ref = _ref()
    layout, width, dt, container, vr, vc, seed, _ = case
    rng = np.random.default_rng(seed)
    R, C = BOUNDS[layout]
    W = L.storage_words(layout, dt, R, C)
    words = rng.integers(0, 1 << 63, size=(len(vr), W), dtype=np.uint64).astype(container)
    out = _np(L.cube_to_nd(words, layout, dt, vr, vc, shape=(R, C)))
    for b in range(len(vr)):
        n = L.geometry(layout, dt, int(vr[b]), int(vc[b])).storage_elements
        rows = ref.cube_to_nd([int(w) for w in words[b, :n]], layout, dt, int(vr[b]), int(vc[b]))
        np.testing.assert_array_equal(out[b, :vr[b], :vc[b]].astype(np.uint64),
                                      np.array(rows, np.uint64).reshape(vr[b], vc[b]))
