"""The ieee profile's binary32 helpers on XLA (which flushes subnormals) vs
ptojax.numerics (numpy, exact RNE) over normal, subnormal, tie and overflow values."""

import jax
import jax.numpy as jnp
import numpy as np

from ptojax import numerics
from ptojax.ops import binary32


def _values():
    rng = np.random.default_rng(1)
    return np.concatenate([
        rng.standard_normal(20000) * 2.0 ** rng.integers(-160, 140, 20000),
        (rng.integers(-2 ** 24, 2 ** 24, 5000) + 0.5) * 2.0 ** -149,           # subnormal ties
        (rng.integers(2 ** 23, 2 ** 24, 5000) + 0.5) * 2.0 ** rng.integers(-149, 104, 5000),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 2.25 * 2 ** -150, 2 ** -150, 3 * 2 ** -150, -3 * 2 ** -150,
         2 ** -126 * (1 - 2 ** -25), -2 ** -126 * (1 - 2 ** -24), 2 ** 128 * (1 - 2 ** -25),
         2 ** 128 * (1 - 2 ** -24), -1e-50]])


def test_round_bits_and_round_value_match_exact_rne():
    x = _values()
    expected = numerics.round_fp32_bits(x)
    with jax.enable_x64(True):
        bits = np.asarray(jax.jit(binary32.round_bits)(jnp.asarray(x))).astype(np.uint32)
        vals = np.asarray(jax.jit(jax.vmap(binary32.round_value))(jnp.asarray(x)))
    assert np.array_equal(bits, expected)
    ev = numerics.fp32_value(expected)
    same = (vals == ev) & (np.signbit(vals) == np.signbit(ev)) | (np.isnan(vals) & np.isnan(ev))
    assert same.all()


def test_decode_keeps_subnormals():
    b = np.concatenate([np.arange(0, 5000, dtype=np.uint64),
                        np.random.default_rng(2).integers(0, 2 ** 32, 20000, dtype=np.uint64)])
    with jax.enable_x64(True):
        v = np.asarray(jax.jit(binary32.value)(jnp.asarray(b)))
    e = numerics.fp32_value(b.astype(np.uint32))
    assert np.all((v == e) | (np.isnan(v) & np.isnan(e)))
