"""Shared tile registers of the reference model (docs/shared-decisions.md 1).

The Core's Shared registers S0..S255 are the Machine's `shared` records; a
SharedTileID without a record has no descriptor. Element (r, c) of a Shared
tile sits at its layout's linear index e (r*cols + c when RowMajor) and
belongs to quarter (PE) q(e) = floor(4*floor(e*bits/8) / capacity). These are the rules the Shared
TLOAD/TSTORE (shared_transport.py) and the cooperative matrix forms
(matrix.py) share: reading a Word, judging a descriptor, B.IOS fields.
"""

from __future__ import annotations

from .. import tables
from .state import MASK64, Block, Machine
from .transport import derived_rows, generic_indexable

ALL_PES = 0b1111
SHARED_MAX_BYTES = 262144          # 256 KiB per-PE Shared TSize (SizeCode 12)
ROW_MAJOR = tables.TILE_LAYOUT_CODE["RowMajor"]


def quarter(e: int, d: tables.DataType, capacity: int) -> int:
    """The PE whose quarter holds element e: floor(4 * byte_offset(e) / capacity)."""
    return (4 * ((e * d.bits) // 8)) // capacity


def undefined_word(sid: int, e: int) -> int:
    """The model's deterministic "undefined register" Word: SharedTileID XOR element."""
    return (sid ^ e) & MASK64


def read_word(m: Machine, sid: int, e: int) -> int:
    """ReadSharedTileWord: no record, or element e's quarter not initialized ->
    the undefined Word; else the stored Word."""
    i = m.record_of(sid)
    if i is None:
        return undefined_word(sid, e)
    r = m.shared[i]
    d = tables.DTYPE_BY_CODE.get(r.dtype)
    words = m.shared_payload(i)
    if d is None or r.capacity <= 0 or not 0 <= e < len(words):
        return undefined_word(sid, e)
    q = quarter(e, d, r.capacity)
    if not 0 <= q <= 3 or not r.initialized_mask & tables.pe_bit(q):
        return undefined_word(sid, e)
    return words[e]


def capacity_legal(m: Machine, capacity: int) -> bool:
    """SharedTileCapacityIsLegal: whole CELLs, at most 256 KiB and TILE_CAPACITY."""
    return (capacity >= tables.CELL_BYTES and capacity % tables.CELL_BYTES == 0
            and capacity <= SHARED_MAX_BYTES and capacity <= m.tile_capacity)


def shape_legal(capacity: int, cols: int, vr: int, vc: int, d: tables.DataType) -> bool:
    """TileDescriptorShapeLegal: rows derive from (capacity, cols), the valid
    region fits them and the capacity's element count."""
    rows = derived_rows(capacity, cols, d)
    return rows != 0 and vr <= rows and vc <= cols and vr * vc <= capacity * 8 // d.bits


def descriptor_legal(m: Machine, i: int) -> bool:
    """SharedTileDescriptorLegal of record i."""
    r = m.shared[i]
    d = tables.DTYPE_BY_CODE.get(r.dtype)
    if r.sid < 0 or d is None or not 0 < r.allocation_mask <= ALL_PES:
        return False
    if r.initialized_mask & ~r.allocation_mask:
        return False
    if not capacity_legal(m, r.capacity):
        return False
    rows = derived_rows(r.capacity, r.cols, d)
    return (rows != 0 and r.rows == rows and 0 <= r.valid_rows <= r.rows
            and 0 <= r.valid_cols <= r.cols and r.rows * r.cols <= r.capacity * 8 // d.bits
            and r.layout_name is not None
            and generic_indexable(r.layout_name, r.rows, r.cols, d))


def cooperative_ready(m: Machine, i: int) -> bool:
    """SharedTileCooperativeMatrixReady: legal, allocated and initialized on all
    four PEs, published, contents defined."""
    r = m.shared[i]
    return (descriptor_legal(m, i) and r.allocation_mask == ALL_PES
            and r.initialized_mask == ALL_PES and r.published and r.contents_defined)


def minimum_capacity(cols: int, vr: int, vc: int, d: tables.DataType) -> int:
    """Smallest TSize of 128 B..256 KiB whose descriptor admits the shape, 0 if none."""
    for code in range(1, 13):
        capacity = tables.size_code_bytes(code)
        if shape_legal(capacity, cols, vr, vc, d):
            return capacity
    return 0


def ios_well_formed(b: Block) -> bool:
    """Fields a decoded B.IOS can hold (a hand-made block state may hold others)."""
    return all(0 <= sid <= 255 and 0 <= size <= 12 and mask in tables.PEMODE_MASK[1:]
               for sid, size, mask in b.ios)
