"""Plain-Python machine state of the reference model, and its State conversion.

`Machine.from_state` turns a ptojax State (any array leaves) into ints, lists
and a bytearray; `Machine.to_state` writes the result back into a State with
exactly the array layout and dtypes of ptojax/state.py. Tile payload rows are
converted lazily (only the slots an operation touches), so a default-sized
State with 64 x 32768 payload Words stays cheap to run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import tables
from ..state import MAX_IOS, MAX_IOT, MachineConfig, State

MASK64 = (1 << 64) - 1
DATR_ABSENT = [0, tables.DTYPE_NONE, tables.PAD_NULL, 0, 0, 0, 0]   # block reset value
DATR_FIELD_MASKS = (0x1F, 0x1F, 0x3, 0x7, 0x7, 0x1, 0x1)          # Layout .. Canonicalize


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

    @property
    def layout_name(self) -> Optional[str]:
        return tables.TILE_LAYOUTS[self.layout] if 0 <= self.layout < len(tables.TILE_LAYOUTS) else None

    @property
    def contents_defined(self) -> bool:
        return self.allocated and self.defined_valid == self.valid_rows * self.valid_cols


@dataclass
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
    """Header state of the open block; reset values = state._empty_block()."""
    active: bool = False
    pc: int = 0
    op: int = -1
    dtype: int = 0
    datr_present: bool = False
    datr: list = field(default_factory=lambda: list(DATR_ABSENT))
    lb: list = field(default_factory=lambda: [0, 0, 0])
    lb_present: list = field(default_factory=lambda: [False, False, False])
    ior_present: bool = False
    ior: list = field(default_factory=lambda: [0, 0, 0, 0])     # RegDst, RegSrc0..2
    iots: list = field(default_factory=list)                    # [Binding]
    iot_closed: bool = False
    ios: list = field(default_factory=list)                     # [[sid, size_code, mask]]
    zero_seen: bool = False
    fpatr_present: bool = False
    fpatr: int = 0
    catr_present: bool = False
    catr: int = 0

    def copy(self) -> "Block":
        return copy.deepcopy(self)


class Machine:
    """GM bytes, per-PE GPRs, Local tiles, fault register, PC and the open block."""

    def __init__(self, state: State, cfg: Optional[MachineConfig] = None):
        leaves = {k: np.asarray(v) for k, v in state.items() if k not in ("tiles", "block")}
        if leaves["gm"].ndim != 1:
            raise ValueError("reference.run takes one State, not a batch")
        t = {k: np.asarray(v) for k, v in state.tiles.items() if k not in ("words", "defined")}
        S, W = state.tiles.words.shape
        if S % 4:
            raise ValueError(f"State has {S} tile slots, not a multiple of 4")
        self.hand_slots = S // 4
        self.array_words = W
        self.tile_words = W
        if cfg is not None:
            if cfg.hand_slots != self.hand_slots or cfg.gm_bytes != leaves["gm"].shape[0]:
                raise ValueError("cfg does not match the State's sizes (hand_slots, gm_bytes)")
            if cfg.tile_words > W:
                raise ValueError(f"cfg.tile_words={cfg.tile_words} exceeds the State's {W} Words")
            self.tile_words = cfg.tile_words
        # MGATHER.CAS lane order (cas_order.py); the any-serialization checker
        # (cas_check.py) may force an explicit order and record each CAS's lanes
        self.cas_lane_order = cfg.cas_lane_order if cfg is not None else "row-major"
        self.cas_seed = cfg.cas_seed if cfg is not None else 0
        # numeric profile of the matrix family ("portable" raw words / "ieee")
        self.profile = cfg.profile if cfg is not None else "portable"
        self.cas_forced_order: Optional[list] = None
        self.cas_trace: Optional[list] = None
        self.gm = bytearray(leaves["gm"].astype(np.uint8).tobytes())
        self.gpr = [[int(x) & MASK64 for x in row] for row in leaves["gpr"].astype(np.uint64).tolist()]
        self.pc = int(leaves["pc"]) & MASK64
        self.fault = int(leaves["fault"])
        self.fault_address = int(leaves["fault_address"]) & MASK64
        self.tile_capacity = int(leaves["tile_capacity"])
        self._state = state
        cols = {k: t[k].tolist() for k in ("allocated", "dtype", "layout", "location", "capacity",
                                            "rows", "cols", "valid_rows", "valid_cols", "k_repeat",
                                            "n_repeat", "cell_count", "storage_bytes", "mask",
                                            "defined_valid")}
        self.tiles = [Tile(**{k: (bool(v[i]) if k == "allocated" else int(v[i]))
                              for k, v in cols.items()}) for i in range(S)]
        self._arrays = None          # numpy copies of words/defined, made on first payload use
        self._payload: dict[int, tuple[list, list]] = {}
        self.block = self._block_from_state(state.block)

    # ------------------------------------------------------------- tiles

    def slot_of(self, index: int) -> Optional[int]:
        """Materialized slot of TileIndex 0..63: (i//16)*hand_slots + i%16, None past hand_slots."""
        if not 0 <= index < tables.LOCAL_TILES:
            return None
        hand, k = divmod(index, tables.HAND_SLOTS)
        return hand * self.hand_slots + k if k < self.hand_slots else None

    def tile_at(self, index: int) -> Tile:
        """Descriptor of TileIndex `index`; an unmaterialized index reads as a free tile."""
        slot = self.slot_of(index)
        return self.tiles[slot] if slot is not None else Tile()

    def payload(self, slot: int) -> tuple[list, list]:
        """(words, defined) lists of one slot, converted on first use."""
        if slot not in self._payload:
            words, defined = self._payload_arrays()
            self._payload[slot] = ([int(x) for x in words[slot].tolist()],
                                   [bool(x) for x in defined[slot].tolist()])
        return self._payload[slot]

    def _payload_arrays(self):
        if self._arrays is None:
            self._arrays = (np.asarray(self._state.tiles.words).astype(np.uint64),
                            np.asarray(self._state.tiles.defined).astype(bool))
        return self._arrays

    def capacity_in_use(self) -> int:
        """A.5: sum over allocated tiles of popcount(mask) * capacity."""
        return sum(bin(t.mask & 0xF).count("1") * t.capacity for t in self.tiles if t.allocated)

    # ------------------------------------------------------------- block

    @staticmethod
    def _block_from_state(b) -> Block:
        g = {k: np.asarray(v) for k, v in b.items()}
        iot_count = max(0, min(int(g["iot_count"]), MAX_IOT))
        ios_count = max(0, min(int(g["ios_count"]), MAX_IOS))
        closed = bool(g["iot_closed"])
        iots = []
        for i, r in enumerate(g["iot"].tolist()[:iot_count]):
            iots.append(Binding(bool(r[0]), int(r[1]), int(r[2]), int(r[3]), bool(r[4]), bool(r[5]),
                                int(r[6]), int(r[7]), last=closed and i == iot_count - 1))
        # B.DATR fields are raw encoded fields: keep only their encoded widths
        datr = [int(x) & w for x, w in zip(g["datr"].tolist(), DATR_FIELD_MASKS)]
        return Block(active=bool(g["active"]), pc=int(g["pc"]) & MASK64, op=int(g["op"]),
                     dtype=int(g["dtype"]), datr_present=bool(g["datr_present"]),
                     datr=datr,
                     lb=[int(x) for x in g["lb"].tolist()],
                     lb_present=[bool(x) for x in g["lb_present"].tolist()],
                     ior_present=bool(g["ior_present"]), ior=[int(x) for x in g["ior"].tolist()],
                     iots=iots, iot_closed=closed,
                     ios=[[int(x) for x in r] for r in g["ios"].tolist()[:ios_count]],
                     zero_seen=bool(g["zero_seen"]), fpatr_present=bool(g["fpatr_present"]),
                     fpatr=int(g["fpatr"]), catr_present=bool(g["catr_present"]),
                     catr=int(g["catr"]))

    # ------------------------------------------------------------- write back

    def to_state(self) -> State:
        """A new State holding this machine, same shapes and dtypes as ptojax/state.py."""
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(True):
            old = self._state.tiles
            if self._payload:       # only slots an operation touched were converted
                words, defined = (a.copy() for a in self._payload_arrays())
                for slot, (w, d) in self._payload.items():
                    words[slot] = np.array(w, dtype=np.uint64)
                    defined[slot] = np.array(d, dtype=bool)
                words, defined = jnp.asarray(words), jnp.asarray(defined)
            else:
                words = jnp.asarray(old.words, jnp.uint64)
                defined = jnp.asarray(old.defined, bool)

            def col(name, dt=np.int32):
                return jnp.asarray(np.array([getattr(t, name) for t in self.tiles], dtype=dt))

            tiles = self._state.tiles.replace(
                allocated=col("allocated", bool), dtype=col("dtype"), layout=col("layout"),
                location=col("location"), capacity=col("capacity"), rows=col("rows"),
                cols=col("cols"), valid_rows=col("valid_rows"), valid_cols=col("valid_cols"),
                k_repeat=col("k_repeat"), n_repeat=col("n_repeat"), cell_count=col("cell_count"),
                storage_bytes=col("storage_bytes"), mask=col("mask"),
                words=words, defined=defined,
                defined_valid=col("defined_valid"))
            b = self.block
            iot = np.zeros((MAX_IOT, 8), np.int32)
            for i, binding in enumerate(b.iots):
                iot[i] = binding.row()
            ios = np.zeros((MAX_IOS, 3), np.int32)
            for i, r in enumerate(b.ios):
                ios[i] = r
            block = self._state.block.replace(
                active=jnp.asarray(b.active, bool), pc=jnp.asarray(b.pc, jnp.uint64),
                op=jnp.asarray(b.op, jnp.int32), dtype=jnp.asarray(b.dtype, jnp.int32),
                datr_present=jnp.asarray(b.datr_present, bool),
                datr=jnp.asarray(np.array(b.datr, np.int32)),
                lb=jnp.asarray(np.array(b.lb, np.int32)),
                lb_present=jnp.asarray(np.array(b.lb_present, bool)),
                ior_present=jnp.asarray(b.ior_present, bool),
                ior=jnp.asarray(np.array(b.ior, np.int32)),
                iot_count=jnp.asarray(len(b.iots), jnp.int32),
                iot_closed=jnp.asarray(b.iot_closed, bool), iot=jnp.asarray(iot),
                ios_count=jnp.asarray(len(b.ios), jnp.int32), ios=jnp.asarray(ios),
                zero_seen=jnp.asarray(b.zero_seen, bool),
                fpatr_present=jnp.asarray(b.fpatr_present, bool),
                fpatr=jnp.asarray(b.fpatr & 0xFFFFFFFF, jnp.uint32),
                catr_present=jnp.asarray(b.catr_present, bool),
                catr=jnp.asarray(b.catr & 0xFFFFFFFF, jnp.uint32))
            return self._state.replace(
                gm=jnp.asarray(np.frombuffer(bytes(self.gm), np.uint8).copy()),
                gpr=jnp.asarray(np.array(self.gpr, dtype=np.uint64)),
                pc=jnp.asarray(self.pc, jnp.uint64),
                fault=jnp.asarray(self.fault, jnp.int32),
                fault_address=jnp.asarray(self.fault_address, jnp.uint64),
                tile_capacity=jnp.asarray(self.tile_capacity, jnp.uint64),
                tiles=tiles, block=block)
