"""Lookup tables as arrays and the Local-tile helpers every operation shares."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Optional, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import tables
from ..indexing import row, set_row
from ..layouts.geometry import CELL_SHAPES, MODEL_TILE_ELEMENTS, derived, shape_legal
from .lowering import settle
from ..state import (TILE_COLUMN as COL, TILE_FIELDS, MachineConfig, SharedTiles, State, decode_window,
                     encode_window, full_window, is_wide, pool_extent, pool_start, pool_top, window_slots)
from ..storage import PeFile, PoolWrite

F = tables.FAULT_CODE
U64 = jnp.uint64

DT_BITS = np.zeros(32, np.int32)
DT_SIGNED = np.zeros(32, bool)
DT_INT = np.zeros(32, bool)
DT_CLASS = np.full(32, -1, np.int32)          # 0 b32, 1 b16, 2 b8, 3 b4, -1 none
_CLASSES = ("b32", "b16", "b8", "b4")
PAD_WORDS = np.zeros((32, 4), np.uint64)       # [dtype, PadValue] carrier words
for _d in tables.DATATYPES:
    DT_BITS[_d.code] = _d.bits
    DT_SIGNED[_d.code] = _d.signed
    DT_INT[_d.code] = _d.is_integer
    DT_CLASS[_d.code] = _CLASSES.index(_d.cube_class) if _d.cube_class else -1
    for _p in range(4):
        PAD_WORDS[_d.code, _p] = tables.pad_word(_d, _p)

# CUBE layouts in ptojax's array order and their descriptor layout codes.
CUBE_ORDER = ("CUBE_M16", "CUBE_M32", "CUBE_N8")
CUBE_TILE_LAYOUT = np.array([tables.TILE_LAYOUT_CODE[n] for n in CUBE_ORDER], np.int32)
CELL_R = np.array([[CELL_SHAPES[(l, c)][0] for c in _CLASSES] for l in CUBE_ORDER], np.int32)
CELL_C = np.array([[CELL_SHAPES[(l, c)][1] for c in _CLASSES] for l in CUBE_ORDER], np.int32)
# B.DATR CUBE conversion code (21..26) -> index into CUBE_ORDER
CODE_TO_CUBE = np.zeros(32, np.int32)
for _code, _name in {**tables.CUBE_LOAD_CODES, **tables.CUBE_STORE_CODES}.items():
    CODE_TO_CUBE[_code] = CUBE_ORDER.index(_name)
# B.DATR ordinary Layout code -> the layout it gives a new tile (RowMajor elsewhere)
DEST_LAYOUT = np.full(32, tables.TILE_LAYOUT_CODE["RowMajor"], np.int32)
for _code, _name in tables.ORDINARY_CODE_LAYOUT.items():
    DEST_LAYOUT[_code] = tables.TILE_LAYOUT_CODE[_name]



def pe_count(mask: ArrayLike) -> jax.Array:
    """Number of PEs a 4-bit PE mask names (one instruction, no table)."""
    return jax.lax.population_count(jnp.asarray(mask).astype(jnp.int32) & 15)


_STEP_ID = re.compile(tables.STEP_ID)


def ordered_fault(*checks: tuple[str, ArrayLike, str]) -> jax.Array:
    """Fault code of the first (step id, condition, fault name) entry whose
    condition holds, else 0: an ordered check list as data. The step id
    (tables.STEP_ID, e.g. "MM.8 acc_hand") names the spec step; the oracle's
    twin check carries the same id. A family settles its verdict (`settle`):
    every effect of the bundle depends on it."""
    code: jax.Array = jnp.int32(0)
    for step, cond, name in reversed(checks):
        if not (isinstance(step, str) and _STEP_ID.fullmatch(step)):
            raise ValueError(f"ordered_fault: {step!r} is not a step id ({tables.STEP_ID})")
        code = jnp.where(cond, F[name], code)
    return code


def _common(a: ArrayLike, b: ArrayLike) -> tuple[jax.Array, jax.Array]:
    t = jnp.result_type(a, b)
    return jnp.asarray(a, t), jnp.asarray(b, t)


def div(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """a // b for non-negative a and positive b (b < 1 is read as 1).

    Truncating division is floor division there, and one instruction instead
    of jnp's sign-corrected sequence of eight (which every check would carry).
    """
    a, b = _common(a, b)
    return jax.lax.div(a, jnp.maximum(b, 1))


def mod(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """a % b for non-negative a and positive b (b < 1 is read as 1)."""
    a, b = _common(a, b)
    return jax.lax.rem(a, jnp.maximum(b, 1))


def lane_divmod(j: ArrayLike, d: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """(j // d, j % d) for lane indices 0 <= j < 2**22 and d >= 1 (d < 1 is read as 1).

    A float32 reciprocal and one correction step: the float quotient is within
    one of the true one there, and the correction makes it exact. Lane-wide
    integer division is a scalar instruction per element on CPU; this is vector
    arithmetic (three lane-wide divisions were a tenth of a TLOAD batch).
    """
    j = jnp.asarray(j, jnp.int32)
    d = jnp.maximum(jnp.asarray(d, jnp.int32), 1)
    q = (j.astype(jnp.float32) * (1 / d.astype(jnp.float32))).astype(jnp.int32)
    r = j - q * d
    q = jnp.where(r < 0, q - 1, jnp.where(r >= d, q + 1, q))
    return q, j - q * d


def take(table: ArrayLike, i: ArrayLike) -> jax.Array:
    """table[i] for a static numpy table and a traced scalar index, clamped in range."""
    return row(jnp.asarray(table), i)


def elem_bytes(bits: jax.Array) -> jax.Array:
    return jnp.maximum(bits >> 3, 1)


def slot_of(index: ArrayLike, hand_slots: int) -> tuple[jax.Array, jax.Array]:
    """(materialized slot, exists) of a TileIndex 0..63."""
    hand, k = div(index, tables.HAND_SLOTS), mod(index, tables.HAND_SLOTS)
    return jnp.where(k < hand_slots, hand * hand_slots + k, 0), k < hand_slots


def free_slot(tiles: PeFile, hand: jax.Array, hand_slots: int) -> tuple[jax.Array, jax.Array]:
    """Lowest unallocated materialized slot of a hand: (slot, found)."""
    first = hand * hand_slots
    free = jax.lax.dynamic_slice_in_dim(tiles.desc[:, COL["allocated"]], first, hand_slots) == 0
    return first + jnp.argmax(free).astype(first.dtype), jnp.any(free)


def capacity_register(tile_capacity: jax.Array) -> jax.Array:
    """TILE_CAPACITY (uint64) as int64 for comparisons with charges; values past
    2^62 exceed any possible charge, so clamping keeps the unsigned meaning."""
    return jnp.minimum(tile_capacity, jnp.uint64(1 << 62)).astype(jnp.int64)


def core_charge(tiles: PeFile) -> jax.Array:
    """Sum of popcount(mask) * capacity over allocated Local tiles (A.5)."""
    d = tiles.desc
    # int64 before the product: a (hand-made) capacity near 2^31 must not wrap
    charge = pe_count(d[:, COL["mask"]]).astype(jnp.int64) * d[:, COL["capacity"]].astype(jnp.int64)
    return jnp.sum(jnp.where(d[:, COL["allocated"]] != 0, charge, 0))


def gpr_value(gpr_row: jax.Array, reg: jax.Array) -> jax.Array:
    """Value of GPR `reg` of one PE's file; x0 always reads 0."""
    return jnp.where(reg == 0, U64(0), row(gpr_row, reg))


def log2(x: ArrayLike) -> jax.Array:
    """log2 of a positive power-of-two int32 (traced)."""
    return 31 - jax.lax.clz(jnp.maximum(x, 1).astype(jnp.int32))


def tile_coords(is_cube: ArrayLike, lay: jax.Array, cr: jax.Array, cc: jax.Array, b4: jax.Array,
                k_repeat: ArrayLike, W: int,
                ordinary: Optional[tuple[jax.Array, jax.Array, jax.Array, ArrayLike]] = None,
                ) -> tuple[jax.Array, jax.Array]:
    """Logical (row, col) of payload slots 0..W-1 of a tile (inverse of B.3).

    CUBE tiles: lay indexes CUBE_ORDER, cr/cc the cell shape. Cell shapes are
    powers of two, so the map is shifts and masks; only the N8 cell number
    divides by K_repeat. `ordinary` = (layout, rows, cols, bits) of an ordinary
    tile, chosen where is_cube is False (ordinary_coords); None: CUBE only.
    Everything may be traced.
    """
    j = jnp.arange(W, dtype=jnp.int32)
    lcr, lcc = log2(cr), log2(cc)
    cell, inner = j >> (lcr + lcc), j & (cr * cc - 1)
    kr = jnp.maximum(k_repeat, 1)
    # CUBE_N8: cell = n*K_repeat + k, column-major inside the cell
    n, _ = lane_divmod(cell, kr)
    n8_r = ((cell - n * kr) << lcr) + (inner & (cr - 1))
    n8_c = (n << 3) + (inner >> lcr)
    # CUBE_M16/M32: cells along columns, row-major inside (M16 b4 swaps groups)
    q = inner & (cc - 1)
    q = jnp.where(b4 & (lay == 0), q ^ (12 * (((q >> 2) ^ (q >> 3)) & 1)), q)
    m_r, m_c = inner >> lcc, (cell << lcc) + q
    is_n8 = lay == 2
    r, c = jnp.where(is_n8, n8_r, m_r), jnp.where(is_n8, n8_c, m_c)
    if ordinary is None:
        return r, c
    o_r, o_c = ordinary_coords(*ordinary, W)
    return jnp.where(is_cube, r, o_r), jnp.where(is_cube, c, o_c)


# ---------------------------------------------------------------- Local tiles

DESCRIPTOR_FIELDS = TILE_FIELDS[1:-1]   # what install publishes; it places "base"
_ROW_MAJOR = tables.TILE_LAYOUT_CODE["RowMajor"]
_COL_MAJOR = tables.TILE_LAYOUT_CODE["ColumnMajor"]


def source(tiles: PeFile, index: ArrayLike, hand_slots: int,
           ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array], jax.Array]:
    """A source TileIndex's slot and descriptor: (slot, allocated, fields, contents_defined)."""
    slot, exists = slot_of(index, hand_slots)
    desc = row(tiles.desc, slot)
    s = {k: desc[..., COL[k]] for k in DESCRIPTOR_FIELDS}
    return slot, (desc[..., COL["allocated"]] != 0) & exists, s, \
        s["defined_valid"] == s["valid_rows"] * s["valid_cols"]


_ZN = tables.TILE_LAYOUT_CODE["ZN"]
_NZ = tables.TILE_LAYOUT_CODE["NZ"]
ORDINARY_LAYOUTS = (_ROW_MAJOR, _COL_MAJOR, _ZN, _NZ)


def fractal_ok(layout: ArrayLike, rows: jax.Array, cols: jax.Array, bits: ArrayLike) -> jax.Array:
    """ZN/NZ tiles tile into 16-row x 32-byte fractals; others always fit."""
    inner = div(256, bits)
    layout = jnp.asarray(layout)
    frac = (layout == _ZN) | (layout == _NZ)
    return ~frac | (((rows & 15) == 0) & (mod(cols, inner) == 0))


def ordinary_index(layout: jax.Array, rows: jax.Array, cols: jax.Array, bits: ArrayLike, r: jax.Array,
                   c: jax.Array) -> jax.Array:
    """Payload slot of (r, c) in an ordinary tile (A.4 non-packed linear index).

    RowMajor r*cols + c; ColumnMajor c*rows + r; ZN/NZ in 16 x (256/bits)
    fractals (ZN: fractals row-major, column-major inside; NZ: fractals
    column-major, row-major inside).
    """
    inner = div(256, bits)
    br, ir, bc, ic = r >> 4, r & 15, div(c, inner), mod(c, inner)
    zn = (br * div(cols, inner) + bc) * 16 * inner + ic * 16 + ir
    nz = (bc * (rows >> 4) + br) * 16 * inner + ir * inner + ic
    return jnp.select([layout == _COL_MAJOR, layout == _ZN, layout == _NZ],
                      [c * rows + r, zn, nz], r * cols + c)


def ordinary_coords(layout: jax.Array, rows: jax.Array, cols: jax.Array, bits: ArrayLike, W: int,
                    ) -> tuple[jax.Array, jax.Array]:
    """(row, col) of payload slots 0..W-1 of an ordinary tile: the inverse of
    ordinary_index. Rows, columns and the fractal width are powers of two in
    any tile this is asked about, so it is shifts and masks; slots past the
    tile land outside rows x cols."""
    j = jnp.arange(W, dtype=jnp.int32)
    inner = div(256, bits)
    lr, lc, li = log2(rows), log2(cols), log2(inner)
    fb, w = j >> (4 + li), j & ((inner << 4) - 1)          # fractal number, slot inside
    # ZN: fractals row-major (cols/inner a row), each column-major (16 rows)
    zn_f = lc - li
    zn_r = ((fb >> zn_f) << 4) + (w & 15)
    zn_c = ((fb & ((1 << zn_f) - 1)) << li) + (w >> 4)
    # NZ: fractals column-major (rows/16 a column), each row-major (inner columns)
    nz_f = lr - 4
    nz_r = ((fb & ((1 << nz_f) - 1)) << 4) + (w >> li)
    nz_c = ((fb >> nz_f) << li) + (w & (inner - 1))
    r = jnp.select([layout == _COL_MAJOR, layout == _ZN, layout == _NZ],
                   [j & (rows - 1), zn_r, nz_r], j >> lc)
    c = jnp.select([layout == _COL_MAJOR, layout == _ZN, layout == _NZ],
                   [j >> lr, zn_c, nz_c], j & (cols - 1))
    return r, c


def ordinary_span(layout: ArrayLike, rows: jax.Array, cols: jax.Array, bits: ArrayLike, vr: jax.Array,
                  vc: jax.Array) -> jax.Array:
    """Payload Words from slot 0 to the end of the last line a VR x VC region
    touches (a row, a column, a row of fractals, a column of fractals): the
    Words a tile of this shape needs within the model's bound (tile_words)."""
    inner = div(256, bits)
    up: Callable[[jax.Array, ArrayLike], jax.Array] = lambda v, m: (v + m - 1) // m * m
    return jnp.select([layout == _COL_MAJOR, layout == _ZN, layout == _NZ],
                      [vc * rows, up(vr, 16) * cols, up(vc, inner) * rows], vr * cols)


def packed_carrier(rows: ArrayLike, cols: jax.Array) -> jax.Array:
    """Whether a non-CUBE tile of rows x cols elements is one the model keeps in
    packed carriers for its size (TileUsesPackedCarrierRepresentation: more
    elements than PTO_MODEL_TILE_ELEMENTS; 4-bit tiles are packed too,
    carrier_elements, but their nibbles read back zero-extended anyway). Its
    elements read back unextended: an S8 0x80 is the Word 0x80, where an
    ordinary S8 tile holds it sign-extended."""
    return jnp.asarray(rows).astype(jnp.int64) * cols > MODEL_TILE_ELEMENTS


def carrier_elements(layout: jax.Array, rows: jax.Array, cols: jax.Array, bits: jax.Array) -> jax.Array:
    """Logical elements the model keeps in one payload Word of a tile:
    64 / bits for a non-CUBE tile in packed carriers (4 bits wide, or more
    elements than PTO_MODEL_TILE_ELEMENTS: TileUsesPackedCarrierRepresentation;
    layouts/carriers.py), else 1. Its Word e holds elements k*e .. k*e + k - 1,
    the first in the low lane."""
    cube = jnp.isin(layout, jnp.asarray([tables.TILE_LAYOUT_CODE[n] for n in tables.CUBE_LAYOUTS]))
    packed = ~cube & ((bits == 4) | packed_carrier(rows, cols))
    return jnp.where(packed, 64 // jnp.maximum(bits, 1), 1).astype(jnp.int32)


def valid_lanes(vr: jax.Array, vc: ArrayLike, W: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(r, c, in_region) of lanes 0..W-1 enumerating a VR x VC region row-major."""
    j = jnp.arange(W, dtype=jnp.int32)
    r, c = lane_divmod(j, vc)
    return r, c, j < vr * vc


def ordinary_source_legal(s: Mapping[str, jax.Array], allocated: jax.Array, defined: jax.Array,
                          tile_capacity: jax.Array, W: int) -> jax.Array:
    """An allocated, configured, generically indexable, fully defined ordinary tile.

    RowMajor/ColumnMajor/ZN/NZ; capacity legal, rows derived from capacity and
    columns, valid extents inside, fractal alignment for ZN/NZ, and every
    valid element inside the materialized payload Words.
    """
    bits = take(DT_BITS, s["dtype"])
    unit = jnp.maximum(s["cols"] * bits, 1)
    cap = s["capacity"]
    cap_ok = ((cap & 127) == 0) & (cap >= 128) & (cap <= 65536) \
        & (cap.astype(jnp.int64) <= capacity_register(tile_capacity))
    rows_ok = (mod(cap * 8, unit) == 0) & (s["rows"] == div(cap * 8, unit)) & (s["rows"] > 0) \
        & (s["valid_rows"] <= s["rows"]) & (s["valid_cols"] <= s["cols"]) \
        & (s["valid_rows"] >= 0) & (s["valid_cols"] >= 0) & (bits > 0)
    indexable = jnp.isin(s["layout"], jnp.asarray(ORDINARY_LAYOUTS)) \
        & fractal_ok(s["layout"], s["rows"], s["cols"], bits)
    # Under rows_ok and fractal_ok the last valid element (VR-1, VC-1) has the
    # largest index of the region in every ordinary layout, so the region fits
    # when it does (tests/test_transport.py checks this against every lane)
    vr, vc = s["valid_rows"], s["valid_cols"]
    last = ordinary_index(s["layout"], s["rows"], s["cols"], bits, vr - 1, vc - 1)
    in_words = (vr * vc <= W) & ((vr * vc == 0) | (last < W))
    return allocated & indexable & cap_ok & rows_ok & defined & in_words


def ordinary_slot(s: Mapping[str, jax.Array], r: jax.Array, c: jax.Array) -> jax.Array:
    """Payload slot of (r, c) of an ordinary source descriptor `s`."""
    return ordinary_index(s["layout"], s["rows"], s["cols"], take(DT_BITS, s["dtype"]), r, c)


def ordinary_shape(tsize: jax.Array, col: jax.Array, vr: jax.Array, vc: jax.Array, bits: ArrayLike, W: int,
                  layout: ArrayLike = _ROW_MAJOR) -> tuple[jax.Array, jax.Array]:
    """C.7 step 4 destination shape: (legal, derived rows) for a TSize and Col,
    the tile's Words within the model's bound (ordinary_span). A ZN/NZ shape
    off the fractal grid is not bounded here: its own check (fractal_ok)
    rejects it afterwards, as the model does."""
    cap_bits = tsize * 8
    unit = jnp.maximum(col * bits, 1)
    rows = div(cap_bits, unit)
    in_words = (ordinary_span(layout, rows, col, bits, vr, vc) <= W) \
        | ~fractal_ok(layout, rows, col, bits)
    ok = (col > 0) & ((col & (col - 1)) == 0) & (mod(cap_bits, unit) == 0) \
        & (rows >= 1) & (rows <= 65535) & (rows >= vr) & (vc <= col) \
        & (vr * vc <= div(cap_bits, bits)) & in_words
    return ok, rows


def shared_charge(shared: SharedTiles) -> jax.Array:
    """Sum of popcount(allocation_mask) * capacity over live Shared records (A.5)."""
    charge = pe_count(shared.allocation_mask).astype(jnp.int64) * shared.capacity.astype(jnp.int64)
    return jnp.sum(jnp.where(shared.sid >= 0, charge, 0))


def local_pool_in_use(state: State, cfg: MachineConfig) -> jax.Array:
    """Charge against the executing PE's Local pool: its own Local tiles, plus
    the Shared pool under the snapshot's single Core budget (shared-decisions 1)."""
    used = core_charge(cast(PeFile, state.tiles))      # the view's tiles: a PeFile (dispatch)
    if cfg.semantics == "0.58.3":
        used = used + shared_charge(state.shared)
    return used


def size_code_bytes(size_code: jax.Array) -> jax.Array:
    """TSize bytes of a SizeCode 1..12 (clipped): tables.size_code_bytes's twin."""
    return cast(jax.Array, jnp.int32(128) << jnp.clip(size_code - 1, 0, 11))     # jnp.int32(...) is untyped: Any


def destination(state: State, hand: jax.Array, size_code: jax.Array, mask: ArrayLike, cfg: MachineConfig,
                ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Destination hand allocation: (slot, found, tsize, budget_ok) (A.2, A.5)."""
    tsize = size_code_bytes(size_code)
    charge = local_pool_in_use(state, cfg) + pe_count(mask) * tsize
    hand_slots = cfg.hand_slots
    slot, found = free_slot(cast(PeFile, state.tiles), hand, hand_slots)     # the view's (dispatch)
    return slot, found, tsize, charge <= capacity_register(state.tile_capacity)


def _s64(tiles: PeFile) -> bool:
    """Whether the pools keep 64-bit slots, one a Word (state.slots64): static."""
    return cast(bool, tiles.words.dtype == jnp.uint64)      # jnp.uint64 is untyped: Any


def lane_count(tiles: PeFile) -> int:
    """The lanes an operation's arrays have in this completion (a storage.PeFile's
    `lane`: lowering.lane_classes), static. Every tile the block names has at most
    that many Words; the machine's bound stays cfg.tile_words."""
    return tiles.lane.shape[0]


def _window(tiles: PeFile, a: jax.Array, start: jax.Array) -> jax.Array:
    """The window_slots slots of lane_count Words of PE tiles.pe's flat pool `a`
    [4, K * W] from `start` (a window start: state.pool_start)."""
    n = window_slots(lane_count(tiles), _s64(tiles))
    return jax.lax.dynamic_slice(a, (tiles.pe, start.astype(jnp.int32)), (1, n)).reshape(n)


def _next_base(tiles: PeFile, W: int) -> jax.Array:
    """Where the PE's next tile is placed: its pool top (state.pool_top),
    clamped as a window start (W = tile_words)."""
    pool_slots = tiles.words.shape[-1]
    d = tiles.desc
    top = pool_top(d[:, COL["allocated"]], d[:, COL["capacity"]], d[:, COL["dtype"]],
                   d[:, COL["base"]], W, s64=_s64(tiles))
    return jnp.minimum(top, pool_slots - full_window(W, _s64(tiles))).astype(jnp.int32)


def payload(tiles: PeFile, slot: ArrayLike, W: int) -> jax.Array:
    """The first lane_count payload Words (uint64) of slot `slot` of a PE's file
    (a storage.PeFile), decoded from its pool window (state.py, "payload pool";
    W = tile_words). Operations read allocated tiles only (install keeps the
    stale Words an allocation does not write)."""
    L = lane_count(tiles)
    slot = jnp.asarray(slot)
    if slot.ndim:
        return jax.vmap(lambda k: payload(tiles, k, W))(slot.reshape(-1)).reshape(slot.shape + (L,))
    return payload_defined(tiles, slot, W)[0]


def payload_word(tiles: PeFile, slot: jax.Array, i: jax.Array, W: int) -> jax.Array:
    """payload(tiles, slot, W)[i] for one Word i (scalars): the Word's own
    slots decoded, not the lane_count-Word window (a loop that visits a few
    Words of a large tile)."""
    d = row(tiles.desc, slot)
    s64 = _s64(tiles)
    start = pool_start(d[COL["base"]], tiles.words.shape[-1], W, s64=s64)
    wide = is_wide(d[COL["dtype"]])
    i = jnp.clip(jnp.asarray(i), 0, lane_count(tiles) - 1).astype(start.dtype)
    n = 1 if s64 else 2                     # a Word's slots (a narrow Word and its neighbour)
    at = (start + (i if s64 else jnp.where(wide, 2 * i, i))).astype(jnp.int32)
    take_n: Callable[[jax.Array], jax.Array] = \
        lambda a: jax.lax.dynamic_slice(a, (tiles.pe, at), (1, n)).reshape(n)
    return decode_window(take_n(tiles.words), take_n(tiles.defined), wide, 1)[0][0]


def payload_defined(tiles: PeFile, slot: jax.Array, W: int) -> tuple[jax.Array, jax.Array]:
    """(Words, definedness bits) of the first lane_count elements of one slot
    (a scalar `slot`), as payload reads them."""
    d = row(tiles.desc, slot)
    start = pool_start(d[COL["base"]], tiles.words.shape[-1], W, s64=_s64(tiles))
    return decode_window(_window(tiles, tiles.words, start), _window(tiles, tiles.defined, start),
                         is_wide(d[COL["dtype"]]), lane_count(tiles))


def install(tiles: PeFile, slot: jax.Array, do: jax.Array, fields: Mapping[str, ArrayLike], words: jax.Array,
            defined: jax.Array, written: jax.Array, W: int) -> PeFile:
    """Allocate free slot `slot` of a PE's file (a storage.PeFile) when `do`:
    publish its descriptor (every field of DESCRIPTOR_FIELDS), place its
    storage at the PE's pool top (state.pool_top; W = tile_words), and there
    write the Words of `words` (lane_count of them) that `written` marks and
    all of `defined` (allocation clears every other bit; the Words not written
    keep the pool's, stale), as the file's pending write (storage.PoolWrite,
    encode_window). Else the file is unchanged. The tile's own slots past the
    lanes' window stay as they are: above the pool top nothing was ever
    written (zero, undefined), which is what this allocation would write there.
    A block installs one tile this way (install_aux places up to two small
    ones after it)."""
    L = lane_count(tiles)
    s64 = _s64(tiles)
    wide = is_wide(jnp.asarray(fields["dtype"]))
    # the Words once: fused into the slot encoding, an operation's per-Word work
    # (a TLOAD's element loads) ran once per slot of each carrier form
    # jax.lax.optimization_barrier is unannotated in jax, hence the ignore
    words, defined, written = jax.lax.optimization_barrier((words, defined, written))  # type: ignore[no-untyped-call]
    slots, slots_defined = encode_window(words, defined, wide, L, s64=s64)
    slots_written = encode_window(words, written, wide, L, s64=s64)[1]
    desc, write = _placed(tiles, slot, do, fields, W, tiles.write, slots, slots_defined,
                          slots_written)
    return tiles.replace(desc=desc, write=write)


def _placed(tiles: PeFile, slot: jax.Array, do: jax.Array, fields: Mapping[str, ArrayLike], W: int,
            prev: PoolWrite, slots: jax.Array, slots_defined: jax.Array, slots_written: jax.Array,
            ) -> tuple[jax.Array, PoolWrite]:
    """A new tile at the PE's pool top when `do`: (the file's descriptors with
    its row, the PoolWrite `prev` replaced by its window: the `slots_written`
    Words, definedness over its own slots). Else both unchanged: a family that
    does not install here keeps another family's write."""
    assert set(fields) == set(DESCRIPTOR_FIELDS), sorted(set(DESCRIPTOR_FIELDS) ^ set(fields))
    base = _next_base(tiles, W)
    # column 0 is "allocated", the last "base" (TILE_FIELDS)
    desc = jnp.stack([jnp.int32(1)] + [jnp.asarray(fields[k]).astype(jnp.int32)
                                      for k in DESCRIPTOR_FIELDS] + [base])
    own = jnp.arange(slots.shape[0]) < pool_extent(jnp.asarray(fields["capacity"]),
                                                   jnp.asarray(fields["dtype"]), W, s64=_s64(tiles))
    slot, do, desc, own = settle((slot, do, desc, own))
    fit: Callable[[jax.Array, jax.Array], jax.Array] = lambda new, old: jnp.where(do, new, old)
    write = prev.replace(base=fit(base, prev.base), words=fit(slots, prev.words),
                         words_mask=fit(own & slots_written, prev.words_mask),
                         defined=fit(slots_defined, prev.defined),
                         defined_mask=fit(own, prev.defined_mask))
    return set_row(tiles.desc, slot, jnp.where(do, desc, row(tiles.desc, slot))), write


def aux_words(lanes: int) -> int:
    """Words an auxiliary window holds: a matrix block's RowMax output (at most
    32 rows) or GroupMax output (M x ceil(N / GroupN) <= lanes / 8 + 32 with
    GroupN >= 8 and M x N <= lanes; a matrix D, a CUBE tile, has at most
    PTO_MODEL_TILE_ELEMENTS Words, whatever class a block runs at)."""
    return min(min(lanes, MODEL_TILE_ELEMENTS) // 8 + 32, lanes)


def aux_slots(lanes: int, s64: bool) -> int:
    """Pool slots of an auxiliary window: its Words are 32-bit, kept whole."""
    return aux_words(lanes) * (1 if s64 else 2)


def install_aux(tiles: PeFile, k: int, slot: jax.Array, do: jax.Array, fields: Mapping[str, ArrayLike],
                words: jax.Array, W: int) -> PeFile:
    """Allocate free slot `slot` as a small ordinary tile when `do`, like
    install, through auxiliary window `k` (storage.PeFile.aux): placed at the
    pool top (above the tiles installed before it), its aux_words(lanes)
    `words` (32-bit, the valid ones first) written and defined up to
    `fields["defined_valid"]`."""
    n = aux_words(lane_count(tiles))
    written = jnp.arange(n) < jnp.asarray(fields["defined_valid"])
    slots, slots_defined = encode_window(words, written, True, n, s64=_s64(tiles))
    prev = jax.tree_util.tree_map(lambda x: x[k], tiles.aux)
    desc, write = _placed(tiles, slot, do, fields, W, prev, slots, slots_defined, slots_defined)
    aux = jax.tree_util.tree_map(lambda a, x: a.at[k].set(x), tiles.aux, write)
    return tiles.replace(desc=desc, aux=aux)


# ---------------------------------------------------------------- CUBE descriptors


def cube_geometry(lay: jax.Array, cls: jax.Array, vr: jax.Array, vc: jax.Array, capacity: jax.Array,
                  tile_capacity: jax.Array, tile_words: int,
                  ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array], jax.Array]:
    """Cell shape, derived geometry and B.6 shape legality for a traced CUBE
    layout index `lay` (CUBE_ORDER) and width class `cls`."""
    cr, cc = take(CELL_R.reshape(-1), lay * 4 + cls), take(CELL_C.reshape(-1), lay * 4 + cls)
    n8 = lay == CUBE_ORDER.index("CUBE_N8")
    g = derived(n8, cr, cc, vr, vc)
    ok = shape_legal(n8, cr, cc, vr, vc, capacity, tile_capacity, tile_words) & (cls >= 0)
    return cr, cc, g, ok


def cube_descriptor(s: Mapping[str, jax.Array], tile_capacity: jax.Array, W: int,
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """A tile descriptor `s` as a CUBE source: (legal, layout index, cell rows, cell cols).

    Legal = CUBE layout at Matrix location, B.6 shape legal for its capacity
    and every derived field exactly consistent (the model's TileCubeDescriptorLegal).
    """
    lay = jnp.select([s["layout"] == CUBE_TILE_LAYOUT[i] for i in range(3)], [0, 1, 2], -1)
    cr, cc, g, shape_ok = cube_geometry(jnp.maximum(lay, 0), take(DT_CLASS, s["dtype"]),
                                        s["valid_rows"], s["valid_cols"], s["capacity"],
                                        capacity_register(tile_capacity), W)
    legal = (lay >= 0) & (s["location"] == tables.TILE_LOCATION_CODE["Matrix"]) & shape_ok \
        & (s["rows"] == g["storage_rows"]) & (s["cols"] == g["storage_cols"]) \
        & (s["k_repeat"] == g["k_repeat"]) & (s["n_repeat"] == g["n_repeat"]) \
        & (s["cell_count"] == g["cell_count"]) & (s["storage_bytes"] == g["required_bytes"])
    return legal, lay, cr, cc
