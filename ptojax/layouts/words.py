"""Raw element words at the Python API: the one check that every pj.layouts
entry point and pj.golden's raw codes share.

The rule. An array of raw element words has an integer dtype (its container)
at least as wide as the element (`tables.DataType.bits`; a 4-bit type holds
one nibble per value), else TypeError naming both. An array going into a tile
(nd_to_cube, nd_to_ordinary, golden's raw codes and E8M0 scales) holds each
element's raw bits, and every value must fit the element's width:

- an unsigned container: 0 .. 2^bits - 1 (0..0xFFFF for FP16, 0..0xF for a
  4-bit type);
- a signed container: -2^(bits-1) .. 2^bits - 1, a negative value standing
  for its two's complement bits (int8 -1 for S8 is 0xFF, int32 -1 for FP16 is
  0xFFFF, int32 0xBC00 for FP16 is 0xBC00); the words come back in the
  unsigned container of the same width, holding those raw bits.

Anything else is refused, a ValueError naming the first offending index (a
tuple index into the input array, row-major order), its value and the width:
high bits are never dropped silently. Float, bool and other containers are
refused (TypeError).

Payload Words read out of a tile (cube_to_nd, ordinary_to_nd) are the model's
64-bit carriers, not raw bits: S8/S16/S32 sign-extended, PadValue Max/Min
full-carrier words, a portable D's raw sums (docs/execution-model.md), and
nd_to_cube's own padding. Those pass through as they are: only the container
rule applies, and a signed container is read as its two's complement bits.

Values of a traced array (inside jit) cannot be read and are not checked.
The checks are whole-array reductions (numpy, or one jitted reduction for a
jax array); the offending index is looked for only when one exists.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from .. import tables

__all__ = ["word_range", "check_container", "first_outside", "first_true", "raw_words"]


def word_range(container: npt.DTypeLike, bits: int) -> tuple[int, int]:
    """(lo, hi): the values a `container` array may hold for a `bits`-wide element's
    raw bits (the rule above), within what the container can hold at all."""
    c = np.dtype(container)
    cbits = 8 * c.itemsize
    if c.kind == "u":
        return 0, min((1 << bits) - 1, (1 << cbits) - 1)
    return max(-(1 << (bits - 1)), -(1 << (cbits - 1))), min((1 << bits) - 1, (1 << (cbits - 1)) - 1)


def _container_range(c: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(c)
    return int(info.min), int(info.max)


def _a(c: np.dtype[Any]) -> str:
    return f"an {c}" if str(c).startswith("int") else f"a {c}"


def check_container(container: npt.DTypeLike, dt: tables.DataType | int | str, what: str) -> np.dtype[Any]:
    """The container as a numpy dtype if it can hold `dt`'s raw bits: an integer
    dtype at least as wide as the element; else TypeError naming both."""
    d = tables.dtype(dt)
    c = np.dtype(container)
    if c.kind not in "iu":
        raise TypeError(
            f"{what} must hold raw {d.name} element bits as an integer array (unsigned, or signed "
            f"holding two's complement bits), got dtype {c}")
    if 8 * c.itemsize < d.bits:
        wide = {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}[max(8, d.bits)]
        raise TypeError(
            f"{what} is {_a(c)} array ({8 * c.itemsize}-bit container) but {d.name} elements are "
            f"{d.bits} bits wide: a container narrower than the element cannot hold its raw "
            f"bits; expected {wide} or wider")
    return c


def first_true(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    """The row-major first index where `mask` holds (mask must hold somewhere)."""
    flat = int(np.argmax(mask.reshape(-1)))
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def first_outside(a: NDArray[Any], lo: int, hi: int) -> Optional[tuple[tuple[int, ...], int]]:
    """(index, value) of the row-major first element of integer array `a` outside
    lo..hi, or None. Two reductions when every value fits (the common case);
    the mask is built only when one does not."""
    if a.size == 0:
        return None
    cmin, cmax = _container_range(a.dtype)
    low, high = lo > cmin, hi < cmax
    if not (low and int(a.min()) < lo) and not (high and int(a.max()) > hi):
        return None
    bad = np.zeros(a.shape, bool)
    if low:
        bad |= a < a.dtype.type(max(lo, cmin))
    if high:
        bad |= a > a.dtype.type(min(hi, cmax))
    idx = first_true(bad)
    return idx, int(a[idx])


@jax.jit
def _extremes(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.min(x), jnp.max(x)


def _misfit_message(what: str, d: tables.DataType, c: np.dtype[Any], idx: tuple[int, ...], v: int,
                    lo: int, hi: int) -> str:
    shown = f"{v} ({v:#x})" if v >= 0 else f"{v}"
    if c.kind == "u":
        allowed = f"0..{hi:#x}"
    else:
        allowed = f"{lo}..{hi} (a negative value stands for its two's complement bits)"
    nibble = " (4-bit types hold one nibble per value)" if d.bits == 4 else ""
    width = f"an {d.bits}" if d.bits == 8 else f"a {d.bits}"
    return (f"{what} holds {shown} at index {idx}, which does not fit {width}-bit {d.name} "
            f"element{nibble}: {_a(c)} array of raw element bits must hold {allowed}")


def raw_words(x: npt.ArrayLike | jax.Array, dt: tables.DataType | int | str, what: str, *,
              carriers: bool = False) -> NDArray[Any] | jax.Array:
    """`x` as an unsigned array (numpy stays numpy, jax stays jax) of raw `dt`
    element words, checked by the rule above.

    carriers=False (a tile's input): every value must fit the element, a signed
    container's negative values become their two's complement bits.
    carriers=True (payload Words read out of a tile): the container rule only,
    a signed container read as its bits (a same-width bitcast).
    """
    d = tables.dtype(dt)
    x = x if isinstance(x, jax.Array) else np.asarray(x)
    c = check_container(x.dtype, d, what)
    traced = isinstance(x, jax.core.Tracer)
    cbits = 8 * c.itemsize
    lo, hi = word_range(c, d.bits)
    cmin, cmax = _container_range(c)
    negative = c.kind == "i"            # whether a value may need its sign bits dropped
    if not carriers and not traced and x.size and (lo > cmin or hi < cmax):
        # whole-array reductions (one jitted program for a jax array); the
        # offending index is looked for only when there is one
        if isinstance(x, jax.Array):
            mn, mx = (int(v) for v in _extremes(x))
        else:
            mn, mx = (int(x.min()) if negative else 0), int(x.max())
        if mn < lo or mx > hi:
            found = first_outside(np.asarray(x), lo, hi)
            assert found is not None
            raise ValueError(_misfit_message(what, d, c, found[0], found[1], lo, hi))
        negative = negative and mn < 0
    if c.kind == "u":
        return x
    unsigned = np.dtype(f"uint{cbits}")
    trim = not carriers and negative and d.bits < cbits     # two's complement bits of the element
    if isinstance(x, jax.Array):
        u = jax.lax.bitcast_convert_type(x, unsigned)
        return u & jnp.asarray((1 << d.bits) - 1, unsigned) if trim else u
    u_np = np.asarray(x).view(unsigned)
    return u_np & unsigned.type((1 << d.bits) - 1) if trim else u_np
