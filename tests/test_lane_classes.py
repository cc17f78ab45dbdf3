"""Lane classes (ops/dispatch.py): a completion runs at the least lane count that
holds every tile its block names.

On `small` (1024-Word tiles: classes 256 and 1024) each bundle below needs the
larger class through exactly one of its tiles (a TLOAD destination, a TSTORE
source, an MGATHER.CAS destination's padded region, a TMATMUL source), with
Words past the first 256 that the result shows: too small a class would drop
them. Each runs alone (with filler rows that commit nothing, so need no lanes:
its own class) and all run in one batch (the batch's largest class), against
the reference model. Every call has the same rows, words and filler, so the
file compiles pj.batch.run once. pj.run runs one State at tile_words, the one
class every other test file checks.
"""

import numpy as np
import pytest

import ptojax as pj
from ptojax.fuzz import gen as G
from ptojax.ops.lowering import lane_classes
from ptojax.state import state_differences

CFG = pj.preset("small")
SRC, DST = 0x100, 0x800


def test_classes():
    assert lane_classes(32768) == (256, 512, 1024, 4096, 32768, 131072)  # asl (packed tiles)
    assert lane_classes(2048) == (256, 512, 2048)
    assert lane_classes(1024) == (256, 1024)                    # small
    assert lane_classes(256) == (256,) and lane_classes(512) == (512,)
    assert lane_classes(100) == (100,)


def _load(s, text):
    r = pj.reference.run(s, pj.asm.assemble(text), cfg=CFG)
    assert r.fault == "Fault_None", (text, r.fault)
    return r.state


def _start(rng):
    """GM holds random bytes at SRC (a 17x16 FP16 matrix, 16 CAS displacements)."""
    s = pj.write_memory(pj.reset(CFG), SRC, rng.integers(0, 256, 0x600, dtype=np.uint8).tobytes())
    return pj.write_gpr(pj.write_gpr(s, "a0", SRC), "a1", 32)


# a 17x16 FP16 RowMajor tile of TSize 1024 bytes: 512 Words, 272 of them valid
TLOAD_17x16 = "\n".join(["BSTART.TLOAD FP16", "B.DIM zero, 16, ->LB0", "B.DIM zero, 17, ->LB1",
                         "B.IOR a0, a1", "B.IOT mask=1000, last, ->T<4>", "BSTOP"])


def _cases():
    rng = np.random.default_rng(11)
    cases = {"TLOAD destination": (_start(rng), TLOAD_17x16)}

    s = pj.write_gpr(_load(_start(rng), TLOAD_17x16), "a0", DST)
    cases["TSTORE source"] = (s, "\n".join([
        "BSTART.TSTORE FP16", "B.DIM zero, 16, ->LB0", "B.DIM zero, 17, ->LB1", "B.IOR a0, a1",
        "B.IOT T#1, mask=1000, last", "BSTOP"]))

    # 4x4 U32 lanes into a destination of TSize 2048 bytes: 512 padded Words
    s = _start(rng)
    s = pj.write_memory(s, SRC, (np.arange(16, dtype="<u4") * 4).view(np.uint8).tobytes())
    for hand in ("T", "T", "M"):
        s = _load(pj.write_gpr(s, "a1", 16), "\n".join([
            "BSTART.TLOAD U32", "B.DIM zero, 4, ->LB0", "B.DIM zero, 4, ->LB1", "B.IOR a0, a1",
            f"B.IOT mask=1000, last, ->{hand}<1>", "BSTOP"]))
    cases["MGATHER.CAS destination"] = (pj.write_gpr(s, "a0", DST), "\n".join([
        "BSTART.MGATHER.CAS U32", "B.DIM zero, 4, ->LB0", "B.DIM zero, 4, ->LB1",
        "B.IOT T#1, T#2, mask=1000", "B.IOT M#1, mask=1000, last, ->U<5>", "B.IOR a0", "BSTOP"]))

    # A (16x32 FP16, 512 Words) and B (32x16) by CUBE TLOADs; D has 256 Words
    s = _start(rng)
    for rows, cols, layout in ((16, 32, "ND2M16"), (32, 16, "ND2N8")):
        s = _load(pj.write_gpr(s, "a1", cols * 2), "\n".join([
            "BSTART.TLOAD FP16", f"B.DATR {{{layout}, DTYPE_NONE, Zero}}",
            f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {rows}, ->LB1", "B.IOR a0, a1",
            "B.IOT mask=1000, last, ->T<4>", "BSTOP"]))
    cases["TMATMUL source"] = (s, "\n".join([
        "BSTART.TMATMUL FP16", "B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0", "B.DIM zero, 16, ->LB0",
        "B.DIM zero, 16, ->LB1", "B.DIM zero, 32, ->LB2",
        "B.IOT T#1, T#2, mask=1000, last, ->M<4>", "BSTOP"]))
    return cases


CASES = _cases()


# Never executed (length 0): BSTARTs of the effect groups the cases name, so every
# call has one effect set and completion bound (one program of ROWS rows)
FILLER = [G.START[op] for op in ("TLOAD", "TSTORE", "MGATHER.CAS", "TMATMUL")]
ROWS, WORDS = 8, 8


def _batch(runs):
    """pj.batch.run of (State, words) pairs, then filler rows up to ROWS."""
    words = np.zeros((ROWS, WORDS), np.uint32)
    words[:, :len(FILLER)] = FILLER
    lengths = np.zeros(ROWS, np.int32)
    for i, (_, w) in enumerate(runs):
        words[i] = 0
        words[i, :len(w)] = w
        lengths[i] = len(w)
    states = [s for s, _ in runs] + [runs[0][0]] * (ROWS - len(runs))
    return pj.batch.run(pj.batch.stack_states(states), words, lengths=lengths, cfg=CFG)


@pytest.mark.parametrize("name", list(CASES))
def test_alone_matches_reference(name):
    s, text = CASES[name]
    words = pj.asm.assemble(text)
    want = pj.reference.run(s, words, cfg=CFG)
    assert want.fault == "Fault_None"
    got = _batch([(s, words)])[0]
    assert got.fault == "Fault_None"
    assert not state_differences(got.state, want.state), name


def test_batch_at_the_largest_class_matches_reference():
    """A 16x16 TLOAD (class 256) batched with the cases above runs at 1024 lanes."""
    small = _start(np.random.default_rng(5))
    runs = [(small, pj.asm.assemble(TLOAD_17x16.replace("17, ->LB1", "16, ->LB1")))]
    runs += [(s, pj.asm.assemble(t)) for s, t in CASES.values()]
    got = _batch(runs)
    for i, (s, w) in enumerate(runs):
        want = pj.reference.run(s, w, cfg=CFG)
        assert want.fault == "Fault_None"
        assert not state_differences(got[i].state, want.state), i
