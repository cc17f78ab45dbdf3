"""TMOV completions of the reference model: the Local tile copy (TLSU
Function 2) and the Shared moves (9 L2S.INSERT, 10 L2S.PUBLISH, 11
S2L.BROADCAST, 12 S2L.EXTRACT), written from the 0.58.3 ASL
(BSTART.TMOV.asl, dispatch/shared-tlsu.asl, dispatch/destination-shape.asl,
memory/shared-movement.asl, state/shared-registers.asl; docs/tmov.md).

Like the other families, every completion returns None or a Fault and
changes nothing before its last check passed: a destination allocated before
a failing check is released again (the model's rollback).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Optional, cast

from .. import families, tables
from .family import Family
from .shared import ALL_PES, capacity_legal, descriptor_legal, quarter, read_word
from .shared_transport import shared_pool_ok
from .state import Block, Machine, SharedRecord, Tile
from .transport import (BUNDLE_CONTROL, DESTINATION_LAYOUT, TILE_ALLOCATION, TILE_LEGALITY,
                        Fault, allocate, budget_ok, derived_rows, free_slot, generic_indexable,
                        lb_in_range, ordinary_source_legal, words_needed)
from .layouts import capacity_legal as local_capacity_legal

FUNCTION = {"TMOV": 2, "TMOV.L2S.INSERT": 9, "TMOV.L2S.PUBLISH": 10, "TMOV.S2L.BROADCAST": 11,
            "TMOV.S2L.EXTRACT": 12}
FP64 = tables.DTYPE_BY_NAME["FP64"].code
ANY = tables.TILE_LOCATION_CODE["Any"]


# ----------------------------------------------------------------- shared helpers


def scalar_schema_legal(b: Block) -> bool:
    """TMOV reads no GPR: a B.IOR is legal only with every field zero."""
    return not b.ior_present or not any(b.ior)


def datr_legal(b: Block) -> bool:
    """TMOV's B.DATR contract: only Layout may be nonzero (DataType 0 is FP64)."""
    if not b.datr_present:
        return True
    _layout, dtype, pad, cmode, rmode, sat, canon = b.datr
    return not (dtype or pad or cmode or rmode or sat or canon)


def tile_layout(b: Block) -> str:
    """CurrentBundleTileLayout: the destination half of the B.DATR code, else RowMajor."""
    return DESTINATION_LAYOUT.get(b.datr[0], "RowMajor") if b.datr_present else "RowMajor"


def configured(m: Machine, t: Tile) -> bool:
    """TileDescriptorConfigured: allocated, a legal capacity, rows derived from
    (capacity, columns), the valid region inside (any layout, CUBE included)."""
    d = tables.DTYPE_BY_CODE.get(t.dtype)
    if not t.allocated or d is None or not local_capacity_legal(t.capacity, m.tile_capacity):
        return False
    return (t.rows == derived_rows(t.capacity, t.cols, d) != 0
            and 0 <= t.valid_rows <= t.rows and 0 <= t.valid_cols <= t.cols)


def legal_record(m: Machine, sid: int) -> Optional[SharedRecord]:
    """The record of `sid` when SharedTileDescriptorLegal, else None."""
    i = m.record_of(sid)
    return m.shared[i] if i is not None and descriptor_legal(m, i) else None


def destination_shape(b: Block, src: Optional[Tile], rec: Optional[SharedRecord]) -> tuple[int, int, int]:
    """(valid rows, valid columns, columns) of a new destination: LB1/LB0/LB2
    when 1..65535, else the configured tile source's, else the legal Shared
    record's, else 1 / 1 / the valid columns (B.DIM 0 inherits)."""
    def pick(n: int, field: str, default: int) -> int:
        if lb_in_range(b, n):
            return b.lb[n]
        if src is not None:
            return cast(int, getattr(src, field))
        if rec is not None:
            return cast(int, getattr(rec, field))
        return default
    vr = pick(1, "valid_rows", 1)
    vc = pick(0, "valid_cols", 1)
    return vr, vc, pick(2, "cols", vc)


def new_destination(m: Machine, b: Block, d: tables.DataType, layout: str,
                    shape: tuple[int, int, int]) -> tuple[Optional[Fault], Optional[int], dict[str, Any]]:
    """ResolveBundleTileDestinations after the type: the lowest free slot of
    the destination hand, the budget, the shape (every failure
    Fault_TileAllocation); then the allocation. Returns (fault, slot, the
    descriptor fields)."""
    bind = next(x for x in b.iots if x.dst_valid)
    vr, vc, cols = shape
    tsize = tables.size_code_bytes(bind.size_code)
    slot = free_slot(m, bind.dst_hand)
    if slot is None or not budget_ok(m, bind.mask, tsize):
        return TILE_ALLOCATION, None, {}
    rows = derived_rows(tsize, cols, d)
    if rows == 0 or vr > rows or vc > cols or vr * vc > tsize * 8 // d.bits:
        return TILE_ALLOCATION, None, {}
    # ptojax's model bound (as a TLOAD's): the valid region's Words fit
    # ordinary_words (the model's packed tiles included)
    if generic_indexable(layout, rows, cols, d) and \
            words_needed(layout, rows, cols, d, vr, vc) > m.ordinary_words:
        return TILE_ALLOCATION, None, {}
    # the descriptor's int fields, and the slot's Tile as it was under "free"
    fields: dict[str, Any] = dict(dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout], location=ANY,
                                  capacity=tsize, rows=rows, cols=cols, valid_rows=vr, valid_cols=vc,
                                  mask=bind.mask & 0xF, defined_valid=0)
    fields["free"] = copy.copy(m.tiles[slot])
    allocate(m, slot, **{k: v for k, v in fields.items() if k != "free"})
    return None, slot, fields


def release(m: Machine, slot: int, fields: Mapping[str, Any]) -> None:
    """RollBackBundleTileDestinations: the slot as free as before (a free
    slot owns no payload Words, so none is written back)."""
    m.tiles[slot] = fields["free"]


# ----------------------------------------------------------------- Function 2: Local copy


def local_tmov(m: Machine, b: Block) -> Optional[Fault]:
    """BSTART.TMOV Function 2 (BSTOP after the zero-mask no-op and the CUBE selection)."""
    if b.ios:
        return shared_local_tmov(b)
    dests = [x for x in b.iots if x.dst_valid]
    sources = [(x.src0_valid, x.src0) for x in b.iots] + [(x.src1_valid, x.src1) for x in b.iots]
    n_src = sum(v for v, _ in sources)
    if len(dests) != 1 or n_src != 1 or (b.iots and not b.iot_closed) \
            or not scalar_schema_legal(b):
        return BUNDLE_CONTROL                   # MV.4 bindings
    if not datr_legal(b):
        return TILE_LEGALITY                    # MV.5 datr
    # the shape source: the first binding's source in binding order
    bind = next(x for x in b.iots if x.src0_valid or x.src1_valid)
    src_index = bind.src0 if bind.src0_valid else bind.src1
    src = m.tile_at(src_index)
    src_ok = m.slot_of(src_index) is not None and configured(m, src)
    # ResolveBundleEffectiveDataType: B.DATR's (0 = FP64), the BSTART's, the source's
    code: Optional[int]
    if b.datr_present:
        code = b.datr[1]
    elif b.dtype != tables.DTYPE_NONE:
        code = b.dtype
    else:
        code = src.dtype if src_ok else None
    d = tables.DTYPE_BY_CODE.get(code) if code is not None else None
    if d is None:
        return TILE_LEGALITY                    # MV.6 dtype
    layout = tile_layout(b)
    shape = destination_shape(b, src if src_ok else None, None)
    fault, slot, fields = new_destination(m, b, d, layout, shape)
    if fault is not None:
        return TILE_ALLOCATION                  # MV.7 destination
    assert slot is not None                     # no fault: a slot
    # read after the allocation, which may have taken the source's own slot
    src_slot = m.slot_of(src_index)
    src = m.tile_at(src_index)
    if src_slot is None or src_slot == slot or not ordinary_source_legal(m, src, m.ordinary_words):
        release(m, slot, fields)
        return TILE_LEGALITY                    # MV.8 source
    dst = m.tiles[slot]
    if not (generic_indexable(layout, dst.rows, dst.cols, d)
            and (dst.rows, dst.cols, dst.valid_rows, dst.valid_cols, dst.layout, dst.dtype)
            == (src.rows, src.cols, src.valid_rows, src.valid_cols, src.layout, src.dtype)):
        release(m, slot, fields)
        return TILE_LEGALITY                    # MV.9 match
    # the whole payload and every definedness bit, whatever the PE mask
    dst.defined_valid = src.defined_valid
    words, defined = m.payload(slot)
    src_words, src_defined = m.payload(src_slot)
    words[:] = src_words
    defined[:] = src_defined
    return None


def shared_local_tmov(b: Block) -> Fault:
    """Function 2 with a B.IOS: the Shared TLSU path, which has no Function 2."""
    if len(b.ios) != 1:
        return TILE_LEGALITY                    # MV.1 shared_count
    if not scalar_schema_legal(b):
        return BUNDLE_CONTROL                   # MV.2 shared_scalar
    return TILE_LEGALITY                        # MV.3 shared_path


# ----------------------------------------------------------------- Functions 9..12: Shared


def shared_tmov(m: Machine, b: Block, function: int) -> Optional[Fault]:
    """ExecuteBundleSharedTLSUOperation for the TMOV Functions 9..12."""
    if len(b.ios) != 1:
        return TILE_LEGALITY                    # MS.1 one_shared_binding
    if not scalar_schema_legal(b):
        return BUNDLE_CONTROL                   # MS.2 scalar_schema
    if not datr_legal(b):
        return TILE_LEGALITY                    # MS.3 datr
    if function in (9, 10):
        return local_to_shared(m, b, publish=function == 10)
    return shared_to_local(m, b, broadcast=function == 11)


def local_to_shared(m: Machine, b: Block, publish: bool) -> Optional[Fault]:
    """L2S.INSERT / L2S.PUBLISH: the selected quarters of a Local tile into Sx."""
    sid, size_code, mask = b.ios[0]
    x = b.iots[0] if len(b.iots) == 1 else None
    if (x is None or x.dst_valid or not x.src0_valid or x.src1_valid or not x.last
            or not 1 <= size_code <= 12 or x.mask != mask):
        return TILE_LEGALITY                    # MS.4 local_schema
    tsize = tables.size_code_bytes(size_code)
    src_slot = m.slot_of(x.src0)
    src = m.tile_at(x.src0)
    if src_slot is None or not ordinary_source_legal(m, src, m.ordinary_words) \
            or src.capacity != tsize:
        return TILE_LEGALITY                    # MS.5 local_source
    d = tables.DTYPE_BY_CODE[src.dtype]
    i = m.record_of(sid)
    if not capacity_legal(m, tsize):
        return TILE_LEGALITY                    # MS.6 update_compatible
    if i is not None:
        r = m.shared[i]
        if mask & ~r.allocation_mask or (r.capacity, r.rows, r.cols, r.valid_rows, r.valid_cols,
                                         r.dtype, r.layout) != (
                src.capacity, src.rows, src.cols, src.valid_rows, src.valid_cols, src.dtype,
                src.layout):
            return TILE_LEGALITY                # MS.6 update_compatible
    elif not shared_pool_ok(m, mask, tsize):
        return TILE_LEGALITY                    # MS.6 update_compatible
    n = src.rows * src.cols
    if n > m.shared_words or (i is None and m.free_record() is None):
        return TILE_ALLOCATION                  # MS.7 model_bounds
    if publish and i is not None and (m.shared[i].initialized_mask | mask) != \
            m.shared[i].allocation_mask:
        return TILE_LEGALITY                    # MS.8 prospective_init
    # the source's Words up to tile_words, the executor's lanes (0 past them)
    src_words, src_defined = m.payload(src_slot)
    value: Callable[[int], int] = lambda e: src_words[e] if e < m.tile_words else 0
    known: Callable[[int], bool] = lambda e: e < m.tile_words and src_defined[e]
    if i is None:
        # a fresh record: the whole source, every Word and every definedness bit,
        # whatever the mask (AtomicUpdateSharedTileWithPublication: updated.tile = tile)
        i = m.free_record()
        assert i is not None                    # (step MS.7 found one)
        m.shared[i] = SharedRecord(sid=sid, allocation_mask=mask, initialized_mask=mask,
                                   published=publish, contents_defined=True, dtype=src.dtype,
                                   layout=src.layout, capacity=tsize, rows=src.rows,
                                   cols=src.cols, valid_rows=src.valid_rows,
                                   valid_cols=src.valid_cols)
        words, defined = m.shared_payload(i), m.shared_defined(i)
        for e in range(len(words)):
            words[e] = value(e) if e < n else 0
            defined[e] = e < n and known(e)
        return None
    # an existing record: each element of a selected quarter that is defined in
    # the source is copied and marked defined; every other one keeps its Word and bit
    r = m.shared[i]
    words, defined = m.shared_payload(i), m.shared_defined(i)
    for e in range(n):
        if mask & tables.pe_bit(quarter(e, d, tsize)) and known(e):
            words[e] = value(e)
            defined[e] = True
    r.initialized_mask |= mask
    r.contents_defined = r.initialized_mask == r.allocation_mask
    r.published = r.published or (publish and r.contents_defined)
    return None


def shared_to_local(m: Machine, b: Block, broadcast: bool) -> Optional[Fault]:
    """S2L.BROADCAST / S2L.EXTRACT: Sx's selected quarters into a new Local tile."""
    sid, size_code, mask = b.ios[0]
    x = b.iots[0] if len(b.iots) == 1 else None
    if (x is None or not x.dst_valid or x.src0_valid or x.src1_valid or not x.last
            or not 1 <= x.size_code <= 10 or size_code != 0 or x.mask != mask):
        return TILE_LEGALITY                    # MS.9 read_schema
    rec = legal_record(m, sid)
    vr, vc, cols = destination_shape(b, None, rec)
    # the transfer type: the BSTART DataType (DTYPE_NONE: the record's, the contract's rule)
    code = b.dtype if b.dtype != tables.DTYPE_NONE else (rec.dtype if rec else None)
    d = tables.DTYPE_BY_CODE.get(code) if code is not None else None
    layout = tile_layout(b)
    lay = tables.TILE_LAYOUT_CODE[layout]
    tsize = tables.size_code_bytes(x.size_code)
    if d is None or vr < 1 or vc < 1 or cols < 1 or vc > cols:
        return TILE_LEGALITY                    # MS.9 read_schema
    i = m.record_of(sid)
    r: Optional[SharedRecord]
    if i is not None:
        r = m.shared[i]
        readable = (descriptor_legal(m, i) and r.capacity == tsize and r.cols == cols
                    and vr <= r.valid_rows and vc <= r.valid_cols and r.dtype == d.code
                    and r.layout == lay)
    else:
        readable = (capacity_legal(m, tsize) and derived_rows(tsize, cols, d) != 0
                    and vr <= derived_rows(tsize, cols, d) and vr * vc <= tsize * 8 // d.bits)
    if not readable:
        return TILE_LEGALITY                    # MS.9 read_schema
    if broadcast:
        r = m.shared[i] if i is not None else None
        if not (mask == ALL_PES and r is not None and r.allocation_mask == ALL_PES
                and r.initialized_mask == r.allocation_mask and r.contents_defined
                and r.published):
            return TILE_LEGALITY                # MS.10 broadcast_ready
    # the destination's type: B.DATR's (0 = FP64), the BSTART's, the record's
    if b.datr_present:
        edt = tables.DTYPE_BY_CODE[b.datr[1]]
    else:
        edt = d
    fault, slot, fields = new_destination(m, b, edt, layout, (vr, vc, cols))
    if fault is not None:
        return TILE_ALLOCATION                  # MS.11 destination
    assert slot is not None                     # no fault: a slot
    rows = derived_rows(tsize, cols, d)
    if (fields["rows"], fields["dtype"]) != (rows, d.code):
        release(m, slot, fields)
        return TILE_LEGALITY                    # MS.12 match
    words, defined = m.payload(slot)
    for e in range(min(rows * cols, m.ordinary_words, len(words))):
        if mask & tables.pe_bit(quarter(e, d, tsize)):
            words[e] = read_word(m, sid, e)
            defined[e] = True
    if mask == ALL_PES:
        m.tiles[slot].defined_valid = vr * vc
    return None


def complete(m: Machine, b: Block, op: tuple[str, str, int], pe: int) -> Optional[Fault]:
    function = FUNCTION[op[0]]
    if function == 2:
        return local_tmov(m, b)
    return shared_tmov(m, b, function)


def selects(b: Block, op: tuple[str, str, int]) -> bool:
    """Every BSTART.TMOV block (Functions 2 and 9..12)."""
    return op[0] in FUNCTION


FAMILY = Family(families.BY_NAME["tmov"], complete, selects)
