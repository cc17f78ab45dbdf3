"""Plain-Python machine state of the reference model, and its State conversion.

`Machine(state, cfg)` turns a ptojax State (any array leaves) into ints, lists
and a bytearray: four Local tile register files (one per PE, the leading axis
of every State.tiles leaf) and the Core's Shared tile records
(docs/shared-decisions.md section 1). `Machine.to_state` writes the result
back into a State with exactly the array layout and dtypes of
ptojax/state.py. Payload (a Local tile's W Words, decoded from its pool
window, and a Shared record's row) is converted lazily, only what an
operation touches, and to_state writes back only pool slots and rows that
changed; every leaf the run left equal is the input's own jax array. A
default-sized State then costs what the run touches, plus one copy of each
payload leaf it changes (jax arrays are immutable and the input State stays
valid).

`Machine.cur` is the executing PE: `tiles`, `payload`, `tile_at` and the
capacity helpers act on that PE's Local file, so the per-operation code reads
as a single-PE machine (`run(pe=p)` is PE p's view; `run_core` moves `cur`
from PE to PE).
"""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from .. import tables
from ..state import (MAX_IOS, MAX_IOT, WIDE_CODES, MachineConfig, State, decode_window,
                     encode_window, full_window, max_tile_words, pool_extent)

if TYPE_CHECKING:
    import jax

    from ..state import Block as StateBlock, SharedTiles, Tiles
    from .cas_trace import CasRecord

MASK64 = (1 << 64) - 1
DATR_ABSENT = [0, tables.DTYPE_NONE, tables.PAD_NULL, 0, 0, 0, 0]   # block reset value


def _layout_name(code: int) -> Optional[str]:
    return tables.TILE_LAYOUTS[code] if 0 <= code < len(tables.TILE_LAYOUTS) else None


@dataclass
class Tile:
    """One materialized Local tile slot (descriptor fields of A.3)."""
    allocated: bool = False
    dtype: int = tables.DTYPE_BY_NAME["U64"].code
    layout: int = tables.TILE_LAYOUT_CODE["RowMajor"]
    location: int = tables.TILE_LOCATION_CODE["Any"]
    capacity: int = 0
    rows: int = 0
    cols: int = 0
    valid_rows: int = 0
    valid_cols: int = 0
    k_repeat: int = 0
    n_repeat: int = 0
    cell_count: int = 0
    storage_bytes: int = 0
    mask: int = 0
    defined_valid: int = 0
    base: int = 0               # first slot of its storage in the PE's payload pool

    @property
    def layout_name(self) -> Optional[str]:
        return _layout_name(self.layout)

    @property
    def contents_defined(self) -> bool:
        return self.allocated and self.defined_valid == self.valid_rows * self.valid_cols


@dataclass
class SharedRecord:
    """One materialized Shared register record (shared-decisions.md section 1).
    sid -1 = a free record; a SharedTileID without a record is descriptor_valid = false."""
    sid: int = -1
    allocation_mask: int = 0
    initialized_mask: int = 0
    published: bool = False
    contents_defined: bool = False
    dtype: int = tables.DTYPE_BY_NAME["U64"].code
    layout: int = tables.TILE_LAYOUT_CODE["RowMajor"]
    capacity: int = 0
    rows: int = 0
    cols: int = 0
    valid_rows: int = 0
    valid_cols: int = 0

    @property
    def layout_name(self) -> Optional[str]:
        return _layout_name(self.layout)


SHARED_FIELDS = tuple(f.name for f in fields(SharedRecord))
TILE_FIELDS = tuple(f.name for f in fields(Tile))


@dataclass(frozen=True)
class Binding:
    """One recorded (participating) B.IOT (encoding.md 3)."""
    dst_valid: bool
    dst_hand: int
    size_code: int
    mask: int
    src0_valid: bool
    src1_valid: bool
    src0: int
    src1: int
    last: bool

    def row(self) -> list[int]:
        return [int(self.dst_valid), self.dst_hand, self.size_code, self.mask,
                int(self.src0_valid), int(self.src1_valid), self.src0, self.src1]


@dataclass
class Block:
    """Header state of the open block; reset values = state.empty_block()."""
    active: bool = False
    pc: int = 0
    op: int = -1
    dtype: int = 0
    datr_present: bool = False
    datr: list[int] = field(default_factory=lambda: list(DATR_ABSENT))
    lb: list[int] = field(default_factory=lambda: [0, 0, 0])
    lb_present: list[bool] = field(default_factory=lambda: [False, False, False])
    ior_present: bool = False
    ior: list[int] = field(default_factory=lambda: [0, 0, 0, 0])     # RegDst, RegSrc0..2
    iots: list[Binding] = field(default_factory=list)
    iot_closed: bool = False
    ios: list[list[int]] = field(default_factory=list)          # [[sid, size_code, mask]]
    zero_seen: bool = False
    fpatr_present: bool = False
    fpatr: int = 0
    catr_present: bool = False
    catr: int = 0

    def copy(self) -> "Block":
        """An independent copy (one is taken before every word): the lists are
        copied, the Bindings shared (frozen)."""
        return Block(active=self.active, pc=self.pc, op=self.op, dtype=self.dtype,
                     datr_present=self.datr_present, datr=list(self.datr), lb=list(self.lb),
                     lb_present=list(self.lb_present), ior_present=self.ior_present,
                     ior=list(self.ior), iots=list(self.iots), iot_closed=self.iot_closed,
                     ios=[list(r) for r in self.ios], zero_seen=self.zero_seen,
                     fpatr_present=self.fpatr_present, fpatr=self.fpatr,
                     catr_present=self.catr_present, catr=self.catr)


# what Machine.snapshot keeps: GM, the Local files, the payload caches, the Shared
# records and rows (Words, definedness), numeric_flags
Snapshot = tuple[bytes, list[list[Tile]], list[dict[int, tuple[int, list[int], list[bool]]]],
                 list[SharedRecord], dict[int, tuple[list[int], list[bool]]], int]


class Machine:
    """GM bytes, per-PE GPRs, per-PE Local tiles, Shared records, fault register,
    PC and the open block."""

    def __init__(self, state: State, cfg: Optional[MachineConfig] = None) -> None:
        leaves = {k: np.asarray(v) for k, v in state.items()
                  if k not in ("tiles", "shared", "block", "rules")}
        if leaves["gm"].ndim != 1:
            raise ValueError("reference.run takes one State, not a batch")
        P, K, W = state.tiles.words.shape
        S = state.tiles.base.shape[-1]
        if P != tables.NUM_PES:
            raise ValueError(f"State has {P} Local register files, expected {tables.NUM_PES}")
        self.pool_words = K * W
        self.s64 = state.tiles.words.dtype == np.uint64       # 64-bit slots (state.slots64)
        self.window_slots = full_window(W, self.s64)       # a window at its largest
        if S % 4:
            raise ValueError(f"State has {S} tile slots, not a multiple of 4")
        R, WS = state.shared.words.shape
        self.hand_slots = S // 4
        self.array_words = W                                  # pool page width
        self.tile_words = W
        self.shared_slots = R
        self.shared_words = WS
        if cfg is not None:
            if (cfg.hand_slots != self.hand_slots or cfg.gm_bytes != leaves["gm"].shape[0]
                    or cfg.shared_slots != R):
                raise ValueError("cfg does not match the State's sizes "
                                 "(hand_slots, gm_bytes, shared_slots)")
            if cfg.tile_words > W:
                raise ValueError(f"cfg.tile_words={cfg.tile_words} exceeds the State's {W} Words")
            assert cfg.shared_words is not None       # MachineConfig.__post_init__ sets it
            if cfg.shared_words > WS:
                raise ValueError(f"cfg.shared_words={cfg.shared_words} exceeds the State's "
                                 f"{WS} Shared Words")
            self.tile_words = cfg.tile_words
            self.shared_words = cfg.shared_words
        # the bound of a non-CUBE tile's Words: the model's packed tiles
        # (state.max_tile_words) where tile_words is the model's own bound
        self.ordinary_words = max_tile_words(self.tile_words)
        # MGATHER.CAS lane order (cas_order.py); the any-serialization checker
        # (cas_check.py) may force an explicit order and record each CAS's lanes
        self.cas_lane_order = cfg.cas_lane_order if cfg is not None else "row-major"
        self.cas_seed = cfg.cas_seed if cfg is not None else 0
        # numeric profile of the matrix family ("portable" raw words / "ieee") and
        # the cooperative rules ("adr0100" / "0.58.3", shared-decisions.md): cfg's
        # when given, else the rules the State was reset for
        rules = state.rules if cfg is None else cfg
        self.profile = rules.profile
        self.semantics = rules.semantics
        self.cas_forced_order: Optional[list[int]] = None
        self.cas_trace: Optional[list[CasRecord]] = None
        self.gm = bytearray(leaves["gm"].astype(np.uint8).tobytes())
        self.gpr = [[int(x) & MASK64 for x in row] for row in leaves["gpr"].astype(np.uint64).tolist()]
        self.pc = int(leaves["pc"]) & MASK64
        self.fault = int(leaves["fault"])
        self.fault_address = int(leaves["fault_address"]) & MASK64
        self.numeric_flags = int(leaves["numeric_flags"]) & 0x1F
        self.tile_capacity = int(leaves["tile_capacity"])
        self._state = state
        t = [np.asarray(getattr(state.tiles, k)).tolist() for k in TILE_FIELDS]
        self.files = [[Tile(bool(allocated), *map(int, rest))     # TILE_FIELDS order
                       for allocated, *rest in zip(*(v[p] for v in t))] for p in range(P)]
        sh = {k: np.asarray(getattr(state.shared, k)).tolist() for k in SHARED_FIELDS}
        # (a dict of int and bool values: mypy cannot match ** of it to the fields)
        self.shared = [SharedRecord(**cast(dict[str, Any],
                                           {k: (bool(v[i]) if k in ("published", "contents_defined")
                                                else int(v[i])) for k, v in sh.items()}))
                       for i in range(R)]
        # per PE: slot -> (window start, words, defined) as the run has them
        self._payloads: list[dict[int, tuple[int, list[int], list[bool]]]] = [{} for _ in range(P)]
        # record -> (Words, definedness) as the run has them
        self._shared_payload: dict[int, tuple[list[int], list[bool]]] = {}
        # (pe, window start) -> the State's (words, defined) there: to_state writes
        # back only a tile's own Words that differ
        self._loaded: dict[tuple[int, int], tuple[NDArray[Any], NDArray[Any]]] = {}
        self._shared_loaded: dict[int, tuple[list[int], list[bool]]] = {}
        self.cur = 0                 # the executing PE
        self.core = False            # run_core: completions are collectives
        self.block = self._block_from_state(state.block)

    # ------------------------------------------------------------- Local tiles (PE cur)

    @property
    def tiles(self) -> list[Tile]:
        """The executing PE's Local file (one Tile per materialized slot)."""
        return self.files[self.cur]

    def slot_of(self, index: int) -> Optional[int]:
        """Materialized slot of TileIndex 0..63: (i//16)*hand_slots + i%16, None past hand_slots."""
        if not 0 <= index < tables.LOCAL_TILES:
            return None
        hand, k = divmod(index, tables.HAND_SLOTS)
        return hand * self.hand_slots + k if k < self.hand_slots else None

    def tile_at(self, index: int) -> Tile:
        """Descriptor of TileIndex `index` in PE cur's file; unmaterialized = a free tile."""
        slot = self.slot_of(index)
        return self.tiles[slot] if slot is not None else Tile()

    # ------------------------------------------------------------- payload pool
    # A State keeps each PE's Local payload as one pool of slots, 64-bit Words
    # where the budget cannot bind, else 32-bit (ptojax/state.py, "payload
    # pool"): a tile's storage is the window of
    # window_slots(W) slots from its base, the first min(2 x capacity, its
    # window) its own; a 32/64-bit tile keeps each Word in two slots, any other
    # in one (the Word is the slot sign-extended); a new tile is placed where
    # the PE's highest placed storage ends. This is how the State lays the
    # payload out, not machine behaviour: every slot reads as a W-Word row here.

    def wide(self, tile: Tile) -> bool:
        return tile.dtype in WIDE_CODES

    def extent(self, tile: Tile) -> int:
        """Pool slots a tile owns (state.pool_extent)."""
        return int(pool_extent(tile.capacity, tile.dtype, self.array_words, np, self.s64))

    def held(self, tile: Tile) -> int:
        """Words a tile's own slots hold: one a slot, a wide tile's two a Word."""
        n = self.extent(tile)
        return n // 2 if self.wide(tile) and not self.s64 else n

    def next_base(self, pe: int) -> int:
        """Where PE `pe`'s next tile goes: the end of its highest placed storage."""
        top = max([0] + [t.base + self.extent(t) for t in self.files[pe] if t.allocated])
        return min(top, self.pool_words - self.window_slots)

    def window(self, pe: int, tile: Tile) -> int:
        """Start of a tile's window: its base clamped into the pool; a free slot's
        is where it would be placed."""
        if not tile.allocated:
            return self.next_base(pe)
        return min(max(tile.base, 0), self.pool_words - self.window_slots)

    def place(self, slot: int) -> None:
        """Put a slot of PE cur that is being allocated at its pool top."""
        tile = self.tiles[slot]
        tile.allocated = False
        tile.base = self.next_base(self.cur)
        tile.allocated = True
        self._payloads[self.cur].pop(slot, None)

    def payload(self, slot: int, pe: Optional[int] = None) -> tuple[list[int], list[bool]]:
        """(words, defined) lists of one slot of PE `pe` (default cur): its Words,
        tile_words or as many as its own slots hold (a packed tile's logical
        elements fit them), decoded from its window on first use."""
        pe = self.cur if pe is None else pe
        cache = self._payloads[pe]
        if slot not in cache:
            tile = self.files[pe][slot]
            at = self.window(pe, tile)
            if (pe, at) not in self._loaded:
                self._loaded[pe, at] = cast(tuple[NDArray[Any], NDArray[Any]], tuple(
                    np.asarray(leaf)[pe].reshape(-1)[at:at + self.window_slots].copy()
                    for leaf in (self._state.tiles.words, self._state.tiles.defined)))
            n = max(self.tile_words, self.held(tile))
            words, defined = decode_window(*self._loaded[pe, at], self.wide(tile), n, np)
            cache[slot] = (at, words.tolist(), defined.tolist())
        return cache[slot][1:]

    def local_charge(self, pe: Optional[int] = None) -> int:
        """Local pool of PE `pe` (default cur): sum over its allocated tiles of
        popcount(mask) * capacity (the A.5 charge, per PE file)."""
        pe = self.cur if pe is None else pe
        return sum(bin(t.mask & 0xF).count("1") * t.capacity for t in self.files[pe] if t.allocated)

    def capacity_in_use(self) -> int:
        """What a new Local allocation of PE cur is weighed against: its Local
        pool (adr0100), or Local(cur) + Shared (0.58.3's one Core budget)."""
        used = self.local_charge()
        if self.semantics == "0.58.3":
            used += self.shared_charge()
        return used

    # ------------------------------------------------------------- Shared records

    def shared_charge(self) -> int:
        """Shared pool: sum over records of popcount(allocation_mask) * capacity."""
        return sum(bin(r.allocation_mask & 0xF).count("1") * r.capacity
                   for r in self.shared if r.sid >= 0)

    def record_of(self, sid: int) -> Optional[int]:
        """Index of the record holding SharedTileID `sid`, None when it has none."""
        for i, r in enumerate(self.shared):
            if r.sid == sid:
                return i
        return None

    def free_record(self) -> Optional[int]:
        """Lowest free record (sid -1)."""
        for i, r in enumerate(self.shared):
            if r.sid < 0:
                return i
        return None

    def _shared_row(self, record: int) -> tuple[list[int], list[bool]]:
        """(Words, definedness) of one record, converted on first use."""
        if record not in self._shared_payload:
            if record not in self._shared_loaded:
                self._shared_loaded[record] = (
                    _row(self._state.shared.words, (record,), np.uint64),
                    cast(list[bool], _row(self._state.shared.defined, (record,), np.bool_)))
            words, defined = self._shared_loaded[record]
            self._shared_payload[record] = (list(words), list(defined))
        return self._shared_payload[record]

    def shared_payload(self, record: int) -> list[int]:
        """Payload Words of one record (a list to write in place)."""
        return self._shared_row(record)[0]

    def shared_defined(self, record: int) -> list[bool]:
        """Per-element definedness (TileLogicalElementDefined) of one record's
        Words, beside shared_payload (a list to write in place)."""
        return self._shared_row(record)[1]

    # ------------------------------------------------------------- collective rollback

    def snapshot(self) -> Snapshot:
        """Everything a completing block can change (run_core's all-or-none). Tiles,
        records and payload rows hold only ints and bools: one level of copying is a
        full copy (deepcopy of 32,768-Word rows would cost more than the block)."""
        return (bytes(self.gm), [[copy.copy(t) for t in f] for f in self.files],
                [{s: (at, list(w), list(d)) for s, (at, w, d) in c.items()}
                 for c in self._payloads],
                [copy.copy(r) for r in self.shared],
                {r: (list(w), list(d)) for r, (w, d) in self._shared_payload.items()},
                self.numeric_flags)

    def restore(self, snap: Snapshot) -> None:
        gm, files, payloads, shared, shared_payload, self.numeric_flags = snap
        self.gm = bytearray(gm)
        self.files, self._payloads = files, payloads
        self.shared, self._shared_payload = shared, shared_payload

    # ------------------------------------------------------------- block

    @staticmethod
    def _block_from_state(b: StateBlock) -> Block:
        # the fields are in their domains (block_domain.check_block, on entry to run)
        g = {k: np.asarray(v) for k, v in b.items()}
        iot_count, ios_count = int(g["iot_count"]), int(g["ios_count"])
        closed = bool(g["iot_closed"])
        iots = []
        for i, r in enumerate(g["iot"].tolist()[:iot_count]):
            iots.append(Binding(bool(r[0]), int(r[1]), int(r[2]), int(r[3]), bool(r[4]), bool(r[5]),
                                int(r[6]), int(r[7]), last=closed and i == iot_count - 1))
        return Block(active=bool(g["active"]), pc=int(g["pc"]) & MASK64, op=int(g["op"]),
                     dtype=int(g["dtype"]), datr_present=bool(g["datr_present"]),
                     datr=[int(x) for x in g["datr"].tolist()],
                     lb=[int(x) for x in g["lb"].tolist()],
                     lb_present=[bool(x) for x in g["lb_present"].tolist()],
                     ior_present=bool(g["ior_present"]), ior=[int(x) for x in g["ior"].tolist()],
                     iots=iots, iot_closed=closed,
                     ios=[[int(x) for x in r] for r in g["ios"].tolist()[:ios_count]],
                     zero_seen=bool(g["zero_seen"]), fpatr_present=bool(g["fpatr_present"]),
                     fpatr=int(g["fpatr"]), catr_present=bool(g["catr_present"]),
                     catr=int(g["catr"]))

    # ------------------------------------------------------------- write back

    def _descriptors(self) -> tuple[dict[str, NDArray[Any] | np.generic], dict[str, NDArray[Any]],
                                    dict[str, NDArray[Any]], dict[str, NDArray[Any]]]:
        """The machine's small leaves as numpy: (the State's own scalars, GM and
        GPRs; the Local descriptor columns; the Shared record columns; the block)."""
        top: dict[str, NDArray[Any] | np.generic] = {
               "gm": np.frombuffer(self.gm, np.uint8).copy(),
               "gpr": np.array(self.gpr, np.uint64), "pc": np.uint64(self.pc),
               "fault": np.int32(self.fault), "fault_address": np.uint64(self.fault_address),
               "numeric_flags": np.int32(self.numeric_flags),
               "tile_capacity": np.uint64(self.tile_capacity)}
        local = descriptor_columns([t for f in self.files for t in f],
                                   (len(self.files), len(self.files[0])), TILE_FIELDS,
                                   ("allocated",))
        records = descriptor_columns(self.shared, (len(self.shared),), SHARED_FIELDS,
                                     ("published", "contents_defined"))
        return top, local, records, self._block_leaves()

    def _shared_written(self, part: int) -> dict[tuple[int, ...], list[Any]]:
        """(record,) -> Words (part 0) or definedness (part 1) of the Shared rows
        whose part the run changed."""
        return {(r,): row[part] for r, row in self._shared_payload.items()
                if row[part] != self._shared_loaded[r][part]}

    def to_state(self) -> State:
        """A new State holding this machine, same shapes and dtypes as ptojax/state.py.
        A leaf equal to the input State's is the input's own jax array (immutable,
        so sharing it is safe): the cost follows what the run changed."""
        import jax

        with jax.enable_x64(True):
            old = self._state
            top, local, records, block = self._descriptors()
            words, defined = self._written()
            tiles = old.tiles.replace(
                words=with_words(old.tiles.words, old.tiles.words.dtype, words),
                defined=with_words(old.tiles.defined, bool, defined),
                **kept_or_put(old.tiles, local))
            shared = old.shared.replace(
                words=with_rows(old.shared.words, np.uint64, self._shared_written(0)),
                defined=with_rows(old.shared.defined, bool, self._shared_written(1)),
                **kept_or_put(old.shared, records))
            return old.replace(tiles=tiles, shared=shared,
                               block=old.block.replace(**kept_or_put(old.block, block)),
                               **kept_or_put(old, top))

    def to_leaves(self) -> dict[str, NDArray[Any]]:
        """The machine as numpy leaves keyed and ordered as state.state_leaves
        gives them, never touching JAX: what a campaign compares. A payload
        leaf the run did not write is the input State's own array (read only)."""
        top, local, records, block = self._descriptors()
        words, defined = self._written()
        old = self._state
        tiles = dict(local, words=np_with_words(old.tiles.words, words),
                     defined=np_with_words(old.tiles.defined, defined))
        pools = {}
        for part, (name, dtype) in enumerate((("words", np.uint64), ("defined", np.bool_))):
            pool = np.asarray(getattr(old.shared, name))
            rows = self._shared_written(part)
            if rows:
                pool = pool.copy()
                for (r,), values in rows.items():
                    pool[r] = np.array(values, dtype)
            pools[name] = pool
        shared = dict(records, **pools)
        out = {}
        for name, group in (("", top), ("tiles.", tiles), ("shared.", shared), ("block.", block)):
            for k, v in group.items():
                out[f".{name}{k}"] = np.asarray(v)
        return {k: out[k] for k in leaf_order(old)}

    def _written(self) -> tuple[dict[tuple[int, int], object], dict[tuple[int, int], object]]:
        """(pe, pool slot) -> value of the allocated tiles' own slots that differ
        from the input State's: (words, defined)."""
        out: tuple[dict[tuple[int, int], object], dict[tuple[int, int], object]] = ({}, {})
        for pe, cache in enumerate(self._payloads):
            for slot, (at, words, defined) in cache.items():
                tile = self.files[pe][slot]
                if not tile.allocated or self.window(pe, tile) != at:
                    continue            # a free slot owns no Words
                # the Words of the tile's own n slots only (a narrow or 64-bit slot
                # holds one, a wide pair of 32-bit slots one): the window past them
                # is not the tile's, and at the model's bounds it is up to 131,072 slots
                n = self.extent(tile)
                held = self.held(tile)
                new = encode_window(np.array(words[:held], np.uint64), np.array(defined[:held], bool),
                                    self.wide(tile), held, np, self.s64)
                back = decode_window(*new, self.wide(tile), held, np)[0]
                if back.tolist() != words[:held]:
                    raise AssertionError(f"PE{pe} slot {slot}: a Word no {tile.dtype=} carrier "
                                         "holds (state.py, payload pool)")
                for part, written in enumerate(out):
                    now, was = new[part][:n], self._loaded[pe, at][part][:n]
                    written.update({(pe, at + j): now[j]
                                    for j in np.flatnonzero(now != was).tolist()})
        return out

    def _block_leaves(self) -> dict[str, NDArray[Any]]:
        b = self.block
        iot = np.zeros((MAX_IOT, 8), np.int32)
        for i, binding in enumerate(b.iots):
            iot[i] = binding.row()
        ios = np.zeros((MAX_IOS, 3), np.int32)
        for i, r in enumerate(b.ios):
            ios[i] = r
        leaves = {"active": np.bool_(b.active), "pc": np.uint64(b.pc), "op": np.int32(b.op),
                  "dtype": np.int32(b.dtype), "datr_present": np.bool_(b.datr_present),
                  "datr": np.array(b.datr, np.int32), "lb": np.array(b.lb, np.int32),
                  "lb_present": np.array(b.lb_present, bool),
                  "ior_present": np.bool_(b.ior_present), "ior": np.array(b.ior, np.int32),
                  "iot_count": np.int32(len(b.iots)), "iot_closed": np.bool_(b.iot_closed),
                  "iot": iot, "ios_count": np.int32(len(b.ios)), "ios": ios,
                  "zero_seen": np.bool_(b.zero_seen), "fpatr_present": np.bool_(b.fpatr_present),
                  "fpatr": np.uint32(b.fpatr & 0xFFFFFFFF),
                  "catr_present": np.bool_(b.catr_present),
                  "catr": np.uint32(b.catr & 0xFFFFFFFF)}
        return {k: np.asarray(v) for k, v in leaves.items()}


@functools.lru_cache(maxsize=8)
def _leaf_order(treedef: jax.tree_util.PyTreeDef) -> tuple[str, ...]:
    import jax
    leaves = jax.tree_util.tree_unflatten(treedef, range(treedef.num_leaves))
    return tuple(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(leaves))


_LEAF_ORDER: list[tuple[str, ...]] = []


def leaf_order(state: State) -> tuple[str, ...]:
    """The leaf paths of a State in state.state_leaves' order (every State has
    the same: found once)."""
    if not _LEAF_ORDER:
        import jax
        _LEAF_ORDER.append(_leaf_order(jax.tree_util.tree_structure(state)))
    return _LEAF_ORDER[0]


def np_with_words(leaf: npt.ArrayLike, words: Mapping[tuple[int, int], object]) -> NDArray[Any]:
    """A [4, K, W] numpy pool leaf with `words` ((pe, slot of the PE's pool) ->
    value) written into a copy; the leaf itself (as numpy) when there are none."""
    a = np.asarray(leaf)
    if not words:
        return a
    a = a.copy()
    W = a.shape[2]
    keys = np.array(list(words), np.int64).reshape(-1, 2)
    a[keys[:, 0], keys[:, 1] // W, keys[:, 1] % W] = np.array(list(words.values()), a.dtype)
    return a


def _row(leaf: npt.ArrayLike, index: tuple[int, ...], dtype: npt.DTypeLike) -> list[int]:
    """One payload row of a State leaf as Python values. np.asarray of a CPU jax
    array is a view, so only this row is converted."""
    return cast(list[int], np.asarray(leaf)[index].astype(dtype).tolist())


def descriptor_columns(items: Sequence[object], shape: tuple[int, ...], names: tuple[str, ...],
                       flags: tuple[str, ...]) -> dict[str, NDArray[Any]]:
    """{field: numpy array of `shape`} of descriptor objects (Tiles or SharedRecords,
    in row-major order): bool for the `flags`, int32 for the other fields."""
    get = operator.attrgetter(*names)
    a = np.array([get(x) for x in items], np.int64).reshape(*shape, len(names))
    return {k: a[..., i].astype(bool if k in flags else np.int32) for i, k in enumerate(names)}


def kept_or_put(old: Tiles | SharedTiles | StateBlock | State,
                new: Mapping[str, NDArray[Any] | np.generic]) -> dict[str, jax.Array]:
    """{name: leaf}: old[name] where it is a jax array equal to new[name] (same dtype
    and shape; sharing an immutable array is safe), else new[name] (an array this
    module built and drops) on the device, all in one device_put."""
    import jax

    kept, put = {}, {}
    for k, v in new.items():
        o = old[k]
        if isinstance(o, jax.Array) and o.dtype == v.dtype and o.shape == v.shape \
                and np.array_equal(np.asarray(o), v):
            kept[k] = o
        else:
            put[k] = v
    return {**kept, **jax.device_put(put)}


@functools.cache
def _scatter() -> Callable[..., jax.Array]:
    import jax
    return jax.jit(lambda leaf, index, rows: leaf.at[index].set(rows))


def with_words(leaf: jax.Array | NDArray[Any], dtype: npt.DTypeLike,
               words: Mapping[tuple[int, int], object]) -> jax.Array:
    """A [4, K, W] pool leaf with `words` ((pe, slot of the PE's pool) -> value)
    written: with_rows at [pe, slot // W, slot % W]."""
    import jax

    W = leaf.shape[2]
    # [pe, page, column] indices: reshaping a jax leaf would copy it
    at3: dict[tuple[int, ...], object] = {(pe, at // W, at % W): v for (pe, at), v in words.items()}
    if not at3 and isinstance(leaf, jax.Array) and leaf.dtype == dtype:
        return leaf
    return with_rows(leaf, dtype, at3)


def with_rows(leaf: jax.Array | NDArray[Any], dtype: npt.DTypeLike,
              rows: Mapping[tuple[int, ...], object]) -> jax.Array:
    """`leaf` as a jax array of `dtype` with `rows` (index tuple -> list) written.
    A jax leaf of that dtype is returned as is when there are no rows, else
    through one scatter, which copies it once whatever the number of rows. Any
    other leaf (a numpy State's) is copied in numpy, written, then handed to jax:
    on CPU, device_put may alias a numpy array even with may_alias=False, and
    the caller's array must never share memory with the result."""
    import jax

    if not (isinstance(leaf, jax.Array) and leaf.dtype == dtype):
        new = np.array(leaf, dtype)
        for k, v in rows.items():
            new[k] = np.array(v, dtype)
        return cast(jax.Array, jax.device_put(new))
    if not rows:
        return leaf
    keys = list(rows)
    # repeat the last row up to a power of two: few scatter shapes get compiled
    keys += keys[-1:] * ((1 << (len(keys) - 1).bit_length()) - len(keys))
    index = tuple(np.array(i) for i in zip(*keys))
    return _scatter()(leaf, index, np.array([rows[k] for k in keys], dtype))
