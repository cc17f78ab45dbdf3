"""Local payload between the pooled State and the envelope's per-tile rows.

A State keeps each PE's Local payload as one pool (ptojax/state.py, "payload
pool"); the arch-state envelope, like the model, gives each tile its own Words.
slot_rows and pool_rows convert between the two (docs/interop.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from .. import tables
from ..state import full_window, max_tile_words, own_words, pool_top, write_tile_words
from .fields import fail as _fail


def _name(slot: int, S: int) -> str:
    """The assembly name of materialized slot `slot` of an S-slot file."""
    hand, k = divmod(slot, S // 4)
    return tables.tile_name(hand * tables.HAND_SLOTS + k)


def _own_row(t: dict, p: int, slot: int, W: int) -> tuple:
    """(words, defined) slot row of an allocated slot: its own pool Words
    (state.pool_extent), then zeros."""
    row = (np.zeros(W, np.uint64), np.zeros(W, bool))
    for r, own in zip(row, own_words(t, p, slot)):
        r[:own.size] = own
    return row


def slot_rows(t: dict) -> dict:
    """Tiles leaves with words/defined as [4, S, L] slot rows (L =
    max_tile_words: a packed tile's elements past tile_words included): an
    allocated slot's own pool Words (state.pool_extent) then zeros; a free
    slot, which owns none, all zeros."""
    P, S = t["base"].shape
    W = max_tile_words(t["words"].shape[-1])
    rows = {"words": np.zeros((P, S, W), np.uint64), "defined": np.zeros((P, S, W), bool)}
    for p in range(P):
        # numpy intp indices, used as int slot numbers
        for slot in cast("Iterable[int]", np.flatnonzero(t["allocated"][p])):
            rows["words"][p, slot], rows["defined"][p, slot] = _own_row(t, p, slot, W)
    return {**t, **rows}


def pool_rows(t: dict, K: int, s64: bool, W: int) -> dict:
    """Inverse of slot_rows for an envelope read into slot rows: each PE's
    allocated tiles at their recorded pool_base (base >= 0), the others placed in
    slot order after them, as allocation places them (state.pool_top); K pages
    of W (tile_words) slots."""
    P, S, L = t["words"].shape
    pool = {"words": np.zeros((P, K, W), np.uint64 if s64 else np.uint32),
            "defined": np.zeros((P, K, W), bool)}
    for p in range(P):
        for slot in range(S):
            if not t["allocated"][p, slot] and (t["words"][p, slot].any()
                                                 or t["defined"][p, slot].any()):
                _fail(f"free slot {_name(slot, S)} of PE {p}",
                      "holds payload Words, but a free slot owns no storage in ptojax's pooled "
                      "State (its stale Words are undefined)")
        # numpy intp indices, used as int slot numbers
        for slot in cast("Iterable[int]", np.flatnonzero(t["allocated"][p] & (t["base"][p] < 0))):
            t["base"][p, slot] = min(int(pool_top(t["allocated"][p] & (t["base"][p] >= 0),
                                                  t["capacity"][p], t["dtype"][p], t["base"][p],
                                                  W, np, s64)), K * W - full_window(W, s64))
        placed = {**t, **pool}          # the same arrays: write_tile_words edits the pool
        for slot in cast("Iterable[int]", np.flatnonzero(t["allocated"][p])):
            words, defined = t["words"][p, slot], t["defined"][p, slot]
            write_tile_words(placed, p, slot, words, defined)
            kept = _own_row(placed, p, slot, L)
            if not (np.array_equal(kept[0], words) and np.array_equal(kept[1], defined)):
                _fail(f"tile {_name(slot, S)} of PE {p}",
                      "holds Words its storage cannot: past its own pool slots (2 per "
                      "capacity byte), or a 4..16-bit type's Word other than its low 32 bits "
                      "sign-extended (ptojax's pooled State keeps no more)")
    return {**t, **pool}
