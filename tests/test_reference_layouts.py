"""Reference CUBE CELL geometry (state-and-transport.md B.1-B.6), reference alone."""

import itertools

import pytest

from ptojax import tables
from ptojax.reference import layouts as L

# ----------------------------------------------------------------- B.1


CELL_TABLE = [
    ("CUBE_N8", "FP32", (4, 8)), ("CUBE_N8", "FP16", (8, 8)),
    ("CUBE_N8", "E4M3", (16, 8)), ("CUBE_N8", "U4X2", (32, 8)),
    ("CUBE_M32", "FP32", (32, 1)), ("CUBE_M32", "FP16", (32, 2)),
    ("CUBE_M32", "E4M3", (32, 4)), ("CUBE_M32", "U4X2", (32, 8)),
    ("CUBE_M16", "FP32", (16, 2)), ("CUBE_M16", "FP16", (16, 4)),
    ("CUBE_M16", "E4M3", (16, 8)), ("CUBE_M16", "U4X2", (16, 16)),
]


@pytest.mark.parametrize("layout,dtype,shape", CELL_TABLE)
def test_cell_table_row(layout, dtype, shape):
    assert L.cell_shape(layout, dtype) == shape
    cr, cc = shape
    assert cr * cc * tables.dtype(dtype).bits == 128 * 8     # one CELL = 128 bytes


@pytest.mark.parametrize("d", [d for d in tables.DATATYPES if d.cube_class])
@pytest.mark.parametrize("layout", L.CUBE_LAYOUTS)
def test_cell_shape_depends_only_on_width(layout, d):
    width_rep = {32: "FP32", 16: "FP16", 8: "E4M3", 4: "U4X2"}[d.bits]
    assert L.cell_shape(layout, d.name) == L.cell_shape(layout, width_rep)
    assert L.cell_shape(layout, d.code) == L.cell_shape(layout, d.name)


@pytest.mark.parametrize("dtype", ["HiF4X2", "FP64", "S64", "U64", 14, 0, 16, 24])
def test_no_cell_for_hif4_and_64bit(dtype):
    with pytest.raises(ValueError):
        L.cell_shape("CUBE_M16", dtype)
    with pytest.raises(ValueError):
        L.geometry("CUBE_N8", dtype, 1, 1)
    assert L.legal("CUBE_M16", dtype, 1, 1, 128) is False


@pytest.mark.parametrize("bad", [("CUBE_X", "FP16"), ("RowMajor", "FP16"), ("CUBE_M16", "FP8"),
                                 ("CUBE_M16", 15), ("CUBE_M16", 31), (22, "FP16"),
                                 ("CUBE_M16", None)])
def test_unknown_names_raise(bad):
    with pytest.raises(ValueError):
        L.cell_shape(*bad)


@pytest.mark.parametrize("vr,vc", [(0, 1), (1, 0), (-1, 3), (2, -5)])
def test_non_positive_dims_raise(vr, vc):
    with pytest.raises(ValueError):
        L.geometry("CUBE_N8", "FP16", vr, vc)
    with pytest.raises(ValueError):
        L.payload_index("CUBE_N8", "FP16", vr, vc, 0, 0)
    with pytest.raises(ValueError):
        L.nd_to_cube([[0]], "CUBE_N8", "FP16", vr, vc, "Zero")
    assert L.legal("CUBE_N8", "FP16", vr, vc, 128) is False


# ----------------------------------------------------------------- B.2


def test_worked_geometry_n8_fp16_13x19():
    assert L.geometry("CUBE_N8", "FP16", 13, 19) == {
        "cell_rows": 8, "cell_cols": 8, "storage_rows": 16, "storage_cols": 24,
        "k_repeat": 2, "n_repeat": 3, "cell_count": 6, "required_bytes": 768}


def test_worked_geometry_m16_fp32_3x5():
    g = L.geometry("CUBE_M16", "FP32", 3, 5)
    assert (g["storage_rows"], g["storage_cols"], g["cell_count"], g["required_bytes"]) == \
        (16, 6, 3, 384)
    assert (g["k_repeat"], g["n_repeat"]) == (3, 1)


def test_worked_geometry_m32_fp16_13x19():
    g = L.geometry("CUBE_M32", "FP16", 13, 19)
    assert (g["storage_rows"], g["storage_cols"], g["cell_count"], g["required_bytes"]) == \
        (32, 20, 10, 1280)


def test_e1_geometry_m16_fp16_2x3():
    g = L.geometry("CUBE_M16", "FP16", 2, 3)
    assert (g["storage_rows"], g["storage_cols"], g["k_repeat"], g["n_repeat"],
            g["cell_count"], g["required_bytes"]) == (16, 4, 1, 1, 1, 128)


def test_m_layouts_cap_valid_rows():
    assert L.geometry("CUBE_M16", "FP16", 16, 1)["storage_rows"] == 16
    assert L.geometry("CUBE_M32", "FP16", 32, 1)["storage_rows"] == 32
    with pytest.raises(ValueError):
        L.geometry("CUBE_M16", "FP16", 17, 1)
    with pytest.raises(ValueError):
        L.geometry("CUBE_M32", "U8", 33, 1)


# ----------------------------------------------------------------- B.6


def test_legal_tsize_is_only_an_upper_bound():
    assert L.legal("CUBE_N8", "FP16", 13, 19, 768)
    assert L.legal("CUBE_N8", "FP16", 13, 19, 1024)
    assert not L.legal("CUBE_N8", "FP16", 13, 19, 512)
    assert not L.legal("CUBE_N8", "FP16", 19, 13, 128)     # E6 TSize too small


def test_legal_capacity_rules():
    assert not L.legal("CUBE_M16", "FP16", 2, 3, 100)      # not a multiple of 128
    assert not L.legal("CUBE_M16", "FP16", 2, 3, 0)
    assert not L.legal("CUBE_M16", "FP16", 2, 3, 131072)    # above 64 KiB
    assert L.legal("CUBE_M16", "FP16", 2, 3, 65536)
    assert not L.legal("CUBE_M16", "FP16", 2, 3, 256, tile_capacity=128)


def test_legal_row_caps_and_model_bound():
    assert L.legal("CUBE_M16", "FP16", 16, 4, 128)
    assert not L.legal("CUBE_M16", "FP16", 17, 4, 65536)
    assert not L.legal("CUBE_M32", "FP32", 33, 1, 65536)
    # U8 N8 16x512: 64 cells of 128 slots = 8192 payload Words
    assert L.legal("CUBE_N8", "U8", 16, 512, 8192)
    assert not L.legal("CUBE_N8", "U8", 16, 512, 8192, tile_elements=1024)
    # storage columns aligned past 65535
    assert not L.legal("CUBE_N8", "U8", 16, 65535, 65536)


# ----------------------------------------------------------------- B.3 / B.4


@pytest.mark.parametrize("layout,dtype,vr,vc,r,c,idx", [
    ("CUBE_N8", "FP16", 13, 19, 0, 0, 0), ("CUBE_N8", "FP16", 13, 19, 7, 7, 63),
    ("CUBE_N8", "FP16", 13, 19, 8, 0, 64), ("CUBE_N8", "FP16", 13, 19, 0, 8, 128),
    ("CUBE_N8", "FP16", 13, 19, 12, 18, 340), ("CUBE_N8", "FP16", 13, 19, 13, 0, 69),
    ("CUBE_N8", "FP16", 13, 19, 0, 19, 280), ("CUBE_N8", "FP16", 13, 19, 15, 23, 383),
    ("CUBE_M16", "FP16", 2, 5, 1, 4, 68), ("CUBE_N8", "E4M3", 2, 9, 1, 8, 129),
    ("CUBE_N8", "U4X2", 2, 9, 0, 1, 32), ("CUBE_N8", "U4X2", 2, 9, 0, 0, 0),
    ("CUBE_M16", "FP16", 2, 3, 1, 2, 6), ("CUBE_M16", "FP16", 2, 3, 2, 0, 8),
    ("CUBE_M32", "FP32", 2, 2, 0, 0, 0), ("CUBE_M32", "FP32", 2, 2, 1, 1, 33),
])
def test_payload_index_checks(layout, dtype, vr, vc, r, c, idx):
    assert L.payload_index(layout, dtype, vr, vc, r, c) == idx


def test_m16_b4_interleave():
    # physical positions 0..15 of a row hold logical columns 0-3, 8-11, 4-7, 12-15
    logical_at = {L.payload_index("CUBE_M16", "U4X2", 2, 16, 0, j): j for j in range(16)}
    assert [logical_at[p] for p in range(16)] == [0, 1, 2, 3, 8, 9, 10, 11,
                                                  4, 5, 6, 7, 12, 13, 14, 15]
    assert L.payload_index("CUBE_M16", "U4X2", 2, 16, 1, 4) == 16 + 8
    # M32 b4, N8 b4 and M16 of other widths have no interleave
    assert [L.payload_index("CUBE_M32", "U4X2", 1, 8, 0, j) for j in range(8)] == list(range(8))
    assert [L.payload_index("CUBE_M16", "U8", 1, 8, 0, j) for j in range(8)] == list(range(8))
    assert L.payload_index("CUBE_M16", "S4X2", 1, 32, 0, 20) == 256 + 8


def test_n8_k_fast_n_slow_multi_cell():
    # FP16 N8 24x16: K_repeat 3, N_repeat 2; cell(n, k) = n*3 + k, column-major inside
    assert L.payload_index("CUBE_N8", "FP16", 24, 16, 8, 0) == 64
    assert L.payload_index("CUBE_N8", "FP16", 24, 16, 16, 0) == 128
    assert L.payload_index("CUBE_N8", "FP16", 24, 16, 0, 8) == 192
    assert L.payload_index("CUBE_N8", "FP16", 24, 16, 1, 0) == 1
    assert L.payload_index("CUBE_N8", "FP16", 24, 16, 0, 1) == 8


def test_payload_index_outside_storage_raises():
    with pytest.raises(ValueError):
        L.payload_index("CUBE_M16", "FP16", 2, 3, 16, 0)
    with pytest.raises(ValueError):
        L.payload_index("CUBE_M16", "FP16", 2, 3, 0, 4)
    with pytest.raises(ValueError):
        L.payload_index("CUBE_M16", "FP16", 2, 3, -1, 0)


SHAPES = [("CUBE_N8", "FP16", 13, 19), ("CUBE_N8", "U4X2", 33, 9), ("CUBE_M16", "U4X2", 3, 33),
          ("CUBE_M32", "FP32", 32, 3), ("CUBE_M16", "BF16", 16, 9), ("CUBE_N8", "S32", 5, 17),
          ("CUBE_M32", "E5M2", 7, 5), ("CUBE_N8", "E8M0", 17, 8)]


@pytest.mark.parametrize("layout,dtype,vr,vc", SHAPES)
def test_payload_index_is_a_bijection_of_the_storage_region(layout, dtype, vr, vc):
    g = L.geometry(layout, dtype, vr, vc)
    n = g["cell_count"] * g["cell_rows"] * g["cell_cols"]
    assert g["storage_rows"] * g["storage_cols"] == n
    seen = {L.payload_index(layout, dtype, vr, vc, r, c)
            for r, c in itertools.product(range(g["storage_rows"]), range(g["storage_cols"]))}
    assert seen == set(range(n))


# ----------------------------------------------------------------- conversions


def test_nd_to_cube_e1_max_padding():
    words, defined = L.nd_to_cube([[1, 2, 3], [4, 5, 6]], "CUBE_M16", "FP16", 2, 3, "Max")
    assert len(words) == len(defined) == 64
    assert [words[i] for i in (0, 1, 2, 4, 5, 6)] == [1, 2, 3, 4, 5, 6]
    assert all(words[i] == 0x7BFF for i in range(64) if i not in (0, 1, 2, 4, 5, 6))
    assert all(defined)


@pytest.mark.parametrize("pad,word,is_defined", [("Zero", 0, True), ("Max", 0x7BFF, True),
                                                 ("Min", 0xFBFF, True), ("Null", 0, False),
                                                 (0, 0, True), (1, 0x7BFF, True),
                                                 (2, 0xFBFF, True), (3, 0, False)])
def test_nd_to_cube_padding_n8(pad, word, is_defined):
    # tile-state-tload-cube-pad-004: N8 FP16 2x3, tails (2,0) idx2 and (0,3) idx24
    words, defined = L.nd_to_cube([[1, 2, 3], [4, 5, 6]], "CUBE_N8", "FP16", 2, 3, pad)
    assert len(words) == 64
    for i in (2, 24):
        assert words[i] == word and defined[i] is is_defined
    assert defined[0] and words[8] == 2 and words[1] == 4


def test_nd_to_cube_keeps_full_carrier_pad_word():
    words, _ = L.nd_to_cube([[1]], "CUBE_M16", "S4X2", 1, 1, "Max")
    assert words[1] == (1 << 64) - 1
    words, _ = L.nd_to_cube([[1]], "CUBE_M16", "S4X2", 1, 1, "Min")
    assert words[1] == 1 << 63
    words, _ = L.nd_to_cube([[1]], "CUBE_M16", "S8", 1, 1, "Min")
    assert words[1] == 0x80


@pytest.mark.parametrize("layout,dtype,vr,vc", SHAPES)
def test_round_trip(layout, dtype, vr, vc):
    bits = tables.dtype(dtype).bits
    m = [[(r * 131 + c * 7 + 1) % (1 << bits) for c in range(vc)] for r in range(vr)]
    words, defined = L.nd_to_cube(m, layout, dtype, vr, vc, "Null")
    assert sum(defined) == vr * vc
    assert L.cube_to_nd(words, layout, dtype, vr, vc) == m


def test_nd_to_cube_rejects_short_matrix_and_bad_pad():
    with pytest.raises(ValueError):
        L.nd_to_cube([[1, 2]], "CUBE_M16", "FP16", 2, 2, "Zero")
    with pytest.raises(ValueError):
        L.nd_to_cube([[1], [2]], "CUBE_M16", "FP16", 2, 2, "Zero")
    with pytest.raises(ValueError):
        L.nd_to_cube([[1]], "CUBE_M16", "FP16", 1, 1, "Huge")
    with pytest.raises(ValueError):
        L.cube_to_nd([0] * 10, "CUBE_M16", "FP16", 2, 2)
