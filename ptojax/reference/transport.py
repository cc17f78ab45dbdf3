"""TLOAD/TSTORE completion of the reference model (state-and-transport.md C).

Each completion returns None on success or a Fault(name, address); address is
None for every fault but the memory faults, whose address is the virtual data
address of the first failing access (A.8, A.9). Every check of an ordered
list runs before any effect, so a fault leaves tiles and GM untouched (the
rollback of C.10 is implicit: the destination is only installed after the
memory preflight succeeded).
"""

from __future__ import annotations

from typing import Optional, cast

from .. import families, tables
from . import layouts
# Fault is the family record's (family.py); the families name it here
from .family import Family, Fault as Fault
from .state import MASK64, Binding, Block, Machine, Tile

CUBE_LOAD_CODES = {21: "CUBE_M32", 22: "CUBE_M16", 23: "CUBE_N8"}    # B.DATR Layout (ADR 0070)
CUBE_STORE_CODES = {24: "CUBE_M32", 25: "CUBE_M16", 26: "CUBE_N8"}


TILE_LEGALITY = Fault("Fault_TileLegality")
UNIMPLEMENTED = Fault("Fault_Unimplemented")
TILE_ALLOCATION = Fault("Fault_TileAllocation")
BUNDLE_CONTROL = Fault("Fault_BundleControl")
ILLEGAL = Fault("Fault_IllegalInstruction")


# ----------------------------------------------------------------- A.8 memory


def probe(gm_size: int, address: int, size: int) -> Optional[Fault]:
    """A.8: alignment to the element size first, then the range check (no wrap)."""
    if address % size != 0:
        return Fault("Fault_DataAlignment", address)
    if address + size > gm_size:
        return Fault("Fault_DataPage", address)
    return None


def element_address(base: int, stride: int, row: int, col: int, d: tables.DataType) -> int:
    """C.3: base + r*stride + c*element_bytes (4-bit: + floor(c/2)), mod 2^64."""
    offset = col // 2 if d.bits == 4 else col * d.element_bytes
    return (base + row * stride + offset) & MASK64


def dense_stride(columns: int, d: tables.DataType) -> int:
    """C.3: dense byte row width ceil(columns * bits / 8)."""
    return (columns * d.bits + 7) // 8


def load_element(gm: bytearray, address: int, col: int, d: tables.DataType) -> int:
    """C.4: raw little-endian load; S8/S16/S32 sign-extended, 4-bit zero-extended nibble."""
    if d.bits == 4:
        byte = gm[address]
        return (byte >> 4) & 0xF if col % 2 else byte & 0xF
    n = d.element_bytes
    v = int.from_bytes(gm[address:address + n], "little")
    if d.signed and n < 8 and v >> (8 * n - 1):
        v = (v - (1 << (8 * n))) & MASK64
    return v


def store_element(gm: bytearray, address: int, col: int, d: tables.DataType, word: int) -> None:
    """C.4: write the low element bytes; 4-bit read-modify-writes only its nibble."""
    if d.bits == 4:
        byte = gm[address]
        nib = word & 0xF
        gm[address] = (byte & 0x0F) | (nib << 4) if col % 2 else (byte & 0xF0) | nib
        return
    n = d.element_bytes
    gm[address:address + n] = (word & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


def preflight(m: Machine, base: int, stride: int, vr: int, vc: int,
              d: tables.DataType) -> Optional[Fault]:
    """C.4/A.8: probe every valid element row-major; the first failure is the fault."""
    size = d.element_bytes
    gm_size = len(m.gm)
    for r in range(vr):
        for c in range(vc):
            f = probe(gm_size, element_address(base, stride, r, c, d), size)
            if f is not None:
                return f
    return None


# ----------------------------------------------------------------- schema helpers


def pe_count(mask: int) -> int:
    return bin(mask & 0xF).count("1")


def gpr(m: Machine, pe: int, reg: int) -> int:
    """GPR `reg` of PE `pe`; x0 (index 0) reads 0 (so does a selector past x23,
    which only a hand-made block state can hold: decode rejects 24..31)."""
    return m.gpr[pe][reg] & MASK64 if 0 < reg < tables.NUM_GPRS else 0


def lb_in_range(b: Block, n: int) -> bool:
    """A dimension value usable as a shape: 1..65535 (absent reads 0)."""
    return 1 <= b.lb[n] <= 65535


def ior_surplus(b: Block) -> bool:
    """RegSrc2 or RegDst nonzero: TLOAD/TSTORE consume only RegSrc0 (base) and RegSrc1 (stride)."""
    return b.ior_present and (b.ior[3] != 0 or b.ior[0] != 0)


def base_and_stride(m: Machine, b: Block, pe: int, default_stride: int) -> tuple[int, int]:
    """C.3: B.IOR RegSrc0/RegSrc1 of the current PE, else base 0 and the dense stride."""
    if b.ior_present:
        return gpr(m, pe, b.ior[1]), gpr(m, pe, b.ior[2])
    return 0, default_stride


def binding_well_formed(x: Binding) -> bool:
    """Fields a decoded B.IOT can hold (a hand-made block state may hold others)."""
    return (x.mask in tables.PEMODE_MASK[1:] and 0 <= x.dst_hand <= 3
            and (not x.dst_valid or 1 <= x.size_code <= 10)
            and 0 <= x.src0 < tables.LOCAL_TILES and 0 <= x.src1 < tables.LOCAL_TILES)


def free_slot(m: Machine, hand: int) -> Optional[int]:
    """A.2: lowest unallocated materialized slot of `hand` (first hand_slots slots)."""
    for k in range(m.hand_slots):
        slot = hand * m.hand_slots + k
        if not m.tiles[slot].allocated:
            return slot
    return None


def budget_ok(m: Machine, mask: int, tsize: int, charge_pes: Optional[int] = None) -> bool:
    """A.5 / shared-decisions.md 1: a new Local allocation of the executing PE:
    its pool in use (adr0100: its Local pool; 0.58.3: Local + Shared) plus the
    new charge popcount(mask)*TSize (or charge_pes*TSize) <= TILE_CAPACITY."""
    n = pe_count(mask) if charge_pes is None else charge_pes
    return m.capacity_in_use() + n * tsize <= m.tile_capacity


def allocate(m: Machine, slot: int, **descriptor: int) -> Tile:
    """B.7: install a fresh descriptor; definedness cleared, payload Words kept."""
    tile = Tile(allocated=True, **descriptor)
    m.tiles[slot] = tile
    m.place(slot)
    _, defined = m.payload(slot)
    defined[:] = [False] * len(defined)
    return tile


# ----------------------------------------------------------------- C.5 / C.6 CUBE


def cube_transport(m: Machine, b: Block, op: tuple[str, str, int], pe: int) -> Optional[Fault]:
    """C.5 (TLOAD, Layout 21..23) and C.6 (TSTORE, Layout 24..26); taken for any
    BSTART whose block carries a B.DATR with a CUBE conversion Layout.

    `op` is the block's (name, engine, Function) entry of tables.OPS.
    """
    _, engine, function = op
    # C5.2 tlsu_decodable: the block's Function must decode as a TLSU tile operation
    if not tlsu_decodable(engine, function):
        return ILLEGAL
    # C5.3 cube_schema: schema, dimensions, attributes, direction, bindings
    if not cube_schema_legal(b, engine, function):
        return TILE_LEGALITY
    # C5.4 cube_dtype: dtype = BSTART DataType, must have a CELL mapping
    d = tables.DTYPE_BY_CODE.get(b.dtype)
    if d is None or not layouts.cube_dtype_supported(d):
        return TILE_LEGALITY
    vc, vr = b.lb[0], b.lb[1]
    code = b.datr[0]
    # 5. base and byte row stride: dense default over LB0 valid columns (G.1)
    base, stride = base_and_stride(m, b, pe, dense_stride(vc, d))
    if function == 0:
        return _cube_tload(m, b, d, CUBE_LOAD_CODES[code], vr, vc, base, stride)
    return _cube_tstore(m, b, d, CUBE_STORE_CODES[code], vr, vc, base, stride)


def tlsu_decodable(engine: str, function: int) -> bool:
    """C.5 step 2: the CUBE transport decodes the block's Function as a TLSU tile
    operation. TLSU blocks map 9..12 (TMOV variants) and 14 (TSTORE.SPART) onto
    known codes; other blocks (matrix starts) are looked up raw in 0..8 and 13."""
    if engine == "TLSU":
        return 0 <= function <= 14
    return 0 <= function <= 8 or function == 13


def cube_schema_legal(b: Block, engine: str, function: int) -> bool:
    """C.5 step 3 / C.6 steps 1-4: every condition raises Fault_TileLegality."""
    # dimensions: LB0 and LB1 present and 1..65535, LB2 absent
    if not (b.lb_present[0] and b.lb_present[1]) or b.lb_present[2]:
        return False
    if not (lb_in_range(b, 0) and lb_in_range(b, 1)):
        return False
    # attributes: DataType must be DTYPE_NONE; CMode/RMode/Sat/Canonicalize zero
    layout, dtype, _pad, cmode, rmode, sat, canon = b.datr
    if dtype != tables.DTYPE_NONE or cmode or rmode or sat or canon:
        return False
    # direction: a TileMemory block, Function 0 with 21..23 or Function 1 with 24..26
    if engine != "TLSU":
        return False
    if not ((function == 0 and layout in CUBE_LOAD_CODES)
            or (function == 1 and layout in CUBE_STORE_CODES)):
        return False
    # bindings: no B.IOS, exactly one B.IOT, terminated, no B.FPATR, B.IOR surplus zero
    if b.ios or len(b.iots) != 1 or b.fpatr_present or ior_surplus(b):
        return False
    bind = b.iots[0]
    if not bind.last or not binding_well_formed(bind):
        return False
    if function == 0:    # one destination (SizeCode 1..10), no sources
        return (bind.dst_valid and 1 <= bind.size_code <= 10
                and not bind.src0_valid and not bind.src1_valid)
    return not bind.dst_valid and bind.src0_valid and not bind.src1_valid


def _cube_tload(m: Machine, b: Block, d: tables.DataType, layout: str, vr: int, vc: int,
                base: int, stride: int) -> Optional[Fault]:
    bind = b.iots[0]
    tsize = tables.size_code_bytes(bind.size_code)
    # C5.6 cube_destination: shape vs TSize (B.6), Core budget, free slot
    if not layouts.legal(layout, d, vr, vc, tsize, m.tile_capacity, m.tile_words):
        return TILE_ALLOCATION
    if not budget_ok(m, bind.mask, tsize):
        return TILE_ALLOCATION
    slot = free_slot(m, bind.dst_hand)
    if slot is None:
        return TILE_ALLOCATION
    # 7. preflight every valid read, row-major (a fault rolls the allocation back)
    f = preflight(m, base, stride, vr, vc, d)
    if f is not None:
        return f
    # allocate the CUBE Matrix descriptor with the binding mask
    g = layouts.geometry(layout, d, vr, vc)
    allocate(m, slot, dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout],
             location=tables.TILE_LOCATION_CODE["Matrix"], capacity=tsize,
             rows=g["storage_rows"], cols=g["storage_cols"], valid_rows=vr, valid_cols=vc,
             k_repeat=g["k_repeat"], n_repeat=g["n_repeat"], cell_count=g["cell_count"],
             storage_bytes=g["required_bytes"], mask=bind.mask & 0xF, defined_valid=vr * vc)
    # 8. load the valid elements into their CELL slots, then pad (B.5)
    words, defined = m.payload(slot)
    index = layouts.index_function(layout, d, vr, vc)
    for r in range(vr):
        for c in range(vc):
            i = index(r, c)
            words[i] = load_element(m.gm, element_address(base, stride, r, c, d), c, d)
            defined[i] = True
    pad = b.datr[2]
    pad_word = tables.pad_word(d, pad)
    pad_defined = pad != tables.PAD_NULL
    for r in range(g["storage_rows"]):
        for c in range(g["storage_cols"]):
            if r >= vr or c >= vc:
                i = index(r, c)
                words[i] = pad_word
                defined[i] = pad_defined
    return None


def cube_descriptor_legal(m: Machine, t: Tile) -> bool:
    """B.6: a legal CUBE descriptor (Matrix location, shape, derived fields)."""
    layout = t.layout_name
    if not t.allocated or layout not in layouts.CUBE_LAYOUTS:
        return False
    if t.location != tables.TILE_LOCATION_CODE["Matrix"]:
        return False
    d = tables.DTYPE_BY_CODE.get(t.dtype)
    if d is None:
        return False
    if not layouts.legal(layout, d, t.valid_rows, t.valid_cols, t.capacity, m.tile_capacity,
                         m.tile_words):
        return False
    g = layouts.geometry(layout, d, t.valid_rows, t.valid_cols)
    return (t.rows == g["storage_rows"] and t.cols == g["storage_cols"]
            and t.k_repeat == g["k_repeat"] and t.n_repeat == g["n_repeat"]
            and t.cell_count == g["cell_count"] and t.storage_bytes == g["required_bytes"]
            and t.storage_bytes <= t.capacity)


def _cube_tstore(m: Machine, b: Block, d: tables.DataType, layout: str, vr: int, vc: int,
                 base: int, stride: int) -> Optional[Fault]:
    bind = b.iots[0]
    slot = m.slot_of(bind.src0)
    t = m.tile_at(bind.src0)
    # C6.6 cube_source: a defined CUBE tile of this dtype, layout, valid shape and mask
    if (slot is None or not cube_descriptor_legal(m, t) or not t.contents_defined
            or t.dtype != d.code or t.layout_name != layout
            or t.valid_rows != vr or t.valid_cols != vc
            or (t.mask & bind.mask) != bind.mask):
        return TILE_LEGALITY
    # 7. preflight every valid write, row-major
    f = preflight(m, base, stride, vr, vc, d)
    if f is not None:
        return f
    # 8. store each valid element; padding never reaches GM
    words, _ = m.payload(slot)
    index = layouts.index_function(layout, d, vr, vc)
    for r in range(vr):
        for c in range(vc):
            store_element(m.gm, element_address(base, stride, r, c, d), c, d, words[index(r, c)])
    return None


# ----------------------------------------------------------------- C.7 / C.8 ordinary


def ordinary_datr_legal(b: Block) -> bool:
    """C.7 step 3: only Layout and PadValue may be nonzero; PadValue 0 for non-CUBE layouts."""
    if not b.datr_present:
        return True
    layout, dtype, pad, cmode, rmode, sat, canon = b.datr
    if dtype != 0 or cmode or rmode or sat or canon:
        return False
    return pad == 0


def ordinary_bindings_complete(b: Block, loads: bool) -> bool:
    """C.7/C.8 step 2: TLOAD 1 destination/0 sources, TSTORE 0/1; terminated; B.IOR surplus zero."""
    dests = sum(1 for x in b.iots if x.dst_valid)
    srcs = sum(int(x.src0_valid) + int(x.src1_valid) for x in b.iots)
    if (dests, srcs) != ((1, 0) if loads else (0, 1)):
        return False
    if b.iots and not b.iot_closed:
        return False
    return not ior_surplus(b)


def ordinary_tload(m: Machine, b: Block, pe: int) -> Optional[Fault]:
    """C.7: ordinary Local TLOAD, GM read row-major into a tile of the layout its
    B.DATR code names (RowMajor without one; a relayout code's second half)."""
    if b.fpatr_present or not ordinary_bindings_complete(b, loads=True):
        return BUNDLE_CONTROL                   # C7.2 bindings
    if not ordinary_datr_legal(b) or not all(binding_well_formed(x) for x in b.iots):
        return TILE_LEGALITY                    # C7.3 datr
    layout = DESTINATION_LAYOUT[b.datr[0]] if b.datr_present else "RowMajor"
    # effective dtype: B.DATR DataType when present and concrete, else BSTART (F.3)
    code = b.datr[1] if b.datr_present and b.datr[1] != tables.DTYPE_NONE else b.dtype
    d = tables.DTYPE_BY_CODE.get(code)
    start = tables.DTYPE_BY_CODE.get(b.dtype)
    if d is None or start is None:
        return TILE_LEGALITY                    # C7.3 datr (no such DataType)
    # dimensions (C.2): an absent or zero LB0/LB1 means 1; LB2 absent or zero means ValidCol
    vc = b.lb[0] if lb_in_range(b, 0) else 1
    vr = b.lb[1] if lb_in_range(b, 1) else 1
    cols = b.lb[2] if lb_in_range(b, 2) else vc
    bind = next(x for x in b.iots if x.dst_valid)
    tsize = tables.size_code_bytes(bind.size_code)
    slot = free_slot(m, bind.dst_hand)
    if slot is None or not budget_ok(m, bind.mask, tsize):
        return TILE_ALLOCATION                  # C7.4 destination
    rows = derived_rows(tsize, cols, d)
    if rows == 0 or vr > rows or vc > cols or vr * vc > tsize * 8 // d.bits:
        return TILE_ALLOCATION
    indexable = generic_indexable(layout, rows, cols, d)
    if indexable and words_needed(layout, rows, cols, d, vr, vc) > m.ordinary_words:
        return TILE_ALLOCATION
    # the new descriptor must be generically indexable (TileDescriptorLegal),
    # checked after the allocation, which it rolls back
    if not indexable:
        return TILE_LEGALITY                    # C7.4 indexable
    # base/stride: dense default over the resolved Col with the BSTART dtype (F.3)
    base, stride = base_and_stride(m, b, pe, dense_stride(cols, start))
    f = preflight(m, base, stride, vr, vc, d)
    if f is not None:
        return f
    allocate(m, slot, dtype=d.code, layout=tables.TILE_LAYOUT_CODE[layout],
             location=tables.TILE_LOCATION_CODE["Any"], capacity=tsize, rows=rows, cols=cols,
             valid_rows=vr, valid_cols=vc, mask=bind.mask & 0xF, defined_valid=vr * vc)
    words, defined = m.payload(slot)
    # the model keeps a tile past PTO_MODEL_TILE_ELEMENTS in packed carriers,
    # whose elements read back unextended (TileReadLogicalElement)
    keep = (1 << d.bits) - 1 if rows * cols > layouts.MODEL_TILE_ELEMENTS else MASK64
    for r in range(vr):
        for c in range(vc):
            i = layout_index(layout, rows, cols, d, r, c)
            assert i is not None                # a generically indexable layout (checked above)
            words[i] = load_element(m.gm, element_address(base, stride, r, c, d), c, d) & keep
            defined[i] = True
    return None


def derived_rows(capacity: int, cols: int, d: tables.DataType) -> int:
    """A.3: rows = capacity_bits / (Col * bits); 0 unless Col is a power of two,
    the division is exact and the result is 1..65535."""
    if capacity <= 0 or cols <= 0 or cols & (cols - 1):
        return 0
    bits = capacity * 8
    row_bits = cols * d.bits
    if bits % row_bits:
        return 0
    rows = bits // row_bits
    return rows if 1 <= rows <= 65535 else 0


# B.DATR Layout -> layout of a new ordinary tile (the model's
# TileDataLayoutDestinationLayout); TLOAD and MGATHER.CAS read only this half
# of a code, and GM is always row-major.
DESTINATION_LAYOUT = {
    0: "RowMajor", 6: "RowMajor", 17: "RowMajor", 27: "RowMajor",
    1: "ColumnMajor", 18: "ColumnMajor", 28: "ColumnMajor",
    3: "ZN", 8: "ZN", 30: "ZN",
    4: "NZ", 9: "NZ", 20: "NZ",
}


def fractal_width(d: tables.DataType) -> int:
    """Elements in one 32-byte fractal row (a fractal is 16 such rows)."""
    return 256 // d.bits


def generic_indexable(layout: str, rows: int, cols: int, d: tables.DataType) -> bool:
    """TileLayoutShapeLegal: RowMajor and ColumnMajor always; ZN and NZ only as
    whole fractals (rows a multiple of 16, columns of the fractal width)."""
    if layout in ("RowMajor", "ColumnMajor"):
        return True
    if layout in ("ZN", "NZ"):
        return rows % 16 == 0 and cols % fractal_width(d) == 0
    return False


def layout_index(layout: str, rows: int, cols: int, d: tables.DataType, row: int,
                 col: int) -> Optional[int]:
    """A.4 linear index of (row, col) in an ordinary tile of rows x cols; None
    when the layout cannot index that shape."""
    if not generic_indexable(layout, rows, cols, d):
        return None
    if layout == "RowMajor":
        return row * cols + col
    if layout == "ColumnMajor":
        return col * rows + row
    inner = fractal_width(d)
    fractal = 16 * inner
    br, bc, ir, ic = row // 16, col // inner, row % 16, col % inner
    if layout == "ZN":        # fractals in row order, each filled down its columns
        return (br * (cols // inner) + bc) * fractal + ic * 16 + ir
    return (bc * (rows // 16) + br) * fractal + ir * inner + ic   # NZ


def linear_index(t: Tile, d: tables.DataType, row: int, col: int) -> Optional[int]:
    """A.4 non-packed linear index of (row, col) of an ordinary tile; None when not indexable."""
    if t.layout_name is None:
        return None
    return layout_index(t.layout_name, t.rows, t.cols, d, row, col)


def words_needed(layout: str, rows: int, cols: int, d: tables.DataType, vr: int, vc: int) -> int:
    """ptojax's model bound for a new ordinary tile: every payload Word up to the
    end of the last line its valid region reaches (rows for RowMajor, columns
    for ColumnMajor, rows of fractals for ZN, columns of fractals for NZ)."""
    if layout == "RowMajor":
        return vr * cols
    if layout == "ColumnMajor":
        return vc * rows
    inner = fractal_width(d)
    if layout == "ZN":
        return -(-vr // 16) * 16 * cols
    return -(-vc // inner) * inner * rows


def ordinary_source_legal(m: Machine, t: Tile, bound: Optional[int] = None) -> bool:
    """C.8 step 4: an allocated, configured, generically indexable, fully defined
    source whose valid elements lie within `bound` Words (default tile_words;
    a TSTORE's or TMOV's source: m.ordinary_words, the model's packed tiles)."""
    d = tables.DTYPE_BY_CODE.get(t.dtype)
    if not t.allocated or d is None or t.layout_name in (None, *layouts.CUBE_LAYOUTS):
        return False
    if not layouts.capacity_legal(t.capacity, m.tile_capacity):
        return False
    rows = derived_rows(t.capacity, t.cols, d)
    if rows == 0 or t.rows != rows or not 0 <= t.valid_rows <= t.rows \
            or not 0 <= t.valid_cols <= t.cols:
        return False
    if not t.contents_defined:
        return False
    # every valid element must have a slot among the model's payload Words
    if t.valid_rows == 0 or t.valid_cols == 0:
        return True
    if t.layout_name in ("RowMajor", "ColumnMajor"):     # largest index at the far corner
        cells = [(t.valid_rows - 1, t.valid_cols - 1)]
    else:
        cells = [(r, c) for r in range(t.valid_rows) for c in range(t.valid_cols)]
    for r, c in cells:
        i = linear_index(t, d, r, c)
        if i is None or i >= (m.tile_words if bound is None else bound):
            return False
    return True


def ordinary_tstore(m: Machine, b: Block, pe: int) -> Optional[Fault]:
    """C.8: ordinary Local TSTORE of the source descriptor's valid region."""
    if b.fpatr_present or not ordinary_bindings_complete(b, loads=False):
        return BUNDLE_CONTROL                   # C7.2 bindings (C.8 steps 0-3 are C.7's)
    if not ordinary_datr_legal(b) or not all(binding_well_formed(x) for x in b.iots):
        return TILE_LEGALITY                    # C7.3 datr
    # a relayout code changes nothing here: the source is read through its own
    # layout and dtype, GM written row-major
    start = tables.DTYPE_BY_CODE.get(b.dtype)
    if start is None:
        return TILE_LEGALITY
    bind = next(x for x in b.iots if x.src0_valid or x.src1_valid)
    src = bind.src0 if bind.src0_valid else bind.src1
    slot = m.slot_of(src)
    t = m.tile_at(src)
    # dense default stride: LB2, else the source's physical columns, with the BSTART dtype
    if lb_in_range(b, 2):
        cols = b.lb[2]
    elif slot is not None and t.allocated:
        cols = t.cols
    else:
        cols = b.lb[0] if lb_in_range(b, 0) else 1
    base, stride = base_and_stride(m, b, pe, dense_stride(max(cols, 0), start))
    if slot is None or not ordinary_source_legal(m, t, m.ordinary_words):
        return TILE_LEGALITY                    # C8.4 source
    d = tables.DTYPE_BY_CODE[t.dtype]
    f = preflight(m, base, stride, t.valid_rows, t.valid_cols, d)
    if f is not None:
        return f
    words, _ = m.payload(slot)
    for r in range(t.valid_rows):
        for c in range(t.valid_cols):
            store_element(m.gm, element_address(base, stride, r, c, d), c, d,
                          words[cast(int, linear_index(t, d, r, c))])   # a legal source indexes
    return None


def cube_selected(b: Block) -> bool:
    """C.5: a B.DATR with a CUBE conversion Layout (21..26) selects the CUBE
    transport whatever the BSTART."""
    return b.datr_present and b.datr[0] in CUBE_LOAD_CODES.keys() | CUBE_STORE_CODES.keys()


def complete(m: Machine, b: Block, op: tuple[str, str, int], pe: int) -> Optional[Fault]:
    """The default family: the CUBE transport, else an ordinary Local TLOAD or
    TSTORE; any other operation no family selects is outside the slice."""
    if cube_selected(b):
        return cube_transport(m, b, op, pe)
    if op[0] not in ("TLOAD", "TSTORE"):
        return UNIMPLEMENTED                    # DSP.1 unmodelled
    if op[0] == "TLOAD":
        return ordinary_tload(m, b, pe)
    return ordinary_tstore(m, b, pe)


FAMILY = Family(families.BY_NAME["transport"], complete)
