"""B.FPATR matrix post-processing on the batch: the parameter carriers and
the element conversion of the reference profile (ASL matrix-postprocess.asl,
matrix-quantization.asl, reference-quantization.asl at 0.58.3), lane-wise.

The ASL computes on exact reals. Here every value is a float64 that holds
it exactly: an FP32 or S32 accumulator value (<= 32 significant bits) times
an FP19 scale or activation parameter (11 bits) has at most 43 significant
bits and lies in 2^-275 .. 2^256, a normal float64. Rounding such a value
to an integer, to binary32/16 or BF16 scales it by a power of two (exact)
and compares its fraction with 1/2 (exact), so each result is the real one.
The 8-bit formats (E4M3, HiF8) round by the ASL's search over their codes,
done here as a lookup in the sorted table of their finite values.
Each conversion returns its Words with the numeric flags each raises (int32
lanes, the ASL's ...WithFlags: NV 1, DZ 2, OF 4, UF 8, NX 16); the matrix
commit ORs those of D's valid region and of the reductions into the State's
sticky status.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import NDArray

from .. import tables
from . import binary32

U64 = jnp.uint64            # typed Any in jax's stubs: an expression with U64(...) operands is Any
DT = {d.name: d.code for d in tables.DATATYPES}

# ---------------------------------------------------------------- mode tables (B.FPATR.asl)

VECTOR_MODES = (2, 4, 12, 18, 20, 23, 28, 33, 36, 37, 38, 39)
SCALAR_MODES = (3, 5, 13, 17, 19, 24, 25, 26, 27, 32, 34, 35)
S32_MODES = (2, 3, 4, 5, 12, 13, 17, 18, 19, 20, 35, 39)
FP32_MODES = (1, 16, 23, 24, 25, 26, 27, 28, 32, 33, 34, 36, 37, 38)
SHIFT_MODES = (12, 13)
FIXED_ROUNDING = (1, 16, 25, 26, 28, 32, 33, 34, 36, 37)


def _flags(modes: Iterable[int]) -> NDArray[np.bool_]:
    out = np.zeros(64, bool)
    out[list(modes)] = True
    return out


IS_VECTOR, IS_SCALAR = _flags(VECTOR_MODES), _flags(SCALAR_MODES)
IS_S32, IS_FP32, IS_SHIFT = _flags(S32_MODES), _flags(FP32_MODES), _flags(SHIFT_MODES)
IS_FIXED = _flags(FIXED_ROUNDING)
OFFSET_WIDTH = np.zeros(64, np.int32)
OFFSET_WIDTH[[17, 18]] = 5
OFFSET_WIDTH[[2, 3, 23, 24]] = 9
OFFSET_WIDTH[[19, 20]] = 17
OUTPUT_TYPE = np.full(64, -1, np.int32)           # -1: mode 0 (the accumulator type)
for _codes, _name in (((1, 4, 5, 32, 33), "FP16"), ((2, 3, 23, 24), "S8"),
                      ((12, 13, 19, 20), "S16"), ((16, 34, 35, 36, 39), "BF16"),
                      ((17, 18), "S4X2"), ((25, 28), "HiF8"), ((26, 37), "E4M3"),
                      ((27, 38), "FP32")):
    OUTPUT_TYPE[list(_codes)] = DT[_name]

# numeric status flags (numeric-status.asl: CORE_STATE[36:32] holds NV, DZ, OF, UF, NX)
NV, DZ, OF, UF, NX = 1, 2, 4, 8, 16


def _flag(cond: ArrayLike, value: ArrayLike) -> jax.Array:
    return jnp.where(cond, jnp.asarray(value, jnp.int32), jnp.int32(0))


def or_all(flags: jax.Array) -> jax.Array:
    """The OR of every element of an int32 array of flags."""
    # jax.lax.reduce returns Any in jax's annotations
    return cast(jax.Array, jax.lax.reduce(flags.astype(jnp.int32), jnp.int32(0), jax.lax.bitwise_or,
                                          tuple(range(jnp.ndim(flags)))))


# rounding modes; B.DATR RMode 0 (the operation default) and 1 are RNE
RNE, RTZ, RTM, RTP, RNA, RTO, RHB = range(7)
RMODE = np.array([RNE, RNE, RTZ, RTM, RTP, RNA, RTO, RHB], np.int32)


def _at(table: NDArray[Any], i: ArrayLike) -> jax.Array:
    return jnp.asarray(table)[jnp.clip(i, 0, len(table) - 1)]


def output_type(mode: jax.Array, acc_type: jax.Array) -> jax.Array:
    """D's DataType code: the accumulator's for mode 0, else the mode's."""
    return jnp.where(mode == 0, acc_type, _at(OUTPUT_TYPE, mode))


def mode_matches_accumulator(mode: jax.Array, acc_type: jax.Array) -> jax.Array:
    """Mode 0 takes FP32/S32/U32 (every accumulator type); the others their class."""
    return jnp.where(mode == 0, True,
                     jnp.where(_at(IS_S32, mode), acc_type == DT["S32"],
                               _at(IS_FP32, mode) & (acc_type == DT["FP32"])))


def rounding(mode: jax.Array, rmode: jax.Array) -> jax.Array:
    """MatrixFPATREffectiveControl's rounding mode."""
    half_up = (mode == 25) | (mode == 28)              # the HiF8 outputs round half up
    return jnp.where(half_up, RHB, jnp.where(_at(IS_FIXED, mode), RNE, _at(RMODE, rmode)))


# ---------------------------------------------------------------- parameter carriers


def _bits(word: jax.Array, hi: int, lo: int) -> jax.Array:
    return cast(jax.Array, (word >> U64(lo)) & U64((1 << (hi - lo + 1)) - 1))


def fp19_positive_normal(code: jax.Array) -> jax.Array:
    e = (code >> U64(10)) & U64(0xFF)
    return cast(jax.Array, ((code >> U64(18)) & U64(1) == 0) & (e > 0) & (e < 0xFF))


def quant_parameter_legal(mode: jax.Array, word: jax.Array) -> jax.Array:
    """BundleFPATRQuantParameterWordLegal for PreQuantMode `mode`."""
    width = _at(OFFSET_WIDTH, mode)
    scale_ok = (_bits(word, 12, 0) == 0) & fp19_positive_normal(_bits(word, 31, 13))
    # bits past the offset field (from 37 + width; width 0: from 32) must be zero
    top = jnp.where(width > 0, 37 + width, 32).astype(U64)
    high_clear = (word >> top) == 0
    offset_ok = jnp.where(width > 0, _bits(word, 36, 32) == 0, True)
    shift_ok = (_bits(word, 31, 0) == 0) & ((word >> U64(36)) == 0)
    uses = _at(IS_SCALAR, mode) | _at(IS_VECTOR, mode)
    return jnp.where(_at(IS_SHIFT, mode), shift_ok, uses & scale_ok & offset_ok & high_clear)


def relu_parameter_legal(word: jax.Array) -> jax.Array:
    """An FP19 positive zero or positive normal in bits 18:0, every bit above zero."""
    return cast(jax.Array, ((word >> U64(19)) == 0) & ((word == 0) | fp19_positive_normal(word)))


# ---------------------------------------------------------------- exact float64 helpers


def _exp2(n: ArrayLike) -> jax.Array:
    """2.0 ** n for integer n in the float64 normal range (exact, by its bits)."""
    return jax.lax.bitcast_convert_type((jnp.asarray(n).astype(jnp.int64) + 1023).astype(U64)
                                        << U64(52), jnp.float64)


def _exponent(a: jax.Array) -> jax.Array:
    """floor(log2(a)) of a positive normal float64."""
    bits = jax.lax.bitcast_convert_type(a, U64)
    return cast(jax.Array, ((bits >> U64(52)) & U64(0x7FF)).astype(jnp.int32) - 1023)


def fp19_value(code: jax.Array) -> jax.Array:
    """A finite FP19 value (sign 18, bias-127 exponent 17:10, fraction 9:0)."""
    e = ((code >> U64(10)) & U64(0xFF)).astype(jnp.int32)
    f = (code & U64(0x3FF)).astype(jnp.float64)
    mag = jnp.where(e == 0, f * _exp2(-136), (1024.0 + f) * _exp2(e - 137))
    return jnp.where((code >> U64(18)) & U64(1) == 1, -mag, mag)


def to_integer(x: jax.Array, mode: jax.Array) -> jax.Array:
    """FloatingToInteger of an exact float64 (integral float64 out)."""
    lower = jnp.floor(x)
    frac = x - lower
    up = lower + 1.0
    odd = jnp.fmod(lower, 2.0) != 0
    nearest: Callable[[jax.Array], jax.Array] = lambda tie: jnp.where(frac < 0.5, lower, jnp.where(frac > 0.5, up, tie))
    return jnp.select(
        [mode == RNE, mode == RTZ, mode == RTM, mode == RTP, mode == RNA, mode == RTO],
        [nearest(jnp.where(odd, up, lower)), jnp.trunc(x), lower, jnp.ceil(x),
         nearest(jnp.where(x < 0, lower, up)), jnp.where((frac == 0) | odd, lower, up)],
        jnp.where(frac < 0.5, lower, up))                                  # RHB


def round_magnitude(q: jax.Array, mode: jax.Array, negative: jax.Array) -> jax.Array:
    """MatrixRoundMagnitude: a magnitude rounded as its signed value would be."""
    lower = jnp.floor(q)
    rhb_negative = jnp.where(q - lower <= 0.5, lower, lower + 1.0)
    swapped = jnp.where(negative & (mode == RTP), RTM, jnp.where(negative & (mode == RTM), RTP, mode))
    return jnp.where(negative & (mode == RHB), rhb_negative, to_integer(q, swapped))


# ---------------------------------------------------------------- encodings


def _normalize_integer(r: jax.Array, dtype: jax.Array) -> jax.Array:
    """NormalizeTileInteger of an integral float64 (any size): the type's low
    bits, sign- or zero-extended to a Word."""
    low32 = jnp.fmod(r, 2.0 ** 32).astype(jnp.int64).astype(U64) & U64(0xFFFFFFFF)
    bits = jnp.select([dtype == DT["S4X2"], dtype == DT["S8"], dtype == DT["S16"]], [4, 8, 16], 32)
    shift = (64 - bits).astype(U64)
    signed = ((low32 << shift).astype(jnp.int64) >> shift.astype(jnp.int64)).astype(U64)
    return jnp.where(dtype == DT["U32"], low32, signed)


def _integer_range(dtype: jax.Array) -> tuple[jax.Array, jax.Array]:
    lo = jnp.select([dtype == DT["S4X2"], dtype == DT["S8"], dtype == DT["S16"],
                     dtype == DT["S32"]], [-8.0, -128.0, -32768.0, -2.0 ** 31], 0.0)
    hi = jnp.select([dtype == DT["S4X2"], dtype == DT["S8"], dtype == DT["S16"],
                     dtype == DT["S32"]], [7.0, 127.0, 32767.0, 2.0 ** 31 - 1], 2.0 ** 32 - 1)
    return lo, hi


def encode_integer(x: jax.Array, dtype: jax.Array, mode: jax.Array, sat: jax.Array
                   ) -> tuple[jax.Array, jax.Array]:
    """ReferenceMatrixIntegerEncoding: round, clamp only when saturating, wrap;
    flags OF|NX out of range (saturating or not), else NX when inexact."""
    r = to_integer(x, mode)
    lo, hi = _integer_range(dtype)
    overflow = (r < lo) | (r > hi)
    flags = jnp.where(overflow, OF | NX, _flag(r != x, NX))
    return _normalize_integer(jnp.where(sat, jnp.clip(r, lo, hi), r), dtype), flags


# binary formats: (fraction bits, bias, largest finite, infinity, sign bit)
_BINARY = {"FP32": (23, 127, 0x7F7FFFFF, 0x7F800000, 0x80000000),
           "FP16": (10, 15, 0x7BFF, 0x7C00, 0x8000),
           "BF16": (7, 127, 0x7F7F, 0x7F80, 0x8000)}


def _binary_field(dtype: jax.Array, k: int) -> jax.Array:
    return jnp.select([dtype == DT["FP32"], dtype == DT["FP16"]],
                      [_BINARY["FP32"][k], _BINARY["FP16"][k]], _BINARY["BF16"][k])


def encode_binary(x: jax.Array, dtype: jax.Array, mode: jax.Array, sat: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
    """ReferenceFP32FiniteEncoding / ReferenceBinary16Encoding of an exact
    float64: normal or subnormal rounding with a carry into the exponent;
    past the largest exponent infinity (the largest finite when saturating),
    OF|NX; zero is +0. Flags: an inexact value below the smallest normal UF|NX,
    another inexact one NX."""
    fb, bias = _binary_field(dtype, 0), _binary_field(dtype, 1)
    max_finite, infinity = U64(_binary_field(dtype, 2)), U64(_binary_field(dtype, 3))
    negative = x < 0
    sign = jnp.where(negative, U64(_binary_field(dtype, 4)), U64(0))
    a = jnp.abs(jnp.where(x == 0, 1.0, x))
    e = _exponent(a)
    overflow = sign | jnp.where(sat, max_finite, infinity)
    unit = _exp2(fb)
    subnormal = e < 1 - bias
    q = a * _exp2(fb - jnp.where(subnormal, 1 - bias, e))
    r = round_magnitude(q, mode, negative)
    inexact = r != q
    carry = ~subnormal & (r == 2.0 * unit)
    biased = (e + bias + carry).astype(U64)
    r = jnp.where(carry, unit, r)
    normal_word = sign | (biased << fb.astype(U64)) | (r - unit).astype(U64)
    word = jnp.where(subnormal, sign | r.astype(U64), normal_word)
    over = (e > bias) | (~subnormal & (biased >= (2 * bias + 1).astype(U64)))
    flags = jnp.where(over, OF | NX, _flag(inexact, jnp.where(subnormal, UF | NX, NX)))
    return jnp.where(x == 0, U64(0), jnp.where(over, overflow, word)), _flag(x != 0, flags)


@functools.lru_cache(maxsize=None)
def _fp8_tables() -> tuple[NDArray[np.float64], NDArray[np.int32]]:
    """Per format (row 0 E4M3, row 1 HiF8): the distinct finite values ascending
    (padded with +inf) and for each the first code holding it."""
    from .. import numerics                # imported when a matrix program is traced
    n = 256
    values = np.full((2, n), np.inf)
    codes = np.zeros((2, n), np.int32)
    for f, name in enumerate(("E4M3", "HiF8")):
        finite: dict[float, int] = {}
        for code, v in enumerate(numerics.value_table(name)):
            if np.isfinite(v):
                finite.setdefault(float(v) + 0.0, code)        # first code of a value (-0: 0)
        for i, v in enumerate(sorted(finite)):
            values[f, i], codes[f, i] = v, finite[v]
    return values, codes


def encode_fp8(x: jax.Array, dtype: jax.Array, mode: jax.Array, sat: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
    """ReferenceFP8Encoding for E4M3 / HiF8: of the neighbours below and above
    x in the value table the closer, a midpoint by the mode's rule (RNE the
    even code, or the first code when both are even or odd; RHB the larger
    value). Every mode with an 8-bit output fixes RNE or RHB
    (MatrixFPATREffectiveControl), so no other rounding mode reaches here."""
    values, codes = (jnp.asarray(t) for t in _fp8_tables())
    f = jnp.broadcast_to(dtype == DT["HiF8"], jnp.shape(x)).astype(jnp.int32)
    hif8 = f == 1
    maximum = jnp.where(hif8, 32768.0, 448.0)
    negative = x < 0
    below = jnp.where(hif8, jnp.searchsorted(values[1], x, side="right"),
                      jnp.searchsorted(values[0], x, side="right"))
    i = jnp.clip(below - 1, 0, 255)
    exact = values[f, i] == x
    j = jnp.where(exact, i, jnp.clip(i + 1, 0, 255))
    lo, hi, c_lo, c_hi = values[f, i], values[f, j], codes[f, i], codes[f, j]
    d_lo, d_hi = x - lo, hi - x
    first_lo = c_lo < c_hi
    even_lo = c_lo % 2 == 0
    tie = (mode == RNE) & jnp.where(even_lo != (c_hi % 2 == 0), even_lo, first_lo)
    take_lo = jnp.where(d_lo < d_hi, True, jnp.where(d_lo > d_hi, False, tie))
    code = codes[f, jnp.where(take_lo, i, j)]
    tiny = jnp.abs(x) < jnp.where(hif8, 2.0 ** -15, 2.0 ** -6)      # below the smallest normal
    flags = _flag(~exact, jnp.where(tiny, UF | NX, NX))
    saturated = jnp.where(hif8, jnp.where(negative, 0xEE, 0x6E), jnp.where(negative, 0xFE, 0x7E))
    overflow = jnp.where(hif8, jnp.where(negative, 0xEF, 0x6F), 0x7F)
    over = jnp.abs(x) > maximum
    code = jnp.where(over, jnp.where(sat, saturated, overflow), code)
    flags = jnp.where(over, OF | NX, flags)
    return jnp.where(x == 0, 0, code).astype(U64), _flag(x != 0, flags)


def _is_integer(dtype: jax.Array) -> jax.Array:
    return (dtype == DT["S4X2"]) | (dtype == DT["S8"]) | (dtype == DT["S16"]) \
        | (dtype == DT["S32"]) | (dtype == DT["U32"])


def encode(x: jax.Array, dtype: jax.Array, mode: jax.Array, sat: jax.Array
           ) -> tuple[jax.Array, jax.Array]:
    """MatrixEncodeReal for every output type of the mode table: (Words, flags)."""
    fp8 = (dtype == DT["E4M3"]) | (dtype == DT["HiF8"])
    (iw, i_f), (fw, f_f), (bw, b_f) = (encode_integer(x, dtype, mode, sat),
                                       encode_fp8(x, dtype, mode, sat),
                                       encode_binary(x, dtype, mode, sat))
    integer = _is_integer(dtype)
    return (jnp.where(integer, iw, jnp.where(fp8, fw, bw)),
            jnp.where(integer, i_f, jnp.where(fp8, f_f, b_f)))


# ---------------------------------------------------------------- one element


_NEGATIVE_ZERO = {"FP32": 0x80000000, "FP16": 0x8000, "BF16": 0x8000, "E4M3": 0x80, "HiF8": 0}
_CANONICAL_NAN = {"FP32": 0x7FC00000, "FP16": 0x7E00, "BF16": 0x7FC0, "E4M3": 0x7F, "HiF8": 0x80}


def _by_type(dtype: jax.Array, table: Mapping[str, int]) -> jax.Array:
    return jnp.select([dtype == DT[k] for k in table], [U64(v) for v in table.values()], U64(0))


def _special(nan: jax.Array, neg_inf: jax.Array, dtype: jax.Array, sat: jax.Array) -> jax.Array:
    """MatrixPostQuantSpecialValue for a NaN or infinite FP32 source (its Words;
    _special_flags their flags)."""
    integer = _is_integer(dtype)
    lo, hi = _integer_range(dtype)
    int_end = _normalize_integer(jnp.where(sat & ~neg_inf, hi, lo), dtype)
    int_word = jnp.where(nan & sat, U64(0), int_end)
    fp8 = (dtype == DT["E4M3"]) | (dtype == DT["HiF8"])
    hif8 = dtype == DT["HiF8"]
    fp8_inf = jnp.where(sat, jnp.where(hif8, jnp.where(neg_inf, 0xEE, 0x6E),
                                       jnp.where(neg_inf, 0xFE, 0x7E)),
                        jnp.where(hif8, jnp.where(neg_inf, 0xEF, 0x6F), 0x7F)).astype(U64)
    sign = jnp.where(neg_inf, U64(_binary_field(dtype, 4)), U64(0))
    bin_inf = sign | jnp.where(sat, U64(_binary_field(dtype, 2)), U64(_binary_field(dtype, 3)))
    float_word = jnp.where(nan, jnp.where(sat, U64(0), _by_type(dtype, _CANONICAL_NAN)),
                           jnp.where(fp8, fp8_inf, bin_inf))
    return jnp.where(integer, int_word, float_word)


def _special_flags(nan: jax.Array, signaling: jax.Array, dtype: jax.Array, sat: jax.Array) -> jax.Array:
    """A NaN: NV into an integer type, else NV when signaling. An infinity: OF|NX
    when saturated, NV into a wrapping integer type, OF|NX into E4M3 (which has
    no infinity), nothing into a binary infinity."""
    integer = _is_integer(dtype)
    inf_flags = jnp.where(sat, OF | NX, jnp.where(integer, NV, _flag(dtype == DT["E4M3"], OF | NX)))
    return jnp.where(nan, _flag(integer | signaling, NV), inf_flags)


def element(word: jax.Array, mode: jax.Array, relu: jax.Array, acc_type: jax.Array, quant: jax.Array,
            relu_param: jax.Array, rnd: jax.Array, sat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """TileProfileMatrixPostProcess of raw accumulator Words (any shape) under
    PreQuantMode `mode`, ReluMode `relu`, parameter Words `quant` and
    `relu_param`, rounding mode `rnd` (rounding()) and saturation `sat`:
    (D's Words, the flags each raises)."""
    out = output_type(mode, acc_type)
    source = jnp.where(mode == 0, acc_type, jnp.where(_at(IS_S32, mode), DT["S32"], DT["FP32"]))
    lo32 = word & U64(0xFFFFFFFF)
    f_exp, f_frac = (lo32 >> U64(23)) & U64(0xFF), lo32 & U64(0x7FFFFF)
    f_neg = (lo32 >> U64(31)) == 1
    is_fp32 = source == DT["FP32"]
    nan = is_fp32 & (f_exp == 0xFF) & (f_frac != 0)
    inf = is_fp32 & (f_exp == 0xFF) & (f_frac == 0)
    neg_zero = is_fp32 & f_neg & (f_exp == 0) & (f_frac == 0)
    s32 = lo32.astype(jnp.uint32).astype(jnp.int32)
    negative = jnp.where(source == DT["S32"], s32 < 0, is_fp32 & f_neg)
    uses = _at(IS_SCALAR, mode) | _at(IS_VECTOR, mode)
    scale = jnp.where(uses, fp19_value((quant >> U64(13)) & U64(0x7FFFF)), 1.0)
    multiplier = jnp.where(~negative | (relu == 0), scale,
                           jnp.where(relu == 1, 0.0, fp19_value(relu_param & U64(0x7FFFF))))
    special = nan | (inf & ~(f_neg & (multiplier == 0)))
    value = jnp.select([source == DT["S32"], source == DT["U32"], inf],
                       [s32.astype(jnp.float64), lo32.astype(jnp.float64), 0.0],
                       binary32.value(jnp.where(nan | inf, U64(0), lo32)))
    activated = value * multiplier
    width = _at(OFFSET_WIDTH, mode)
    field = (quant >> U64(37)) & ((U64(1) << width.astype(U64)) - U64(1))
    offset = jnp.where(width > 0, (field.astype(jnp.int64)
                                   - ((field >> jnp.maximum(width - 1, 0).astype(U64)).astype(jnp.int64)
                                      << width.astype(jnp.int64))), 0).astype(jnp.float64)
    half = jnp.where(width > 0, _exp2(jnp.maximum(width - 1, 0)), 1.0)
    rounded = to_integer(activated, rnd)
    intermediate = jnp.clip(rounded, -half, half - 1.0)
    # MatrixRoundAndSaturateSigned's flags: OF|NX out of range, else NX if inexact
    i_flags = _flag(width > 0, jnp.where(intermediate != rounded, OF | NX,
                                         _flag(rounded != activated, NX)))
    encoded, flags = encode(jnp.where(width > 0, intermediate, activated) + offset, out, rnd, sat)
    flags = flags | i_flags
    floating = (out == DT["FP32"]) | (out == DT["FP16"]) | (out == DT["BF16"]) \
        | (out == DT["E4M3"]) | (out == DT["HiF8"])
    signed_zero = neg_zero & (multiplier != 0) & (offset == 0) & floating
    encoded = jnp.where(signed_zero, _by_type(out, _NEGATIVE_ZERO), encoded)
    flags = _flag(~signed_zero, flags)
    encoded = jnp.where(special, _special(nan, inf & f_neg, out, sat), encoded)
    signaling = nan & ((lo32 >> U64(22)) & U64(1) == 0)
    flags = jnp.where(special, _special_flags(nan, signaling, out, sat), flags)
    # shift modes: the S32 value >> (bits 35:32 + 1), saturated to S16 (OF|NX)
    shifted = s32.astype(jnp.int64) >> (((quant >> U64(32)) & U64(0xF)) + U64(1)).astype(jnp.int64)
    clipped = jnp.clip(shifted, -32768, 32767)
    shift = _at(IS_SHIFT, mode)
    encoded = jnp.where(shift, clipped.astype(U64), encoded)
    flags = jnp.where(shift, _flag(clipped != shifted, OF | NX), flags)
    identity = (mode == 0) & (relu == 0)
    return jnp.where(identity, word, encoded), _flag(~identity, flags)


# ---------------------------------------------------------------- RowMax / GroupMax


def _normalized(word: jax.Array, acc_type: jax.Array) -> jax.Array:
    lo = word & U64(0xFFFFFFFF)
    return jnp.where(acc_type == DT["S32"],
                     lo.astype(jnp.uint32).astype(jnp.int32).astype(jnp.int64).astype(U64), lo)


def maximum(left: jax.Array, right: jax.Array, acc_type: jax.Array) -> tuple[jax.Array, jax.Array]:
    """TileProfileBinaryWithFlags(MAX): S32/U32 compare bits 31:0 and return the
    larger normalized (left on a tie); FP32 returns a source Word unchanged
    (both NaN: the canonical NaN; one NaN: the other; two zeros: the left
    when both are -0, else a fresh +0), else the larger by value, left on a
    tie; NV when an FP32 Word is a signaling NaN. (Word, flags)."""
    lv, rv = _normalized(left, acc_type), _normalized(right, acc_type)
    signed = acc_type == DT["S32"]
    int_left = jnp.where(signed, lv.astype(jnp.int64) >= rv.astype(jnp.int64), lv >= rv)
    int_max = jnp.where(int_left, lv, rv)
    l32, r32 = left & U64(0xFFFFFFFF), right & U64(0xFFFFFFFF)
    nan: Callable[[jax.Array], jax.Array] = lambda w: ((w >> U64(23)) & U64(0xFF) == 0xFF) & (w & U64(0x7FFFFF) != 0)
    zero: Callable[[jax.Array], jax.Array] = lambda w: (w & U64(0x7FFFFFFF)) == 0
    key: Callable[[jax.Array], jax.Array] = lambda w: jnp.where(w >> U64(31) == 1, ~w & U64(0xFFFFFFFF),
                                                                 w ^ U64(0x80000000))
    both_neg_zero = (l32 == 0x80000000) & (r32 == 0x80000000)
    fp_max = jnp.select(
        [nan(l32) & nan(r32), nan(l32), nan(r32), zero(l32) & zero(r32)],
        [U64(binary32.CANONICAL_NAN), right, left, jnp.where(both_neg_zero, left, U64(0))],
        jnp.where(key(l32) >= key(r32), left, right))
    fp32 = acc_type == DT["FP32"]
    signaling: Callable[[jax.Array], jax.Array] = lambda w: nan(w) & ((w >> U64(22)) & U64(1) == 0)
    return jnp.where(fp32, fp_max, int_max), _flag(fp32 & (signaling(l32) | signaling(r32)), NV)


def absolute(word: jax.Array, acc_type: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MatrixReductionAbsoluteWithFlags: U32 bits 31:0; S32 the magnitude
    (-2^31 gives 0x7FFFFFFF and OF); FP32 bits 30:0. (Word, flags)."""
    lo = word & U64(0xFFFFFFFF)
    negative = (lo >> U64(31)) == 1
    s32_abs = jnp.where(lo == 0x80000000, U64(0x7FFFFFFF),
                        jnp.where(negative, (U64(0) - lo) & U64(0xFFFFFFFF), lo))
    s32 = acc_type == DT["S32"]
    return (jnp.select([s32, acc_type == DT["FP32"]], [s32_abs, word & U64(0x7FFFFFFF)], lo),
            _flag(s32 & (lo == 0x80000000), OF))


def reduction_step(current: jax.Array, candidate: jax.Array, max_abs: ArrayLike, acc_type: jax.Array
                   ) -> tuple[jax.Array, jax.Array]:
    """TileProfileMatrixReductionStepWithFlags: MAX, of the absolute values with
    MaxAbsEn; (Word, the flags of both absolutes and the MAX)."""
    (c_abs, f1), (d_abs, f2) = absolute(current, acc_type), absolute(candidate, acc_type)
    value, f = maximum(jnp.where(max_abs, c_abs, current), jnp.where(max_abs, d_abs, candidate),
                       acc_type)
    return value, f | _flag(max_abs, f1 | f2)
