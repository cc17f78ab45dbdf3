"""Ordinary tile layouts (RowMajor "ND", ColumnMajor "DN", ZN, NZ): the payload
index of an element, and batched ND <-> layout conversion kernels.

ZN and NZ tiles are made of fractals of 16 rows x 32 bytes (16 x 256/bits
elements): ZN puts the fractals in row order and fills each down its
columns; NZ puts them in column order and fills each along its rows
(state-and-transport.md A.4, the model's TileLinearIndex). A ZN/NZ tile is
indexable only as whole fractals. A relayout TLOAD (B.DATR Layout 1..20,
27..30) fills a tile of the layout its code names from row-major GM; these
kernels do the same reordering for a batch of whole tiles, as reshapes and
transposes (memory-speed copies, no per-element gather).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from .. import tables
from .._x64 import x64
from .geometry import IntOrArray
from .kernels import flat_rows, flattens_inside, reshaped_result
from .words import raw_words

ORDINARY_LAYOUTS = ("RowMajor", "ColumnMajor", "ZN", "NZ")
ALIASES = {"ND": "RowMajor", "DN": "ColumnMajor"}


def ordinary_layout(spec: str) -> str:
    """Validate an ordinary layout name (RowMajor/ND, ColumnMajor/DN, ZN, NZ)."""
    if not isinstance(spec, str):
        raise TypeError(f"layout must be a name such as 'NZ', got {type(spec).__name__}")
    by_upper = {n.upper(): n for n in ORDINARY_LAYOUTS} | ALIASES
    name = by_upper.get(spec.upper())
    if name is None:
        raise ValueError(f"unknown ordinary layout {spec!r}; expected one of "
                         f"{', '.join(ORDINARY_LAYOUTS)} (or ND, DN)")
    return name


def fractal_width(dt: tables.DataType | int | str) -> int:
    """Elements in one 32-byte fractal row of dtype `dt` (4 for 64-bit types .. 64 for 4-bit)."""
    return 256 // tables.dtype(dt).bits


def indexable(layout: str, dt: tables.DataType | int | str, rows: int, cols: int) -> bool:
    """Whether a rows x cols tile of this layout has an element index: always
    for RowMajor/ColumnMajor, whole fractals only for ZN/NZ."""
    lay = ordinary_layout(layout)
    if lay in ("ZN", "NZ"):
        return rows % 16 == 0 and cols % fractal_width(dt) == 0
    return True


def payload_index(layout: str, dt: tables.DataType | int | str, rows: int, cols: int, row: IntOrArray,
                  col: IntOrArray) -> IntOrArray:
    """Payload slot of (row, col) in a rows x cols tile (ints or integer arrays)."""
    lay = ordinary_layout(layout)
    if not indexable(lay, dt, rows, cols):
        raise ValueError(f"a {rows}x{cols} {tables.dtype(dt).name} tile is not whole "
                         f"{lay} fractals (16 rows x {fractal_width(dt)} columns)")
    if lay == "RowMajor":
        return row * cols + col
    if lay == "ColumnMajor":
        return col * rows + row
    inner = fractal_width(dt)
    br, ir, bc, ic = row // 16, row % 16, col // inner, col % inner
    if lay == "ZN":
        return (br * (cols // inner) + bc) * 16 * inner + ic * 16 + ir
    return (bc * (rows // 16) + br) * 16 * inner + ir * inner + ic


# ----------------------------------------------------------------- kernels


def _runs(n: int, dtype: Any, flat: bool) -> tuple[int, int]:
    """A contiguous run of n words as (runs, words per run) of 8 bytes each
    where it divides: XLA:CPU copies an innermost axis of 8 bytes as one word
    (an NZ fractal row of 32 bytes moves 1.3-1.6x faster as 4 x 8 bytes at
    64 MiB); a small (flat) batch keeps the one run, ~1 us faster a call."""
    e = max(1, 8 // np.dtype(dtype).itemsize)
    return (n // e, e) if n % e == 0 and not flat else (n, 1)


def _split(x: jax.Array, layout: str, inner: int, flat: bool = True) -> jax.Array:
    """[B, R, C] -> [B, R*C] in `layout` order (R, C whole fractals for ZN/NZ).

    A ZN row of fractals (16 rows) is that band stored column by column; NZ
    stores each column band (`inner` columns) row by row: one transpose each
    (XLA moves those faster than the 5-D fractal form). flat False: the
    transposed N-d array, which the caller flattens (kernels._FLATTEN_INSIDE_BYTES:
    XLA:CPU copies into an N-d result without a div/mod per element)."""
    B, R, C = x.shape
    if layout == "RowMajor":
        return x.reshape(B, R * C)
    if layout == "ColumnMajor":
        t = x.transpose(0, 2, 1)
    elif layout == "ZN":
        t = x.reshape(B, R // 16, 16, C).transpose(0, 1, 3, 2)
    else:
        flat = flat or C == inner          # one column band: a plain copy, fastest flat
        t = x.reshape(B, R, C // inner, *_runs(inner, x.dtype, flat)).transpose(0, 2, 1, 3, 4)
    return t.reshape(B, R * C) if flat else t


def _join(w: jax.Array, layout: str, inner: int, R: int, C: int, flat: bool = True) -> jax.Array:
    """The inverse of _split: [B, R*C] in `layout` order -> [B, R, C]."""
    B = w.shape[0]
    if layout == "RowMajor":
        return w.reshape(B, R, C)
    if layout == "ColumnMajor":
        return w.reshape(B, C, R).transpose(0, 2, 1)
    if layout == "ZN":
        # flattening keeps the innermost axis (C) whole here: no div/mod per element, flat is as fast
        t = w.reshape(B, R // 16, C, 16).transpose(0, 1, 3, 2)
        flat = True
    else:
        flat = flat or C == inner
        t = w.reshape(B, C // inner, R, *_runs(inner, w.dtype, flat)).transpose(0, 2, 1, 3, 4)
    return t.reshape(B, R, C) if flat else t


_nd_to_layout = jax.jit(_split, static_argnames=("layout", "inner", "flat"))
_layout_to_nd = jax.jit(_join, static_argnames=("layout", "inner", "R", "C", "flat"))


def _shape_checked(lay: str, dt: tables.DataType | int | str, R: int, C: int) -> None:
    if R < 1 or C < 1:
        raise ValueError(f"a tile needs at least one row and column, got {R}x{C}")
    if not indexable(lay, dt, R, C):
        raise ValueError(f"{lay} tiles are whole fractals of 16 rows x {fractal_width(dt)} "
                         f"{tables.dtype(dt).name} columns; {R}x{C} is not")


@x64
def nd_to_ordinary(x: npt.ArrayLike | jax.Array, layout: str, dtype: tables.DataType | int | str) -> jax.Array:
    """Reorder row-major tiles into `layout` payload order, as a relayout TLOAD
    places them (GM row-major, the tile in the code's layout).

    x: [B, R, C] (or one [R, C]) integer array of raw element bits, (R, C)
    the tiles' physical rows and columns, checked as nd_to_cube's x is (a
    container narrower than the element: TypeError; a value that does not fit
    the element's width: ValueError naming its index; signed arrays hold two's
    complement bits). Returns [B, R*C] (or [R*C]), unsigned.
    """
    lay = ordinary_layout(layout)
    d = tables.dtype(dtype)
    x = raw_words(x, d, "x")
    if x.ndim not in (2, 3):
        raise ValueError(f"x must be [rows, cols] or [batch, rows, cols], got shape {x.shape}")
    xb = x[None] if x.ndim == 2 else x
    _shape_checked(lay, d, xb.shape[1], xb.shape[2])
    xj = jnp.asarray(xb)
    if flattens_inside(xb):    # a small batch: one program, no flag to hash (each costs ~1 us a call)
        out = _nd_to_layout(xj, layout=lay, inner=fractal_width(d))
    else:
        out = flat_rows(_nd_to_layout(xj, layout=lay, inner=fractal_width(d), flat=False), xj)
    return out[0] if x.ndim == 2 else out


@x64
def ordinary_to_nd(words: npt.ArrayLike | jax.Array, layout: str, dtype: tables.DataType | int | str, rows: int,
                   cols: int) -> jax.Array:
    """Read `layout` payloads of rows x cols tiles back as row-major matrices
    (the inverse of nd_to_ordinary). words: [B, rows*cols] (or one [rows*cols]),
    an integer array at least as wide as the element of carrier Words, passed
    through as they are (cube_to_nd's rule)."""
    lay = ordinary_layout(layout)
    d = tables.dtype(dtype)
    words = raw_words(words, d, "words", carriers=True)
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    R, C = int(rows), int(cols)
    _shape_checked(lay, d, R, C)
    if words.ndim not in (1, 2) or words.shape[-1] != R * C:
        raise ValueError(f"words must be [{R * C}] or [batch, {R * C}] for a {R}x{C} tile, "
                         f"got shape {words.shape}")
    wb = words[None] if words.ndim == 1 else words
    wj = jnp.asarray(wb)
    if flattens_inside(wb):
        out = _layout_to_nd(wj, layout=lay, inner=fractal_width(d), R=R, C=C)
    else:
        out = reshaped_result(_layout_to_nd(wj, layout=lay, inner=fractal_width(d), R=R, C=C, flat=False),
                        (wb.shape[0], R, C), wj)
    return out[0] if words.ndim == 1 else out
