"""The records of an MGATHER.CAS trace (Machine.cas_trace): what one executed
MGATHER.CAS did, lane by lane. mgather_cas.py writes them, state.py's
Machine holds the list, cas_check.py reads it; they are here, below all
three, so that the Machine's state needs no import of a completion.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import tables


@dataclass(frozen=True)
class Lane:
    """One valid (r, c): lane = r*ValidCol + c (row-major)."""
    lane: int
    address: int          # base + displacement mod 2^64
    expected: int         # raw low element bits
    replacement: int      # raw low element bits
    slot_word: int        # destination payload Word of (r, c)


@dataclass
class CasRecord:
    """What one executed MGATHER.CAS did (recorded only when m.cas_trace is a list)."""
    slot: int                  # materialized destination slot
    tile_index: int            # its TileIndex
    dtype: tables.DataType     # transfer dtype
    lanes: list[Lane]          # row-major
    order: list[int]           # lane indices in the order they executed
    gm_before: bytes           # GM just before the first lane
    gm_after: bytes            # GM just after the last lane
    pe: int = 0                # the executing PE (whose Local file holds the slot)
