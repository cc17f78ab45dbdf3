"""The model's packed carriers, in plain Python (packed-boundary.asl).

A non-CUBE tile that is 4 bits wide, or has more logical elements than
PTO_MODEL_TILE_ELEMENTS, is kept by the model in packed carriers: element i
is lane i mod k of payload Word i div k (k = 64 / bits, low lanes first),
each lane only the element's low bits. The reference keeps one logical
element a Word, as the executor does; `raw_slot` is what the model's
payload[[e]] holds, for the one operation that reads a source's raw slots
(MGATHER.CAS: atomics.asl reads index_payload[[e]], expected_payload[[e]]
and replacement_payload[[e]] at the lane's linear index e).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import tables
from .layouts import CUBE_LAYOUTS, MODEL_TILE_ELEMENTS


def uses_packed_carriers(layout: str, d: tables.DataType, rows: int, cols: int) -> bool:
    """TileUsesPackedCarrierRepresentation."""
    return layout not in CUBE_LAYOUTS and (d.bits == 4 or rows * cols > MODEL_TILE_ELEMENTS)


def raw_slot(words: Sequence[int], layout: str, d: tables.DataType, rows: int, cols: int, e: int) -> int:
    """The model's payload Word e of a tile whose logical elements are `words`
    (those past the list, or past rows x cols, are the reset's zero lanes):
    element e itself, or for a packed tile carrier e, the lanes of elements
    k*e .. k*e + k - 1."""
    n = min(len(words), rows * cols)
    if not uses_packed_carriers(layout, d, rows, cols):
        return words[e] if e < len(words) else 0
    k, mask = 64 // d.bits, (1 << d.bits) - 1
    word = 0
    for lane in range(k):
        i = k * e + lane
        if i < n:
            word |= (words[i] & mask) << (d.bits * lane)
    return word
