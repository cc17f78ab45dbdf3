"""CUBE CELL geometry of ADR 0069 (state-and-transport.md B.1-B.4, B.6).

Every function here works on Python ints and, unchanged, on integer jax
arrays, so the same formulas serve the Python API and the jitted kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.numpy as jnp

from .. import tables

# A Python int, or an integer numpy or jax array (traced or not): each formula here
# takes either, and its result is what the same arithmetic gives on its arguments.
IntOrArray = Any

# (layout, CUBE width class) -> (cell rows, cell columns); one CELL = 128 bytes.
CELL_SHAPES: dict[tuple[str, str], tuple[int, int]] = {
    ("CUBE_N8", "b32"): (4, 8), ("CUBE_N8", "b16"): (8, 8),
    ("CUBE_N8", "b8"): (16, 8), ("CUBE_N8", "b4"): (32, 8),
    ("CUBE_M32", "b32"): (32, 1), ("CUBE_M32", "b16"): (32, 2),
    ("CUBE_M32", "b8"): (32, 4), ("CUBE_M32", "b4"): (32, 8),
    ("CUBE_M16", "b32"): (16, 2), ("CUBE_M16", "b16"): (16, 4),
    ("CUBE_M16", "b8"): (16, 8), ("CUBE_M16", "b4"): (16, 16),
}

MAX_EXTENT = 65535          # aligned storage extent limit
MAX_CELLS = 16384           # descriptor cell-count limit
MODEL_TILE_ELEMENTS = 32768  # PTO_MODEL_TILE_ELEMENTS: payload Word slots per tile


def cube_dtype(dt: tables.DataType | int | str) -> tables.DataType:
    """The DataType if it has a CELL class, else ValueError (HiF4X2, b64)."""
    d = tables.dtype(dt)
    if d.cube_class is None:
        raise ValueError(
            f"{d.name} has no CUBE CELL class: HiF4X2 and every 64-bit dtype are "
            f"illegal CUBE types; expected a 32/16/8/4-bit dtype other than HiF4X2")
    return d


def cell_shape(layout: str, dt: tables.DataType | int | str) -> tuple[int, int]:
    """(cell rows, cell columns) of one 128-byte CELL, e.g. ("CUBE_M16", "FP16") -> (16, 4)."""
    return CELL_SHAPES[(tables.cube_layout(layout), cast(str, cube_dtype(dt).cube_class))]


def _traced(*xs: object) -> bool:
    return any(isinstance(x, jax.Array) for x in xs)


def _ceil_div(a: IntOrArray, b: IntOrArray) -> IntOrArray:
    """ceil(a / b) for b > 0; on arrays a truncating division (one instruction
    instead of jnp's floor sequence), which agrees wherever a + b - 1 >= 0 --
    every shape that shape_legal can accept."""
    if _traced(a, b):
        t = jnp.result_type(a, b)
        return jax.lax.div(jnp.asarray(a + b - 1, t), jnp.asarray(b, t))
    return (a + b - 1) // b


def m16_b4_position(j: IntOrArray) -> IntOrArray:
    """Physical inner column of logical inner column j for CUBE_M16 b4.

    Groups 4..7 and 8..11 swap places (ADR 0069 two-word row order); the map is
    its own inverse. Equivalent to j ^ 12 when bits 2 and 3 of j differ.
    """
    return j ^ (12 * (((j >> 2) ^ (j >> 3)) & 1))


def _pick(cond: IntOrArray, a: IntOrArray, b: IntOrArray) -> IntOrArray:
    """a where cond else b, for Python values or (traced) arrays alike."""
    if _traced(cond, a, b):
        return jnp.where(cond, a, b)
    return a if cond else b


def derived(layout: str | IntOrArray, cell_rows: IntOrArray, cell_cols: IntOrArray, valid_rows: IntOrArray,
            valid_cols: IntOrArray) -> dict[str, IntOrArray]:
    """Derived storage geometry (B.2): storage rows/cols, K/N repeat, cells, bytes.

    `layout` is a CUBE layout name, or a (traced) boolean "is CUBE_N8": the
    M16 and M32 formulas differ only in their cell shape.
    """
    n8 = layout == "CUBE_N8" if isinstance(layout, str) else layout
    # N8: cells down K (rows) then across N in groups of 8; M16/M32: cells across K (columns)
    k_repeat = _ceil_div(_pick(n8, valid_rows, valid_cols), _pick(n8, cell_rows, cell_cols))
    n_repeat = _pick(n8, _ceil_div(valid_cols, 8), valid_cols * 0 + 1)
    storage_rows = _pick(n8, k_repeat * cell_rows, valid_rows * 0 + cell_rows)
    storage_cols = _pick(n8, n_repeat * 8, k_repeat * cell_cols)
    cell_count = k_repeat * n_repeat
    return dict(storage_rows=storage_rows, storage_cols=storage_cols,
                k_repeat=k_repeat, n_repeat=n_repeat, cell_count=cell_count,
                required_bytes=cell_count * tables.CELL_BYTES)


def shape_legal(layout: str | IntOrArray, cell_rows: IntOrArray, cell_cols: IntOrArray,
                valid_rows: IntOrArray, valid_cols: IntOrArray, capacity_bytes: IntOrArray,
                tile_capacity: IntOrArray = tables.TILE_CAPACITY_RESET,
                tile_elements: IntOrArray = MODEL_TILE_ELEMENTS) -> IntOrArray:
    """B.6 shape legality of a CUBE descriptor against a per-PE TSize: a boolean.

    Works on ints or arrays (`layout` as in `derived`); never raises for any
    integer input.
    """
    n8 = layout == "CUBE_N8" if isinstance(layout, str) else layout
    g = derived(n8, cell_rows, cell_cols, valid_rows, valid_cols)
    ok = (valid_rows > 0) & (valid_cols > 0)
    ok = ok & ((capacity_bytes & (tables.CELL_BYTES - 1)) == 0) & (capacity_bytes >= 128)
    ok = ok & (capacity_bytes <= 65536) & (capacity_bytes <= tile_capacity)
    ok = ok & (g["storage_rows"] <= MAX_EXTENT) & (g["storage_cols"] <= MAX_EXTENT)
    ok = ok & (n8 | (valid_rows <= cell_rows))     # an M CELL holds all the rows
    ok = ok & (g["cell_count"] <= MAX_CELLS)
    ok = ok & (g["cell_count"] * cell_rows * cell_cols <= tile_elements)
    ok = ok & (g["required_bytes"] <= capacity_bytes)
    return ok


def payload_index_of(layout: str, cell_rows: int, cell_cols: int, b4: bool,
                     k_repeat: IntOrArray, row: IntOrArray, col: IntOrArray) -> IntOrArray:
    """Payload Word index of logical (row, col) inside the storage region (B.3)."""
    cell_words = cell_rows * cell_cols
    if layout == "CUBE_N8":
        cell = (col // 8) * k_repeat + row // cell_rows        # K-fast, N-slow
        inner = (col % 8) * cell_rows + row % cell_rows        # column-major in a cell
    else:
        inner_col = col % cell_cols
        if b4 and layout == "CUBE_M16":
            inner_col = m16_b4_position(inner_col)
        cell = col // cell_cols
        inner = row * cell_cols + inner_col                    # row-major in a cell
    return cell * cell_words + inner


@dataclass(frozen=True)
class CubeGeometry:
    """The derived descriptor geometry of one CUBE tile (ADR 0069)."""
    layout: str
    dtype: str
    valid_rows: int
    valid_cols: int
    cell_rows: int
    cell_cols: int
    storage_rows: int
    storage_cols: int
    k_repeat: int
    n_repeat: int
    cell_count: int
    required_bytes: int

    @property
    def storage_elements(self) -> int:
        return self.cell_count * self.cell_rows * self.cell_cols

    def legal(self, tsize: int, tile_capacity: int = tables.TILE_CAPACITY_RESET,
              tile_elements: int = MODEL_TILE_ELEMENTS) -> bool:
        """Descriptor legality against a per-PE TSize in bytes (B.6)."""
        return bool(shape_legal(self.layout, self.cell_rows, self.cell_cols,
                                self.valid_rows, self.valid_cols, tsize,
                                tile_capacity, tile_elements))

    def payload_index(self, row: int, col: int) -> int:
        if not (0 <= row < self.storage_rows and 0 <= col < self.storage_cols):
            raise ValueError(
                f"position ({row}, {col}) is outside the {self.storage_rows}x"
                f"{self.storage_cols} storage region of this {self.layout} tile")
        return int(payload_index_of(self.layout, self.cell_rows, self.cell_cols,
                                    tables.dtype(self.dtype).bits == 4,
                                    self.k_repeat, row, col))

    def logical_position(self, index: int) -> tuple[int, int]:
        """Inverse of payload_index: the logical (row, col) stored at a slot."""
        cw = self.cell_rows * self.cell_cols
        if not 0 <= index < self.cell_count * cw:
            raise ValueError(f"payload index {index} outside 0..{self.cell_count * cw - 1}")
        cell, inner = divmod(index, cw)
        if self.layout == "CUBE_N8":
            n, k = divmod(cell, self.k_repeat)
            c8, r = divmod(inner, self.cell_rows)
            return k * self.cell_rows + r, n * 8 + c8
        r, j = divmod(inner, self.cell_cols)
        if self.layout == "CUBE_M16" and tables.dtype(self.dtype).bits == 4:
            j = m16_b4_position(j)
        return r, cell * self.cell_cols + j


def _check_dim(name: str, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v <= 0:
        raise ValueError(f"{name} must be a positive logical dimension, got {v}")


def geometry(layout: str, dt: tables.DataType | int | str, valid_rows: int, valid_cols: int) -> CubeGeometry:
    """Derived geometry of a CUBE tile with the given valid shape.

    Raises ValueError for an unknown layout/dtype, a dtype without a CELL class,
    a non-positive dimension, or more valid rows than an M16/M32 CELL holds.
    """
    lay = tables.cube_layout(layout)
    d = cube_dtype(dt)
    _check_dim("valid_rows", valid_rows)
    _check_dim("valid_cols", valid_cols)
    assert d.cube_class is not None         # cube_dtype's guarantee
    cr, cc = CELL_SHAPES[(lay, d.cube_class)]
    if lay != "CUBE_N8" and valid_rows > cr:
        raise ValueError(
            f"{lay} holds at most {cr} valid rows, got valid_rows={valid_rows}")
    g = derived(lay, cr, cc, valid_rows, valid_cols)
    if max(g["storage_rows"], g["storage_cols"]) > MAX_EXTENT:
        raise ValueError(f"aligned storage extent exceeds {MAX_EXTENT}")
    return CubeGeometry(lay, d.name, valid_rows, valid_cols, cr, cc, **g)


def payload_index(layout: str, dt: tables.DataType | int | str, valid_rows: int, valid_cols: int, row: int,
                  col: int) -> int:
    """Payload Word index of logical (row, col) of a CUBE tile
    (docs/architecture.md, "Public API").

    (row, col) may be a valid or a padding position of the storage region.
    """
    return geometry(layout, dt, valid_rows, valid_cols).payload_index(row, col)


def descriptor_legal(layout: str, dt: tables.DataType | int | str, valid_rows: int, valid_cols: int, tsize: int,
                     tile_capacity: int = tables.TILE_CAPACITY_RESET,
                     tile_elements: int = MODEL_TILE_ELEMENTS) -> bool:
    """True iff a CUBE descriptor of this shape fits a per-PE TSize (B.6).

    Unknown names raise ValueError; an illegal but well-formed shape (zero
    dimension, too many M rows, too little capacity) is simply False.
    """
    lay = tables.cube_layout(layout)
    d = tables.dtype(dt)
    if d.cube_class is None:
        return False
    cr, cc = CELL_SHAPES[(lay, d.cube_class)]
    return bool(shape_legal(lay, cr, cc, valid_rows, valid_cols, tsize,
                            tile_capacity, tile_elements))
