"""Execution order of MGATHER.CAS lanes (MachineConfig.cas_lane_order).

The spec leaves the serialization of duplicate-address MGATHER.CAS lanes
implementation-defined (state-and-transport.md D.5; the model picks
ARBITRARY). ptojax makes it a configuration choice, shared by pj.run and the
reference oracle, so both compute exactly the same order. Pure Python and
numpy, no JAX and no random-number library.

Lanes are numbered row-major over the valid region: lane i = r*ValidCol + c,
i in 0..n-1 with n = ValidRow*ValidCol. The orders:

- "row-major" (default): 0, 1, ..., n-1.
- "reverse": n-1, ..., 1, 0.
- "permuted": lane i gets the 32-bit key

      key(i) = (i * 2654435761 + seed * 40503 + 12345) mod 2^32

  (seed = MachineConfig.cas_seed, any Python int; the mod is the
  mathematical one, i.e. two's-complement wrap of seed into uint32), and
  lanes execute in ascending key order, ties broken by ascending lane index.
  2654435761 is odd, so keys of lanes 0..2^32-1 are distinct and the tie
  rule never fires for real tiles; it is stated so the order is total.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

LANE_ORDERS = ("row-major", "reverse", "permuted")   # = state.CAS_LANE_ORDERS
KEY_MULTIPLIER = 2654435761
SEED_MULTIPLIER = 40503
KEY_OFFSET = 12345
_MASK32 = (1 << 32) - 1


def lane_key(i: int, seed: int) -> int:
    """Sort key of lane `i` in the "permuted" order (a uint32 value)."""
    return (i * KEY_MULTIPLIER + seed * SEED_MULTIPLIER + KEY_OFFSET) & _MASK32


def lane_keys(n: int, seed: int) -> NDArray[np.uint32]:
    """Keys of lanes 0..n-1 as a uint32 array (wrapping uint32 arithmetic)."""
    i = np.arange(n, dtype=np.uint64)
    base = (seed * SEED_MULTIPLIER + KEY_OFFSET) & _MASK32
    return ((i * np.uint64(KEY_MULTIPLIER) + np.uint64(base)) & np.uint64(_MASK32)).astype(np.uint32)


def lane_order(n: int, order: str = "row-major", seed: int = 0) -> list[int]:
    """Lane indices 0..n-1 in execution order for MachineConfig.cas_lane_order `order`."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"lane count must be an int >= 0, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    n, seed = int(n), int(seed)
    if order == "row-major":
        return list(range(n))
    if order == "reverse":
        return list(range(n - 1, -1, -1))
    if order == "permuted":
        # a stable sort of the keys = ascending key, ties by lane index
        return [int(i) for i in np.argsort(lane_keys(n, seed), kind="stable")]
    raise ValueError(f"cas_lane_order {order!r} not in {LANE_ORDERS}")
