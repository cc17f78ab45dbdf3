"""Reading an arch-state envelope: each field checked, a clear ValueError
naming its path otherwise (docs/interop.md). arch_state.py and pool_rows.py
build on these."""

from __future__ import annotations

import re
from typing import NoReturn, Optional

import numpy as np

from .. import tables
from ..state import MachineConfig

U64 = (1 << 64) - 1
_TILE_NAME = re.compile(r"^([TUMN])#([1-9][0-9]?)$")


def fail(label: str, msg: str) -> NoReturn:
    raise ValueError(f"arch-state {label}: {msg}")


def obj(v, label: str, required=(), optional=()) -> dict:
    """An object; with required/optional fields given, exactly those (schema objects)."""
    if not isinstance(v, dict):
        fail(label, f"must be an object, got {type(v).__name__}")
    if any(not isinstance(k, str) for k in v):
        fail(label, "keys must be strings")
    missing = [k for k in required if k not in v]
    if missing:
        fail(label, f"missing required field(s): {', '.join(missing)}")
    extra = sorted(set(v) - set(required) - set(optional))
    if extra and (required or optional):     # a schema object: no other fields
        fail(label, f"unexpected field(s): {', '.join(extra)}")
    return v


def int_(v, label: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        fail(label, f"must be an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        fail(label, f"{v} out of range {lo}..{hi}")
    return v


def bool_(v, label: str) -> bool:
    if not isinstance(v, bool):
        fail(label, f"must be a boolean, got {type(v).__name__}")
    return v


def str_(v, label: str) -> str:
    if not isinstance(v, str):
        fail(label, f"must be a string, got {type(v).__name__}")
    return v


def list_(v, label: str, n: Optional[int] = None) -> list:
    if not isinstance(v, list):
        fail(label, f"must be an array, got {type(v).__name__}")
    if n is not None and len(v) != n:
        fail(label, f"must have {n} entries, got {len(v)}")
    return v


def tile_index(name: str, label: str) -> int:
    m = _TILE_NAME.match(name) if isinstance(name, str) else None
    if m is None or not 1 <= int(m.group(2)) <= tables.HAND_SLOTS:
        fail(label, f"tile register name {name!r} is not T#1..T#16, U#n, M#n or N#n")
    return tables.HANDS.index(m.group(1)) * tables.HAND_SLOTS + int(m.group(2)) - 1


def slot(cfg: MachineConfig, name: str, label: str) -> int:
    slot = cfg.slot_of(tile_index(name, label))
    if slot is None:
        fail(label, f"tile {name} does not fit cfg.hand_slots={cfg.hand_slots}")
    return slot


def put_sparse(row: np.ndarray, pairs, label: str, W: int, lo: int, bound: str = "cfg.tile_words"):
    for i, p in enumerate(list_(pairs, label)):
        off, val = list_(p, f"{label}[{i}]", 2)
        off = int_(off, f"{label}[{i}][0]", lo, (1 << 31) - 1)
        val = int_(val, f"{label}[{i}][1]", 0, U64)
        if off >= W:
            fail(label, f"payload offset {off} does not fit {bound}={W}")
        row[off] = val


def put_bits(row: np.ndarray, offsets, label: str, W: int, lo: int, bound: str = "cfg.tile_words"):
    for i, off in enumerate(list_(offsets, label)):
        off = int_(off, f"{label}[{i}]", lo, (1 << 31) - 1)
        if off >= W:
            fail(label, f"definedness offset {off} does not fit {bound}={W}")
        row[off] = True


def dtype_code(name, label: str) -> int:
    str_(name, label)
    try:
        return tables.dtype(name).code
    except ValueError as e:
        fail(label, str(e))


def _code(names: tuple, what: str, name, label: str) -> int:
    """Index of `name` in `names` (case-insensitive), else the envelope fails."""
    str_(name, label)
    for i, n in enumerate(names):
        if n.lower() == name.lower():
            return i
    fail(label, f"unknown {what} {name!r}; expected one of {', '.join(names)}")


def layout_code(name, label: str) -> int:
    return _code(tables.TILE_LAYOUTS, "tile layout", name, label)


def location_code(name, label: str) -> int:
    return _code(tables.TILE_LOCATIONS, "tile location", name, label)
