"""CUBE CELL geometry and ND <-> CUBE conversions, in plain Python.

Independent scalar reference for state-and-transport.md section B (ADR 0069):
B.1 CELL shape, B.2 derived geometry, B.3/B.4 payload index (N8 K-fast/N-slow
and column-major inside a CELL, M16 b4 nibble interleave), B.5 padding and
B.6 descriptor legality. One function per rule; no JAX, no numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import tables

CUBE_LAYOUTS = ("CUBE_M16", "CUBE_M32", "CUBE_N8")
CELL_BYTES = tables.CELL_BYTES          # one CELL is 128 bytes
MAX_ALLOCATION_BYTES = 65536            # largest Local TSize (SizeCode 10)
MAX_EXTENT = 65535                      # storage rows/columns are 16-bit
MAX_CELLS = 16384                       # ASL cell-count range (F.9)
MODEL_TILE_ELEMENTS = 32768             # PTO_MODEL_TILE_ELEMENTS default
MASK64 = (1 << 64) - 1

# B.1: (layout, element bits) -> (cell rows, cell columns)
_CELL_SHAPE = {
    ("CUBE_N8", 32): (4, 8), ("CUBE_N8", 16): (8, 8),
    ("CUBE_N8", 8): (16, 8), ("CUBE_N8", 4): (32, 8),
    ("CUBE_M32", 32): (32, 1), ("CUBE_M32", 16): (32, 2),
    ("CUBE_M32", 8): (32, 4), ("CUBE_M32", 4): (32, 8),
    ("CUBE_M16", 32): (16, 2), ("CUBE_M16", 16): (16, 4),
    ("CUBE_M16", 8): (16, 8), ("CUBE_M16", 4): (16, 16),
}

# B.4: M16 b4 inner column j -> physical position inside the CELL row
_M16_B4_POSITION = (0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15)


# ----------------------------------------------------------------- argument checks


def layout_name(layout: object) -> str:
    """Validate a CUBE layout name ("CUBE_M16", "CUBE_M32", "CUBE_N8")."""
    if not isinstance(layout, str):
        raise ValueError(f"CUBE layout must be a name such as 'CUBE_M16', got {layout!r}")
    name = layout.upper()
    if name not in CUBE_LAYOUTS:
        raise ValueError(f"unknown CUBE layout {layout!r}; expected one of {', '.join(CUBE_LAYOUTS)}")
    return name


def _lookup_dtype(dtype: tables.DataType | int | str) -> tables.DataType:
    try:
        return tables.dtype(dtype)
    except TypeError as e:
        raise ValueError(str(e)) from None


def cube_dtype_supported(dtype: tables.DataType | int | str) -> bool:
    """B.1: every 4/8/16/32-bit dtype except HiF4X2 has a CELL mapping."""
    d = _lookup_dtype(dtype)
    return d.bits != 64 and d.name != "HiF4X2"


def cube_dtype(dtype: tables.DataType | int | str) -> tables.DataType:
    """The DataType of a CUBE-legal dtype; HiF4X2 and 64-bit types raise."""
    d = _lookup_dtype(dtype)
    if not cube_dtype_supported(d):
        raise ValueError(f"{d.name} has no CUBE CELL mapping (HiF4X2 and 64-bit types are illegal)")
    return d


def _dim(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an int, got {v!r}")
    return v


def _positive(name: str, v: object) -> int:
    v = _dim(name, v)
    if v <= 0:
        raise ValueError(f"{name}={v} must be positive")
    return v


def align(value: int, quantum: int) -> int:
    """align(v, q) = ceil(v/q)*q (B.2)."""
    return -(-value // quantum) * quantum


# ----------------------------------------------------------------- B.1 / B.2


def cell_shape(layout: str, dtype: tables.DataType | int | str) -> tuple[int, int]:
    """B.1: (cell rows, cell columns) of one 128-byte CELL."""
    name = layout_name(layout)
    d = cube_dtype(dtype)
    return _CELL_SHAPE[(name, d.bits)]


def geometry(layout: str, dtype: tables.DataType | int | str, valid_rows: int, valid_cols: int) -> dict[str, int]:
    """B.2: derived storage geometry of a CUBE tile with the given valid shape.

    Raises ValueError for a non-CUBE layout/dtype, non-positive dimensions, or
    more valid rows than an M16/M32 CELL holds. Upper bounds (65535 extents,
    cell count, TSize) are legality questions: see `legal`.
    """
    name = layout_name(layout)
    cr, cc = cell_shape(name, dtype)
    vr = _positive("valid_rows", valid_rows)
    vc = _positive("valid_cols", valid_cols)
    if name == "CUBE_N8":
        storage_rows = align(vr, cr)
        storage_cols = align(vc, 8)
        k_repeat = storage_rows // cr
        n_repeat = storage_cols // 8
    else:
        if vr > cr:
            raise ValueError(f"{name} holds at most {cr} valid rows, got {vr}")
        storage_rows = cr
        storage_cols = align(vc, cc)
        k_repeat = storage_cols // cc
        n_repeat = 1
    cells = k_repeat * n_repeat
    return {"cell_rows": cr, "cell_cols": cc, "storage_rows": storage_rows,
            "storage_cols": storage_cols, "k_repeat": k_repeat, "n_repeat": n_repeat,
            "cell_count": cells, "required_bytes": CELL_BYTES * cells}


# ----------------------------------------------------------------- B.6


def capacity_legal(tsize: int, tile_capacity: int = tables.TILE_CAPACITY_RESET) -> bool:
    """A.3: a Local capacity is a multiple of 128 in 128..65536 and <= TILE_CAPACITY."""
    return (tsize >= CELL_BYTES and tsize % CELL_BYTES == 0
            and tsize <= MAX_ALLOCATION_BYTES and tsize <= tile_capacity)


def legal(layout: str, dtype: tables.DataType | int | str, vr: int, vc: int, tsize: int,
          tile_capacity: int = tables.TILE_CAPACITY_RESET, tile_elements: int = MODEL_TILE_ELEMENTS) -> bool:
    """B.6: can a CUBE descriptor of this shape live in a tile of `tsize` bytes?

    Unknown layout/dtype names raise ValueError; a known dtype without a CELL
    mapping (HiF4X2, 64-bit) or a non-positive dimension is simply illegal.
    """
    name = layout_name(layout)
    d = _lookup_dtype(dtype)
    vr, vc, tsize = _dim("vr", vr), _dim("vc", vc), _dim("tsize", tsize)
    if not cube_dtype_supported(d) or not capacity_legal(tsize, tile_capacity):
        return False
    if vr <= 0 or vc <= 0:
        return False
    cr, cc = _CELL_SHAPE[(name, d.bits)]
    if name != "CUBE_N8" and vr > cr:
        return False
    g = geometry(name, d, vr, vc)
    if g["storage_rows"] > MAX_EXTENT or g["storage_cols"] > MAX_EXTENT:
        return False
    if g["cell_count"] > MAX_CELLS:
        return False
    if g["cell_count"] * cr * cc > tile_elements:      # model payload bound (F.9)
        return False
    return g["required_bytes"] <= tsize


# ----------------------------------------------------------------- B.3 / B.4


def cell_element_index(layout: str, cr: int, cc: int, four_bit: bool, inner_row: int,
                       inner_col: int) -> int:
    """B.3 offset inside one CELL: N8 column-major; M16/M32 row-major (B.4 for M16 b4)."""
    if layout == "CUBE_N8":
        return inner_col * cr + inner_row
    if layout == "CUBE_M16" and four_bit:
        inner_col = _M16_B4_POSITION[inner_col]
    return inner_row * cc + inner_col


def cell_index(layout: str, cr: int, cc: int, k_repeat: int, row: int, col: int) -> int:
    """B.3 CELL number: N8 K-fast/N-slow (n_cell*K_repeat + k_cell); M16/M32 one per CC columns."""
    if layout == "CUBE_N8":
        return (col // 8) * k_repeat + row // cr
    return col // cc


def index_function(layout: str, dtype: tables.DataType | int | str, vr: int, vc: int) -> Callable[[int, int], int]:
    """A closure (row, col) -> payload slot for one tile geometry (no argument checks)."""
    name = layout_name(layout)
    d = cube_dtype(dtype)
    g = geometry(name, d, vr, vc)
    cr, cc, kr = g["cell_rows"], g["cell_cols"], g["k_repeat"]
    four_bit = d.bits == 4
    per_cell = cr * cc

    def index(row: int, col: int) -> int:
        return (cell_index(name, cr, cc, kr, row, col) * per_cell
                + cell_element_index(name, cr, cc, four_bit, row % cr, col % cc))
    return index


def payload_index(layout: str, dtype: tables.DataType | int | str, vr: int, vc: int, row: int, col: int) -> int:
    """B.3: payload Word slot of logical (row, col), a valid or padding position."""
    g = geometry(layout, dtype, vr, vc)
    row, col = _dim("row", row), _dim("col", col)
    if not (0 <= row < g["storage_rows"] and 0 <= col < g["storage_cols"]):
        raise ValueError(f"({row}, {col}) lies outside the {g['storage_rows']}x"
                         f"{g['storage_cols']} storage region")
    return index_function(layout, dtype, vr, vc)(row, col)


# ----------------------------------------------------------------- conversions


def nd_to_cube(matrix: Sequence[Sequence[int]], layout: str, dtype: tables.DataType | int | str, vr: int, vc: int,
               pad: int | str) -> tuple[list[int], list[bool]]:
    """ND matrix -> (words, defined) of the CUBE storage region (B.3, B.5).

    `matrix` is a list of rows (at least vr x vc) of carrier ints; each valid
    element lands at its payload slot (as a 64-bit Word). Every other storage
    slot gets tables.pad_word(dtype, pad), defined unless pad is Null.
    """
    d = cube_dtype(dtype)
    g = geometry(layout, d, vr, vc)
    pad_code = _pad_code(pad)
    n = g["cell_count"] * g["cell_rows"] * g["cell_cols"]
    pad_word = tables.pad_word(d, pad_code)
    words = [pad_word] * n
    defined = [pad_code != tables.PAD_NULL] * n
    index = index_function(layout, d, vr, vc)
    if len(matrix) < vr:
        raise ValueError(f"matrix has {len(matrix)} rows, need {vr}")
    for r in range(vr):
        row = matrix[r]
        if len(row) < vc:
            raise ValueError(f"matrix row {r} has {len(row)} columns, need {vc}")
        for c in range(vc):
            i = index(r, c)
            words[i] = int(row[c]) & MASK64
            defined[i] = True
    return words, defined


def cube_to_nd(words: Sequence[int], layout: str, dtype: tables.DataType | int | str, vr: int,
               vc: int) -> list[list[int]]:
    """CUBE payload words -> the valid region as a list of rows (B.3)."""
    index = index_function(layout, dtype, vr, vc)
    g = geometry(layout, dtype, vr, vc)
    if len(words) < g["cell_count"] * g["cell_rows"] * g["cell_cols"]:
        raise ValueError("words is shorter than the tile's storage region")
    return [[int(words[index(r, c)]) for c in range(vc)] for r in range(vr)]


def _pad_code(pad: int | str) -> int:
    try:
        return tables.padvalue(pad)
    except TypeError as e:
        raise ValueError(str(e)) from None
