"""Reference executor: TMATMUL / TGEMV family with All-Local operands.

Golden vectors E1-E5 and E7 of spec/matrix.md (Local parts), the nine
acceptance criteria of ADR 0071, one test per check of the ordered list in
docs/matmul-decisions.md (fault raised, nothing but the fault register
changed), and ieee-profile scenarios whose expected words are computed here
with exact Fractions. Every scenario is built from instruction words: the
operands are put in GM, loaded with CUBE TLOADs (A, B, C) and ordinary TLOADs
(Bias, E8M0 scales), then the matrix bundle runs. Undefined-element and
descriptor-corruption cases edit the State's tiles directly.

`run` is a module-level name so that tests/_scenarios.py can re-bind this file
to the JAX executor.
"""

from fractions import Fraction

import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.isa.encode import BSTOP, FPATR0, datr, dim, fpatr, ior, ios
from ptojax.reference import layouts as ref_layouts
from ptojax.reference import run
import _bundles
from _bundles import (FP16, SMALL, X2, X3, allocated, bstart, dims, iot, matmul_words, matrix_of, mstart,
                      poke, poke_tiles, run_ok, same_except, tile)

IEEE = SMALL.replace(profile="ieee")
MASK64 = (1 << 64) - 1
STORE_CODE = {"CUBE_M32": 24, "CUBE_M16": 25, "CUBE_N8": 26}


# ----------------------------------------------------------------- encoders


def test_matrix_encoders_match_golden_words():
    # A.1 table, encoding.md 8.3 and 8.5
    assert [mstart(op, 0) for op in ("TMATMUL", "TMATMUL.BIAS", "TMATMUL.ACC", "TMATMULMX",
                                     "TMATMULMX.BIAS", "TMATMULMX.ACC", "TGEMV", "TGEMV.BIAS",
                                     "TGEMV.ACC", "TGEMVMX", "TGEMVMX.BIAS", "TGEMVMX.ACC")] == [
        0x00031181, 0x00131181, 0x00231181, 0x00431181, 0x00531181, 0x00631181,
        0x01031181, 0x01131181, 0x01231181, 0x01431181, 0x01531181, 0x01631181]
    assert mstart("TMATMULMX", "FP16") == 0x20431181 and FPATR0 == 0x00002023
    assert iot(0, 1, hand=2, size=1, pemode=7) == 0x0408CF13
    assert mstart("TMATMUL.ACC", "FP16") == 0x20231181
    assert iot(1, hand=1, pemode=1, last=0) == 0x0010D293
    assert iot(2, 3, pemode=1) == 0x0C284213


# ----------------------------------------------------------------- setup from instruction words


class Setup(_bundles.Setup):
    """_bundles.Setup whose loads run on this module's `run` (tests/_scenarios.py re-binds it)."""

    def __init__(self, cfg=SMALL):
        super().__init__(cfg, run=run)


def ok(s, words, cfg=None):
    return run_ok(run, s, words, cfg=cfg)


def check_d(s, index, layout, dt, rows, cols, size, values, mask=0b1111):
    """D's descriptor is the CUBE geometry of (rows, cols); valid Words = values,
    defined exactly on the valid slots."""
    t = tile(s, index)
    d = tables.dtype(dt)
    g = ref_layouts.geometry(layout, d, rows, cols)
    assert bool(t["allocated"])
    assert (int(t["dtype"]), tables.TILE_LAYOUTS[int(t["layout"])]) == (d.code, layout)
    assert tables.TILE_LOCATIONS[int(t["location"])] == "Matrix"
    assert (int(t["valid_rows"]), int(t["valid_cols"])) == (rows, cols)
    assert (int(t["rows"]), int(t["cols"]), int(t["k_repeat"]), int(t["n_repeat"]),
            int(t["cell_count"]), int(t["storage_bytes"])) == (
        g["storage_rows"], g["storage_cols"], g["k_repeat"], g["n_repeat"], g["cell_count"],
        g["required_bytes"])
    assert int(t["capacity"]) == 128 << (size - 1) and int(t["mask"]) == mask
    assert int(t["defined_valid"]) == rows * cols
    at = ref_layouts.index_function(layout, d, rows, cols)
    valid = {at(r, c) for r in range(rows) for c in range(cols)}
    assert {int(i) for i in np.flatnonzero(t["defined"])} == valid
    assert matrix_of(s, index, layout, dt, rows, cols) == [[v & MASK64 for v in row]
                                                           for row in values]


def fails(s, words, fault, cfg=None):
    """The completing BSTOP faults; nothing but the fault register (and the
    abandoned block, the PC) changes; with "hold" the block stays too."""
    r = run(s, words, cfg=cfg)
    assert r.fault == fault, r.fault
    assert r.executed == len(words) - 1
    pc0 = int(np.asarray(s.pc))
    assert int(np.asarray(r.state.fault_address)) == pc0 + 4 * (len(words) - 1)
    assert int(np.asarray(r.state.pc)) == pc0 + 4 * (len(words) - 1)
    assert same_except(s, r.state, "fault", "fault_address", "pc", "block")
    assert not bool(np.asarray(r.state.block.active))
    opened = ok(s, words[:-1], cfg=cfg)
    h = run(opened, [BSTOP], on_fault="hold", cfg=cfg)
    assert h.fault == fault and same_except(opened, h.state, "fault", "fault_address")
    return r


def dot(A, B, i, j):
    return sum(A[i][k] * B[k][j] for k in range(len(B)))


def wrap(x):
    return x & MASK64


# ----------------------------------------------------------------- E1 (Local TMATMUL)


def test_e1_fp16_cube_operands():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2, 3], [4, 5, 6]])
    b = st.cube("CUBE_N8", "FP16", [[1, 2], [3, 4], [5, 6]])
    s = st.state()
    r = run(s, matmul_words("TMATMUL", "FP16", [a, b], 2, 2, 3, hand=0, size=1))
    assert r.ok
    check_d(r.state, 0, "CUBE_M16", "FP32", 2, 2, 1, [[22, 28], [49, 64]])
    assert same_except(s, r.state, "tiles", "pc")
    for i in (a, b):                                    # sources never modified
        assert all(np.array_equal(tile(s, i)[k], tile(r.state, i)[k]) for k in tile(s, i))


def test_e1_mixed_input_types_rmode_sat_accepted():
    st = Setup()
    a = st.cube("CUBE_M16", "S16", [[1, 2], [3, 4]])
    b = st.cube("CUBE_N8", "S8", [[5, 6], [7, 8]])
    s = st.state()
    words = matmul_words("TMATMUL", "S16", [a, b], 2, 2, 2,
                         extra=[datr(0, 19, 0, rmode=1, sat=1)])
    check_d(ok(s, words), 0, "CUBE_M16", "S32", 2, 2, 1, [[19, 22], [43, 50]])


def test_e1_defaults_are_one():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[6]])
    b = st.cube("CUBE_N8", "FP16", [[7]])
    s = ok(st.state(), matmul_words("TMATMUL", "FP16", [a, b]))
    check_d(s, 0, "CUBE_M16", "FP32", 1, 1, 1, [[42]])


def padding_state(pad=3):
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2], [3, 4]], pad=pad)
    b = st.cube("CUBE_N8", "FP16", [[5, 6], [7, 8]], pad=pad)
    return st.state(), a, b


def poison(s, index, layout, dt, vr, vc, r, c):
    """Set the padding slot (r, c) of a CUBE tile to all ones, defined."""
    slot = ref_layouts.payload_index(layout, tables.dtype(dt), vr, vc, r, c)
    hs = s.tiles.base.shape[1] // 4
    sl = (index // 16) * hs + index % 16
    s = poke_tiles(s, "words", (sl, slot), np.uint64(MASK64))
    return poke_tiles(s, "defined", (sl, slot), True)


def test_e1_padding_never_read():
    s, a, b = padding_state()
    s = poison(s, a, "CUBE_M16", "FP16", 2, 2, 15, 3)
    s = poison(s, b, "CUBE_N8", "FP16", 2, 2, 7, 7)
    out = ok(s, matmul_words("TMATMUL", "FP16", [a, b], 2, 2, 2))
    check_d(out, 0, "CUBE_M16", "FP32", 2, 2, 1, [[19, 22], [43, 50]])
    # Max padding (defined, nonzero words) is never read either
    s, a, b = padding_state(pad=1)
    out = ok(s, matmul_words("TMATMUL", "FP16", [a, b], 2, 2, 2))
    check_d(out, 0, "CUBE_M16", "FP32", 2, 2, 1, [[19, 22], [43, 50]])


def undefine(s, index, layout, dt, vr, vc, r, c):
    """Mark one valid element undefined (defined flag and defined_valid)."""
    slot = ref_layouts.payload_index(layout, tables.dtype(dt), vr, vc, r, c)
    hs = s.tiles.base.shape[1] // 4
    sl = (index // 16) * hs + index % 16
    s = poke_tiles(s, "defined", (sl, slot), False)
    return poke_tiles(s, "defined_valid", sl, vr * vc - 1)


def test_e1_undefined_element_is_tile_legality():
    s, a, b = padding_state()
    s = undefine(s, a, "CUBE_M16", "FP16", 2, 2, 1, 1)
    fails(s, matmul_words("TMATMUL", "FP16", [a, b], 2, 2, 2), "Fault_TileLegality")


def test_e1_row_major_primaries_rejected():
    st = Setup()
    a = st.ordinary("FP16", [[1, 2], [3, 4]], hand=1)
    b = st.ordinary("FP16", [[5, 6], [7, 8]], hand=1)
    fails(st.state(), matmul_words("TMATMUL", "FP16", [a, b], 2, 2, 2), "Fault_TileLegality")


# ----------------------------------------------------------------- E2 (ACC)


def acc_state(atype, ctype, c_value=5, size=1):
    st = Setup()
    c = st.cube("CUBE_M16", ctype, [[c_value]], hand=2, size=size)
    a = st.cube("CUBE_M16", atype, [[2]])
    b = st.cube("CUBE_N8", atype, [[3]])
    return st.state(), c, a, b


@pytest.mark.parametrize("atype, ctype", [("FP16", "FP32"), ("S8", "S32"), ("U8", "U32")])
def test_e2_acc_types(atype, ctype):
    s, c, a, b = acc_state(atype, ctype)
    out = ok(s, matmul_words("TMATMUL.ACC", atype, [c, a, b], split=True))
    check_d(out, 0, "CUBE_M16", ctype, 1, 1, 1, [[11]])
    assert matrix_of(out, c, "CUBE_M16", ctype, 1, 1) == [[5]]        # C unchanged
    assert all(np.array_equal(tile(s, c)[k], tile(out, c)[k]) for k in tile(s, c))


def test_e2_acc_chaining():
    s, c, a, b = acc_state("FP16", "FP32")
    s1 = ok(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], split=True))
    s2 = ok(s1, matmul_words("TMATMUL.ACC", "FP16", [0, a, b], hand=1, split=True))
    check_d(s2, 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])              # first D unchanged
    check_d(s2, 16 + 2, "CUBE_M16", "FP32", 1, 1, 1, [[17]])         # U#1, U#2 hold A, B
    assert allocated(s2) == sorted(allocated(s1) + [18])


def test_e2_acc_index_collision_golden_words():
    st = Setup()
    st.cube("CUBE_M16", "FP32", [[9]], hand=0)                        # T#1 filler
    c = st.cube("CUBE_M16", "FP32", [[5]], hand=0, pemode=1)          # T#2
    a = st.cube("CUBE_M16", "FP16", [[2]], hand=0, pemode=1)          # T#3
    b = st.cube("CUBE_N8", "FP16", [[3]], hand=0, pemode=1)           # T#4
    assert (c, a, b) == (1, 2, 3)
    s = st.state()
    words = [0x20231181, 0x00002023, 0x0010D293, 0x0C284213, BSTOP]
    fails(s, words, "Fault_TileLegality")
    # the same block with D in hand 2 succeeds (C 1 != hand 2)
    words2 = [0x20231181, FPATR0, iot(1, hand=2, pemode=1, last=0), iot(2, 3, pemode=1), BSTOP]
    check_d(ok(s, words2), 32, "CUBE_M16", "FP32", 1, 1, 1, [[11]], mask=0b1000)


# ----------------------------------------------------------------- E3 (BIAS)


def bias_state(bias=((10, 20),), dt="S32", cols=None):
    st = Setup()
    a = st.cube("CUBE_M16", "S16", [[1, 2], [3, 4]])
    b = st.cube("CUBE_N8", "S8", [[5, 6], [7, 8]])
    bias_i = st.ordinary(dt, [list(r) for r in bias], cols=cols)
    return st.state(), a, b, bias_i


def bias_words(a, b, bias):
    words = [mstart("TMATMUL.BIAS", "S16"), datr(0, 19, 0), FPATR0, *dims(2, 2, 2),
             iot(a, b, last=0), iot(bias, hand=0, size=1), BSTOP]
    return words


def test_e3_bias_add():
    s, a, b, bias = bias_state()
    out = ok(s, bias_words(a, b, bias))
    check_d(out, 0, "CUBE_M16", "S32", 2, 2, 1, [[29, 42], [53, 70]])


@pytest.mark.parametrize("bias, dt", [(((10,),), "S32"), (((10,), (20,)), "S32"),
                                      (((10, 20), (30, 40)), "S32"), (((10, 20),), "S16")])
def test_e3_bias_shape_and_dtype_rejected(bias, dt):
    s, a, b, bi = bias_state(bias, dt)
    fails(s, bias_words(a, b, bi), "Fault_TileLegality")


def test_e3_bias_column_major_and_cube_rejected():
    s, a, b, bi = bias_state()
    hs = SMALL.hand_slots
    sl = (bi // 16) * hs + bi % 16
    cm = poke_tiles(s, "layout", sl, tables.TILE_LAYOUT_CODE["ColumnMajor"])
    fails(cm, bias_words(a, b, bi), "Fault_TileLegality")
    # a CUBE-layout (M16) S32 1x2 Bias
    st = Setup()
    a = st.cube("CUBE_M16", "S16", [[1, 2], [3, 4]])
    b = st.cube("CUBE_N8", "S8", [[5, 6], [7, 8]])
    bi = st.cube("CUBE_M16", "S32", [[10, 20]], hand=3)
    fails(st.state(), bias_words(a, b, bi), "Fault_TileLegality")


def test_e3_u16_chain_bias_acc_and_tgemv():
    st = Setup()
    a = st.cube("CUBE_M16", "U16", [[1, 2], [3, 4]])
    b = st.cube("CUBE_N8", "U16", [[5, 6], [7, 8]])
    bias = st.ordinary("U32", [[1, 2]])
    v = st.cube("CUBE_M16", "U16", [[1, 2]], hand=2)
    w = st.cube("CUBE_N8", "U16", [[2], [3]], hand=2)
    s = st.state()
    s = ok(s, [mstart("TMATMUL.BIAS", "U16"), FPATR0, *dims(2, 2, 2), iot(a, b, hand=0, last=0),
               iot(bias), BSTOP])
    check_d(s, 0, "CUBE_M16", "U32", 2, 2, 1, [[20, 24], [44, 52]])
    s = ok(s, matmul_words("TMATMUL.ACC", "U16", [0, a, b], 2, 2, 2, hand=2, split=True))
    check_d(s, 34, "CUBE_M16", "U32", 2, 2, 1, [[20 + 19, 24 + 22], [44 + 43, 52 + 50]])
    s = ok(s, matmul_words("TGEMV", "U16", [v, w], None, 1, 2, hand=0))
    check_d(s, 1, "CUBE_M16", "U32", 1, 1, 1, [[8]])


# ----------------------------------------------------------------- E4 (MX, Local)


def mx_state(a_val=2, b_val=3, sa=1, sb=1, K=32):
    st = Setup()
    a = st.cube("CUBE_M16", "E4M3", [[a_val] * K], size=3)
    sa_i = st.ordinary("E8M0", [[sa] * -(-K // 32)])
    b = st.cube("CUBE_N8", "E5M2", [[b_val]] * K, size=2)
    sb_i = st.ordinary("E8M0", [[sb]] * -(-K // 32))
    return st.state(), a, sa_i, b, sb_i


def mx_words(op, srcs, K=32, hand=0, split=False):
    return matmul_words(op, "E4M3", srcs, None, None, K, hand=hand, split=split,
                        extra=[datr(0, tables.dtype("E5M2").code, 0)])


def test_e4_mx_local_scaled():
    s, a, sa, b, sb = mx_state()
    out = ok(s, mx_words("TMATMULMX", [a, sa, b, sb]))
    check_d(out, 0, "CUBE_M16", "FP32", 1, 1, 1, [[192]])


def test_e4_mx_direct_and_acc():
    s, a, sa, b, sb = mx_state(1, 1)
    s1 = ok(s, mx_words("TMATMULMX", [a, sa, b, sb]))
    check_d(s1, 0, "CUBE_M16", "FP32", 1, 1, 1, [[32]])
    s2 = ok(s1, mx_words("TMATMULMX.ACC", [0, a, sa, b, sb], hand=2, split=True))
    check_d(s2, 32, "CUBE_M16", "FP32", 1, 1, 1, [[64]])


def test_e4_mx_raw_scale_multiplies_raw():
    # portable: raw E8M0 127 multiplies by 127 (matrix.md C.1, G.1)
    s, a, sa, b, sb = mx_state(1, 1, sa=127, sb=2)
    out = ok(s, mx_words("TMATMULMX", [a, sa, b, sb]))
    check_d(out, 0, "CUBE_M16", "FP32", 1, 1, 1, [[32 * 127 * 2]])


def test_e4_mx_unscaled_fp16_golden_words():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[2]], hand=0)
    b = st.cube("CUBE_N8", "FP16", [[3]], hand=0)
    assert (a, b) == (0, 1)
    out = ok(st.state(), [0x20431181, 0x00002023, 0x0408CF13, BSTOP])
    check_d(out, 32, "CUBE_M16", "FP32", 1, 1, 1, [[6]])


def test_e4_mx_scale_presence_must_match_types():
    # FP16 side with a supplied scale: stream count mismatch
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[2]])
    sa = st.ordinary("E8M0", [[1]])
    b = st.cube("CUBE_N8", "FP16", [[3]])
    fails(st.state(), matmul_words("TMATMULMX", "FP16", [a, sa, b]), "Fault_TileLegality")
    # E4M3 side without its scale
    s, a, sa, b, sb = mx_state()
    fails(s, mx_words("TMATMULMX", [a, b, sb]), "Fault_TileLegality")


def test_e4_mx_mixed_scaled_and_unscaled_sides():
    # A FP16 (no scale), B E4M3 with scale: stream A, B, sB
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[2, 2]])
    b = st.cube("CUBE_N8", "E4M3", [[3], [5]])
    sb = st.ordinary("E8M0", [[4]])
    out = ok(st.state(), matmul_words("TMATMULMX", "FP16", [a, b, sb], 1, 1, 2,
                                      extra=[datr(0, tables.dtype("E4M3").code, 0)]))
    check_d(out, 0, "CUBE_M16", "FP32", 1, 1, 1, [[2 * 3 * 4 + 2 * 5 * 4]])


def test_e4_mx_bias_and_second_scale_block():
    K = 40
    st = Setup()
    a = st.cube("CUBE_M16", "E4M3", [list(range(1, K + 1))], size=4)
    sa = st.ordinary("E8M0", [[3, 5]])
    b = st.cube("CUBE_N8", "E5M2", [[k % 7] for k in range(K)], size=3)
    sb = st.ordinary("E8M0", [[2], [7]])
    bias = st.ordinary("FP32", [[1000]])
    out = ok(st.state(), matmul_words("TMATMULMX.BIAS", "E4M3", [a, sa, b, sb, bias], 1, 1, K,
                                      extra=[datr(0, tables.dtype("E5M2").code, 0)]))
    want = sum((k + 1) * (3 if k < 32 else 5) * (k % 7) * (2 if k < 32 else 7)
               for k in range(K)) + 1000
    check_d(out, 0, "CUBE_M16", "FP32", 1, 1, 1, [[want]])


# ----------------------------------------------------------------- E5 (TGEMV)


def test_e5_tgemv_fp16():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1] * 9], size=3)
    b = st.cube("CUBE_N8", "FP16", [[1] * 10 for _ in range(9)], size=3)
    out = ok(st.state(), matmul_words("TGEMV", "FP16", [a, b], None, 10, 9, size=4))
    check_d(out, 0, "CUBE_M16", "FP32", 1, 10, 4, [[9] * 10])


def test_e5_tgemv_u16_explicit_m1():
    st = Setup()
    a = st.cube("CUBE_M16", "U16", [[2, 3]])
    b = st.cube("CUBE_N8", "U16", [[5, 7], [11, 13]])
    out = ok(st.state(), matmul_words("TGEMV", "U16", [a, b], 1, 2, 2))
    check_d(out, 0, "CUBE_M16", "U32", 1, 2, 1, [[43, 53]])


def test_e5_tgemv_bias_and_acc():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[2]])
    b = st.cube("CUBE_N8", "FP16", [[3]])
    bias = st.ordinary("FP32", [[5]])
    c = st.cube("CUBE_M16", "FP32", [[5]], hand=2)
    s = st.state()
    s1 = ok(s, [mstart("TGEMV.BIAS", "FP16"), FPATR0, iot(a, b, hand=0, last=0), iot(bias),
                BSTOP])
    check_d(s1, 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])
    s2 = ok(s, matmul_words("TGEMV.ACC", "FP16", [c, a, b], split=True))
    check_d(s2, 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])


def test_e5_tgemv_faults():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 1]])
    b = st.cube("CUBE_N8", "FP16", [[1], [1]])
    a2 = st.cube("CUBE_M16", "FP16", [[1, 1], [1, 1]], hand=2)
    s = st.state()
    fails(s, matmul_words("TGEMV", "FP16", [a2, b], 2, 1, 2), "Fault_TileLegality")
    words = matmul_words("TGEMV", "FP16", [a, b], 1, 1, 2)
    fails(s, words[:2] + [ios(40, 7)] + words[2:], "Fault_TileLegality")


# ----------------------------------------------------------------- E7 (capacity / geometry)


def test_e7_destination_tsize_boundaries():
    # FP32 M16 D 16x9 needs 5 CELLs = 640 B: 1 KiB fits, 512 B is TileAllocation
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1] * 3 for _ in range(16)], size=1)
    b = st.cube("CUBE_N8", "FP16", [[1] * 9 for _ in range(3)], size=2)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "FP16", [a, b], 16, 9, 3, size=3), "Fault_TileAllocation")
    check_d(ok(s, matmul_words("TMATMUL", "FP16", [a, b], 16, 9, 3, size=4)),
            0, "CUBE_M16", "FP32", 16, 9, 4, [[3] * 9] * 16)
    # U32 M16 16x16 needs 1 KiB
    st = Setup()
    a = st.cube("CUBE_M16", "U8", [[1] for _ in range(16)])
    b = st.cube("CUBE_N8", "U8", [[2] * 16], size=2)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "U8", [a, b], 16, 16, 1, size=3), "Fault_TileAllocation")
    check_d(ok(s, matmul_words("TMATMUL", "U8", [a, b], 16, 16, 1, size=4)),
            0, "CUBE_M16", "U32", 16, 16, 4, [[2] * 16] * 16)


def test_e7_source_geometries_and_capacity():
    # FP16 M16 16x17 (640 B in 1 KiB), FP16 N8 17x9 (768 B in 1 KiB)
    A = [[(r * 17 + c) % 11 for c in range(17)] for r in range(16)]
    B = [[(k + 2 * j) % 5 for j in range(9)] for k in range(17)]
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", A, size=4)
    b = st.cube("CUBE_N8", "FP16", B, size=4)
    s = st.state()
    words = matmul_words("TMATMUL", "FP16", [a, b], 16, 9, 17, size=4)
    check_d(ok(s, words), 0, "CUBE_M16", "FP32", 16, 9, 4,
            [[dot(A, B, i, j) for j in range(9)] for i in range(16)])
    # the same A descriptor claiming a 512 B capacity is an illegal source
    hs = SMALL.hand_slots
    bad = poke_tiles(s, "capacity", (a // 16) * hs + a % 16, 512)
    fails(bad, words, "Fault_TileLegality")


def test_e7_m32_17_rows_and_n8_13x19():
    A = [[(r + c) % 3 for c in range(13)] for r in range(17)]
    B = [[(k * j) % 4 for j in range(19)] for k in range(13)]
    st = Setup()
    a = st.cube("CUBE_M32", "FP16", A, size=5)             # 32 x 14 storage, 896 B
    b = st.cube("CUBE_N8", "FP16", B, size=4)              # 16 x 24 storage, 768 B
    s = st.state()
    t = tile(s, b)
    assert (int(t["rows"]), int(t["cols"]), int(t["storage_bytes"])) == (16, 24, 768)
    out = ok(s, matmul_words("TMATMUL", "FP16", [a, b], 17, 19, 13, size=6))
    check_d(out, 0, "CUBE_M32", "FP32", 17, 19, 6,
            [[dot(A, B, i, j) for j in range(19)] for i in range(17)])


@pytest.mark.parametrize("atype", ["HiF4X2", "FP64", "S32", "U64", "E8M0"])
def test_e7_illegal_input_types(atype):
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1]])
    b = st.cube("CUBE_N8", "FP16", [[1]])
    fails(st.state(), matmul_words("TMATMUL", atype, [a, b]), "Fault_TileLegality")


def test_e7_m16_fp32_with_17_valid_rows_is_illegal():
    st = Setup()
    a = st.cube("CUBE_M16", "FP32", [[1]] * 16)
    b = st.cube("CUBE_N8", "FP32", [[1]])
    s = st.state()
    hs = SMALL.hand_slots
    bad = poke_tiles(s, "valid_rows", (a // 16) * hs + a % 16, 17)
    fails(bad, matmul_words("TMATMUL", "FP32", [a, b], 17, 1, 1), "Fault_TileLegality")


# ----------------------------------------------------------------- ADR 0071 acceptance criteria


def test_adr0071_1_mandatory_cube_roles():
    st = Setup()
    a16 = st.cube("CUBE_M16", "FP16", [[1, 2]])
    a32 = st.cube("CUBE_M32", "FP16", [[1, 2]])
    b = st.cube("CUBE_N8", "FP16", [[3], [4]])
    a_n8 = st.cube("CUBE_N8", "FP16", [[1, 2]], hand=2)
    b_m16 = st.cube("CUBE_M16", "FP16", [[3], [4]], hand=2)
    c32 = st.cube("CUBE_M32", "FP32", [[5]], hand=2)
    c16 = st.cube("CUBE_M16", "FP32", [[5]], hand=2)
    s = st.state()
    for srcs in ([a_n8, b], [a16, b_m16], [a16, a16]):
        fails(s, matmul_words("TMATMUL", "FP16", [*srcs], 1, 1, 2), "Fault_TileLegality")
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [c32, a16, b], 1, 1, 2, split=True),
          "Fault_TileLegality")                                      # C layout != A layout
    check_d(ok(s, matmul_words("TMATMUL.ACC", "FP16", [c16, a16, b], 1, 1, 2, split=True)),
            0, "CUBE_M16", "FP32", 1, 1, 1, [[16]])
    check_d(ok(s, matmul_words("TMATMUL.ACC", "FP16", [c32, a32, b], 1, 1, 2, split=True)),
            0, "CUBE_M32", "FP32", 1, 1, 1, [[16]])                  # D inherits M32


def test_adr0071_2_ordinary_local_primary_rejected():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2]])
    b = st.cube("CUBE_N8", "FP16", [[3], [4]])
    a_rm = st.ordinary("FP16", [[1, 2]], hand=2)
    b_rm = st.ordinary("FP16", [[3], [4]], hand=2)
    c_rm = st.ordinary("FP32", [[5]], hand=2)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "FP16", [a_rm, b], 1, 1, 2), "Fault_TileLegality")
    fails(s, matmul_words("TMATMUL", "FP16", [a, b_rm], 1, 1, 2), "Fault_TileLegality")
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [c_rm, a, b], 1, 1, 2, split=True),
          "Fault_TileLegality")
    # supplying an ordinary Bias does not make an ordinary primary legal
    bias = st.ordinary("FP32", [[1]], hand=3)
    s = st.state()
    fails(s, [mstart("TMATMUL.BIAS", "FP16"), FPATR0, *dims(1, 1, 2), iot(a_rm, b, hand=0,
                                                                          last=0),
              iot(bias), BSTOP], "Fault_TileLegality")


def test_adr0071_3_m16_m32_overlap():
    rows = [[r + c for c in range(3)] for r in range(16)]
    B = [[1, 2], [3, 4], [5, 6]]
    want = [[dot(rows, B, i, j) for j in range(2)] for i in range(16)]
    for layout in ("CUBE_M16", "CUBE_M32"):
        st = Setup()
        a = st.cube(layout, "FP16", rows, size=2)
        b = st.cube("CUBE_N8", "FP16", B)
        out = ok(st.state(), matmul_words("TMATMUL", "FP16", [a, b], 16, 2, 3, size=2))
        check_d(out, 0, layout, "FP32", 16, 2, 2, want)
    rows20 = [[r, 1, 2] for r in range(20)]
    st = Setup()
    a = st.cube("CUBE_M32", "FP16", rows20, size=2)
    b = st.cube("CUBE_N8", "FP16", B)
    out = ok(st.state(), matmul_words("TMATMUL", "FP16", [a, b], 20, 2, 3, size=2))
    check_d(out, 0, "CUBE_M32", "FP32", 20, 2, 2,
            [[dot(rows20, B, i, j) for j in range(2)] for i in range(20)])


def test_adr0071_4_arbitrary_dimensions_and_tails():
    M, N, K = 3, 11, 19               # N > 8, K spans 3 N8 CELLs (b16: 8 rows each)
    A = [[(7 * i + 3 * k) % 13 - 6 for k in range(K)] for i in range(M)]
    B = [[(5 * k + j) % 9 - 4 for j in range(N)] for k in range(K)]
    st = Setup()
    a = st.cube("CUBE_M16", "S16", A, size=4)              # 5 CELLs
    b = st.cube("CUBE_N8", "S16", B, size=4)               # 3 x 2 CELLs
    out = ok(st.state(), matmul_words("TMATMUL", "S16", [a, b], M, N, K, size=4))
    check_d(out, 0, "CUBE_M16", "S32", M, N, 4,
            [[wrap(dot(A, B, i, j)) for j in range(N)] for i in range(M)])


def test_adr0071_5_tsize_boundaries_and_padding_exclusion():
    # D FP32 M16 1x5: 3 CELLs = 384 B -> 512 B ok, 256 B TileAllocation
    st = Setup()
    a = st.cube("CUBE_M16", "U8", [[1, 2]], pad=1)
    b = st.cube("CUBE_N8", "U8", [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], pad=1)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "U8", [a, b], 1, 5, 2, size=2), "Fault_TileAllocation")
    out = ok(s, matmul_words("TMATMUL", "U8", [a, b], 1, 5, 2, size=3))
    check_d(out, 0, "CUBE_M16", "U32", 1, 5, 3, [[13, 16, 19, 22, 25]])
    # D padding: old Words kept (reset: 0), undefined; never the source padding
    pad = ref_layouts.payload_index("CUBE_M16", tables.dtype("U32"), 1, 5, 1, 0)
    t = tile(out, 0)
    assert not t["defined"][pad] and int(t["words"][pad]) == 0


def test_adr0071_6_bias_and_optional_mx_scales():
    s, a, b, bias = bias_state(((-1, 2),))
    out = ok(s, bias_words(a, b, bias))
    check_d(out, 0, "CUBE_M16", "S32", 2, 2, 1, [[18, 24], [42, 52]])
    # scales of the wrong shape: sA must be M x ceil(K/32)
    st = Setup()
    a = st.cube("CUBE_M16", "E4M3", [[1] * 33], size=4)
    sa_bad = st.ordinary("E8M0", [[1]])
    b = st.cube("CUBE_N8", "E5M2", [[1]] * 33, size=3)
    sb = st.ordinary("E8M0", [[1], [1]])
    fails(st.state(), mx_words("TMATMULMX", [a, sa_bad, b, sb], K=33), "Fault_TileLegality")


def test_adr0071_7_tgemv_local_only_m1():
    st = Setup()
    a = st.cube("CUBE_M32", "S8", [[1, -2, 3]])
    b = st.cube("CUBE_N8", "S8", [[1, 1], [2, 2], [3, -3]])
    s = st.state()
    words = matmul_words("TGEMV", "S8", [a, b], None, 2, 3, size=2)   # M32 b32: 2 CELLs
    check_d(ok(s, words), 0, "CUBE_M32", "S32", 1, 2, 2, [[6, wrap(-12)]])
    fails(s, words[:2] + [ios(7, 7)] + words[2:], "Fault_TileLegality")


def test_adr0071_8_failures_before_effects():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2]])
    b = st.cube("CUBE_N8", "FP16", [[3], [4]])
    b_bf = st.cube("CUBE_N8", "BF16", [[3], [4]], hand=2)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "FP16", [a, b_bf], 1, 1, 2), "Fault_TileLegality")  # dtype
    fails(s, matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 3), "Fault_TileLegality")     # shape
    fails(s, matmul_words("TMATMUL", "FP16", [b, a], 1, 1, 2), "Fault_TileLegality")     # layout
    fails(undefine(s, b, "CUBE_N8", "FP16", 2, 1, 1, 0),
          matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2), "Fault_TileLegality")        # defined


def test_adr0071_9_matrix_encodings_unchanged():
    from ptojax.reference.decode import decode
    names = ["TMATMUL", "TMATMUL.BIAS", "TMATMUL.ACC", "TMATMULMX", "TMATMULMX.BIAS",
             "TMATMULMX.ACC", "TGEMV", "TGEMV.BIAS", "TGEMV.ACC", "TGEMVMX", "TGEMVMX.BIAS",
             "TGEMVMX.ACC"]
    for name in names:
        cmd = decode(mstart(name, "FP16"))
        assert cmd is not None and cmd.mnemonic == "BSTART." + name
        assert cmd["DataType"] == 4
    for function in (3, 7, 15, 19, 23, 31):
        assert decode(0x00031181 & ~(0x1F << 20) | function << 20 | 4 << 27) is None


# ----------------------------------------------------------------- ordered checks (decisions list)


def base_state():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2]])
    b = st.cube("CUBE_N8", "FP16", [[3], [4]])
    c = st.cube("CUBE_M16", "FP32", [[5]], hand=2)
    bias = st.ordinary("FP32", [[7]])
    return st.state(), a, b, c, bias


def test_check_pre_cube_layout_code_takes_the_transport_path():
    s, a, b, *_ = base_state()
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, extra=[datr(22, 31, 0)])
    fails(s, words, "Fault_TileLegality")
    words = matmul_words("TGEMV", "FP16", [a, b], 1, 1, 2, extra=[datr(25, 31, 0)])
    fails(s, words, "Fault_IllegalInstruction")


def test_check_0_zero_mask_is_a_no_op():
    s, *_ = base_state()
    for op in ("TMATMUL", "TGEMVMX.ACC"):
        words = [mstart(op, "FP16"), iot(62, 63, hand=0, pemode=0), BSTOP]
        r = run(s, words)
        assert r.ok and r.executed == 3
        assert same_except(s, r.state, "pc")


def test_check_1_missing_fpatr():
    s, a, b, *_ = base_state()
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2)
    fails(s, [w for w in words if w != FPATR0], "Fault_BundleControl")


def test_check_1b_shared_operand_takes_the_cooperative_path():
    # a Shared B (right-only group) is checked as docs/shared-decisions.md 5:
    # S9 holds no record, so the Shared readiness check rejects the block
    s, a, b, *_ = base_state()
    words = [mstart("TMATMUL", "FP16"), FPATR0, *dims(1, 1, 2), ios(9, 7), iot(a, hand=0), BSTOP]
    fails(s, words, "Fault_TileLegality")
    # B.FPATR missing still comes first
    fails(s, [w for w in words if w != FPATR0], "Fault_BundleControl")


@pytest.mark.parametrize("atype, btype", [
    ("FP16", "S8"), ("S8", "U8"), ("U16", "FP32"), ("FP16", "FP64"), ("FP16", "E8M0"),
    ("FP16", "HiF4X2"), ("S32", "S32")])
def test_check_3_ordinary_type_classes(atype, btype):
    s, a, b, *_ = base_state()
    words = matmul_words("TMATMUL", atype, [a, b], 1, 1, 2,
                         extra=[datr(0, tables.dtype(btype).code, 0)])
    fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("atype, btype", [("HiF8", "FP16"), ("FP16", "FP32"), ("E3M2", "E4M3"),
                                          ("S8", "S8")])
def test_check_3_mx_type_set(atype, btype):
    s, a, b, *_ = base_state()
    words = matmul_words("TMATMULMX", atype, [a, b], 1, 1, 2,
                         extra=[datr(0, tables.dtype(btype).code, 0)])
    fails(s, words, "Fault_TileLegality")


def test_check_3_datr_dtype_none_keeps_atype_and_zero_means_fp64():
    s, a, b, *_ = base_state()
    out = ok(s, matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, extra=[datr(0, 31, 0)]))
    check_d(out, 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])
    fails(s, matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, extra=[datr(0, 0, 0)]),
          "Fault_TileLegality")


@pytest.mark.parametrize("case", ["missing_source", "extra_source", "no_destination",
                                  "two_destinations", "not_closed", "acc_without_c",
                                  "bias_missing"])
def test_check_3_stream(case):
    s, a, b, c, bias = base_state()
    head = [mstart("TMATMUL", "FP16"), FPATR0, *dims(1, 1, 2)]
    words = {
        "missing_source": head + [iot(a, hand=0), BSTOP],
        "extra_source": head + [iot(a, b, hand=0, last=0), iot(bias), BSTOP],
        "no_destination": head + [iot(a, b), BSTOP],
        "two_destinations": head + [iot(a, b, hand=0, last=0), iot(hand=1), BSTOP],
        "not_closed": head + [iot(a, b, hand=0, last=0), BSTOP],
        "acc_without_c": [mstart("TMATMUL.ACC", "FP16"), FPATR0, *dims(1, 1, 2),
                          iot(a, b, hand=0), BSTOP],
        "bias_missing": [mstart("TMATMUL.BIAS", "FP16"), FPATR0, *dims(1, 1, 2),
                         iot(a, b, hand=0), BSTOP],
    }[case]
    fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("fields, good", [
    ((0, 0, 0, 0), True), ((1, 0, 0, 0), False), ((0, X2, 0, 0), False),
    ((0, 0, X3, 0), False), ((0, 0, 0, X2), False)])
def test_check_3_ior_schema(fields, good):
    s, a, b, *_ = base_state()
    dst, s0, s1, s2 = fields
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2)
    words = words[:-1] + [ior(s0, s1, s2, dst), BSTOP]
    if good:
        check_d(ok(s, words), 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])
    else:
        fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("attrs, good", [
    (dict(layout=1), False), (dict(layout=27), False), (dict(pad=1), False),
    (dict(cmode=1), False), (dict(canon=1), False), (dict(rmode=7, sat=1), True)])
def test_check_3_datr_closed_fields(attrs, good):
    s, a, b, *_ = base_state()
    kw = dict(layout=0, dtype=4, pad=0)
    kw.update(attrs)
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, extra=[datr(**kw)])
    if good:
        check_d(ok(s, words), 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]])
    else:
        fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("mnk", [(0, 1, 2), (1, 0, 2), (1, 1, 0)])
def test_check_3_present_zero_dimension(mnk):
    s, a, b, *_ = base_state()
    fails(s, matmul_words("TMATMUL", "FP16", [a, b], *mnk), "Fault_TileLegality")


def test_check_4_tgemv_m_not_one():
    s, a, b, *_ = base_state()
    fails(s, matmul_words("TGEMV", "FP16", [a, b], 2, 1, 2), "Fault_TileLegality")


@pytest.mark.parametrize("ta, tb", [(1, 0), (0, 1), (1, 1)])
def test_check_5_transpose_needs_shared_primary(ta, tb):
    s, a, b, *_ = base_state()
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, fp=fpatr(trans_a=ta, trans_b=tb))
    fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("atype, pre", [("FP16", 2), ("FP16", 35), ("S8", 1), ("S8", 27),
                                        ("U8", 1), ("U8", 3)])
def test_check_6_prequant_mode_vs_accumulator(atype, pre):
    st = Setup()
    a = st.cube("CUBE_M16", atype, [[1, 2]])
    b = st.cube("CUBE_N8", atype, [[3], [4]])
    extra_src = [a] if pre in (2, 4, 12, 18, 20, 23, 28, 33, 36, 37, 38, 39) else []
    words = matmul_words("TMATMUL", atype, [a, b, *extra_src], 1, 1, 2, fp=fpatr(pre=pre))
    fails(st.state(), words, "Fault_TileLegality")


def hs_slot(index):
    hs = SMALL.hand_slots
    return (index // 16) * hs + index % 16


@pytest.mark.parametrize("role, field, value", [
    ("c", "layout", tables.TILE_LAYOUT_CODE["CUBE_M32"]), ("c", "dtype", 4),
    ("c", "valid_cols", 2), ("c", "capacity", 256), ("c", "defined_valid", 0),
    ("c", "allocated", False), ("c", "location", 0), ("c", "cell_count", 2),
    ("a", "dtype", 5), ("a", "valid_rows", 2), ("a", "defined_valid", 1), ("a", "allocated", False),
    ("a", "location", tables.TILE_LOCATION_CODE["Any"]), ("a", "storage_bytes", 256),
    ("b", "dtype", 1), ("b", "valid_cols", 2), ("b", "layout", tables.TILE_LAYOUT_CODE["CUBE_M16"]),
    ("b", "k_repeat", 2),
    ("bias", "dtype", 25), ("bias", "valid_cols", 2), ("bias", "defined_valid", 0),
    ("bias", "layout", tables.TILE_LAYOUT_CODE["ColumnMajor"]), ("bias", "allocated", False),
    ("bias", "capacity", 100)])
def test_check_7_local_sources(role, field, value):
    s, a, b, c, bias = base_state()
    op = {"c": "TMATMUL.ACC", "bias": "TMATMUL.BIAS"}.get(role, "TMATMUL")
    if role == "c":
        words = matmul_words(op, "FP16", [c, a, b], 1, 1, 2, split=True)
    elif role == "bias":
        words = [mstart(op, "FP16"), FPATR0, *dims(1, 1, 2), iot(a, b, hand=0, last=0),
                 iot(bias), BSTOP]
    else:
        words = matmul_words(op, "FP16", [a, b], 1, 1, 2)
    ok(s, words)                                             # legal as built
    index = {"a": a, "b": b, "c": c, "bias": bias}[role]
    fails(poke_tiles(s, field, hs_slot(index), value), words, "Fault_TileLegality")


@pytest.mark.parametrize("which, field, value", [
    ("sa", "dtype", 27), ("sa", "valid_cols", 2), ("sa", "defined_valid", 0),
    ("sb", "valid_rows", 2), ("sb", "layout", tables.TILE_LAYOUT_CODE["CUBE_N8"]),
    ("sb", "allocated", False)])
def test_check_7_scale_sources(which, field, value):
    s, a, sa, b, sb = mx_state()
    words = mx_words("TMATMULMX", [a, sa, b, sb])
    index = {"sa": sa, "sb": sb}[which]
    fails(poke_tiles(s, field, hs_slot(index), value), words, "Fault_TileLegality")


def test_check_7_unmaterialized_and_free_sources():
    s, a, b, *_ = base_state()
    fails(s, matmul_words("TMATMUL", "FP16", [a, 16 + 9], 1, 1, 2), "Fault_TileLegality")
    fails(s, matmul_words("TMATMUL", "FP16", [a + 3, b], 1, 1, 2), "Fault_TileLegality")


def test_check_7_acc_capacity_must_equal_destination_tsize():
    s, a, b, c, _ = base_state()
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 1, 2, size=2, split=True),
          "Fault_TileLegality")


def test_check_8_acc_index_vs_hand():
    st = Setup()
    st.cube("CUBE_M16", "FP32", [[5]], hand=0)                       # C = TileIndex 0
    a = st.cube("CUBE_M16", "FP16", [[2]])
    b = st.cube("CUBE_N8", "FP16", [[3]])
    s = st.state()
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [0, a, b], hand=0, split=True),
          "Fault_TileLegality")
    # C index 16 (U#1) against hand 0 and hand 1: only the raw numbers are compared
    st = Setup()
    c = st.cube("CUBE_M16", "FP32", [[5]], hand=1)
    a = st.cube("CUBE_M16", "FP16", [[2]])
    b = st.cube("CUBE_N8", "FP16", [[3]])
    s = st.state()
    check_d(ok(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], hand=1, split=True)),
            16 + 3, "CUBE_M16", "FP32", 1, 1, 1, [[11]])


def test_check_10_no_free_slot_in_hand():
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2]], hand=0)
    b = st.cube("CUBE_N8", "FP16", [[3], [4]], hand=0)
    st.cube("CUBE_M16", "FP16", [[1]], hand=0)
    st.cube("CUBE_M16", "FP16", [[1]], hand=0)
    fails(st.state(), matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, hand=0),
          "Fault_TileAllocation")


@pytest.mark.parametrize("pemode, spare, good", [(7, 4 * 128, True), (7, 4 * 128 - 1, False),
                                                 (1, 128, True), (1, 127, False)])
def test_check_10_core_budget(pemode, spare, good):
    s, a, b, *_ = base_state()
    used = sum(bin(int(m)).count("1") * int(c) for al, m, c in
               zip(np.asarray(s.tiles.allocated)[0], np.asarray(s.tiles.mask)[0],
                   np.asarray(s.tiles.capacity)[0]) if al)
    s = poke(s, tile_capacity=used + spare)
    words = matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2, pemode=pemode)
    if good:
        check_d(ok(s, words), 0, "CUBE_M16", "FP32", 1, 1, 1, [[11]],
                mask=tables.PEMODE_MASK[pemode])
    else:
        fails(s, words, "Fault_TileAllocation")


def test_check_10_destination_past_the_model_payload_bound():
    # D FP32 M16 16x66: 33 CELLs of 32 Words = 1056 > tile_words 1024; 16x64 fits
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1]] * 16)
    b66 = st.cube("CUBE_N8", "FP16", [[1] * 66], size=5)
    b64 = st.cube("CUBE_N8", "FP16", [[2] * 64], size=5)
    s = st.state()
    fails(s, matmul_words("TMATMUL", "FP16", [a, b66], 16, 66, 1, size=7), "Fault_TileAllocation")
    check_d(ok(s, matmul_words("TMATMUL", "FP16", [a, b64], 16, 64, 1, size=6)),
            0, "CUBE_M16", "FP32", 16, 64, 6, [[2] * 64] * 16)


def test_publish_keeps_stale_words_outside_the_valid_region():
    s, a, b, *_ = base_state()
    # D's slot 0 (T#1) is free: its Word 1 (FP32: pool slot 1 of the window it will
    # be placed at, or 2 and 3 in 32-bit slots) holds stale 0xDEAD, marked defined
    j = 1 if s.tiles.words.dtype == np.uint64 else 2
    s = poke_tiles(s, "words", (0, j), np.uint64(0xDEAD))
    s = poke_tiles(s, "defined", (0, j), True)
    out = ok(s, matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 2))
    t = tile(out, 0)
    assert int(t["words"][0]) == 11 and bool(t["defined"][0])
    assert int(t["words"][1]) == 0xDEAD and not bool(t["defined"][1])


def test_result_tstore_writes_low_bytes():
    st = Setup()
    a = st.cube("CUBE_M16", "S8", [[-1, 2]])
    b = st.cube("CUBE_N8", "S8", [[3, 4], [5, 6]])
    s = ok(st.state(), matmul_words("TMATMUL", "S8", [a, b], 1, 2, 2))
    check_d(s, 0, "CUBE_M16", "S32", 1, 2, 1, [[7, 8]])
    s = pj.write_gpr(pj.write_gpr(s, X2, 0x800), X3, 8)
    s = ok(s, [bstart("TSTORE", "S32"), datr(STORE_CODE["CUBE_M16"], 31, 3), dim(0, 2), dim(1, 1),
               iot(0, pemode=7), ior(X2, X3), BSTOP])
    assert pj.read_memory(s, 0x800, 8) == (7).to_bytes(4, "little") + (8).to_bytes(4, "little")


def test_every_form_runs():
    """All 12 forms once, FP16 x FP16 (MX unscaled), M=1, N=2, K=3."""
    st = Setup()
    a = st.cube("CUBE_M16", "FP16", [[1, 2, 3]])
    b = st.cube("CUBE_N8", "FP16", [[1, 2], [3, 4], [5, 6]])
    c = st.cube("CUBE_M16", "FP32", [[100, 200]], hand=2)
    bias = st.ordinary("FP32", [[10, 20]])
    s = st.state()
    for op in ("TMATMUL", "TMATMULMX", "TGEMV", "TGEMVMX"):
        for suffix, srcs, want in (("", [a, b], [22, 28]), (".BIAS", [a, b, bias], [32, 48]),
                                   (".ACC", [c, a, b], [122, 228])):
            words = matmul_words(op + suffix, "FP16", srcs, 1, 2, 3, split=suffix == ".ACC")
            if suffix == ".BIAS":
                words = [mstart(op + suffix, "FP16"), FPATR0, *dims(1, 2, 3),
                         iot(a, b, hand=0, last=0), iot(bias), BSTOP]
            check_d(ok(s, words), 0, "CUBE_M16", "FP32", 1, 2, 1, [want])


# ----------------------------------------------------------------- portable carrier rules


def test_portable_signed_and_s4x2_carriers():
    st = Setup()
    a = st.cube("CUBE_M16", "S8", [[-3]])
    b = st.cube("CUBE_N8", "S8", [[5]])
    a4 = st.cube("CUBE_M16", "S4X2", [[-1, 1]], hand=2)
    b4 = st.cube("CUBE_N8", "S4X2", [[3], [2]], hand=2)
    s = st.state()
    check_d(ok(s, matmul_words("TMATMUL", "S8", [a, b])), 0, "CUBE_M16", "S32", 1, 1, 1,
            [[wrap(-15)]])
    # S4X2 nibbles are zero-extended: -1 enters as 15
    check_d(ok(s, matmul_words("TMATMUL", "S4X2", [a4, b4], 1, 1, 2)), 0, "CUBE_M16", "S32",
            1, 1, 1, [[15 * 3 + 2]])


def test_portable_full_64_bit_accumulator():
    st = Setup()
    a = st.cube("CUBE_M16", "U16", [[0xFFFF, 0xFFFF]])
    b = st.cube("CUBE_N8", "U16", [[0xFFFF], [0xFFFF]])
    out = ok(st.state(), matmul_words("TMATMUL", "U16", [a, b], 1, 1, 2))
    check_d(out, 0, "CUBE_M16", "U32", 1, 1, 1, [[2 * 0xFFFF * 0xFFFF]])


def test_portable_wraps_mod_2_64():
    st = Setup()
    a = st.cube("CUBE_M16", "S16", [[-32768] * 4])
    b = st.cube("CUBE_N8", "S16", [[-32768]] * 4)
    c = st.cube("CUBE_M16", "S32", [[-1]], hand=2)
    out = ok(st.state(), matmul_words("TMATMUL.ACC", "S16", [c, a, b], 1, 1, 4, split=True))
    check_d(out, 0, "CUBE_M16", "S32", 1, 1, 1, [[wrap(4 * 32768 * 32768 - 1)]])


# ----------------------------------------------------------------- ieee profile


def r32(x: Fraction):
    """Round an exact value to binary32 (RNE, subnormals, overflow -> inf):
    returns the bit pattern. Written for these tests, from the IEEE rules."""
    sign = 0x80000000 if x < 0 else 0
    a = abs(x)
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, -126) - 23)         # spacing of binary32 near a
    n = a / q
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2):
        fl += 1
    v = fl * q
    if v >= Fraction(2) ** 128:
        return sign | 0x7F800000
    if v < Fraction(2) ** -126:
        return sign | int(fl)                       # subnormal (or min normal when 2^23)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    mant = v / Fraction(2) ** e - 1
    return sign | (e + 127) << 23 | int(mant * 2 ** 23)


def v32(bits):
    """The exact value of a finite binary32 pattern."""
    sign = -1 if bits >> 31 else 1
    e, m = bits >> 23 & 0xFF, bits & 0x7FFFFF
    if e == 0:
        return sign * Fraction(m) * Fraction(2) ** -149
    return sign * (1 + Fraction(m, 2 ** 23)) * Fraction(2) ** (e - 127)


def ieee_dot(products, start=Fraction(0), bias=None):
    """Sequential binary32: acc = r32(acc + r32(p)) for each exact product p."""
    acc = v32(r32(start))
    for p in products:
        acc = v32(r32(acc + v32(r32(p))))
    if bias is not None:
        acc = v32(r32(acc + bias))
    return r32(acc)


def test_r32_helper():
    assert r32(Fraction(1)) == 0x3F800000 and r32(Fraction(-2)) == 0xC0000000
    assert r32(Fraction(2) ** -149) == 1 and r32(Fraction(3, 2) * Fraction(2) ** -150) == 1
    assert r32(Fraction(2) ** 128) == 0x7F800000
    assert r32(1 + Fraction(2) ** -24) == 0x3F800000 and r32(1 + Fraction(3, 2 ** 25)) == 0x3F800001


def acc_name(atype):
    return {"signed": "S32", "unsigned": "U32"}.get(tables.dtype(atype).kind, "FP32")


def ieee_run(atype, A, B, btype=None, op="TMATMUL", c=None, bias=None, scales=None, m=None):
    """Load [C], A (M16), [sA], B (N8), [sB], [Bias]; run under the ieee profile;
    return D's valid Words (D = T#1)."""
    st = Setup(IEEE)
    M, K, N = len(A), len(A[0]), len(B[0])
    sa, sb = scales if scales is not None else (None, None)
    srcs = []
    if c is not None:
        srcs.append(st.cube("CUBE_M16", acc_name(atype), c, hand=2))
    srcs.append(st.cube("CUBE_M16", atype, A, size=4))
    if sa is not None:
        srcs.append(st.ordinary("E8M0", sa))
    srcs.append(st.cube("CUBE_N8", btype or atype, B, size=4))
    if sb is not None:
        srcs.append(st.ordinary("E8M0", sb))
    if bias is not None:
        srcs.append(st.ordinary(acc_name(atype), bias))
    extra = [datr(0, tables.dtype(btype).code, 0)] if btype else []
    out = ok(st.state(), matmul_words(op, atype, srcs, m or M, N, K, extra=extra), cfg=IEEE)
    return matrix_of(out, 0, "CUBE_M16", acc_name(atype), M, N)


def test_ieee_fp16_exact_product():
    got = ieee_run("FP16", [[FP16[1.5]]], [[FP16[2.25]]])
    assert got == [[r32(Fraction(27, 8))]] == [[0x40580000]]


def test_ieee_sequential_rounding_order():
    # 1 + 2^-24 + 2^-24 in ascending k: each add ties to even (1.0), exact sum is 1 + 2^-23
    got = ieee_run("FP16", [[FP16[1.0]] * 3], [[FP16[1.0]], [FP16[2 ** -24]], [FP16[2 ** -24]]])
    assert got == [[0x3F800000]]
    got = ieee_run("FP16", [[FP16[1.0]] * 3], [[FP16[2 ** -24]], [FP16[2 ** -24]], [FP16[1.0]]])
    assert got == [[ieee_dot([Fraction(2) ** -24, Fraction(2) ** -24, 1])]] == [[0x3F800001]]


def test_ieee_fp16_matrix_acc_and_bias():
    A = [[FP16[1.5], FP16[2.0]], [FP16[3.0], FP16[-0.0]]]
    B = [[FP16[2.25], FP16[1.0]], [FP16[1.5], FP16[3.0]]]
    av = [[Fraction(3, 2), 2], [3, 0]]
    bv = [[Fraction(9, 4), 1], [Fraction(3, 2), 3]]
    c_bits = [[0x3F800000, 0xC0000000], [0x00000001, 0x80000000]]      # 1, -2, 2^-149, -0
    got = ieee_run("FP16", A, B, op="TMATMUL.ACC", c=c_bits)
    want = [[ieee_dot([av[i][k] * bv[k][j] for k in range(2)], v32(c_bits[i][j]))
             for j in range(2)] for i in range(2)]
    assert got == want
    got = ieee_run("FP16", A, B, op="TMATMUL.BIAS", bias=[[0x3F000000, 0x7F7FFFFF]])  # 0.5, max
    want = [[ieee_dot([av[i][k] * bv[k][j] for k in range(2)], bias=v32(b))
             for j, b in enumerate((0x3F000000, 0x7F7FFFFF))] for i in range(2)]
    assert got == want


def test_ieee_signed_zero():
    # +0 start: -0 products sum to +0; C = -0 keeps -0
    assert ieee_run("FP16", [[FP16[-0.0]]], [[FP16[1.0]]]) == [[0x00000000]]
    assert ieee_run("FP16", [[FP16[-0.0]]], [[FP16[1.0]]], op="TMATMUL.ACC",
                    c=[[0x80000000]]) == [[0x80000000]]


def test_ieee_nan_and_inf_rules():
    inf, ninf, nan = FP16["inf"], FP16["-inf"], FP16["nan"]
    assert ieee_run("FP16", [[inf]], [[FP16[2.0]]]) == [[0x7F800000]]
    assert ieee_run("FP16", [[ninf]], [[FP16[2.0]]]) == [[0xFF800000]]
    assert ieee_run("FP16", [[inf, ninf]], [[FP16[1.0]], [FP16[1.0]]]) == [[0x7FC00000]]
    assert ieee_run("FP16", [[inf]], [[0x0000]]) == [[0x7FC00000]]           # inf * 0
    assert ieee_run("FP16", [[nan]], [[FP16[1.0]]]) == [[0x7FC00000]]
    assert ieee_run("FP16", [[0xFE01]], [[FP16[1.0]]]) == [[0x7FC00000]]      # -NaN payload
    # a NaN accumulator start (C) and a NaN Bias are canonical too
    assert ieee_run("FP16", [[FP16[1.0]]], [[FP16[1.0]]], op="TMATMUL.ACC",
                    c=[[0xFFC00123]]) == [[0x7FC00000]]
    assert ieee_run("FP16", [[FP16[1.0]]], [[FP16[1.0]]], op="TMATMUL.BIAS",
                    bias=[[0x7F800001]]) == [[0x7FC00000]]


def test_ieee_overflow_and_subnormal_products():
    bf = {"2^100": 0x7180, "-2^100": 0xF180, "1.5*2^-75": 0x1A40, "2^-70": 0x1C80}
    assert ieee_run("BF16", [[bf["2^100"]]], [[bf["2^100"]]]) == [[0x7F800000]]
    assert ieee_run("BF16", [[bf["-2^100"]]], [[bf["2^100"]]]) == [[0xFF800000]]
    # 2.25 * 2^-150 rounds (once) to the smallest subnormal 2^-149
    assert ieee_run("BF16", [[bf["1.5*2^-75"]]], [[bf["1.5*2^-75"]]]) == [[0x00000001]]
    assert ieee_run("BF16", [[bf["2^-70"]]], [[bf["2^-70"]]]) == [[r32(Fraction(2) ** -140)]]
    # FP16 max * max = 65504^2 is finite in binary32
    assert ieee_run("FP16", [[FP16[65504.0]]], [[FP16[65504.0]]]) == [[r32(Fraction(65504) ** 2)]]


def test_ieee_bf16_and_tf32_decode():
    assert ieee_run("BF16", [[0x3FC0]], [[0x4010]]) == [[0x40580000]]        # 1.5 * 2.25
    # TF32: the bits below its 10-bit mantissa are ignored
    assert ieee_run("TF32", [[0x3F800FFF]], [[0x40000000]]) == [[0x40000000]]
    # FP32 x FP32: exact product, one rounding
    a, b = 0x3F800001, 0x3F800001                                            # (1 + 2^-23)^2
    assert ieee_run("FP32", [[a]], [[b]]) == [[r32(v32(a) * v32(b))]] == [[0x3F800002]]


def test_ieee_mx_with_real_scales():
    e4m3 = {1.5: 0x3C, 1.0: 0x38}
    e5m2 = {2.5: 0x41, 1.0: 0x3C}
    A = [[e4m3[1.5]] * 32 + [e4m3[1.0]]]
    B = [[e5m2[2.5]]] * 32 + [[e5m2[1.0]]]
    sa = [[128, 120]]                           # 2^1, 2^-7
    sb = [[125], [130]]                         # 2^-2, 2^3
    got = ieee_run("E4M3", A, B, btype="E5M2", op="TMATMULMX", scales=(sa, sb))
    products = [Fraction(3, 2) * 2 * Fraction(5, 2) / 4] * 32 + [Fraction(1, 128) * 8]
    assert got == [[ieee_dot(products)]]
    # E8M0 0xFF is NaN; E5M2 inf times a scale stays inf
    assert ieee_run("E4M3", [[0x38]], [[0x3C]], btype="E5M2", op="TMATMULMX",
                    scales=([[0xFF]], [[127]])) == [[0x7FC00000]]
    assert ieee_run("E4M3", [[0x38]], [[0x7C]], btype="E5M2", op="TMATMULMX",
                    scales=([[127]], [[130]])) == [[0x7F800000]]
    # E4M3 0x7F is NaN (no infinities)
    assert ieee_run("E4M3", [[0x7F]], [[0x3C]], btype="E5M2", op="TMATMULMX",
                    scales=([[127]], [[127]])) == [[0x7FC00000]]


def test_ieee_mx_fp4_and_scaled_products_exact():
    # E2M1: 0b0111 = 6.0, 0b1010 = -1.0; scales 2^-127 (E8M0 0) keep exact tiny values
    got = ieee_run("E2M1X2", [[0x7, 0xA]], [[0x7], [0x7]], op="TMATMULMX",
                   scales=([[127]], [[127]]))
    assert got == [[ieee_dot([Fraction(36), Fraction(-6)])]]
    got = ieee_run("E2M1X2", [[0x7]], [[0x7]], op="TMATMULMX", scales=([[0]], [[100]]))
    assert got == [[r32(Fraction(36) * Fraction(2) ** (-127 + 100 - 127))]]


def test_ieee_integer_classes():
    # S8 negatives -> S32 sign-extended Word
    assert ieee_run("S8", [[0xFD]], [[5]]) == [[wrap(-15)]]
    # S4X2 -1 is -1 in ieee (15 in portable)
    assert ieee_run("S4X2", [[0xF, 1]], [[3], [2]]) == [[wrap(-3 + 2)]]
    # U16: wraps mod 2^32, zero-extended
    assert ieee_run("U16", [[0xFFFF, 0xFFFF]], [[0xFFFF], [0xFFFF]]) == [
        [(2 * 0xFFFF * 0xFFFF) & 0xFFFFFFFF]]
    # S16 with C and Bias from their low 32 bits; wrap at 2^31
    assert ieee_run("S16", [[0x7FFF, 0x7FFF]], [[0x7FFF], [0x7FFF]], op="TMATMUL.ACC",
                    c=[[0x7FFFFFFF]]) == [[wrap(((0x7FFFFFFF + 2 * 0x7FFF ** 2 + 2 ** 31)
                                                 % 2 ** 32) - 2 ** 31)]]
    assert ieee_run("U8", [[200]], [[100]], op="TMATMUL.BIAS", bias=[[0xFFFFFFFF]]) == [
        [(20000 + 0xFFFFFFFF) & 0xFFFFFFFF]]


def test_ieee_tgemv_and_mixed_float_widths():
    # E4M3 x FP16 (ordinary floating class): 1.5 * 2.25
    assert ieee_run("E4M3", [[0x3C]], [[FP16[2.25]]], btype="FP16", op="TGEMV") == [[0x40580000]]


# ----------------------------------------------------------------- B.FPATR post-processing
#
# Element arithmetic vectors are in test_reference_postprocess.py; here, whole
# bundles: D's element type and geometry, the RowMax / GroupMax outputs, and a
# test per post-process check (step 3 parameter Words, step 6 sources, step 10
# destination group).

P_ONE, P_TWO, P_HALF, P_QUARTER = 0x3F800000 >> 13, 0x40000000 >> 13, 0x3F000000 >> 13, \
    0x3E800000 >> 13                                                   # FP19 codes
PARAM = (20, 21)                                                       # GPRs for B.IOR scalars


def qword(scale, offset=0, width=0):
    """A quant parameter Word: FP19 scale in bits 31:13, signed offset from bit 37."""
    return scale << 13 | ((offset & ((1 << width) - 1)) << 37 if width else 0)


def post_words(op, atype, srcs, post_srcs, m, n, k, fp, aux=(), hand=0, size=1, extra=(),
               scalars=None):
    """A matrix block: D (hand, size) on the first B.IOT with the mathematical
    sources, then the post-process sources, then one destination-only B.IOT
    per (hand, size) of `aux`; B.IOR RegSrc = `scalars` GPRs when given."""
    words = [mstart(op, atype), *extra, fp, *dims(m, n, k)]
    srcs = list(srcs) + list(post_srcs)
    bindings = [iot(*srcs[:2], hand=hand, size=size, last=0)]
    srcs = srcs[2:]
    while srcs:
        bindings.append(iot(*srcs[:2], last=0))
        srcs = srcs[2:]
    bindings += [iot(hand=h, size=z, last=0) for h, z in aux]
    bindings[-1] |= 1 << 19
    if scalars is not None:
        bindings.append(ior(*scalars))
    return words + bindings + [BSTOP]


def s32_state(B=((3, -7, 5), (-1, -2, -3)), **loads):
    """A = 2x2 identity (S8), B (S8) as given: D = B as S32 accumulators."""
    st = Setup()
    a = st.cube("CUBE_M16", "S8", [[1, 0], [0, 1]])
    b = st.cube("CUBE_N8", "S8", [list(r) for r in B], size=size_code(-(-len(B[0]) // 8)))
    extra = {name: st.ordinary(dt, rows) for name, (dt, rows) in loads.items()}
    return st, a, b, extra


def size_code(cells):
    """The smallest SizeCode holding `cells` CELLs of 128 B."""
    return (cells - 1).bit_length() + 1


def gprs(s, *values):
    for reg, v in zip(PARAM, values):
        s = pj.write_gpr(s, reg, v)
    return s


def aux_tile(s, index, dt, rows, cols, values, size=1):
    """A RowMaxOut / GroupMaxOut: RowMajor at Any, accumulator-typed, rows
    derived from its capacity, valid region = values (defined)."""
    t = tile(s, index)
    d = tables.dtype(dt)
    assert bool(t["allocated"]) and int(t["dtype"]) == d.code
    assert tables.TILE_LAYOUTS[int(t["layout"])] == "RowMajor"
    assert tables.TILE_LOCATIONS[int(t["location"])] == "Any"
    assert (int(t["valid_rows"]), int(t["valid_cols"]), int(t["cols"])) == (rows, cols, cols)
    assert int(t["rows"]) == (128 << (size - 1)) * 8 // (cols * d.bits)
    assert int(t["defined_valid"]) == rows * cols
    assert [[int(t["words"][r * cols + c]) for c in range(cols)] for r in range(rows)] == [
        [v & MASK64 for v in row] for row in values]


def test_post_e2_converted_destination():
    # acc-convert-023: C FP32 1x3 of 2 CELLs (256 B); PreQuantMode 1 gives an FP16 D of one
    # CELL in 128 B (no capacity rule with a conversion); raw 5 + 2*j are FP32 subnormals
    # that round to +0 in FP16. C is unchanged.
    st = Setup()
    c = st.cube("CUBE_M16", "FP32", [[5, 5, 5]], hand=2, size=2)
    a = st.cube("CUBE_M16", "FP16", [[2]])
    b = st.cube("CUBE_N8", "FP16", [[1, 2, 3]])
    s = st.state()
    out = ok(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 3, 1, fp=fpatr(pre=1),
                             split=True))
    check_d(out, 0, "CUBE_M16", "FP16", 1, 3, 1, [[0, 0, 0]])
    assert int(tile(out, 0)["cell_count"]) == 1 and int(tile(out, 0)["storage_bytes"]) == 128
    assert all(np.array_equal(tile(s, c)[k], tile(out, c)[k]) for k in tile(s, c))
    # PreQuantMode 0 keeps the capacity rule: D 128 B against C 256 B
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 3, 1, split=True),
          "Fault_TileLegality")


def fp32_acc_state(c_values):
    """C (FP32 raw bits) + A = B = 0: D's accumulators are C's Words."""
    st = Setup()
    c = st.cube("CUBE_M16", "FP32", [c_values], hand=2, size=2)
    a = st.cube("CUBE_M16", "FP16", [[0]])
    b = st.cube("CUBE_N8", "FP16", [[0] * len(c_values)])
    return st.state(), c, a, b


def test_post_fp32_to_fp16_bf16_and_relu():
    s, c, a, b = fp32_acc_state([0x3FC00000, 0xC0000000, 0x7F800000, 0x80000000])
    cases = [  # (B.FPATR, extra header, D dtype, D's Words); 1 x 4 FP32 is two CELLs, else one
        (fpatr(pre=1), (), "FP16", [[0x3E00, 0xC000, 0x7C00, 0x8000]]),
        (fpatr(pre=16), (), "BF16", [[0x3FC0, 0xC000, 0x7F80, 0x8000]]),
        # Sat on (B.DATR, BType = AType): infinity saturates to the largest finite
        (fpatr(pre=1), (datr(0, 31, 0, sat=1),), "FP16", [[0x3E00, 0xC000, 0x7BFF, 0x8000]]),
        # ReLU, no conversion: FP32 D, -2 and -0 give +0
        (fpatr(relu=1), (), "FP32", [[0x3FC00000, 0, 0x7F800000, 0]])]
    for fp, extra, dt, want in cases:
        size = 2 if dt == "FP32" else 1
        words = matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 4, 1, fp=fp, split=True,
                             extra=extra, size=size)
        check_d(ok(s, words), 0, "CUBE_M16", dt, 1, 4, size, want)


def test_post_s32_relu_modes():
    # D = [[5, -6]]: ReLU 0s the negative; LReLU (B.IOR) and PReLU (vector) scale it
    st, a, b, x = s32_state(B=((5, -6), (0, 0)),
                            alpha=("U64", [[P_HALF, P_QUARTER]]))
    s = gprs(st.state(), P_HALF)
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(relu=1))),
            0, "CUBE_M16", "S32", 2, 2, 1, [[5, 0], [0, 0]])
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(relu=2),
                             scalars=(PARAM[0],))), 0, "CUBE_M16", "S32", 2, 2, 1, [[5, -3], [0, 0]])
    # PReLU 0.25: -1.5 rounds to even (RNE): -2
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [x["alpha"]], 2, 2, 2, fpatr(relu=3))),
            0, "CUBE_M16", "S32", 2, 2, 1, [[5, -2], [0, 0]])
    # without a B.IOR the LReLU parameter is zero
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(relu=2))),
            0, "CUBE_M16", "S32", 2, 2, 1, [[5, 0], [0, 0]])


def test_post_s32_quantization_scalar_and_vector():
    st, a, b, x = s32_state(B=((5, -6), (0, 0)),
                            q=("U64", [[qword(P_ONE, 1, 5), qword(P_TWO, 0, 5)]]))
    s = gprs(st.state(), qword(P_TWO, -1, 9))
    # mode 3: S32 x 2 -> S9, -1 -> S8: 9, -13
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(pre=3),
                             scalars=(PARAM[0],))), 0, "CUBE_M16", "S8", 2, 2, 1, [[9, -13], [-1, -1]])
    # mode 18 (vector, S4X2): 5 + 1 = 6; -12 fits S5, wraps to S4 as 4
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [x["q"]], 2, 2, 2, fpatr(pre=18))),
            0, "CUBE_M16", "S4X2", 2, 2, 1, [[6, 4], [1, 0]])
    # mode 13 (shift): parameter 0 shifts right by 1
    s13 = gprs(s, 0)
    check_d(ok(s13, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(pre=13),
                               scalars=(PARAM[0],))), 0, "CUBE_M16", "S16", 2, 2, 1, [[2, -3], [0, 0]])
    # a scalar mode without B.IOR: scale 0
    check_d(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(pre=3))),
            0, "CUBE_M16", "S8", 2, 2, 1, [[0, 0], [0, 0]])


def test_post_fp8_outputs():
    s, c, a, b = fp32_acc_state([0x3FC00000, 0x3F800000, 0xC3E00000])       # 1.5, 1, -448
    s = gprs(s, qword(P_ONE))
    # E4M3: -448 is its largest finite; HiF8 (RHB): -448 is the midpoint of -384 (0xE1)
    # and -512, a tie rounded toward +infinity
    for mode, want in ((26, [[0x3C, 0x38, 0xFE]]), (25, [[0x0C, 0x08, 0xE1]])):
        words = post_words("TMATMUL.ACC", "FP16", [c, a], [b], 1, 3, 1, fpatr(pre=mode),
                           scalars=(PARAM[0],))
        check_d(ok(s, words), 0, "CUBE_M16", tables.DTYPE_BY_CODE[
            tables.dtype("E4M3" if mode == 26 else "HiF8").code].name, 1, 3, 1, want)


def test_post_row_and_group_max():
    B = ((3, -7, 5) + (0,) * 13, (-1, -2, -3) + (-9,) * 13)
    st, a, b, x = s32_state(B=B, rin=("S32", [[9], [0]]))
    s = st.state()
    D = [list(r) for r in B]
    rmax = fpatr(row_max=1)
    out = ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 16, 2, rmax, aux=[(1, 1)],
                           size=4))
    check_d(out, 0, "CUBE_M16", "S32", 2, 16, 4, D)
    aux_tile(out, 16 + 2, "S32", 2, 1, [[5], [-1]])
    # MaxAbs, RowMaxInit (RowMaxIn [9, 0] on the left), GroupMax of 8 columns
    fp = fpatr(row_max=1, row_max_init=1, max_abs=1, group_max=1, group_n=1)
    out = ok(s, post_words("TMATMUL", "S8", [a, b], [x["rin"]], 2, 16, 2, fp,
                           aux=[(1, 1), (2, 1)], size=4))
    aux_tile(out, 16 + 2, "S32", 2, 1, [[9], [9]])
    aux_tile(out, 32, "S32", 2, 2, [[7, 0], [9, 9]])


def flags(s):
    """The State's sticky numeric flags by name (CORE_STATE[36:32])."""
    return tables.flag_names(int(np.asarray(s.numeric_flags)))


def raw_acc_state(ctype, atype, c_values):
    """C (raw Words of `ctype`, one row) + A = B = 0: D's accumulators are C's Words."""
    st = Setup()
    n = len(c_values)
    c = st.cube("CUBE_M16", ctype, [c_values], hand=2, size=size_code(-(-n // 2)))
    a = st.cube("CUBE_M16", atype, [[0]])
    b = st.cube("CUBE_N8", atype, [[0] * n])
    return st.state(), c, a, b


def test_post_numeric_flags_are_sticky_and_only_from_the_commit():
    # numeric-status.asl: CORE_STATE[36:32] NV DZ OF UF NX; CommitMatrixResult ORs the
    # flags of D's conversion and of RowMax/GroupMax; reset clears them
    st, a, b, x = s32_state(B=((5, -6), (0, 0)), q=("U64", [[qword(P_ONE, 1, 5),
                                                             qword(P_TWO, 0, 5)]]))
    s = gprs(st.state(), qword(P_TWO, -1, 9))
    assert flags(s) == []                       # the setup's TLOADs raise nothing
    # exact (mode 3: 5 x 2 - 1 = 9, -6 x 2 - 1 = -13): no flag
    exact = ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(pre=3),
                             scalars=(PARAM[0],)))
    assert flags(exact) == []
    # mode 18: -12 fits S5 and wraps in S4X2 (no Sat): OF and NX
    wrapped = ok(exact, post_words("TMATMUL", "S8", [a, b], [x["q"]], 2, 2, 2, fpatr(pre=18)))
    assert flags(wrapped) == ["OF", "NX"]
    # sticky: a later exact commit, a plain TMATMUL and a faulting bundle keep them
    again = ok(wrapped, post_words("TMATMUL", "S8", [a, b], [], 2, 2, 2, fpatr(pre=3),
                                   scalars=(PARAM[0],)))
    assert flags(again) == ["OF", "NX"]
    assert flags(ok(again, matmul_words("TMATMUL", "S8", [a, b], 2, 2, 2))) == ["OF", "NX"]
    r = fails(again, [w for w in matmul_words("TMATMUL", "S8", [a, b], 2, 2, 2) if w != FPATR0],
              "Fault_BundleControl")                 # no B.FPATR
    assert flags(r.state) == ["OF", "NX"]
    assert flags(pj.reset(SMALL)) == []


def test_post_numeric_flags_of_conversions():
    # FP32 -> FP16 (mode 1): a subnormal FP32 rounds to +0 (UF NX); +inf stays infinite
    # (no flag) unless saturated (OF NX); 1.5 is exact
    s, c, a, b = raw_acc_state("FP32", "FP16", [0x3FC00000, 5])
    words = lambda *extra: matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 2, 1,
                                        fp=fpatr(pre=1), split=True, extra=extra)
    assert flags(ok(s, words())) == ["UF", "NX"]
    s, c, a, b = raw_acc_state("FP32", "FP16", [0x3FC00000, 0x7F800000])
    words = lambda *extra: matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 2, 1,
                                        fp=fpatr(pre=1), split=True, extra=extra)
    assert flags(ok(s, words())) == []
    assert flags(ok(s, words(datr(0, 31, 0, sat=1)))) == ["OF", "NX"]
    # a quiet NaN into FP16 raises nothing, a signaling one NV
    for nan, want in ((0x7FC00000, []), (0x7F800001, ["NV"])):
        s, c, a, b = raw_acc_state("FP32", "FP16", [nan, 0x3FC00000])
        words = matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 1, 2, 1, fp=fpatr(pre=1),
                             split=True)
        assert flags(ok(s, words)) == want


def test_post_numeric_flags_of_reductions():
    # RowMax with MaxAbs of an S32 -2^31: OF (the absolute is 0x7FFFFFFF); without
    # MaxAbs none; an FP32 signaling NaN in the MAX: NV; a quiet one: none
    s, c, a, b = raw_acc_state("S32", "S8", [0x80000000, 5])
    for max_abs, want in ((1, ["OF"]), (0, [])):
        out = ok(s, post_words("TMATMUL.ACC", "S8", [c, a], [b], 1, 2, 1,
                               fpatr(row_max=1, max_abs=max_abs), aux=[(1, 1)]))
        assert flags(out) == want
    for nan, want in ((0x7F800001, ["NV"]), (0x7FC00000, [])):
        s, c, a, b = raw_acc_state("FP32", "FP16", [0x3FC00000, nan])
        out = ok(s, post_words("TMATMUL.ACC", "FP16", [c, a], [b], 1, 2, 1,
                               fpatr(group_max=1, group_n=1), aux=[(1, 1)]))
        assert flags(out) == want


@pytest.mark.parametrize("value, legal", [(qword(P_TWO, -1, 9), True), (qword(P_TWO) | 1, False),
                                          (qword(P_TWO) | 1 << 46, False),
                                          (qword(P_TWO | 1 << 18), False)])
def test_check_3_scalar_quant_parameter_word(value, legal):
    st, a, b, _ = s32_state()
    s = gprs(st.state(), value)
    words = post_words("TMATMUL", "S8", [a, b], [], 2, 3, 2, fpatr(pre=3), scalars=(PARAM[0],))
    if legal:
        ok(s, words)
    else:
        fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("value, legal", [(0, True), (P_HALF, True), (1, False),
                                          (P_HALF | 1 << 18, False), (1 << 19, False)])
def test_check_3_scalar_lrelu_parameter_word(value, legal):
    st, a, b, _ = s32_state()
    s = gprs(st.state(), qword(P_ONE, 0, 9), value)
    words = post_words("TMATMUL", "S8", [a, b], [], 2, 3, 2, fpatr(pre=3, relu=2),
                       scalars=PARAM)
    if legal:
        ok(s, words)
    else:
        fails(s, words, "Fault_TileLegality")


@pytest.mark.parametrize("what", ["shape", "dtype", "layout", "location", "undefined"])
def test_check_6_rowmax_input(what):
    rows = [[9], [0], [1]] if what == "shape" else [[9], [0]]
    dt = "U32" if what == "dtype" else "S32"
    st, a, b, x = s32_state(rin=(dt, rows))
    s = st.state()
    slot = hs_slot(x["rin"])
    if what == "layout":
        s = poke_tiles(s, "layout", slot, tables.TILE_LAYOUT_CODE["ColumnMajor"])
    if what == "location":
        s = poke_tiles(s, "location", slot, tables.TILE_LOCATION_CODE["Matrix"])
    if what == "undefined":
        s = poke_tiles(s, "defined_valid", slot, 1)
    fp = fpatr(row_max=1, row_max_init=1)
    fails(s, post_words("TMATMUL", "S8", [a, b], [x["rin"]], 2, 3, 2, fp, aux=[(1, 1)]),
          "Fault_TileLegality")


@pytest.mark.parametrize("what", ["good", "shape", "dtype", "content", "offset_bits"])
def test_check_6_vector_quant_source(what):
    q = [qword(P_ONE, 1, 5), qword(P_TWO), qword(P_HALF, -3, 5)]
    if what == "shape":
        q = q[:2]
    if what == "content":
        q[1] |= 1 << 12
    if what == "offset_bits":
        q[2] |= 1 << 42                                   # past mode 18's 5-bit offset
    st, a, b, x = s32_state(q=("S64" if what == "dtype" else "U64", [q]))
    words = post_words("TMATMUL", "S8", [a, b], [x["q"]], 2, 3, 2, fpatr(pre=18))
    if what == "good":
        check_d(ok(st.state(), words), 0, "CUBE_M16", "S4X2", 2, 3, 1, [[4, 2, -1], [0, -4, -5]])
    else:
        fails(st.state(), words, "Fault_TileLegality")


@pytest.mark.parametrize("word, legal", [(P_HALF, True), (0, True), (P_HALF | 1 << 18, False),
                                         (1 << 20, False)])
def test_check_6_vector_prelu_source(word, legal):
    st, a, b, x = s32_state(alpha=("U64", [[P_ONE, word, P_ONE]]))
    words = post_words("TMATMUL", "S8", [a, b], [x["alpha"]], 2, 3, 2, fpatr(relu=3), size=2)
    if legal:
        ok(st.state(), words)
    else:
        fails(st.state(), words, "Fault_TileLegality")


def test_check_10_converted_d_geometry():
    # D 16 x 16: S32 needs 1 KiB (SizeCode 4), an FP16 conversion 512 B (SizeCode 3)
    st = Setup()
    c = st.cube("CUBE_M16", "FP32", [[0x3F800000] * 16] * 16, hand=2, size=4)
    a = st.cube("CUBE_M16", "FP16", [[0]] * 16)
    b = st.cube("CUBE_N8", "FP16", [[0] * 16], size=2)
    s = st.state()
    out = ok(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 16, 16, 1, fp=fpatr(pre=1),
                             size=3, split=True))
    check_d(out, 0, "CUBE_M16", "FP16", 16, 16, 3, [[0x3C00] * 16] * 16)
    fails(s, matmul_words("TMATMUL.ACC", "FP16", [c, a, b], 16, 16, 1, fp=fpatr(pre=1), size=2,
                          split=True), "Fault_TileAllocation")


def test_check_10_group_max_columns_power_of_two():
    # N = 24 in groups of 8: 3 GroupMax columns, no power of two: no RowMajor shape
    st, a, b, _ = s32_state(B=((1,) * 24, (2,) * 24))
    s = st.state()
    fp = fpatr(group_max=1, group_n=1)
    fails(s, post_words("TMATMUL", "S8", [a, b], [], 2, 24, 2, fp, aux=[(1, 1)], size=5),
          "Fault_TileAllocation")
    fp = fpatr(group_max=1, group_n=2)                   # 16: 2 columns
    aux_tile(ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 24, 2, fp, aux=[(1, 1)], size=5)),
             16 + 2, "S32", 2, 2, [[1, 1], [2, 2]])


def test_check_10_auxiliary_destination_slots_and_budget():
    st, a, b, _ = s32_state()
    for _ in range(2):
        st.cube("CUBE_M16", "S8", [[1]], hand=0)          # hand 0 keeps two free slots
    s = st.state()
    fp = fpatr(row_max=1, group_max=1, group_n=1)
    ok(s, post_words("TMATMUL", "S8", [a, b], [], 2, 3, 2, fp, aux=[(0, 1), (1, 1)], size=2))
    fails(s, post_words("TMATMUL", "S8", [a, b], [], 2, 3, 2, fp, aux=[(0, 1), (0, 1)], size=2),
          "Fault_TileAllocation")
    # the Core budget counts all three destinations
    used = sum(bin(int(m)).count("1") * int(c) for al, m, c in
               zip(np.asarray(s.tiles.allocated)[0], np.asarray(s.tiles.mask)[0],
                   np.asarray(s.tiles.capacity)[0]) if al)
    words = post_words("TMATMUL", "S8", [a, b], [], 2, 3, 2, fp, aux=[(1, 1), (1, 2)], size=2)
    ok(poke(s, tile_capacity=used + 4 * (256 + 128 + 256)), words)
    fails(poke(s, tile_capacity=used + 4 * (256 + 128 + 256) - 1), words, "Fault_TileAllocation")
