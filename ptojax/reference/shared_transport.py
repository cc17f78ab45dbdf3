"""Shared TLOAD / TSTORE / TSTORE.SPART completions of the reference model.

Written from docs/shared-decisions.md sections 3 and 4 (spec/state-and-
transport.md A.7 and C.9, spec/matrix.md D.1), on the Shared registers of
shared.py. Like transport.py, every completion returns None or a Fault and
changes nothing before its last check passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

from .. import families, tables
from .family import Family
from .state import Block, Machine, SharedRecord
from .shared import (ALL_PES, capacity_legal, descriptor_legal, ios_well_formed,
                     minimum_capacity, quarter, read_word)
from .transport import (BUNDLE_CONTROL, DESTINATION_LAYOUT, TILE_ALLOCATION, TILE_LEGALITY,
                        Fault, derived_rows, ordinary_datr_legal, dense_stride, element_address,
                        generic_indexable, gpr, ior_surplus, layout_index, lb_in_range,
                        load_element, pe_count, probe, store_element)

FUNCTION = {"TLOAD": 0, "TSTORE": 1, "TSTORE.SPART": 14}


# ----------------------------------------------------------------- pool, addresses, preflight


def shared_pool_ok(m: Machine, mask: int, tsize: int) -> bool:
    """A new Shared allocation: adr0100: the Core's Shared pool alone; 0.58.3:
    Local(executing PE) + Shared, one budget; + popcount(mask)*TSize <= TILE_CAPACITY."""
    used = m.shared_charge()
    if m.semantics == "0.58.3":
        used += m.local_charge()
    return used + pe_count(mask) * tsize <= m.tile_capacity


def pe_base_stride(m: Machine, b: Block, pe: int, default_stride: int) -> tuple[int, int]:
    """Base and row stride of PE `pe`: its GPRs named by B.IOR RegSrc0/RegSrc1,
    else base 0 and the dense stride."""
    if b.ior_present:
        return gpr(m, pe, b.ior[1]), gpr(m, pe, b.ior[2])
    return 0, default_stride


def selected_elements(m: Machine, b: Block, mask: int, vr: int, vc: int, layout: str,
                      rows: int, cols: int, capacity: int,
                      d: tables.DataType) -> list[tuple[int, int, int, int]]:
    """(r, c, e, address) of every valid element whose quarter PE is in the mask,
    row-major; e is its index in the register's layout (which sets its quarter),
    the address uses that PE's base and stride."""
    stride0 = dense_stride(cols, d)
    regs = [pe_base_stride(m, b, p, stride0) for p in range(tables.NUM_PES)]
    out = []
    for r in range(vr):
        for c in range(vc):
            e = layout_index(layout, rows, cols, d, r, c)
            assert e is not None                # the callers checked the layout indexes the shape
            q = quarter(e, d, capacity)
            if mask & tables.pe_bit(q):
                base, stride = regs[q]
                out.append((r, c, e, element_address(base, stride, r, c, d)))
    return out


def preflight(m: Machine, elements: Sequence[tuple[int, int, int, int]], d: tables.DataType) -> Optional[Fault]:
    """Alignment then range of every selected access, in order; the first failure."""
    for _, _, _, address in elements:
        f = probe(len(m.gm), address, d.element_bytes)
        if f is not None:
            return f
    return None


# ----------------------------------------------------------------- completion


def shared_tlsu(m: Machine, b: Block, name: str) -> Optional[Fault]:
    """Shared TLOAD (function 0), TSTORE (1), TSTORE.SPART (14): steps 1-3 of
    shared-decisions.md 3 (common), then the direction's own steps.
    (Step 0, the zero-mask no-op, and the CUBE-code dispatch run before this.)"""
    function = FUNCTION[name]
    # SH3.1 one_shared_binding: exactly one B.IOS
    if len(b.ios) != 1 or not ios_well_formed(b):
        return TILE_LEGALITY
    sid, size_code, mask = b.ios[0]
    d = tables.DTYPE_BY_CODE.get(b.dtype)
    if d is None:
        return TILE_LEGALITY
    # SH3.2 scalar_schema: the ordinary path's scalar schema
    if b.fpatr_present or ior_surplus(b):
        return BUNDLE_CONTROL
    # SH3.3 datr: B.DATR attributes
    if not ordinary_datr_legal(b):
        return TILE_LEGALITY
    # the register's layout: the second half of a relayout code (GM is row-major)
    layout = DESTINATION_LAYOUT[b.datr[0]] if b.datr_present else "RowMajor"
    # transfer dtype: the BSTART DataType (the ASL's Shared path reads the
    # operation's DataType, not the B.DATR one; see the report / spec-notes)
    if function == 0:
        return shared_tload(m, b, sid, size_code, mask, d, layout)
    return shared_tstore(m, b, function, sid, size_code, mask, d, layout)


def shared_tload(m: Machine, b: Block, sid: int, size_code: int, mask: int,
                 d: tables.DataType, layout: str) -> Optional[Fault]:
    """shared-decisions.md 3, steps 4-9."""
    # SH3.4 load_bindings: a destination B.IOS, no B.IOT; LB0/LB1/LB2 present and 1..65535
    if size_code == 0 or b.iots:
        return TILE_LEGALITY
    if not all(b.lb_present[n] and lb_in_range(b, n) for n in range(3)):
        return TILE_LEGALITY
    vc, vr, cols = b.lb[0], b.lb[1], b.lb[2]
    if vc > cols:
        return TILE_LEGALITY
    tsize = tables.size_code_bytes(size_code)
    # SH3.5 descriptor: rows derived from (TSize, columns)
    rows = derived_rows(tsize, cols, d)
    if rows == 0 or vr > rows or vr * vc > tsize * 8 // d.bits:
        return TILE_LEGALITY
    # a ZN/NZ register off the fractal grid has no element index (the model
    # stops on an assertion there; docs/spec-notes.md)
    if not generic_indexable(layout, rows, cols, d):
        return TILE_LEGALITY
    # SH3.6 update_compatible: SharedTileUpdateCompatible
    if not capacity_legal(m, tsize):
        return TILE_LEGALITY
    i = m.record_of(sid)
    if i is not None:
        r = m.shared[i]
        if mask & ~r.allocation_mask:
            return TILE_LEGALITY
        if (r.capacity, r.rows, r.cols, r.valid_rows, r.valid_cols, r.dtype, r.layout) != (
                tsize, rows, cols, vr, vc, d.code, tables.TILE_LAYOUT_CODE[layout]):
            return TILE_LEGALITY
    elif not shared_pool_ok(m, mask, tsize):
        return TILE_LEGALITY
    # SH3.7 model_bounds
    if rows * cols > m.shared_words:
        return TILE_ALLOCATION
    if i is None and m.free_record() is None:
        return TILE_ALLOCATION
    # 8. memory preflight of the selected quarters, each with its PE's base/stride
    elements = selected_elements(m, b, mask, vr, vc, layout, rows, cols, tsize, d)
    f = preflight(m, elements, d)
    if f is not None:
        return f
    # 9. effect
    if i is None:
        i = m.free_record()
        assert i is not None                    # (step SH3.7 found one)
        m.shared[i] = SharedRecord(sid=sid, allocation_mask=mask, initialized_mask=mask,
                                   published=True, contents_defined=True, dtype=d.code,
                                   layout=tables.TILE_LAYOUT_CODE[layout], capacity=tsize,
                                   rows=rows, cols=cols, valid_rows=vr, valid_cols=vc)
        # a fresh tile: every Word 0 and undefined, then the loaded elements
        words, defined = m.shared_payload(i), m.shared_defined(i)
        for k in range(len(words)):
            words[k], defined[k] = 0, False
    else:
        r = m.shared[i]
        r.initialized_mask |= mask
        r.contents_defined = r.initialized_mask == r.allocation_mask
        r.published = r.published or r.contents_defined
        words, defined = m.shared_payload(i), m.shared_defined(i)
    # the loaded elements are defined; an existing record's others keep their bits
    for _, c, e, address in elements:
        words[e] = load_element(m.gm, address, c, d)
        defined[e] = True
    return None


def store_shape(m: Machine, b: Block, sid: int) -> tuple[int, int, int]:
    """(valid columns, valid rows, columns): LB0, LB1, LB2 when present, else
    the record's valid columns / valid rows / columns, or 1 / 1 / valid columns."""
    i = m.record_of(sid)
    r = m.shared[i] if i is not None else None
    vc = b.lb[0] if b.lb_present[0] else (r.valid_cols if r else 1)
    vr = b.lb[1] if b.lb_present[1] else (r.valid_rows if r else 1)
    cols = b.lb[2] if b.lb_present[2] else (r.cols if r else vc)
    return vc, vr, cols


def shared_tstore(m: Machine, b: Block, function: int, sid: int, size_code: int, mask: int,
                  d: tables.DataType, layout: str) -> Optional[Fault]:
    """shared-decisions.md 4, steps 4-6."""
    # SH4.4 store_bindings: mask (TSTORE: all four PEs; SPART: any), a source B.IOS, no B.IOT
    if (function == 1 and mask != ALL_PES) or size_code != 0 or b.iots:
        return TILE_LEGALITY
    # SH4.5 read_schema: store shape and the read schema
    vc, vr, cols = store_shape(m, b, sid)
    if vc < 1 or vr < 1 or cols < 1 or vc > cols:
        return TILE_LEGALITY
    i = m.record_of(sid)
    if i is not None:
        r = m.shared[i]
        capacity, rows = r.capacity, r.rows
        # the record read in the layout the code names, of the BSTART dtype
        if not (descriptor_legal(m, i) and r.cols == cols and vr <= r.valid_rows
                and vc <= r.valid_cols and r.dtype == d.code
                and r.layout == tables.TILE_LAYOUT_CODE[layout]):
            return TILE_LEGALITY
    else:
        # no record: a temporary descriptor of the smallest capacity, in that layout
        capacity = minimum_capacity(cols, vr, vc, d)
        if capacity == 0 or not capacity_legal(m, capacity):
            return TILE_LEGALITY
        rows = derived_rows(capacity, cols, d)
        if not generic_indexable(layout, rows, cols, d):
            return TILE_LEGALITY
    # SH4.5 model_bound: the stored elements lie within shared_words (as a record's payload)
    # (the layout indexes the shape: descriptor_legal or generic_indexable above)
    if cast(int, layout_index(layout, rows, cols, d, vr - 1, vc - 1)) >= m.shared_words:
        return TILE_ALLOCATION
    # 6. preflight, then store each selected element's Word (undefined Words included)
    elements = selected_elements(m, b, mask, vr, vc, layout, rows, cols, capacity, d)
    f = preflight(m, elements, d)
    if f is not None:
        return f
    for _, c, e, address in elements:
        store_element(m.gm, address, c, d, read_word(m, sid, e))
    return None


def selects(b: Block, op: tuple[str, str, int]) -> bool:
    """A TLOAD/TSTORE with a B.IOS binding, and TSTORE.SPART always (section 3)."""
    return op[0] in FUNCTION and (bool(b.ios) or op[0] == "TSTORE.SPART")


FAMILY = Family(families.BY_NAME["shared_transport"],
                lambda m, b, op, pe: shared_tlsu(m, b, op[0]), selects)
