"""Binary32 arithmetic that keeps subnormals on XLA:CPU, for the ieee profile.

XLA:CPU runs with flush-to-zero and denormals-are-zero, so a float32
subnormal (an input like FP32 0x00000001, a product like 2^-149) would
silently become 0. Everything here therefore works on float64 values and
integer bit patterns: binary32 values (and every product of two matrix
inputs, >= 2^-302 in magnitude) are normal float64 numbers, decoding builds
the float64 from the fields with integer operations, and rounding to
binary32 is integer round-to-nearest-even on the float64 significand.
Adding two binary32 values in float64 and rounding that sum to binary32 is
the correctly rounded binary32 sum (53 >= 2*24 + 2, so double rounding is
innocuous).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

U64 = jnp.uint64
CANONICAL_NAN = 0x7FC00000


def decode(bits: jax.Array, ebits: int, mbits: int) -> jax.Array:
    """Exact float64 value of an IEEE-style (sign, ebits, mbits) pattern in uint64 `bits`."""
    bias = (1 << (ebits - 1)) - 1
    mant = bits & U64((1 << mbits) - 1)
    exp = ((bits >> U64(mbits)) & U64((1 << ebits) - 1)).astype(jnp.int64)
    sign = (bits >> U64(ebits + mbits)) & U64(1)
    top = (1 << ebits) - 1
    normal = jax.lax.bitcast_convert_type(
        (sign << U64(63)) | ((exp - bias + 1023).astype(U64) << U64(52)) | (mant << U64(52 - mbits)),
        jnp.float64)
    sub = mant.astype(jnp.float64) * jnp.float64(2.0 ** (1 - bias - mbits))
    sub = jnp.where(sign == 1, -sub, sub)
    inf = jnp.where(sign == 1, -jnp.inf, jnp.inf)
    return jnp.select([exp == 0, (exp == top) & (mant == 0), exp == top],
                      [sub, inf, jnp.nan], normal)


def value(bits32: jax.Array) -> jax.Array:
    """Exact float64 value of binary32 bit patterns (uint32 or uint64)."""
    return decode(jnp.asarray(bits32).astype(U64) & U64(0xFFFFFFFF), 8, 23)


def round_bits(x: jax.Array) -> jax.Array:
    """binary32 bits (uint64, zero-extended) of float64 `x`: round to nearest
    even, subnormals kept, overflow to infinity, NaN -> 0x7FC00000."""
    b = jax.lax.bitcast_convert_type(x, U64)
    sign = (b >> U64(63)) << U64(31)
    e = ((b >> U64(52)) & U64(0x7FF)).astype(jnp.int64) - 1023
    sig = (b & U64((1 << 52) - 1)) | U64(1 << 52)
    # keep 24 significant bits for normal results, fewer below 2^-126
    shift = jnp.clip(29 + jnp.maximum(0, -126 - e), 29, 63).astype(U64)
    q = sig >> shift
    rem = sig & ((U64(1) << shift) - U64(1))
    half = U64(1) << (shift - U64(1))
    q = q + ((rem > half) | ((rem == half) & ((q & U64(1)) == 1))).astype(U64)
    mag = (jnp.maximum(e, -126) + 126).astype(U64) * U64(1 << 23) + q
    mag = jnp.where(e > 127, U64(0x7F800000), jnp.minimum(mag, U64(0x7F800000)))
    mag = jnp.where(x == 0, U64(0), mag)
    out = sign | mag
    return jnp.where(jnp.isnan(x), U64(CANONICAL_NAN), out)


_TINY = 2.0 ** -126            # smallest normal binary32
_GRID = 1.5 * 2.0 ** -97       # float64 ulp there is 2^-149, the binary32 subnormal spacing


def round_value(x: jax.Array) -> jax.Array:
    """float64 `x` rounded to binary32 (RNE, subnormals kept, overflow to
    infinity), as a float64 value.

    At or above 2^-126 the hardware float64 -> float32 conversion rounds
    correctly (FTZ only touches subnormal results). Below it, adding
    1.5 * 2^-97 rounds x to a multiple of 2^-149 (ties to even) and
    subtracting it back is exact; the barrier keeps XLA from folding the pair.
    """
    hw = x.astype(jnp.float32).astype(jnp.float64)
    # -tiny -> -0 (jax.lax.optimization_barrier is unannotated in jax, hence the ignore)
    sub = jnp.copysign(jax.lax.optimization_barrier(x + _GRID) - _GRID, x)  # type: ignore[no-untyped-call]
    return jnp.where(jnp.abs(x) < _TINY, sub, hw)
