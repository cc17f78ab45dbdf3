"""Lookup tables as arrays and the Local-tile helpers every operation shares."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from ..layouts.geometry import CELL_SHAPES, derived, shape_legal

F = tables.FAULT_CODE
U64 = jnp.uint64

# DataType code (0..31) -> properties; unassigned codes have bits 0.
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

PE_POPCOUNT = np.array([bin(m).count("1") for m in range(16)], np.int32)


def ordered_fault(*checks):
    """Fault code of the first (condition, fault name) pair that holds, else 0:
    an ordered check list as data."""
    code = jnp.int32(0)
    for cond, name in reversed(checks):
        code = jnp.where(cond, F[name], code)
    return code


def take(table, i):
    """table[i] for a static numpy table and a traced index, clipped in range."""
    return jnp.asarray(table)[jnp.clip(i, 0, len(table) - 1)]


def elem_bytes(bits):
    return jnp.maximum(bits // 8, 1)


def slot_of(index, hand_slots: int):
    """(materialized slot, exists) of a TileIndex 0..63."""
    hand, k = index // tables.HAND_SLOTS, index % tables.HAND_SLOTS
    return jnp.where(k < hand_slots, hand * hand_slots + k, 0), k < hand_slots


def free_slot(tiles, hand, hand_slots: int):
    """Lowest unallocated materialized slot of a hand: (slot, found)."""
    idx = hand * hand_slots + jnp.arange(hand_slots)
    free = ~tiles.allocated[idx]
    k = jnp.argmax(free)
    return idx[k], free[k]


def capacity_register(tile_capacity):
    """TILE_CAPACITY (uint64) as int64 for comparisons with charges; values past
    2^62 exceed any possible charge, so clamping keeps the unsigned meaning."""
    return jnp.minimum(tile_capacity, jnp.uint64(1 << 62)).astype(jnp.int64)


def core_charge(tiles):
    """Sum of popcount(mask) * capacity over allocated Local tiles (A.5)."""
    pc = take(PE_POPCOUNT, tiles.mask)
    return jnp.sum(jnp.where(tiles.allocated, pc * tiles.capacity, 0).astype(jnp.int64))


def gpr_value(gpr_row, reg):
    """Value of GPR `reg` of one PE's file; x0 always reads 0."""
    return jnp.where(reg == 0, U64(0), gpr_row[jnp.clip(reg, 0, gpr_row.shape[0] - 1)])


def log2(x):
    """log2 of a positive power-of-two int32 (traced)."""
    return 31 - jax.lax.clz(jnp.maximum(x, 1).astype(jnp.int32))


def tile_coords(is_cube, lay, cr, cc, b4, k_repeat, cols, W: int):
    """Logical (row, col) of payload slots 0..W-1 of a tile (inverse of B.3).

    CUBE tiles: lay indexes CUBE_ORDER, cr/cc the cell shape. RowMajor
    tiles: slot r*cols + c. Cell shapes and RowMajor column counts are powers
    of two, so the map is shifts and masks; only the N8 cell number divides by
    K_repeat. Everything may be traced.
    """
    j = jnp.arange(W, dtype=jnp.int32)
    lcr, lcc = log2(cr), log2(cc)
    cell, inner = j >> (lcr + lcc), j & (cr * cc - 1)
    kr = jnp.maximum(k_repeat, 1)
    # CUBE_N8: cell = n*K_repeat + k, column-major inside the cell
    n = cell // kr
    n8_r = ((cell - n * kr) << lcr) + (inner & (cr - 1))
    n8_c = (n << 3) + (inner >> lcr)
    # CUBE_M16/M32: cells along columns, row-major inside (M16 b4 swaps groups)
    q = inner & (cc - 1)
    q = jnp.where(b4 & (lay == 0), q ^ (12 * (((q >> 2) ^ (q >> 3)) & 1)), q)
    m_r, m_c = inner >> lcc, (cell << lcc) + q
    # RowMajor
    o_r, o_c = j >> log2(cols), j & (jnp.maximum(cols, 1) - 1)
    is_n8 = lay == 2
    r = jnp.where(is_cube, jnp.where(is_n8, n8_r, m_r), o_r)
    c = jnp.where(is_cube, jnp.where(is_n8, n8_c, m_c), o_c)
    return r, c


# ---------------------------------------------------------------- Local tiles

DESCRIPTOR_FIELDS = ("dtype", "layout", "location", "capacity", "rows", "cols", "valid_rows",
                     "valid_cols", "k_repeat", "n_repeat", "cell_count", "storage_bytes", "mask",
                     "defined_valid")
_ROW_MAJOR = tables.TILE_LAYOUT_CODE["RowMajor"]
_COL_MAJOR = tables.TILE_LAYOUT_CODE["ColumnMajor"]


def source(tiles, index, hand_slots: int):
    """A source TileIndex's slot and descriptor: (slot, allocated, fields, contents_defined)."""
    slot, exists = slot_of(index, hand_slots)
    s = {k: getattr(tiles, k)[slot] for k in DESCRIPTOR_FIELDS}
    return slot, tiles.allocated[slot] & exists, s, s["defined_valid"] == s["valid_rows"] * s["valid_cols"]


_ZN = tables.TILE_LAYOUT_CODE["ZN"]
_NZ = tables.TILE_LAYOUT_CODE["NZ"]
ORDINARY_LAYOUTS = (_ROW_MAJOR, _COL_MAJOR, _ZN, _NZ)


def fractal_ok(layout, rows, cols, bits):
    """ZN/NZ tiles tile into 16-row x 32-byte fractals; others always fit."""
    inner = 256 // jnp.maximum(bits, 1)
    frac = (layout == _ZN) | (layout == _NZ)
    return ~frac | (((rows & 15) == 0) & (cols % jnp.maximum(inner, 1) == 0))


def ordinary_index(layout, rows, cols, bits, r, c):
    """Payload slot of (r, c) in an ordinary tile (A.4 non-packed linear index).

    RowMajor r*cols + c; ColumnMajor c*rows + r; ZN/NZ in 16 x (256/bits)
    fractals (ZN: fractals row-major, column-major inside; NZ: fractals
    column-major, row-major inside).
    """
    inner = 256 // jnp.maximum(bits, 1)
    br, ir, bc, ic = r >> 4, r & 15, c // inner, c % inner
    zn = (br * (cols // inner) + bc) * 16 * inner + ic * 16 + ir
    nz = (bc * (rows >> 4) + br) * 16 * inner + ir * inner + ic
    return jnp.select([layout == _COL_MAJOR, layout == _ZN, layout == _NZ],
                      [c * rows + r, zn, nz], r * cols + c)


def valid_lanes(vr, vc, W: int):
    """(r, c, in_region) of lanes 0..W-1 enumerating a VR x VC region row-major."""
    j = jnp.arange(W, dtype=jnp.int32)
    vcm = jnp.maximum(vc, 1)
    r, c = j // vcm, j % vcm
    return r, c, j < vr * vc


def ordinary_source_ok(s, allocated, defined, tile_capacity, W: int):
    """An allocated, configured, generically indexable, fully defined ordinary tile.

    RowMajor/ColumnMajor/ZN/NZ; capacity legal, rows derived from capacity and
    columns, valid extents inside, fractal alignment for ZN/NZ, and every
    valid element inside the materialized payload Words.
    """
    bits = take(DT_BITS, s["dtype"])
    unit = jnp.maximum(s["cols"] * bits, 1)
    cap = s["capacity"]
    cap_ok = (cap % 128 == 0) & (cap >= 128) & (cap <= 65536) \
        & (cap.astype(jnp.int64) <= capacity_register(tile_capacity))
    rows_ok = ((cap * 8) % unit == 0) & (s["rows"] == (cap * 8) // unit) & (s["rows"] > 0) \
        & (s["valid_rows"] <= s["rows"]) & (s["valid_cols"] <= s["cols"]) \
        & (s["valid_rows"] >= 0) & (s["valid_cols"] >= 0) & (bits > 0)
    indexable = jnp.isin(s["layout"], jnp.asarray(ORDINARY_LAYOUTS)) \
        & fractal_ok(s["layout"], s["rows"], s["cols"], bits)
    r, c, lane = valid_lanes(s["valid_rows"], s["valid_cols"], W)
    idx = ordinary_index(s["layout"], s["rows"], s["cols"], bits, r, c)
    in_words = (s["valid_rows"] * s["valid_cols"] <= W) & jnp.all(~lane | (idx < W))
    return allocated & indexable & cap_ok & rows_ok & defined & in_words


def ordinary_slot(s, r, c):
    """Payload slot of (r, c) of an ordinary source descriptor `s`."""
    return ordinary_index(s["layout"], s["rows"], s["cols"], take(DT_BITS, s["dtype"]), r, c)


def ordinary_shape(tsize, col, vr, vc, bits, W: int):
    """C.7 step 4 destination shape: (legal, derived rows) for a TSize and Col."""
    cap_bits = tsize * 8
    unit = jnp.maximum(col * bits, 1)
    rows = cap_bits // unit
    ok = (col > 0) & ((col & (col - 1)) == 0) & (cap_bits % unit == 0) \
        & (rows >= 1) & (rows <= 65535) & (rows >= vr) & (vc <= col) \
        & (vr * vc <= cap_bits // jnp.maximum(bits, 1)) & (vr * col <= W)
    return ok, rows


def shared_charge(shared):
    """Sum of popcount(allocation_mask) * capacity over live Shared records (A.5)."""
    pc = take(PE_POPCOUNT, shared.allocation_mask)
    return jnp.sum(jnp.where(shared.sid >= 0, pc * shared.capacity, 0).astype(jnp.int64))


def local_pool_in_use(state, cfg):
    """Charge against the executing PE's Local pool: its own Local tiles, plus
    the Shared pool under the snapshot's single Core budget (shared-decisions 1)."""
    used = core_charge(state.tiles)
    if cfg.semantics == "0.58.3":
        used = used + shared_charge(state.shared)
    return used


def destination(state, hand, size_code, mask, cfg):
    """Destination hand allocation: (slot, found, tsize, budget_ok) (A.2, A.5)."""
    tsize = jnp.int32(128) << jnp.clip(size_code - 1, 0, 11)
    charge = local_pool_in_use(state, cfg) + take(PE_POPCOUNT, mask) * tsize
    hand_slots = cfg.hand_slots
    slot, found = free_slot(state.tiles, hand, hand_slots)
    return slot, found, tsize, charge <= capacity_register(state.tile_capacity)


def install(tiles, slot, do, fields: dict, words, defined):
    """Publish a new descriptor + payload row at `slot` when `do` (else unchanged)."""
    upd = {k: getattr(tiles, k).at[slot].set(
        jnp.where(do, jnp.asarray(v).astype(getattr(tiles, k).dtype), getattr(tiles, k)[slot]))
        for k, v in fields.items()}
    upd["allocated"] = tiles.allocated.at[slot].set(tiles.allocated[slot] | do)
    upd["words"] = tiles.words.at[slot].set(jnp.where(do, words, tiles.words[slot]))
    upd["defined"] = tiles.defined.at[slot].set(jnp.where(do, defined, tiles.defined[slot]))
    return tiles.replace(**upd)


# ---------------------------------------------------------------- CUBE descriptors


def cube_geometry(lay, cls, vr, vc, capacity, tile_capacity, tile_words):
    """Cell shape, derived geometry and B.6 shape legality for a traced CUBE
    layout index `lay` (CUBE_ORDER) and width class `cls`."""
    cr, cc = take(CELL_R.reshape(-1), lay * 4 + cls), take(CELL_C.reshape(-1), lay * 4 + cls)
    outs = []
    for name in CUBE_ORDER:
        g = derived(name, cr, cc, vr, vc)
        ok = shape_legal(name, cr, cc, vr, vc, capacity, tile_capacity, tile_words)
        outs.append((g, ok))
    pick = lambda k: jnp.select([lay == i for i in range(3)], [o[0][k] for o in outs])
    g = {k: pick(k) for k in outs[0][0]}
    ok = jnp.select([lay == i for i in range(3)], [o[1] for o in outs]).astype(bool) & (cls >= 0)
    return cr, cc, g, ok


def cube_descriptor(s, tile_capacity, W: int):
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
