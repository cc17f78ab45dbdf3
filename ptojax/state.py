"""MachineConfig (static sizes) and State (the pytree of one machine).

A State is arrays only: global memory, per-PE GPRs, each PE's Local tile
register file (descriptors, 64-bit payload Words, per-slot definedness), the
Core's Shared tile registers, the fault register, the PC and the open
block's header state. Everything a bundle can
change lives here, so `jax.vmap` over a State is a batch of machines.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Protocol, cast, overload

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike
from numpy.typing import NDArray

from . import tables
from ._x64 import x64
from .layouts.geometry import MODEL_TILE_ELEMENTS
from .pytree import PytreeDataclass, pytree_dataclass

if TYPE_CHECKING:
    class NumpyModule(Protocol):
        """The numpy module passed as `xp` (the functions below take numpy or
        jax.numpy): jax.numpy's `ndarray` is jax.Array, no numpy array class."""
        ndarray: type[np.ndarray[Any, Any]]

    # a State's Tiles (a Mapping of its leaves) or a dict of its leaves, jax or numpy
    _TileLeaves = Mapping[str, jax.Array | NDArray[Any]]

MAX_IOT = 16   # B.IOT binding slots of the model's block state
MAX_IOS = 4    # B.IOS binding slots

CAS_LANE_ORDERS = ("row-major", "reverse", "permuted")
SEMANTICS = ("adr0100", "0.58.3")
PROFILES = ("portable", "ieee")


@dataclass(frozen=True)
class MachineConfig:
    """Static sizes and implementation-defined choices; hashable, a jit static arg.

    Defaults mirror the ASL model (4096 bytes of GM, 64 Local tiles of up to
    32768 payload Words, TILE_CAPACITY 256 KiB). `tile_words` and `hand_slots`
    are model bounds like the model's own PTO_MODEL_TILE_ELEMENTS: a tile whose
    storage needs more Words, or a hand with no materialized slot left, is
    rejected with Fault_TileAllocation exactly as the model rejects past its
    bound. Small presets keep thousands of States in memory.
    `shared_slots` records materialize the Core's 256 Shared registers (a
    SharedTileID takes a free record when first written; none left is
    Fault_TileAllocation) and `shared_words` bounds a Shared payload the same
    way (docs/shared-decisions.md section 1); it defaults to `tile_words`.
    """
    gm_bytes: int = 4096
    tile_words: int = MODEL_TILE_ELEMENTS
    hand_slots: int = tables.HAND_SLOTS
    tile_capacity: int = tables.TILE_CAPACITY_RESET
    shared_slots: int = 16
    shared_words: Optional[int] = None     # None: tile_words
    profile: str = "portable"
    cas_lane_order: str = "row-major"
    cas_seed: int = 0
    semantics: str = "adr0100"

    def __post_init__(self) -> None:
        if self.shared_words is None:
            object.__setattr__(self, "shared_words", self.tile_words)

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(f"MachineConfig: {msg}")
        for f in ("gm_bytes", "tile_words", "hand_slots", "shared_slots", "shared_words",
                  "tile_capacity", "cas_seed"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"MachineConfig.{f} must be an int, got {type(v).__name__}")
        assert self.shared_words is not None        # set above, and checked an int
        need(1 <= self.gm_bytes <= 1 << 30, f"gm_bytes={self.gm_bytes} must be in 1..2^30")
        need(1 <= self.tile_words <= MODEL_TILE_ELEMENTS,
             f"tile_words={self.tile_words} must be in 1..{MODEL_TILE_ELEMENTS}")
        need(1 <= self.hand_slots <= tables.HAND_SLOTS,
             f"hand_slots={self.hand_slots} must be in 1..{tables.HAND_SLOTS}")
        need(1 <= self.shared_slots <= tables.SHARED_TILES,
             f"shared_slots={self.shared_slots} must be in 1..{tables.SHARED_TILES}")
        need(1 <= self.shared_words <= MODEL_TILE_ELEMENTS,
             f"shared_words={self.shared_words} must be in 1..{MODEL_TILE_ELEMENTS}")
        need(0 <= self.tile_capacity < 1 << 31, "tile_capacity must be in 0..2^31-1")
        need(self.profile in PROFILES, f"profile {self.profile!r} not in {PROFILES}")
        need(self.cas_lane_order in CAS_LANE_ORDERS,
             f"cas_lane_order {self.cas_lane_order!r} not in {CAS_LANE_ORDERS}")
        need(self.semantics in SEMANTICS, f"semantics {self.semantics!r} not in {SEMANTICS}")

    @property
    def local_slots(self) -> int:
        """Materialized Local tile slots (hand_slots of each of the 4 hands)."""
        return 4 * self.hand_slots

    def slot_of(self, index: int) -> Optional[int]:
        """Materialized slot of a TileIndex 0..63, None past hand_slots."""
        hand, k = divmod(index, tables.HAND_SLOTS)
        return hand * self.hand_slots + k if k < self.hand_slots else None

    @property
    def pool_pages(self) -> int:
        """Pages of tile_words slots in each PE's Local payload pool (tiles.words[pe]):
        room for every allocation the budget admits (pool_pages_for)."""
        return pool_pages_for(self.tile_capacity, self.local_slots, self.tile_words)

    @property
    def max_tile_words(self) -> int:
        """The most Words a Local tile can have (max_tile_words): tile_words, or
        at the model's own bound a packed non-CUBE tile's logical elements."""
        return max_tile_words(self.tile_words)

    @property
    def pool_slots64(self) -> bool:
        """Whether the pools keep 64-bit slots (slots64)."""
        return slots64(self.tile_capacity, self.local_slots, self.tile_words)

    @property
    def register_limit(self) -> Optional[int]:
        """The largest TILE_CAPACITY register a State of this config may hold
        (pool_capacity), None when any."""
        return pool_capacity(self.pool_pages, self.local_slots, self.tile_words,
                             self.pool_slots64)

    @property
    def state_bytes(self) -> int:
        """Bytes one State occupies (all leaves), for sizing batches."""
        return _state_bytes(self)

    def replace(self, **kw: Any) -> "MachineConfig":
        return dataclasses.replace(self, **kw)


# ----------------------------------------------------------------- payload pool
#
# Each PE's Local payload is one pool of pool_pages x W slots (W = tile_words),
# not one W-Word row per slot. A tile's storage is the window of window_slots
# slots from its `base`, of which the first pool_extent are its own. Where the
# budget cannot bind (slots64: tiny, small) a slot is a 64-bit Word. Where it
# binds (asl) slots are 32-bit: a tile of a 32- or 64-bit type keeps each
# 64-bit Word whole in two slots (low, high), since a portable matrix D keeps
# 64-bit raw sums in its FP32/S32/U32 Words and 64-bit types use every bit; any
# other tile keeps one slot per Word, the Word being that slot sign-extended,
# which is exactly its carrier (a 4..16-bit value zero-extended, S8/S16
# sign-extended: A.4), or 2^63 for the slot 2^31: the PadValue Min the model
# writes for a type without a minimum of its own (tables.pad_word), where
# -2^31 is no such carrier.
# Tiles are only ever allocated (a block allocates a fresh slot; nothing in this
# slice releases one but a rollback, which leaves the State unchanged, and
# reset), so a new tile is placed at its PE's pool top (pool_top): the end of
# the highest storage placed so far. A PE's Local charge (A.5, popcount(mask)
# x TSize per tile) is at most TILE_CAPACITY and a tile of TSize bytes needs at
# most 2 x TSize slots (4-bit elements one slot each; 32-bit ones two, but four
# bytes each), so a pool of 2 x TILE_CAPACITY slots (or every slot at its
# largest, when that is less) holds whatever the budget admits. A fresh tile's
# stale Words are the pool's there, never written since reset: zero, as in the
# model's own never-used slot storage.

_MAX_TSIZE = 65536          # the largest legal Local capacity (A.3)
PACKED_WORDS = 2 * _MAX_TSIZE   # logical elements of the largest Local tile at 4 bits
_TOP32, _TOP64 = 1 << 31, 1 << 63
WIDE_CODES = tuple(sorted(d.code for d in tables.DATATYPES if d.bits >= 32))
_WIDE = np.zeros(32, bool)
_WIDE[list(WIDE_CODES)] = True


def slots64(tile_capacity: int, slots: int, W: int) -> bool:
    """Whether a pool keeps 64-bit slots, one a Word: where the budget cannot bind
    (every tile slot at its largest fits 2 x TILE_CAPACITY Words), Words as they
    are cost least; where it binds (the model's own bounds) 32-bit slots make
    the pool what the budget admits."""
    return slots * max_tile_words(W) <= 2 * tile_capacity


def max_tile_words(W: int) -> int:
    """The most Words a Local tile can have on a machine of `tile_words` W: W,
    except at the model's own bound (W = PTO_MODEL_TILE_ELEMENTS), where a
    non-CUBE tile with more logical elements than that (an 8-bit tile of 64
    KiB, a 4-bit one past 16 KiB) keeps every one, as the model's packed
    carriers do (packed-boundary.asl): up to 2 x 64 KiB 4-bit elements.
    CUBE tiles stay within W (cell_count*CR*CC <= PTO_MODEL_TILE_ELEMENTS)."""
    return PACKED_WORDS if W == MODEL_TILE_ELEMENTS else W


def window_slots(L: int, s64: bool = False) -> int:
    """Slots of a window of L Words: L in 64-bit slots; else L narrow Words, or
    the two slots of each of the most Words a wide tile can have (min(L,
    _MAX_TSIZE / 4 bytes)), whichever is more."""
    return L if s64 else max(L, min(2 * L, 2 * (_MAX_TSIZE // 4)))


def full_window(W: int, s64: bool = False) -> int:
    """Slots of a tile's window at its largest on a machine of `tile_words` W:
    what a pool keeps room for past any tile's base."""
    return window_slots(max_tile_words(W), s64)


def _window_slack(W: int, s64: bool) -> int:
    """Pool slots past the last tile's own that its window may reach: a tile
    owns at least min(256, W) slots (the least capacity is 128 bytes)."""
    return full_window(W, s64) - min(256, W)


def pool_pages_for(tile_capacity: int, slots: int, W: int) -> int:
    """Pool pages (of W slots) for a TILE_CAPACITY: room for 2 x TILE_CAPACITY
    slots or for every tile slot at its largest, whichever is less, and the last
    window's slack."""
    s64 = slots64(tile_capacity, slots, W)
    need = min(2 * tile_capacity, slots * full_window(W, s64)) + _window_slack(W, s64)
    return max(-(-need // W), -(-full_window(W, s64) // W))      # at least one window


def pool_capacity(pages: int, slots: int, W: int, s64: bool) -> Optional[int]:
    """The largest TILE_CAPACITY register a pool of `pages` holds every allocation
    for; None when it holds every tile slot at its largest (any register)."""
    usable = pages * W - _window_slack(W, s64)
    return None if usable >= slots * full_window(W, s64) else usable // 2


# The functions below that take `xp` compute in numpy (xp=np: numpy arrays or
# scalars out) or in jax.numpy (jax.Array out); their implementations take the
# module as Any (np or jnp, which share no type mypy knows).

@overload
def is_wide(dtype: ArrayLike, xp: NumpyModule) -> np.bool_ | NDArray[np.bool_]: ...
@overload
def is_wide(dtype: ArrayLike, xp: ModuleType = ...) -> jax.Array: ...
def is_wide(dtype: Any, xp: Any = jnp) -> Any:
    """Whether a tile of this DataType code keeps whole 64-bit Words (two slots each)."""
    dtype = xp.asarray(dtype)
    return (dtype >= 0) & (dtype < 32) & xp.asarray(_WIDE)[xp.clip(dtype, 0, 31)]


@overload
def pool_extent(capacity: ArrayLike, dtype: ArrayLike, W: int, xp: NumpyModule,
                s64: bool = False) -> np.int64 | NDArray[np.int64]: ...
@overload
def pool_extent(capacity: ArrayLike, dtype: ArrayLike, W: int, xp: ModuleType = ...,
                s64: bool = False) -> jax.Array: ...
def pool_extent(capacity: ArrayLike, dtype: ArrayLike, W: int, xp: Any = jnp, s64: bool = False) -> Any:
    """Pool slots a tile of `capacity` (TSize) bytes owns: 2 x TSize, at most its
    window (max_tile_words(W) Words in 64-bit or narrow slots, or two slots per
    Word of a wide tile)."""
    top = max_tile_words(W)
    room = top if s64 else xp.where(is_wide(dtype, xp), window_slots(W), top)
    return xp.clip(2 * xp.asarray(capacity).astype(xp.int64), 0, room)


@overload
def pool_top(allocated: ArrayLike, capacity: ArrayLike, dtype: ArrayLike, base: ArrayLike, W: int,
             xp: NumpyModule, s64: bool = False) -> np.int64 | NDArray[np.int64]: ...
@overload
def pool_top(allocated: ArrayLike, capacity: ArrayLike, dtype: ArrayLike, base: ArrayLike, W: int,
             xp: ModuleType = ..., s64: bool = False) -> jax.Array: ...
def pool_top(allocated: ArrayLike, capacity: ArrayLike, dtype: ArrayLike, base: ArrayLike, W: int,
             xp: Any = jnp, s64: bool = False) -> Any:
    """Where a PE's next tile is placed: the end of its highest placed storage
    (0 with none), over descriptors along the last axis (any leading axes)."""
    ends = xp.asarray(base).astype(xp.int64) + pool_extent(capacity, dtype, W, xp, s64)
    return xp.max(xp.where(xp.asarray(allocated) != 0, ends, 0), axis=-1)


@overload
def pool_start(base: ArrayLike, pool_slots: int, W: int, xp: NumpyModule,
               s64: bool = False) -> np.int64 | NDArray[np.int64]: ...
@overload
def pool_start(base: ArrayLike, pool_slots: int, W: int, xp: ModuleType = ...,
               s64: bool = False) -> jax.Array: ...
def pool_start(base: ArrayLike, pool_slots: int, W: int, xp: Any = jnp, s64: bool = False) -> Any:
    """First pool slot of a tile's window: its base clamped into the pool (as XLA's
    dynamic slices clamp; a base only a hand-made State can hold)."""
    return xp.clip(xp.asarray(base).astype(xp.int64), 0, pool_slots - full_window(W, s64))


def _as_words(pairs: Any, xp: Any) -> Any:     # a numpy array with xp=np, else a jax.Array, in and out
    """uint32[2n] slot pairs (low, high) as uint64[n] (a bitcast, little-endian)."""
    pairs = pairs.reshape(-1, 2)
    if xp is np:
        return np.ascontiguousarray(pairs).view(np.uint64).reshape(-1)
    return jax.lax.bitcast_convert_type(pairs, jnp.uint64)


@overload
def decode_window(slots: NDArray[Any], defined: NDArray[Any], wide: ArrayLike, W: int,
                  xp: NumpyModule) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]: ...
@overload
def decode_window(slots: jax.Array, defined: jax.Array, wide: ArrayLike, W: int,
                  xp: ModuleType = ...) -> tuple[jax.Array, jax.Array]: ...
def decode_window(slots: Any, defined: Any, wide: ArrayLike, W: int, xp: Any = jnp) -> Any:
    """A tile's W Words (uint64) and their definedness from its window's slots."""
    if slots.dtype == np.uint64:                      # 64-bit slots: the Words themselves
        return slots[:W], defined[:W]
    u = xp.asarray(slots).astype(xp.uint32)
    d = xp.asarray(defined)
    n = u.shape[0]                                    # window_slots(W): even
    whole = _as_words(u, xp)                          # n / 2 Words
    whole_d = d.reshape(-1, 2)[:, 0]
    if n // 2 < W:                                    # a wide tile holds at most n / 2
        whole = xp.concatenate([whole, xp.zeros(W - n // 2, xp.uint64)])
        whole_d = xp.concatenate([whole_d, xp.zeros(W - n // 2, bool)])
    lo = u[:W]
    narrow = (lo.astype(xp.int32).astype(xp.int64)).astype(xp.uint64)    # sign-extended
    narrow = xp.where(lo == _TOP32, xp.uint64(_TOP64), narrow)
    return xp.where(wide, whole[:W], narrow), xp.where(wide, whole_d[:W], d[:W])


@overload
def encode_window(words: ArrayLike, defined: ArrayLike, wide: ArrayLike, W: int, xp: NumpyModule,
                  s64: bool = False) -> tuple[NDArray[np.unsignedinteger[Any]], NDArray[np.bool_]]: ...
@overload
def encode_window(words: ArrayLike, defined: ArrayLike, wide: ArrayLike, W: int, xp: ModuleType = ...,
                  s64: bool = False) -> tuple[jax.Array, jax.Array]: ...
def encode_window(words: ArrayLike, defined: ArrayLike, wide: Any, W: int, xp: Any = jnp,
                  s64: bool = False) -> Any:
    """Inverse of decode_window: the window's slots (uint32) and definedness for a
    tile's W Words (a wide tile's Words past half the window do not fit and are
    not kept). Slot j holds Word j // 2's half j % 2 (wide) or Word j (narrow):
    one gather a slot, where concatenating the two forms cost several passes."""
    n = window_slots(W)
    w = xp.asarray(words).astype(xp.uint64)
    d = xp.asarray(defined)
    if s64:
        return w, d
    j = xp.arange(n)
    k = xp.minimum(xp.where(wide, j >> 1, j), W - 1)
    word, bit = w[k], d[k]
    half = (word >> xp.where(wide & ((j & 1) == 1), xp.uint64(32), xp.uint64(0))).astype(xp.uint32)
    narrow_top = ~wide & (word == xp.uint64(_TOP64))
    slots = xp.where(narrow_top, xp.uint32(_TOP32), half)
    inside = wide | (j < W)
    return xp.where(inside, slots, xp.uint32(0)), bit & inside


def _has_slots64(tiles: _TileLeaves) -> bool:
    """Whether a State's Tiles (or a dict of its leaves) keep 64-bit pool slots."""
    return np.asarray(tiles["words"]).dtype == np.uint64


def slot_window(tiles: _TileLeaves, pe: int, slot: int) -> tuple[NDArray[Any], NDArray[np.bool_]]:
    """(slots, defined): numpy views of the window of PE `pe`'s slot `slot` in a
    State's Tiles (or a dict of its numpy leaves, which the views then edit;
    words or defined missing from the dict come back as None). A free slot's
    window is where an allocation of it would be placed (its stale Words)."""
    K, W = np.shape(tiles["defined"])[-2:]
    s64 = _has_slots64(tiles)
    t = {k: np.asarray(tiles[k])[pe] for k in ("allocated", "capacity", "dtype", "base")}
    if not t["allocated"][slot]:
        top = pool_top(t["allocated"], t["capacity"], t["dtype"], t["base"], W, np, s64)
        base = np.minimum(top, K * W - full_window(W, s64))
    else:
        base = t["base"][slot]
    at = int(pool_start(base, K * W, W, np, s64))
    n = full_window(W, s64)
    # never None in fact: _has_slots64 and np.shape above read both keys
    return cast("tuple[NDArray[Any], NDArray[np.bool_]]",
                tuple(np.asarray(tiles[k][pe]).reshape(-1)[at:at + n] if k in tiles else None
                      for k in ("words", "defined")))


def write_tile_words(tiles: Mapping[str, NDArray[Any]], pe: int, slot: int, words: npt.ArrayLike,
                     defined: npt.ArrayLike) -> None:
    """Write a slot's Words and definedness (at most max_tile_words; the rest
    zero and undefined) into the pool of `tiles`, a dict of numpy leaves
    (edited in place), as install does: its own slots only."""
    W = np.shape(tiles["defined"])[-1]
    L = max_tile_words(int(W))
    s64 = _has_slots64(tiles)
    t = {k: np.asarray(tiles[k])[pe, slot] for k in ("capacity", "dtype")}
    n = int(pool_extent(t["capacity"], t["dtype"], W, np, s64))
    wide = bool(is_wide(t["dtype"], np))
    words, defined = np.asarray(words, np.uint64), np.asarray(defined, bool)
    if words.shape[0] < L:
        words = np.concatenate([words, np.zeros(L - words.shape[0], np.uint64)])
        defined = np.concatenate([defined, np.zeros(L - defined.shape[0], bool)])
    for view, new in zip(slot_window(tiles, pe, slot),
                         encode_window(words, defined, wide, L, np, s64)):
        view[:n] = new[:n]


def tile_words(tiles: _TileLeaves, pe: int, slot: int) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """(words uint64[L], defined bool[L]) of PE `pe`'s slot `slot`, L =
    max_tile_words(W), as the executor reads them (decode_window over
    slot_window)."""
    W = np.shape(tiles["defined"])[-1]
    slots, defined = slot_window(tiles, pe, slot)
    return decode_window(slots, defined, bool(is_wide(np.asarray(tiles["dtype"])[pe, slot], np)),
                         max_tile_words(int(W)), np)


PRESETS: dict[str, MachineConfig] = {
    # the ASL model's sizes
    "asl": MachineConfig(),
    # thousands of States: 4 KiB GM, 4 slots per hand of 1024 Words (8 KiB tiles)
    "small": MachineConfig(tile_words=1024, hand_slots=4, shared_slots=8, shared_words=1024),
    # hundreds of thousands: 2 slots per hand of 256 Words (a 16x16 b16 CUBE tile)
    "tiny": MachineConfig(tile_words=256, hand_slots=2, shared_slots=4, shared_words=256),
}


def preset(name: str) -> MachineConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown config preset {name!r}; expected one of {', '.join(PRESETS)}")
    return PRESETS[name]


# ----------------------------------------------------------------- pytree


@pytree_dataclass
class Tiles(PytreeDataclass):
    """Local tile register files: every leaf has a leading PE axis of 4, then
    one entry per materialized slot (TileInfo). Shapes below are per PE."""
    allocated: jax.Array        # bool[S]
    dtype: jax.Array            # int32[S] DataType code
    layout: jax.Array           # int32[S] tables.TILE_LAYOUTS index
    location: jax.Array         # int32[S] tables.TILE_LOCATIONS index
    capacity: jax.Array         # int32[S] per-PE capacity bytes (TSize)
    rows: jax.Array             # int32[S] physical rows
    cols: jax.Array             # int32[S] physical columns
    valid_rows: jax.Array       # int32[S]
    valid_cols: jax.Array       # int32[S]
    k_repeat: jax.Array         # int32[S] CUBE derived fields, 0 for non-CUBE
    n_repeat: jax.Array
    cell_count: jax.Array
    storage_bytes: jax.Array
    mask: jax.Array             # int32[S] 4-bit allocation PE mask, 0 when free
    words: jax.Array            # uint64 or uint32 [K, W]: the PE's payload pool of slots
    defined: jax.Array          # bool[K, W] definedness of each pool slot's Word
    defined_valid: jax.Array    # int32[S] defined elements inside the valid region
    base: jax.Array             # int32[S] first pool slot of the slot's storage


# Tiles' descriptor leaves, in the column order of LocalFile.desc
TILE_FIELDS = ("allocated", "dtype", "layout", "location", "capacity", "rows", "cols",
               "valid_rows", "valid_cols", "k_repeat", "n_repeat", "cell_count", "storage_bytes",
               "mask", "defined_valid", "base")
TILE_COLUMN = {name: i for i, name in enumerate(TILE_FIELDS)}


@pytree_dataclass
class SharedTiles(PytreeDataclass):
    """The Core's Shared tile registers, one entry per materialized record."""
    sid: jax.Array              # int32[R] SharedTileID held, -1 = free record
    allocation_mask: jax.Array  # int32[R] 4-bit PE mask fixed by the allocating write
    initialized_mask: jax.Array  # int32[R] quarters holding written data
    published: jax.Array        # bool[R]
    contents_defined: jax.Array  # bool[R]
    dtype: jax.Array            # int32[R]
    layout: jax.Array           # int32[R] (ordinary layouts only)
    capacity: jax.Array         # int32[R] per-PE TSize bytes
    rows: jax.Array             # int32[R] physical rows (derived from capacity and cols)
    cols: jax.Array             # int32[R]
    valid_rows: jax.Array       # int32[R]
    valid_cols: jax.Array       # int32[R]
    words: jax.Array            # uint64[R, shared_words], element e at its index in the layout
    defined: jax.Array          # bool[R, shared_words] TileLogicalElementDefined of element e


@pytree_dataclass
class Block(PytreeDataclass):
    """Header state of the open block (encoding.md section 3)."""
    active: jax.Array           # bool
    pc: jax.Array               # uint64 BPC of the BSTART
    op: jax.Array               # int32 operation id (isa.OPS), -1 none
    dtype: jax.Array            # int32 BSTART DataType
    datr_present: jax.Array     # bool
    datr: jax.Array             # int32[7] raw Layout, DataType, Pad, CMode, RMode, Sat, Canon
    lb: jax.Array               # int32[3] LB0..LB2 values
    lb_present: jax.Array       # bool[3]
    ior_present: jax.Array      # bool
    ior: jax.Array              # int32[4] RegDst, RegSrc0, RegSrc1, RegSrc2
    iot_count: jax.Array        # int32 recorded (participating) B.IOTs
    iot_closed: jax.Array       # bool: an L=1 binding was recorded
    iot: jax.Array              # int32[MAX_IOT, 8] dst_valid, dst_hand, size_code, mask,
    #                                               src0_valid, src1_valid, src0, src1
    ios_count: jax.Array        # int32
    ios: jax.Array              # int32[MAX_IOS, 3] sid, size_code, mask
    zero_seen: jax.Array        # bool: a PEMode-000 binding was seen in this header
    fpatr_present: jax.Array    # bool
    fpatr: jax.Array            # uint32 raw B.FPATR word
    catr_present: jax.Array     # bool
    catr: jax.Array             # uint32 raw B.CATR word


@dataclass(frozen=True)
class Rules:
    """The rule set a State runs under: MachineConfig.semantics and .profile.

    Static data of the State, as its sizes are (they are its arrays' shapes):
    a pytree node without leaves whose value is part of the tree structure, so
    jit and vmap carry it, a program is compiled for it, and pj.run without
    cfg= runs the rules the State was reset for. A tree_map over States of
    different rules is an error, as one over States of different sizes is."""
    semantics: str = "adr0100"
    profile: str = "portable"

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics {self.semantics!r} not in {SEMANTICS}")
        if self.profile not in PROFILES:
            raise ValueError(f"profile {self.profile!r} not in {PROFILES}")

    @classmethod
    def of(cls, cfg: "MachineConfig") -> "Rules":
        return cls(cfg.semantics, cfg.profile)


jax.tree_util.register_static(Rules)


@pytree_dataclass
class State(PytreeDataclass):
    """One machine: a pytree of arrays (vmap it for a batch) and its Rules."""
    gm: jax.Array               # uint8[gm_bytes]
    gpr: jax.Array              # uint64[4, 24] per-PE GPR files (x0 reads 0)
    pc: jax.Array               # uint64 TPC: address of the next word
    fault: jax.Array            # int32 tables.FAULTS index of _LastFault
    fault_address: jax.Array    # uint64 _FaultAddress
    numeric_flags: jax.Array    # int32 CORE_STATE[36:32], sticky: NV 1, DZ 2, OF 4, UF 8, NX 16
    tile_capacity: jax.Array    # uint64 system register TILE_CAPACITY (bounds each pool)
    tiles: Tiles                # [4, ...] one Local register file per PE
    shared: SharedTiles
    block: Block
    rules: Rules = Rules()      # static: no leaves (see Rules)


def _i32(shape: int | tuple[int, ...] = ()) -> jax.Array:
    return jnp.zeros(shape, jnp.int32)


def empty_block() -> Block:
    return Block(active=jnp.zeros((), bool), pc=jnp.zeros((), jnp.uint64),
                 op=jnp.full((), -1, jnp.int32), dtype=_i32(),
                 datr_present=jnp.zeros((), bool),
                 datr=jnp.array([0, tables.DTYPE_NONE, tables.PAD_NULL, 0, 0, 0, 0], jnp.int32),
                 lb=_i32(3), lb_present=jnp.zeros(3, bool),
                 ior_present=jnp.zeros((), bool), ior=_i32(4),
                 iot_count=_i32(), iot_closed=jnp.zeros((), bool), iot=_i32((MAX_IOT, 8)),
                 ios_count=_i32(), ios=_i32((MAX_IOS, 3)), zero_seen=jnp.zeros((), bool),
                 fpatr_present=jnp.zeros((), bool), fpatr=jnp.zeros((), jnp.uint32),
                 catr_present=jnp.zeros((), bool), catr=jnp.zeros((), jnp.uint32))


def _block_fields() -> tuple[tuple[str, tuple[int, ...], np.dtype[Any]], ...]:
    """(name, shape, dtype) of each Block leaf, in field order."""
    with jax.enable_x64(True):
        b = jax.eval_shape(empty_block)
    return tuple((f.name, getattr(b, f.name).shape, getattr(b, f.name).dtype)
                 for f in dataclasses.fields(Block))


BLOCK_FIELDS = _block_fields()
def _reset(cfg: MachineConfig) -> State:
    P, S, W = tables.NUM_PES, cfg.local_slots, cfg.tile_words
    u64_code = tables.DTYPE_BY_NAME["U64"].code
    row_major = tables.TILE_LAYOUT_CODE["RowMajor"]
    tiles = Tiles(
        allocated=jnp.zeros((P, S), bool),
        dtype=jnp.full((P, S), u64_code, jnp.int32),
        layout=jnp.full((P, S), row_major, jnp.int32),
        location=jnp.full((P, S), tables.TILE_LOCATION_CODE["Any"], jnp.int32),
        capacity=_i32((P, S)), rows=_i32((P, S)), cols=_i32((P, S)), valid_rows=_i32((P, S)),
        valid_cols=_i32((P, S)), k_repeat=_i32((P, S)), n_repeat=_i32((P, S)),
        cell_count=_i32((P, S)), storage_bytes=_i32((P, S)), mask=_i32((P, S)),
        words=jnp.zeros((P, cfg.pool_pages, W), jnp.uint64 if cfg.pool_slots64 else jnp.uint32),
        defined=jnp.zeros((P, cfg.pool_pages, W), bool),
        defined_valid=_i32((P, S)), base=_i32((P, S)))
    R = cfg.shared_slots
    shared = SharedTiles(
        sid=jnp.full(R, -1, jnp.int32), allocation_mask=_i32(R), initialized_mask=_i32(R),
        published=jnp.zeros(R, bool), contents_defined=jnp.zeros(R, bool),
        dtype=jnp.full(R, u64_code, jnp.int32), layout=jnp.full(R, row_major, jnp.int32),
        capacity=_i32(R), rows=_i32(R), cols=_i32(R), valid_rows=_i32(R), valid_cols=_i32(R),
        words=jnp.zeros((R, cfg.shared_words), jnp.uint64),
        defined=jnp.zeros((R, cfg.shared_words), bool))
    return State(gm=jnp.zeros(cfg.gm_bytes, jnp.uint8),
                 gpr=jnp.zeros((tables.NUM_PES, tables.NUM_GPRS), jnp.uint64),
                 pc=jnp.zeros((), jnp.uint64), fault=_i32(),
                 fault_address=jnp.zeros((), jnp.uint64), numeric_flags=_i32(),
                 tile_capacity=jnp.asarray(cfg.tile_capacity, jnp.uint64),
                 tiles=tiles, shared=shared, block=empty_block(), rules=Rules.of(cfg))


def _state_shapes(cfg: MachineConfig) -> object:     # a State of jax.ShapeDtypeStruct leaves
    with jax.enable_x64(True):
        return jax.eval_shape(lambda: _reset(cfg))


@functools.lru_cache(maxsize=None)
def _state_bytes(cfg: MachineConfig) -> int:
    # cached: pj.run asks on every call (machine.stream_runner), and a trace costs ms
    return sum(int(np.prod(l.shape)) * np.dtype(l.dtype).itemsize
               for l in jax.tree_util.tree_leaves(_state_shapes(cfg)))


@x64
def reset(cfg: Optional[MachineConfig] = None) -> State:
    """Profile reset: GM, GPRs and payload Words zero, every tile free, no fault."""
    cfg = MachineConfig() if cfg is None else cfg
    if not isinstance(cfg, MachineConfig):
        raise TypeError(f"reset expects a MachineConfig, got {type(cfg).__name__}")
    return _reset(cfg)


def config_of(s: State) -> MachineConfig:
    """Recover the sizes and rules a State (or a batch of States) was built with."""
    K, W = s.tiles.words.shape[-2:]
    S = s.tiles.base.shape[-1]
    R, WS = s.shared.words.shape[-2:]
    cap = pool_capacity(int(K), int(S), int(W), _has_slots64(s.tiles))
    return MachineConfig(gm_bytes=int(s.gm.shape[-1]), tile_words=int(W), hand_slots=int(S) // 4,
                         shared_slots=int(R), shared_words=int(WS),
                         semantics=s.rules.semantics, profile=s.rules.profile,
                         # Any: mypy checks a ** dict's values against every field
                         **cast("dict[str, Any]", {} if cap is None else {"tile_capacity": cap}))


# ----------------------------------------------------------------- host helpers


def state_leaves(state: object) -> dict[str, NDArray[Any]]:
    """{leaf path (".tiles.words", ".gm", ...): numpy array} of a State (or a
    batch of States), in tree order: the one flattening every comparison uses."""
    return {jax.tree_util.keystr(p): np.asarray(x)
            for p, x in jax.tree_util.tree_leaves_with_path(state)}


def state_differences(a: object, b: object, skip: Iterable[str] = (), limit: Optional[int] = None) -> list[str]:
    """Paths of the leaves whose raw values (or shapes) differ between two
    States, in tree order; fields named in `skip` ("fault", "pc", ...) are
    not compared, and at most `limit` paths are returned."""
    return leaf_differences(state_leaves(a), state_leaves(b), skip, limit)


def leaf_differences(la: Mapping[str, NDArray[Any]], lb: Mapping[str, NDArray[Any]], skip: Iterable[str] = (),
                     limit: Optional[int] = None) -> list[str]:
    """state_differences of two States already flattened by state_leaves."""
    skipped = tuple(f".{name}" for name in skip)
    out = []
    for path in dict.fromkeys([*la, *lb]):
        if path.startswith(skipped):
            continue
        va, vb = la.get(path), lb.get(path)
        if va is None or vb is None or va.shape != vb.shape or not np.array_equal(va, vb):
            out.append(path)
            if limit is not None and len(out) >= limit:
                break
    return out


def check_state(s: object) -> None:
    if not isinstance(s, State):
        raise TypeError(f"expected a ptojax State, got {type(s).__name__}")
    if s.gm.ndim != 1:
        raise ValueError("this helper takes one State, not a batch; index the batch first "
                         "(jax.tree_util.tree_map(lambda a: a[i], states))")


def tile_leaves(leaves: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """{".tiles.words": ..., ...} (state_leaves) as {"words": ..., ...}, the form
    slot_window and own_words read."""
    return {k[len(".tiles."):]: v for k, v in leaves.items() if k.startswith(".tiles.")}


def own_words(tiles: _TileLeaves, pe: int, slot: int) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """(words uint64, defined) of the Words PE `pe`'s allocated slot `slot` owns
    (its pool_extent slots' worth), as tile_words reads them; empty for a free slot."""
    W = np.shape(tiles["defined"])[-1]
    s64 = _has_slots64(tiles)
    t = {k: np.asarray(tiles[k])[pe, slot] for k in ("allocated", "capacity", "dtype")}
    n = int(pool_extent(t["capacity"], t["dtype"], W, np, s64)) if t["allocated"] else 0
    n = n // 2 if is_wide(t["dtype"], np) and not s64 else n
    return cast("tuple[NDArray[np.uint64], NDArray[np.bool_]]", tuple(x[:n] for x in tile_words(tiles, pe, slot)))


def check_pool(s: State) -> None:
    """ValueError when a State's (or a batch's) TILE_CAPACITY register admits
    more Local allocations than its payload pool holds (pool_capacity): build
    the State with pj.reset(cfg) for the register value wanted."""
    K, W = s.tiles.words.shape[-2:]
    cap = pool_capacity(int(K), int(s.tiles.base.shape[-1]), int(W), _has_slots64(s.tiles))
    if cap is not None:
        reg = np.asarray(s.tile_capacity).astype(np.uint64)
        if reg.size and int(reg.max()) > cap:
            raise ValueError(f"TILE_CAPACITY register {int(reg.max())} exceeds {cap}, the most "
                             f"this State's Local payload pool ({K} x {W} slots per PE) holds; "
                             "build it with pj.reset(cfg.replace(tile_capacity=...))")


def check_int(name: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"{name}={v} out of range; expected {lo}..{hi}")
    return int(v)


@x64
def write_memory(s: State, addr: int, data: bytes | bytearray | memoryview | npt.ArrayLike) -> State:
    """Write bytes (bytes, bytearray, or a uint8 array) into GM at `addr`."""
    check_state(s)
    if isinstance(data, (bytes, bytearray, memoryview)):
        buf = np.frombuffer(bytes(data), np.uint8)
    else:
        buf = np.asarray(data)
        if buf.dtype != np.uint8:
            raise TypeError(f"data must be bytes or a uint8 array, got dtype {buf.dtype}")
        buf = buf.reshape(-1)
    n = s.gm.shape[0]
    addr = check_int("addr", addr, 0, n)
    if addr + buf.size > n:
        raise ValueError(f"write of {buf.size} bytes at {addr:#x} runs past GM end {n:#x}")
    return s.replace(gm=s.gm.at[addr:addr + buf.size].set(jnp.asarray(buf)))


def read_memory(s: State, addr: int, n: int) -> bytes:
    """Read `n` bytes of GM starting at `addr`."""
    check_state(s)
    size = s.gm.shape[0]
    addr = check_int("addr", addr, 0, size)
    n = check_int("n", n, 0, size - addr)
    return np.asarray(s.gm[addr:addr + n]).tobytes()


@x64
def write_gpr(s: State, reg: int | str, value: int, pe: int = 0) -> State:
    """Set GPR `reg` (index or name) of PE `pe` to a 64-bit value; x0 stays 0."""
    check_state(s)
    r = tables.gpr_index(reg)
    pe = check_int("pe", pe, 0, tables.NUM_PES - 1)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"value must be an int, got {type(value).__name__}")
    value = int(value)
    if not -(1 << 63) <= value < (1 << 64):
        raise ValueError(f"value {value} does not fit a 64-bit GPR")
    if r == 0:
        return s   # the zero register ignores writes
    return s.replace(gpr=s.gpr.at[pe, r].set(jnp.uint64(value & ((1 << 64) - 1))))


def read_gpr(s: State, reg: int | str, pe: int = 0) -> int:
    check_state(s)
    pe = check_int("pe", pe, 0, tables.NUM_PES - 1)
    return int(np.asarray(s.gpr)[pe, tables.gpr_index(reg)])
