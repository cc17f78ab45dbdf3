"""Reference model: State conversion costs what a run touches, and only that.

reference/state.py converts a Local slot's payload window or a Shared
record's payload on first use and writes back only the Words that changed; every other leaf of the
result is the input's own (immutable) jax array. These tests fill every
payload row of a many-slot State with random bits and check that a run leaves
untouched rows bit-identical, that a run which changes no payload returns the
input's payload leaves themselves, that a State with numpy leaves is never
aliased by the result, and that a faulting collective keeps every payload row.
"""

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax.state import state_differences, state_leaves, tile_words

CFG = pj.MachineConfig(tile_words=256, hand_slots=16, shared_slots=8, shared_words=256)
SRC, DST = 0x400, 0x800
PAYLOAD = (".tiles.words", ".tiles.defined", ".shared.words", ".shared.defined")


def bundle(op, hand="T", mask="1000"):
    """A 16x16 U32 ordinary TLOAD into `hand` (size code 4), or TSTORE of hand#1."""
    lines = [f"BSTART.{op} U32", "B.DIM zero, 16, ->LB0", "B.DIM zero, 16, ->LB1", "B.IOR a0, a1"]
    lines.append(f"B.IOT mask={mask}, last, ->{hand}<4>" if op == "TLOAD"
                 else f"B.IOT {hand}#1, mask={mask}, last")
    return pj.asm.assemble("\n".join(lines + ["BSTOP"]))


def random_state(seed=0):
    """CFG's reset State with random payload in every Local slot and Shared record,
    random GM at SRC, a0 = SRC and a1 = the 64-byte row stride on every PE."""
    rng = np.random.default_rng(seed)
    s = pj.reset(CFG)

    def bits(a):
        return rng.integers(0, 1 << 64, a.shape, dtype=np.uint64, endpoint=False).astype(a.dtype)

    with jax.enable_x64(True):
        s = s.replace(tiles=s.tiles.replace(words=jax.numpy.asarray(bits(s.tiles.words)),
                                            defined=jax.numpy.asarray(
                                                rng.integers(0, 2, s.tiles.defined.shape) == 1)),
                      shared=s.shared.replace(words=jax.numpy.asarray(bits(s.shared.words)),
                                              defined=jax.numpy.asarray(
                                                  rng.integers(0, 2, s.shared.defined.shape) == 1)))
    s = pj.write_memory(s, SRC, rng.integers(0, 256, 1024, dtype=np.uint8).tobytes())
    for pe in range(4):
        s = pj.write_gpr(pj.write_gpr(s, "a0", SRC, pe=pe), "a1", 64, pe=pe)
    return s


def changed_words(a, b):
    """(pe, pool slot) where two [4, K, W] payload pools differ."""
    a, b = (np.asarray(x).reshape(x.shape[0], -1) for x in (a, b))
    return [tuple(x) for x in np.argwhere(a != b).tolist()]


def test_tload_writes_only_its_slot():
    s = random_state()
    r = pj.reference.run(s, bundle("TLOAD", "N"), cfg=CFG)   # hand N (3): slot 48 of PE 0
    assert r.fault == "Fault_None"
    base = int(np.asarray(r.state.tiles.base)[0, 48])
    assert base == 0        # the PE's first tile: its pool top is 0
    for leaf in ("words", "defined"):
        changed = changed_words(getattr(s.tiles, leaf), getattr(r.state.tiles, leaf))
        assert changed and {pe for pe, _ in changed} == {0}
        assert all(base <= at < base + 512 for _, at in changed)   # its own slots only (2 a Word)
    assert r.state.shared.words is s.shared.words and r.state.shared.defined is s.shared.defined
    assert state_differences(s, r.state, skip=("pc", "tiles")) == []
    row = tile_words(r.state.tiles, 0, 48)[0][:256]
    assert row.view(np.uint32)[::2].tobytes() == np.asarray(s.gm)[SRC:SRC + 1024].tobytes()


def test_untouched_payload_is_the_input_leaf():
    """TSTORE reads its source slot and writes GM only: no payload leaf is rebuilt."""
    s = pj.write_gpr(pj.reference.run(random_state(), bundle("TLOAD"), cfg=CFG).state, "a0", DST)
    r = pj.reference.run(s, bundle("TSTORE"), cfg=CFG)
    assert r.fault == "Fault_None"
    for leaf in ("words", "defined"):
        assert getattr(r.state.tiles, leaf) is getattr(s.tiles, leaf)
    assert r.state.shared.words is s.shared.words and r.state.shared.defined is s.shared.defined
    assert np.asarray(r.state.gm)[DST:DST + 1024].tobytes() == np.asarray(s.gm)[SRC:SRC + 1024].tobytes()


def test_numpy_leaves_are_never_aliased():
    s = random_state(1)
    want = pj.reference.run(s, bundle("TLOAD"), cfg=CFG).state
    s_np = jax.tree_util.tree_map(np.array, s)
    r = pj.reference.run(s_np, bundle("TLOAD"), cfg=CFG)
    assert state_differences(r.state, want) == []
    kept = {k: v.copy() for k, v in state_leaves(r.state).items()}
    for leaf in jax.tree_util.tree_leaves(r.state):
        assert isinstance(leaf, jax.Array)
    for leaf in jax.tree_util.tree_leaves(s_np):            # the caller scribbles on its State
        leaf[...] = ~leaf if leaf.dtype == bool else leaf + 1
    assert all(np.array_equal(kept[k], v) for k, v in state_leaves(r.state).items())


@pytest.mark.parametrize("core", [False, True])
def test_fault_keeps_every_payload_row(core):
    """A fault (PE 2's a0 past GM; on the Core after PEs 0 and 1 completed their
    loads) leaves every payload row as it was."""
    s = pj.write_gpr(random_state(2), "a0", CFG.gm_bytes - 64, pe=2)
    words = bundle("TLOAD", mask="1111")
    r = pj.reference.run_core(s, words, cfg=CFG) if core else pj.reference.run(s, words, 2, cfg=CFG)
    assert r.fault == "Fault_DataPage"
    assert state_differences(s, r.state, skip=("fault", "fault_address", "pc", "block")) == []
    for path in PAYLOAD:
        assert np.array_equal(state_leaves(s)[path], state_leaves(r.state)[path])
