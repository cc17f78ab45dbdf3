"""Payload pools of 32-bit slots (ptojax/state.py, "payload pool").

Where the budget binds (every tile slot at its largest would not fit 2 x
TILE_CAPACITY Words: the `asl` preset) a pool keeps 32-bit slots: a 32/64-bit
tile two a Word, any other one (its Word sign-extended, 2^31 standing for the
PadValue Min 2^63). The presets the other differential tests use keep 64-bit
slots, so this file runs generated transport, MGATHER.CAS and matrix cases
(one batch each, 31 cases, edge kinds mixed in) on a config whose pool is
budget-bound, against the reference model, which checks on write-back that
every Word it holds is one its carrier keeps. It compiles its own programs:
no other test file uses this config.
"""

import numpy as np
import pytest

import ptojax as pj
from ptojax.fuzz import gen as G
from ptojax.state import decode_window, encode_window, window_slots

from _differential import assert_same, run_batch, run_reference

# 64 slots of up to 2048 Words against a 56 KiB budget: 32-bit slots (and two
# lane classes, 256 and 2048, as few as a multi-class config can have)
W_TILE, BUDGET = 2048, 57344
CFG = pj.MachineConfig(tile_words=W_TILE, hand_slots=16, tile_capacity=BUDGET)
L, B = 16, 32
ROWS = B - 1
FILLER = [G.START["TLOAD"], G.START["TSTORE.SPART"], G.START["MGATHER.CAS"],   # every effect
          G.START["TMATMUL"]] + [G.BSTOP] * (L - 4)                             # group


def test_config_keeps_32_bit_slots():
    s = pj.reset(CFG)
    assert not CFG.pool_slots64 and s.tiles.words.dtype == np.uint32
    assert s.tiles.words.shape == (4, CFG.pool_pages, W_TILE)
    # room for 2 x TILE_CAPACITY slots and the last window's slack
    assert CFG.pool_pages * W_TILE >= 2 * BUDGET + window_slots(W_TILE) - 256
    # under 1/4 of the row-per-slot State, with room past the last tile for a
    # window of the model's packed tiles (state.max_tile_words: 131,072 slots)
    assert pj.preset("asl").state_bytes * 4 <= 79_712_590


@pytest.mark.parametrize("wide", [False, True])
def test_carriers_round_trip(wide):
    """Every Word a carrier of its kind holds comes back bit for bit."""
    rng = np.random.default_rng(3)
    W = 2048
    if wide:
        words = rng.integers(0, 1 << 64, W, dtype=np.uint64, endpoint=False)
    else:       # 4..16-bit values, S8/S16 sign-extended, the pad words 0, 2^64-1 and 2^63
        small = rng.integers(0, 1 << 16, W).astype(np.uint64)
        signed = rng.integers(-(1 << 15), 1 << 15, W).astype(np.int64).astype(np.uint64)
        pads = rng.choice(np.array([0, (1 << 64) - 1, 1 << 63], np.uint64), W)
        words = np.where(rng.random(W) < 0.4, small, np.where(rng.random(W) < 0.5, signed, pads))
    defined = rng.random(W) < 0.5
    held = window_slots(W) // 2 if wide else W
    got = decode_window(*encode_window(words, defined, wide, W, np), wide, W, np)
    assert np.array_equal(got[0][:held], words[:held])
    assert np.array_equal(got[1][:held], defined[:held])


def _cases(kind: str, seed: int):
    gen = G.GenConfig(machine=CFG, max_words=L, edge_weight=0.3 if kind == "transport" else 0.0)
    draw = {"transport": G.random_cases, "cas": G.random_cas_cases,
            "matmul": G.random_matmul_cases}[kind]
    return draw(seed, ROWS, gen)


@pytest.mark.parametrize("kind", ["transport", "cas", "matmul"])
def test_batch_matches_reference(kind):
    cases = _cases(kind, 0x3210)
    states = [G.build_state(c, CFG) for c in cases]
    got = run_batch(states, [c.words for c in cases], "abandon", cfg=CFG, filler=FILLER, B=B, L=L)
    faults = set()
    for c, s, g in zip(cases, states, got):
        want = run_reference(s, c.words, "abandon", c.pe, cfg=CFG)
        assert_same(f"pj.batch.run ({kind}, 32-bit slots)", c.describe(), g, want)
        faults.add(want.fault)
    assert "Fault_None" in faults and len(faults) >= 2, faults
    allocated = sum(int(np.sum(dict(o.leaves)[".tiles.allocated"])) for o in got)
    assert allocated >= ROWS // 2, allocated       # the cases reach the pool
