"""The block domain: the values header processing can leave in a State's
open block, and the check that pj.run, pj.batch.run and pj.reference.run
all make on entry (check_block), so that no model reads an impossible
block its own way."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, overload

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from . import tables
from .isa import forms
from .state import BLOCK_FIELDS, MAX_IOS, MAX_IOT, Block, empty_block
from .storage import ROW_BITS

if TYPE_CHECKING:
    from .state import NumpyModule

BLOCK_ELEMENTS = sum(int(np.prod(shape)) for _, shape, _ in BLOCK_FIELDS)


# The values header processing can leave in the Block (encoding.md section 4):
# each field one its command decodes to (reserved codes fault at decode, so
# they are never latched), and a field not latched yet (no block open, its
# command not seen, a binding row past the count, a register of an absent
# binding) at its reset value. A State holding anything else is not one the
# model can be in.
def _legal(mnemonic: str, field: str) -> tuple[int, ...]:
    """The values the catalog lets `field` of `mnemonic` take (the others fault at decode)."""
    sets = {v for f in forms.forms_named(mnemonic) for name, legal in f.constraints
            if name == field for v in legal}
    return tuple(sorted(sets))


_DTYPES = _legal("BSTART.TMOV", "DataType")      # every BSTART's, and DTYPE_NONE
_MASKS = tuple(m for m in tables.PEMODE_MASK if m)          # recorded bindings: PEMode != 000
_GPRS = _legal("B.IOR", "RegSrc0")
_IOT_COLUMNS = (range(2), _legal("B.IOT", "DstTile"), _legal("B.IOT", "SizeCode"), _MASKS,
                range(2), range(2), range(64), range(64))
_IOS_COLUMNS = (range(256), _legal("B.IOS", "SizeCode"), _MASKS)
# a field's domain (ints), or for some fields with elements one domain per element
_DOMAIN: dict[str, Sequence[Any]] = {
    "active": range(2), "op": range(len(tables.OPS)), "dtype": _DTYPES, "datr_present": range(2),
    "datr": (_legal("B.DATR", "Layout"), _legal("B.DATR", "DataType"),
             range(len(tables.PADVALUES)), _legal("B.DATR", "CMode"), range(len(tables.RMODES)),
             range(2), range(2)),
    "lb": range(1 << 16), "lb_present": range(2), "ior_present": range(2),
    "ior": (_GPRS,) * 4, "iot_count": range(MAX_IOT + 1), "iot_closed": range(2),
    "iot": _IOT_COLUMNS * MAX_IOT, "ios_count": range(MAX_IOS + 1), "ios": _IOS_COLUMNS * MAX_IOS,
    "zero_seen": range(2), "fpatr_present": range(2), "fpatr": range(1 << 32),
    "catr_present": range(2), "catr": range(1 << 32)}
assert all(max(dom) < 1 << bits for name in ROW_BITS
           for dom, bits in zip(_DOMAIN[name][:len(ROW_BITS[name])], ROW_BITS[name])), \
    "a binding column's values exceed its ROW_BITS width"
# field -> the flag that latches it (lb: one flag per element)
_LATCHED_BY = {"datr": "datr_present", "lb": "lb_present", "ior": "ior_present",
               "fpatr": "fpatr_present", "catr": "catr_present"}


@functools.lru_cache(maxsize=None)
def _block_rules() -> tuple[list[tuple[str, tuple[np.intp, ...]]], NDArray[np.int64], NDArray[np.int64],
                            NDArray[np.int64], NDArray[np.int64], dict[str, int], NDArray[np.int64],
                            list[NDArray[np.bool_]]]:
    """Over _packed_rows' positions: the (field, element) each holds, its
    [lo, hi] and allowed-value bit set (0: the whole range) once latched, the
    reset vector, the position whose zero holds each at reset (gate; itself
    when none), and the binding-row positions past each count."""
    names: list[tuple[str, tuple[np.intp, ...]]]
    lo: list[int]
    hi: list[int]
    allowed: list[int]
    start: dict[str, int]
    names, lo, hi, allowed, start = [], [], [], [], {}
    for name, shape, _ in BLOCK_FIELDS:
        start[name] = len(names)
        for i in range(int(np.prod(shape))):
            names.append((name, np.unravel_index(i, shape) if shape else ()))
            dom = _DOMAIN.get(name, range(-(1 << 63), 1 << 63))    # pc: any address
            dom = dom[i] if shape and not isinstance(dom, range) else dom
            if isinstance(dom, range):
                lo.append(dom.start); hi.append(dom.stop - 1); allowed.append(0)
            else:
                lo.append(min(dom)); hi.append(max(dom)); allowed.append(sum(1 << v for v in dom))
    # concrete even when the first call comes from inside a trace (_bad_chunk's)
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        reset = _packed_rows(empty_block(), np)[0]
    n = len(names)
    size = {f: int(np.prod(sh)) for f, sh, _ in BLOCK_FIELDS}
    gate = np.arange(n)
    for field, flag in _LATCHED_BY.items():
        k = size[field]
        gate[start[field]:start[field] + k] = start[flag] + (np.arange(k) if field == "lb" else 0)
    for r in range(MAX_IOT):        # an IOT row's hand and size need a destination, src0/1 a source
        at = start["iot"] + 8 * r
        gate[[at + 1, at + 2, at + 6, at + 7]] = [at, at, at + 4, at + 5]
    past = []
    for field, width, slots in (("iot", 8, MAX_IOT), ("ios", 3, MAX_IOS)):
        m = np.zeros((slots + 1, n), bool)
        for c in range(slots + 1):
            m[c, start[field] + c * width:start[field] + slots * width] = True
        past.append(m)
    return names, np.array(lo), np.array(hi), np.array(allowed, np.int64), reset, start, gate, past


@overload
def _packed_rows(block: Block, xp: NumpyModule) -> NDArray[np.int64]: ...
@overload
def _packed_rows(block: Block, xp: ModuleType) -> jax.Array: ...
def _packed_rows(block: Block, xp: Any) -> Any:     # xp: the numpy or jax.numpy module
    """[rows, BLOCK_ELEMENTS] int64: every State's block, one entry per field
    element (xp: np or jnp)."""
    leaves = []
    for name, shape, dtype in BLOCK_FIELDS:
        v = xp.asarray(getattr(block, name))
        lead = v.shape[:v.ndim - len(shape)]
        v = v.view(xp.int64) if dtype == np.uint64 else v.astype(xp.int64)
        leaves.append(v.reshape(lead + (-1,)))
    return xp.concatenate(leaves, -1).reshape(-1, BLOCK_ELEMENTS)


@overload
def _bad_positions(v: NDArray[np.int64], xp: NumpyModule) -> NDArray[np.bool_]: ...
@overload
def _bad_positions(v: jax.Array, xp: ModuleType) -> jax.Array: ...
def _bad_positions(v: Any, xp: Any) -> Any:         # xp: the numpy or jax.numpy module
    """bool[rows, BLOCK_ELEMENTS]: the positions of packed blocks `v` outside the rules."""
    names, lo, hi, allowed, reset, start, gate, (past_iot, past_ios) = _block_rules()
    at_reset = v == reset
    latched = (v[:, gate] != 0) | (gate == np.arange(len(names)))
    count: Callable[[str, int], Any] = lambda f, top: xp.clip(v[:, start[f]], 0, top)
    unset = xp.asarray(past_iot)[count("iot_count", MAX_IOT)] \
        | xp.asarray(past_ios)[count("ios_count", MAX_IOS)]
    in_set = ((allowed >> xp.clip(v, 0, 62)) & 1) == 1
    bad = xp.where(latched & ~unset, (v < lo) | (v > hi) | ((allowed != 0) & ~in_set), ~at_reset)
    closed_early = (v[:, start["iot_closed"]] != 0) & (v[:, start["iot_count"]] == 0)
    bad = bad | ((np.arange(len(names)) == start["iot_closed"]) & closed_early[:, None])
    # no block open: every field at its reset value
    return xp.where(v[:, start["active"], None] != 0, bad, ~at_reset)


# rows screened per compiled pass: a fixed shape, so one program serves every
# batch size, and one [1024, BLOCK_ELEMENTS] buffer is reused (a buffer for a whole
# batch was page-faulted in on every call: 17 ms at 16,384 rows, 2.8 ms in chunks)
_CHUNK = 1024


@jax.jit
def _bad_chunk(block: Block) -> jax.Array:
    return jnp.any(_bad_positions(_packed_rows(block, jnp), jnp), -1)


@functools.cache
def _reset_fields() -> dict[str, NDArray[Any]]:
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        return {name: np.asarray(getattr(empty_block(), name)) for name, _, _ in BLOCK_FIELDS}


def _bad_rows(block: Block) -> NDArray[np.bool_]:
    """bool[rows]: the States whose block breaks the rules. A row with no
    block open is right when every field holds its reset value: one compare
    per field, for the whole batch. The open ones (most batches have none)
    are screened in full (_bad_open_rows)."""
    rows = {name: np.asarray(getattr(block, name)).reshape((-1,) + shape)
            for name, shape, _ in BLOCK_FIELDS}
    active = rows["active"]
    reset = _reset_fields()
    differs = [rows[name] != reset[name] for name, _, _ in BLOCK_FIELDS]
    bad = np.zeros(active.shape, bool)
    if not any(d.any() for d in differs):       # no block open anywhere, none bad
        return bad
    for d in differs:
        bad |= d.reshape(len(active), -1).any(-1)
    bad &= ~active
    open_rows = np.flatnonzero(active)
    if open_rows.size:
        bad[open_rows] = _bad_open_rows({k: v[open_rows] for k, v in rows.items()}, block)
    return bad


def _bad_open_rows(rows: Mapping[str, NDArray[Any]], block: Block) -> NDArray[np.bool_]:
    """_bad_rows over every rule, for rows {field: [n, ...]} (`block`: their
    container type). Batches go through `_bad_chunk` 1,024 rows at a time; fewer
    rows (one State) in numpy, so pj.run compiles nothing for the check."""
    n = rows["active"].shape[0]
    head = n - n % _CHUNK
    out = [np.asarray(_bad_chunk(block.replace(**{k: v[i:i + _CHUNK] for k, v in rows.items()})))
           for i in range(0, head, _CHUNK)]
    if n > head:
        tail = block.replace(**{k: v[head:] for k, v in rows.items()})
        out.append(np.any(_bad_positions(_packed_rows(tail, np), np), -1))
    return np.concatenate(out)


def block_domain_errors(block: Block, limit: int = 3) -> list[str]:
    """Why a State's (or a batch's) open-block fields lie outside what header
    processing can produce (the rules above): up to `limit` messages, [] when
    every block is one the model can hold. The rows are screened first
    (0.8 ms for 4,096 States with no block open), the messages written for the
    first bad rows only."""
    with jax.enable_x64(True):
        rows = np.flatnonzero(_bad_rows(block))[:limit]
    if not rows.size:
        return []
    names, lo, hi, _, reset, start, _, _ = _block_rules()
    v = _packed_rows(block, np)[rows]
    out: list[str] = []
    for r, p in zip(*np.nonzero(_bad_positions(v, np))):
        if len(out) == limit:
            break
        name, at = names[p]
        where = f"[{int(rows[r])}]" if np.ndim(block.active) else ""
        field_at = f"{name}[{', '.join(str(int(i)) for i in at)}]" if at else name
        state = "an open block" if v[r, start["active"]] else "no open block"
        out.append(f"State{where}.block.{field_at} = {int(v[r, p])} is not a value header "
                   f"processing leaves ({state}; once latched a value its command decodes "
                   f"to, in {lo[p]}..{hi[p]}; {int(reset[p])} before)")
    return out


def check_block(block: Block) -> None:
    """ValueError when a State's open-block fields are outside what header
    processing can produce (block_domain_errors): pj.run and pj.reference.run
    both reject such a State rather than each reading it its own way."""
    errors = block_domain_errors(block)
    if errors:
        raise ValueError("not a State the model can be in: " + "; ".join(errors))
