"""Local tiles past the model's 32,768 element slots (issue 35, item 5).

The ASL model keeps a non-CUBE tile with more than PTO_MODEL_TILE_ELEMENTS
elements (an 8-bit tile of 64 KiB, a 4-bit one past 16 KiB) in packed
carriers (packed-boundary.asl, TileUsesPackedCarrierRepresentation) and
reads its elements back unextended. At the `asl` preset ptojax keeps every
such element, one a Word (state.max_tile_words: up to 131,072), where it
refused the tile with Fault_TileAllocation or kept only its first 32,768.

The three programs below ran on the 0.58.3 model (run_model.py, 150-205 s
each): the tiles (every logical element and its definedness) and the GM
bytes the model printed are the expected values here, rebuilt from the same
GM pattern. Each runs on pj.run, pj.reference.run and pj.batch.run (the
131,072-lane class), at `asl`: the only preset where tiles go past
tile_words.
"""

import numpy as np
import pytest

import ptojax as pj
from ptojax.interop import from_arch_state, to_arch_state
from ptojax.state import state_differences

ASL = pj.preset("asl")
SRC, DST = 0x100, 0xE00
PATTERN = np.array([(i * 7 + 3) & 0xFF for i in range(3400)], np.uint8)

# S8, valid 1000 x 40 in a 1024 x 64 tile of 64 KiB (65,536 elements), rows 3
# bytes apart; stored back with a zero stride, so GM keeps row 999
S8_LOAD = """BSTART.TLOAD S8
B.DIM zero, 40, ->LB0
B.DIM zero, 1000, ->LB1
B.DIM zero, 64, ->LB2
B.IOR a0, a2
B.IOT mask=1000, last, ->T<10>
BSTOP"""
S8_STORE = """BSTART.TSTORE S8
B.DIM zero, 40, ->LB0
B.DIM zero, 1000, ->LB1
B.IOR a1, zero
B.IOT T#{k}, mask=1000, last
BSTOP"""
# U4X2, valid 4 x 100 in a 4 x 32768 tile of 64 KiB (131,072 elements)
U4_PROGRAM = """BSTART.TLOAD U4X2
B.DIM zero, 100, ->LB0
B.DIM zero, 4, ->LB1
B.DIM zero, 32768, ->LB2
B.IOR a0, a2
B.IOT mask=1000, last, ->T<10>
BSTOP
BSTART.TSTORE U4X2
B.DIM zero, 100, ->LB0
B.DIM zero, 4, ->LB1
B.IOR a1, a2
B.IOT T#1, mask=1000, last
BSTOP"""
TMOV_COPY = """BSTART.TMOV DTYPE_NONE
B.IOT T#1, mask=1000, last, ->T<10>
BSTOP"""

PROGRAMS = {
    "S8 TLOAD + TSTORE": (S8_LOAD + "\n" + S8_STORE.format(k=1), 3),
    "U4X2 TLOAD + TSTORE": (U4_PROGRAM, 64),
    "S8 TLOAD + TMOV + TSTORE of the copy": (
        S8_LOAD + "\n" + TMOV_COPY + "\n" + S8_STORE.format(k=2), 3),
}


def start(stride):
    s = pj.write_memory(pj.reset(ASL), SRC, PATTERN)
    for reg, v in (("a0", SRC), ("a1", DST), ("a2", stride)):
        s = pj.write_gpr(s, reg, v)
    return s


def s8_elements():
    """The model's S8 tile: element (r, c) at r*64 + c is GM[SRC + 3r + c], unextended."""
    words, defined = np.zeros(65536, np.uint64), np.zeros(65536, bool)
    r, c = np.divmod(np.arange(40000), 40)
    words[r * 64 + c] = PATTERN[3 * r + c]
    defined[r * 64 + c] = True
    return words, defined


def u4_elements():
    """The model's U4X2 tile: element (r, c) at r*32768 + c is nibble c of row r (64 bytes apart)."""
    words, defined = np.zeros(131072, np.uint64), np.zeros(131072, bool)
    r, c = np.divmod(np.arange(400), 100)
    byte = PATTERN[64 * r + c // 2]
    words[r * 32768 + c] = np.where(c % 2, byte >> 4, byte & 0xF)
    defined[r * 32768 + c] = True
    return words, defined


def expected_gm(name):
    gm = np.zeros(ASL.gm_bytes, np.uint8)
    gm[SRC:SRC + PATTERN.size] = PATTERN
    if name.startswith("U4X2"):
        for r in range(4):
            row = PATTERN[64 * r: 64 * r + 50]          # 100 nibbles of row r, as loaded
            gm[DST + 64 * r: DST + 64 * r + 50] = row
    else:
        gm[DST:DST + 40] = PATTERN[3 * 999: 3 * 999 + 40]
    return gm


@pytest.fixture(scope="module")
def results():
    out = {}
    for name, (text, stride) in PROGRAMS.items():
        s, words = start(stride), pj.asm.assemble(text)
        out[name] = (s, words, pj.run(s, words), pj.reference.run(s, words))
    return out


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_model_vectors(results, name):
    _, _, jax_r, ref_r = results[name]
    want_words, want_defined = u4_elements() if name.startswith("U4X2") else s8_elements()
    tiles = [0, 1] if "TMOV" in name else [0]
    for r in (jax_r, ref_r):
        assert r.fault == "Fault_None"
        for index in tiles:
            t = pj.read_tile(r.state, index)
            assert (t.rows * t.columns, t.words.size) == (want_words.size,) * 2
            np.testing.assert_array_equal(t.defined, want_defined)
            np.testing.assert_array_equal(t.words, want_words)
            assert t.defined_valid_elements == int(want_defined.sum())
        np.testing.assert_array_equal(np.asarray(r.state.gm), expected_gm(name))
    assert state_differences(jax_r.state, ref_r.state) == []


def test_elements_read_back_unextended(results):
    """A packed S8 tile keeps 0xF6 as the Word 0xF6 (the model's carriers), an
    ordinary one as 0xFFFFFFFFFFFFFFF6 (A.4 sign extension)."""
    t = pj.read_tile(results["S8 TLOAD + TSTORE"][2].state, 0)
    assert int(t.words[999 * 64]) == int(PATTERN[2997]) == 0xF6
    s = pj.write_gpr(start(0), "a0", SRC + 2997)
    r = pj.run(s, pj.asm.assemble(
        "BSTART.TLOAD S8\nB.DIM zero, 1, ->LB0\nB.IOR a0\nB.IOT mask=1000, last, ->T<1>\nBSTOP"))
    assert int(pj.read_tile(r.state, 0).words[0]) == 0xFFFFFFFFFFFFFFF6


def test_batch_runs_the_packed_class(results):
    """pj.batch.run: the packed programs next to each other and a small TLOAD,
    the batch's class the largest (131,072 lanes), equal to pj.run's States."""
    rows = list(PROGRAMS)
    words = np.zeros((len(rows), max(len(results[n][1]) for n in rows)), np.uint32)
    lengths = np.zeros(len(rows), np.int32)
    for i, n in enumerate(rows):
        w = results[n][1]
        words[i, :len(w)], lengths[i] = w, len(w)
    states = pj.batch.stack_states([results[n][0] for n in rows])
    res = pj.batch.run(states, words, lengths=lengths)
    for i, n in enumerate(rows):
        assert state_differences(res[i].state, results[n][2].state) == []


def test_interop_round_trip(results):
    s = results["S8 TLOAD + TMOV + TSTORE of the copy"][2].state
    env = to_arch_state(s)
    for name in ("T#1", "T#2"):
        assert len(env["state"]["tile"]["registers"][name]["data"]) == 65536
    back = from_arch_state(env)
    assert state_differences(back, s) == []


def test_columns_past_65535_are_refused():
    """Col is 1..65535 in the model: 1 x 65536 S8 faults Fault_TileAllocation
    (run on the 0.58.3 model), as no packed shape reaches it."""
    words = pj.asm.assemble("BSTART.TLOAD S8\nB.DIM zero, 100, ->LB0\nB.DIM zero, 65536, ->LB2\n"
                            "B.IOR a0\nB.IOT mask=1000, last, ->T<10>\nBSTOP")
    s = start(0)
    for run in (pj.run, pj.reference.run):
        r = run(s, words)
        assert (r.fault, r.executed) == ("Fault_TileAllocation", 5)
        assert state_differences(r.state, s) == [".fault", ".fault_address", ".pc"]
