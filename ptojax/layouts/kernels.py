"""Batched, jit-compiled ND <-> CUBE conversion kernels.

The CELL mapping of the static bound is a pure reshape/transpose (what XLA
does at memory speed); per-tile valid shapes enter only through masks and,
for CUBE_N8 whose cell order depends on the per-tile K_repeat, through one
gather of whole 128-byte cells. No per-element index gather.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional, cast

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from .. import tables
from .._x64 import x64
from .geometry import CELL_SHAPES, cube_dtype
from .words import raw_words

def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def storage_words(layout: str, dt: tables.DataType | int | str, rows: int, cols: int) -> int:
    """Payload Words of the storage region for a valid-shape bound (rows, cols)."""
    lay = tables.cube_layout(layout)
    cr, cc = CELL_SHAPES[(lay, cast(str, cube_dtype(dt).cube_class))]
    if lay == "CUBE_N8":
        return _ceil_div(rows, cr) * cr * _ceil_div(cols, 8) * 8
    return cr * _ceil_div(cols, cc) * cc


# ----------------------------------------------------------------- kernels


def _m_coords(ncell: int, cr: int, cc: int, swap: bool) -> tuple[NDArray[np.int_], NDArray[np.int_]]:
    """Logical (row, col) of every slot of a [ncell, cr, cc] CUBE_M payload."""
    cell, r, p = np.meshgrid(np.arange(ncell), np.arange(cr), np.arange(cc), indexing="ij")
    j = p ^ (12 * (((p >> 2) ^ (p >> 3)) & 1)) if swap else p
    return r, cell * cc + j


# XLA:CPU emits a copy as one loop over its result's shape. When the result is
# reshaped to [B, W] inside the program, the reshape fuses into that loop and
# every element pays a div/mod to find its source (2-6x slower at 64 MiB); a
# result left in its transposed N-d shape loops without them. Large batches
# therefore return the N-d array and flatten it in a second program that
# donates it (a zero-copy bitcast); small ones flatten in place, saving the
# second dispatch (~2.5 us) where the loop costs little.
_FLATTEN_INSIDE_BYTES = 1 << 20


def flattens_inside(x: Any) -> bool:
    """Whether a kernel on x flattens its result itself (small or traced input)."""
    return isinstance(x, jax.core.Tracer) or x.size * np.dtype(x.dtype).itemsize < _FLATTEN_INSIDE_BYTES


@functools.partial(jax.jit, static_argnames=("shape",), donate_argnums=0)
def _reshape_owned(a: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return a.reshape(shape)


def reshaped_result(a: jax.Array, shape: tuple[int, ...], src: object) -> jax.Array:
    """a, a kernel's result on input src, reshaped to `shape` without a copy
    (a is donated: never src itself, which jit may hand back unchanged)."""
    if a.shape == shape:
        return a                # no reshape to dispatch (~15 us a call)
    if isinstance(a, jax.core.Tracer) or a is src:
        return a.reshape(shape)
    return _reshape_owned(a, shape)


def flat_rows(a: jax.Array, src: object) -> jax.Array:
    """A kernel's [B, ...] result as [B, W]."""
    return reshaped_result(a, (a.shape[0], math.prod(a.shape[1:])), src)


def _swap_b4(t: jax.Array) -> jax.Array:
    """Exchange inner column groups 4..7 and 8..11 (CUBE_M16 b4); an involution."""
    lead = t.shape[:-1]
    return t.reshape(*lead, 2, 2, 4).swapaxes(-3, -2).reshape(*lead, 16)


@functools.partial(jax.jit, static_argnames=(
    "layout", "cr", "cc", "swap", "pad", "pad_defined", "with_defined", "compact", "flat"))
def _nd_to_cube(x: jax.Array, vr: Any, vc: Any, *, layout: str, cr: int, cc: int, swap: bool, pad: int,
                pad_defined: bool, with_defined: bool, compact: bool, flat: bool = True
                ) -> jax.Array | tuple[jax.Array, jax.Array]:
    # vr, vc: the tiles' valid extents ([B] int32), or None when every tile is full,
    # then rebound to the bound's ints R, C
    B, R, C = x.shape
    padw = jnp.asarray(pad, dtype=x.dtype)
    zero = jnp.zeros((), x.dtype)
    # vr None: every tile is full (valid = the bound), so the masks are known
    # when tracing and a full cell is a plain copy, with no select at all
    full = vr is None
    per_tile = (lambda v, n: v) if full else (lambda v, n: v.reshape((B,) + (1,) * n))
    vr, vc = (R, C) if full else (vr, vc)

    def fill(valid: jax.Array, inside: jax.Array, data: jax.Array) -> jax.Array:
        if full and np.all(valid):      # known when tracing: a plain copy, no constant mask array
            return data
        return jnp.where(valid, data, jnp.where(inside, padw, zero))

    def defined(valid: jax.Array, inside: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        if full and np.all(valid):
            return jnp.ones(shape, bool)
        return jnp.broadcast_to(valid | (inside & pad_defined), shape)

    if layout == "CUBE_N8":
        kr, nr = _ceil_div(R, cr), _ceil_div(C, 8)
        xp = jnp.pad(x, ((0, 0), (0, kr * cr - R), (0, nr * 8 - C)))
        f = xp.reshape(B, kr, cr, nr, 8).transpose(0, 3, 1, 4, 2)   # [B, n, k, c8, r]
        n, k, c8, r = np.meshgrid(np.arange(nr), np.arange(kr), np.arange(8),
                                  np.arange(cr), indexing="ij")
        rows, cols = k * cr + r, n * 8 + c8
        k_rep, n_rep = (per_tile(vr, 1) + cr - 1) // cr, (per_tile(vc, 1) + 7) // 8
        inside = (k < per_tile(k_rep, 4)) & (n < per_tile(n_rep, 4))
        valid = (rows < per_tile(vr, 4)) & (cols < per_tile(vc, 4))
        words = fill(valid, inside, f)
        dfn = defined(valid, inside, f.shape) if with_defined else None
        if compact:
            words = words.reshape(B, nr * kr, 8 * cr)
            dfn = None if dfn is None else dfn.reshape(B, nr * kr, 8 * cr)
            # Cell (n, k) of the bound lands at n*K_repeat + k of the tile; slots
            # past the tile's cell count take an outside (all-zero) bound cell.
            j = jnp.arange(nr * kr)[None, :]
            kk = k_rep.reshape(B, 1)
            src = (j // kk) * kr + j % kk
            src = jnp.where(j < kk * n_rep.reshape(B, 1), src, nr * kr - 1)[:, :, None]
            words = jnp.take_along_axis(words, src, axis=1)
            if with_defined:
                # definedness of the compacted tile straight from its geometry
                # (cheaper than gathering a bool array)
                e = jnp.arange(8 * cr)[None, None, :]
                jj = j[:, :, None]
                kk3 = kk[:, :, None]
                row = (jj % kk3) * cr + e % cr
                col = (jj // kk3) * 8 + e // cr
                ok = (row < vr.reshape(B, 1, 1)) & (col < vc.reshape(B, 1, 1))
                inside_c = jj < kk3 * n_rep.reshape(B, 1, 1)
                dfn = ok | (inside_c & pad_defined)
    else:
        ncell = _ceil_div(C, cc)
        xp = jnp.pad(x, ((0, 0), (0, cr - R), (0, ncell * cc - C)))
        t = xp.reshape(B, cr, ncell, cc).transpose(0, 2, 1, 3)          # [B, cell, r, c]
        if swap:
            t = _swap_b4(t)
        rows, cols = _m_coords(ncell, cr, cc, swap)
        inside = cols < ((per_tile(vc, 3) + cc - 1) // cc) * cc
        valid = (rows < per_tile(vr, 3)) & (cols < per_tile(vc, 3))
        words = fill(valid, inside, t)
        dfn = defined(valid, inside, t.shape) if with_defined else None
        flat = flat or ncell == 1          # one cell column: a plain copy, fastest flat
    if flat:
        words, dfn = words.reshape(B, -1), None if dfn is None else dfn.reshape(B, -1)
    return (words, cast(jax.Array, dfn)) if with_defined else words


@functools.partial(jax.jit, static_argnames=("layout", "cr", "cc", "swap", "R", "C", "compact", "flat"))
def _cube_to_nd(words: jax.Array, vr: Any, vc: Any, *, layout: str, cr: int, cc: int, swap: bool,
                R: int, C: int, compact: bool, flat: bool = True) -> jax.Array:
    # vr, vc None: every tile is full, no mask. A bound of whole cells needs no
    # slice, so the mask and the result keep the transposed N-d shape (the
    # caller flattens it when flat is False, see _FLATTEN_INSIDE_BYTES).
    B = words.shape[0]
    if layout == "CUBE_N8":
        kr, nr = _ceil_div(R, cr), _ceil_div(C, 8)
        cells = words[:, : nr * kr * 8 * cr].reshape(B, nr * kr, 8 * cr)
        if compact:
            i = jnp.arange(nr * kr)[None, :]
            k_rep = ((vr.reshape(B, 1) + cr - 1) // cr)
            n, k = i // kr, i % kr
            dst = jnp.where(k < k_rep, n * k_rep + k, 0)[:, :, None]
            cells = jnp.take_along_axis(cells, dst, axis=1)
        x = cells.reshape(B, nr, kr, 8, cr).transpose(0, 2, 4, 1, 3)         # [B, k, r, n, c8]
        whole = (kr * cr, nr * 8) == (R, C)
        rows = (np.arange(kr)[:, None, None, None] * cr + np.arange(cr)[:, None, None])[None]
        cols = (np.arange(nr)[:, None] * 8 + np.arange(8))[None, None, None]
    else:
        ncell = _ceil_div(C, cc)
        t = words[:, : ncell * cr * cc].reshape(B, ncell, cr, cc)
        if swap:
            t = _swap_b4(t)
        x = t.transpose(0, 2, 1, 3)                                             # [B, r, cell, c]
        whole = (cr, ncell * cc) == (R, C)
        flat = flat or ncell == 1
        rows = np.arange(cr)[None, :, None, None]
        cols = (np.arange(ncell)[:, None] * cc + np.arange(cc))[None, None]
    if not whole:
        x = x.reshape(B, -1, x.shape[-2] * x.shape[-1])[:, :R, :C]
        rows, cols = np.arange(R)[None, :, None], np.arange(C)[None, None, :]
    if vr is not None:
        nd = (B,) + (1,) * (x.ndim - 1)
        x = jnp.where((rows < vr.reshape(nd)) & (cols < vc.reshape(nd)), x, jnp.zeros((), x.dtype))
    return x.reshape(B, R, C) if flat else x


# ----------------------------------------------------------------- public API


def _valid_dims(v: npt.ArrayLike | jax.Array | None, bound: int, batch: int, name: str
                ) -> tuple[NDArray[np.int32] | jax.Array, Optional[int]]:
    """Per-tile valid extents as an int32 [batch] array; checked when concrete."""
    if v is None:
        v = bound
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if not 1 <= v <= bound:
            raise ValueError(f"{name}={v} must be in 1..{bound} (the static bound of the input)")
        return np.full((batch,), int(v), np.int32), int(v)
    if isinstance(v, jax.core.Tracer):
        return jnp.broadcast_to(jnp.asarray(v, jnp.int32), (batch,)), None
    arr = np.asarray(v)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an int or an integer array, got dtype {arr.dtype}")
    arr = np.broadcast_to(arr, (batch,)) if arr.ndim == 0 else arr
    if arr.shape != (batch,):
        raise ValueError(f"{name} must be an int or shape ({batch},), got shape {arr.shape}")
    if arr.size and (arr.min() < 1 or arr.max() > bound):
        raise ValueError(f"{name} must lie in 1..{bound} (the static bound), got {arr.min()}..{arr.max()}")
    return arr.astype(np.int32), (int(arr[0]) if arr.size and (arr == arr[0]).all() else None)


def _pad_in(container_bits: int, dt: tables.DataType | int | str, pad: int | str) -> int:
    return tables.pad_word(dt, pad) & ((1 << container_bits) - 1)


@x64
def nd_to_cube(x: npt.ArrayLike | jax.Array, layout: str, dtype: tables.DataType | int | str,
               valid_rows: npt.ArrayLike | jax.Array | None = None,
               valid_cols: npt.ArrayLike | jax.Array | None = None, *, pad: int | str = "Null",
               defined: bool = True) -> jax.Array | tuple[jax.Array, ...]:
    """Convert row-major matrices to CUBE payloads (ADR 0069 CELL order).

    x: [B, R, C] (or one [R, C]) integer array of raw element bits, at least
    as wide as the element (else TypeError); 4-bit dtypes hold one nibble per
    value. Every value must fit the element: 0..2^bits-1 in an unsigned array,
    -2^(bits-1)..2^bits-1 in a signed one (a negative value is its two's
    complement bits; the words come back unsigned), else ValueError naming the
    first offending index (ptojax/layouts/words.py; a traced x is not
    checked). (R, C) is the static bound; valid_rows and
    valid_cols (int or [B] array, default the bound) give each tile's valid
    region. Returns (words, defined) with words [B, W] in payload slot order
    (W = storage Words of the bound, `storage_words`): valid elements, the
    PadValue's word in every other position of the tile's storage region
    (Null: 0 and undefined), and 0/undefined past that region. With
    defined=False only the words are returned.
    """
    lay = tables.cube_layout(layout)
    d = cube_dtype(dtype)
    x = raw_words(x, d, "x")
    single = x.ndim == 2
    if x.ndim not in (2, 3):
        raise ValueError(f"x must be [rows, cols] or [batch, rows, cols], got shape {x.shape}")
    xb = x[None] if single else x
    B, R, C = xb.shape
    if R < 1 or C < 1:
        raise ValueError(f"x must have at least one row and column, got shape {x.shape}")
    assert d.cube_class is not None         # cube_dtype's guarantee
    cr, cc = CELL_SHAPES[(lay, d.cube_class)]
    if lay != "CUBE_N8" and R > cr:
        raise ValueError(f"{lay} holds at most {cr} valid rows; the input bound has {R} rows")
    vr: NDArray[np.int32] | jax.Array | None
    vc: NDArray[np.int32] | jax.Array | None
    vr, vr_static = _valid_dims(valid_rows, R, B, "valid_rows")
    vc, vc_static = _valid_dims(valid_cols, C, B, "valid_cols")
    p = tables.padvalue(pad)
    compact = lay == "CUBE_N8" and not (vr_static is not None and _ceil_div(vr_static, cr) == _ceil_div(R, cr))
    if (vr_static, vc_static) == (R, C):
        vr = vc = None          # every tile full: one program for all, no masks to compute
    flat = flattens_inside(xb)
    # Full tiles of whole cells are defined everywhere. With a second result
    # XLA:CPU no longer fuses the transpose into its output copy (a copy of the
    # input, then a separate relayout: 3-5x slower), so a large batch builds
    # the all-true mask in a program of its own.
    ones = (defined and not flat and vr is None
            and (R, C) == ((_ceil_div(R, cr) * cr, _ceil_div(C, 8) * 8) if lay == "CUBE_N8"
                           else (cr, _ceil_div(C, cc) * cc)))
    # a small batch passes no flat flag (the default): each static argument costs ~1 us a call
    out = _nd_to_cube(xb, vr, vc, layout=lay, cr=cr, cc=cc,
                      swap=(lay == "CUBE_M16" and d.bits == 4),
                      pad=_pad_in(np.dtype(xb.dtype).itemsize * 8, d, p),
                      pad_defined=p != tables.PAD_NULL, with_defined=defined and not ones,
                      compact=compact, **({} if flat else {"flat": False}))
    if ones:
        out = flat_rows(cast(jax.Array, out), xb)
        out = (out, jnp.ones(out.shape, bool))
    elif not flat:
        out = tuple(flat_rows(o, xb) for o in out) if defined else flat_rows(cast(jax.Array, out), xb)
    if single:
        return tuple(o[0] for o in out) if defined else out[0]
    return out


@x64
def cube_to_nd(words: npt.ArrayLike | jax.Array, layout: str, dtype: tables.DataType | int | str,
               valid_rows: npt.ArrayLike | jax.Array, valid_cols: npt.ArrayLike | jax.Array, *,
               shape: Optional[tuple[int, int]] = None) -> jax.Array:
    """Read the valid region of CUBE payloads back into row-major matrices.

    words: [B, W] (or one [W]) payload slots in CUBE order, W at least the
    storage Words of `shape`: an integer array at least as wide as the element
    (else TypeError) of the model's carrier Words, passed through as they are
    (S8/S16/S32 sign-extended, pad words; a signed array is read as its bits);
    valid_rows/valid_cols: int or [B] array.
    shape: the (R, C) static bound of the result; default the largest valid
    extents. Positions outside each tile's valid region read as 0.
    """
    lay = tables.cube_layout(layout)
    d = cube_dtype(dtype)
    words = raw_words(words, d, "words", carriers=True)
    single = words.ndim == 1
    if words.ndim not in (1, 2):
        raise ValueError(f"words must be [W] or [batch, W], got shape {words.shape}")
    wb = words[None] if single else words
    B = wb.shape[0]
    if shape is None:
        shape = (int(np.max(valid_rows)), int(np.max(valid_cols)))
    R, C = (int(s) for s in shape)
    assert d.cube_class is not None         # cube_dtype's guarantee
    cr, cc = CELL_SHAPES[(lay, d.cube_class)]
    if R < 1 or C < 1:
        raise ValueError(f"shape must be positive, got {shape}")
    if lay != "CUBE_N8" and R > cr:
        raise ValueError(f"{lay} holds at most {cr} valid rows; shape has {R} rows")
    need = storage_words(lay, d, R, C)
    if wb.shape[1] < need:
        raise ValueError(f"words has {wb.shape[1]} slots per tile; a {R}x{C} {lay} "
                         f"{d.name} bound needs {need}")
    vr: NDArray[np.int32] | jax.Array | None
    vc: NDArray[np.int32] | jax.Array | None
    vr, vr_static = _valid_dims(valid_rows, R, B, "valid_rows")
    vc, vc_static = _valid_dims(valid_cols, C, B, "valid_cols")
    compact = lay == "CUBE_N8" and not (vr_static is not None and _ceil_div(vr_static, cr) == _ceil_div(R, cr))
    if (vr_static, vc_static) == (R, C):
        vr = vc = None          # every tile full: no mask
    flat = flattens_inside(wb)
    out = _cube_to_nd(wb, vr, vc, layout=lay, cr=cr, cc=cc, swap=(lay == "CUBE_M16" and d.bits == 4),
                      R=R, C=C, compact=compact, **({} if flat else {"flat": False}))
    if not flat:
        out = reshaped_result(out, (B, R, C), wb)
    return out[0] if single else out
