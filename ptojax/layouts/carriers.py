"""The model's packed carriers: how the spec's ASL model stores a 4-bit
ordinary tile's payload, and how ptojax shows it.

The model keeps a non-CUBE tile that is 4 bits wide, or that has more
logical elements than PTO_MODEL_TILE_ELEMENTS, in packed carriers
(packed-boundary.asl, TileUsesPackedCarrierRepresentation): element i is
lane i mod k of payload Word i div k, low lanes first, k = 64 / bits, and a
lane keeps only the element's low bits. ptojax keeps one logical element a
slot in both of its models (any representation is allowed where elements
are compared), and converts at the edges where the model's raw slots are
what is seen:

* `pj.read_tile` / `pj.read_shared` show a 4-bit ordinary tile's Words as
  the model holds them: the carriers in slots 0..ceil(n/16)-1,
  zero after them (the model's payload of a new tile is the reset's zero).
  The model's own printout does the same for these tiles; a packed tile of
  more than PTO_MODEL_TILE_ELEMENTS elements it prints element by element,
  and so does ptojax. (The arch-state interop and the batch files keep
  ptojax's element slots: their round trip is exact.)
* MGATHER.CAS reads its sources' raw slots (atomics.asl: index_payload[[e]]),
  so a packed source's lane e reads carrier e (ops/mgather_cas.py and the
  reference do that from their logical slots).
Definedness stays one bit per logical element, as the model's printout
gives it (TileLogicalElementDefined of slot s).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import tables
from .geometry import MODEL_TILE_ELEMENTS


def shows_carriers(layout: str, dt: tables.DataType | int | str, rows: int, cols: int) -> bool:
    """Whether the model's slots of a tile are its carriers, not its elements:
    a 4-bit ordinary tile within PTO_MODEL_TILE_ELEMENTS elements (a larger
    packed tile the model prints element by element)."""
    return (layout not in tables.CUBE_LAYOUTS and tables.dtype(dt).bits == 4
            and rows * cols <= MODEL_TILE_ELEMENTS)


def pack_carriers(elements: NDArray[Any], bits: int) -> NDArray[np.uint64]:
    """The model's slots for logical elements 0..n-1 (uint64) of a packed tile
    of `bits`-wide elements: carrier j at slot j, zero past the last carrier;
    as long as `elements`."""
    k = 64 // bits
    n = elements.shape[0]
    lanes = np.zeros(-(-n // k) * k, np.uint64)
    lanes[:n] = np.asarray(elements, np.uint64) & np.uint64((1 << bits) - 1)
    shifts = (np.arange(k, dtype=np.uint64) * np.uint64(bits))
    carriers = np.bitwise_or.reduce(lanes.reshape(-1, k) << shifts, axis=1)
    out = np.zeros(n, np.uint64)
    out[:carriers.shape[0]] = carriers
    return out


def model_slots(elements: NDArray[Any], layout: str, dt: tables.DataType | int | str, rows: int,
                cols: int) -> NDArray[np.uint64]:
    """A tile's Words as the model's slots hold them, from ptojax's logical ones:
    the carriers of a 4-bit ordinary tile (shows_carriers), else as they are."""
    words = np.asarray(elements, np.uint64)
    if not shows_carriers(layout, dt, rows, cols):
        return words
    return pack_carriers(words, tables.dtype(dt).bits)

