"""B.FPATR matrix post-processing of the reference model: parameter legality
and the element conversion, written from the pto-spec units
``asl/block/attributes/B.FPATR.asl`` (mode tables, parameter carriers),
``asl/arch/data-types/fp19.asl``, ``asl/arch/profile/matrix-postprocess.asl``,
``matrix-quantization.asl`` and ``reference-quantization.asl`` (the reference
profile's conversion), at release 0.58.3 (e599a3d).

Every value is an exact rational (fractions.Fraction), as the ASL computes on
reals: no float rounding anywhere but the one each encoding names. Each
function returns its Word with the numeric flags it raises (the ASL's
...WithFlags twins: bits NV 0, DZ 1, OF 2, UF 3, NX 4), which the matrix
commit ORs into the State's sticky status (CORE_STATE[36:32]).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from .. import tables
from . import minifloat

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1

# numeric status flags (numeric-status.asl: CORE_STATE[36:32] holds NV, DZ, OF, UF, NX)
NV, DZ, OF, UF, NX = 1, 2, 4, 8, 16

# ----------------------------------------------------------------- mode tables (B.FPATR.asl)

VECTOR_MODES = frozenset({2, 4, 12, 18, 20, 23, 28, 33, 36, 37, 38, 39})
SCALAR_MODES = frozenset({3, 5, 13, 17, 19, 24, 25, 26, 27, 32, 34, 35})
S32_MODES = frozenset({2, 3, 4, 5, 12, 13, 17, 18, 19, 20, 35, 39})
FP32_MODES = frozenset({1, 16, 23, 24, 25, 26, 27, 28, 32, 33, 34, 36, 37, 38})
SHIFT_MODES = frozenset({12, 13})
FIXED_ROUNDING = frozenset({1, 16, 25, 26, 28, 32, 33, 34, 36, 37})
HALF_UP_MODES = frozenset({25, 28})            # HiF8 outputs round half up (RHB)

OUTPUT_TYPE = {}
for _codes, _name in (((1, 4, 5, 32, 33), "FP16"), ((2, 3, 23, 24), "S8"),
                      ((12, 13, 19, 20), "S16"), ((16, 34, 35, 36, 39), "BF16"),
                      ((17, 18), "S4X2"), ((25, 28), "HiF8"), ((26, 37), "E4M3"),
                      ((27, 38), "FP32")):
    for _c in _codes:
        OUTPUT_TYPE[_c] = _name


def offset_width(mode: int) -> int:
    """Bits of the signed offset and of the saturating intermediate (0: none)."""
    if mode in (17, 18):
        return 5
    if mode in (2, 3, 23, 24):
        return 9
    if mode in (19, 20):
        return 17
    return 0


def output_type(mode: int, accumulator: str) -> str:
    """D's element type: the accumulator type for mode 0, else the mode's."""
    return accumulator if mode == 0 else OUTPUT_TYPE[mode]


def mode_matches_accumulator(mode: int, accumulator: str) -> bool:
    """Mode 0 takes FP32, S32 or U32; the others exactly their class."""
    if mode == 0:
        return accumulator in ("FP32", "S32", "U32")
    if mode in S32_MODES:
        return accumulator == "S32"
    return mode in FP32_MODES and accumulator == "FP32"


# ----------------------------------------------------------------- FP19 (fp19.asl)


def fp19_value(code: int) -> Fraction:
    """A finite FP19 value: sign bit 18, bias-127 exponent 17:10, fraction 9:0."""
    exponent, fraction = code >> 10 & 0xFF, code & 0x3FF
    assert exponent != 0xFF
    if exponent == 0:
        magnitude = Fraction(fraction) * Fraction(1, 1 << 136)
    else:
        magnitude = (1 + Fraction(fraction, 1024)) * Fraction(2) ** (exponent - 127)
    return -magnitude if code >> 18 & 1 else magnitude


def fp19_positive_normal(code: int) -> bool:
    return code >> 18 & 1 == 0 and 0 < (code >> 10 & 0xFF) < 0xFF


def fp19_activation_legal(code: int) -> bool:
    """Positive zero or positive normal."""
    return code == 0 or fp19_positive_normal(code)


# ----------------------------------------------------------------- parameter carriers


def quant_parameter_legal(mode: int, word: int) -> bool:
    """BundleFPATRQuantParameterWordLegal: the mode's payload bits, all others zero."""
    bits: Callable[[int, int], int] = lambda hi, lo: word >> lo & ((1 << (hi - lo + 1)) - 1)
    if mode in SHIFT_MODES:
        return bits(31, 0) == 0 and bits(63, 36) == 0
    scale_ok = bits(12, 0) == 0 and fp19_positive_normal(bits(31, 13))
    width = offset_width(mode)
    if width:
        return scale_ok and bits(36, 32) == 0 and bits(63, 37 + width) == 0
    if mode in SCALAR_MODES or mode in VECTOR_MODES:
        return scale_ok and bits(63, 32) == 0
    return False


def relu_parameter_legal(word: int) -> bool:
    """An FP19 activation parameter in bits 18:0, every bit above zero."""
    return word >> 19 == 0 and fp19_activation_legal(word)


# ----------------------------------------------------------------- rounding (arithmetic.asl)

ROUNDING = {0: "RNE", 1: "RNE", 2: "RTZ", 3: "RTM", 4: "RTP", 5: "RNA", 6: "RTO", 7: "RHB"}


@dataclass(frozen=True)
class Control:
    """NumericExecutionControl: the rounding mode and the final saturation."""
    rounding: str
    saturating: bool


def control_of(mode: int, rmode: int, sat: int) -> Control:
    """B.DATR RMode/Sat (RMode 0: the operation default, RNE), then the mode's
    fixed rounding (MatrixFPATREffectiveControl)."""
    rounding = ROUNDING[rmode & 7]
    if mode in HALF_UP_MODES:
        rounding = "RHB"
    elif mode in FIXED_ROUNDING:
        rounding = "RNE"
    return Control(rounding, bool(sat))


def to_integer(value: Fraction, rounding: str) -> int:
    """FloatingToInteger (RNE: the reference profile's ties-to-even)."""
    lower = math.floor(value)
    fraction = value - lower
    if rounding == "RTP":
        return math.ceil(value)
    if rounding == "RTM":
        return lower
    if rounding == "RTZ":
        return math.trunc(value)
    if rounding == "RNE":
        if fraction != Fraction(1, 2):
            return lower + (fraction > Fraction(1, 2))
        return lower + (lower % 2)
    if rounding == "RNA":
        if fraction != Fraction(1, 2):
            return lower + (fraction > Fraction(1, 2))
        return lower if value < 0 else lower + 1
    if rounding == "RTO":
        return lower if fraction == 0 or lower % 2 else lower + 1
    assert rounding == "RHB"
    return lower if fraction < Fraction(1, 2) else lower + 1


def round_magnitude(magnitude: Fraction, rounding: str, negative: bool) -> int:
    """MatrixRoundMagnitude: a magnitude rounded as its signed value would be."""
    if negative and rounding == "RHB":
        lower = math.floor(magnitude)
        return lower if magnitude - lower <= Fraction(1, 2) else lower + 1
    if negative:
        rounding = {"RTP": "RTM", "RTM": "RTP"}.get(rounding, rounding)
    return to_integer(magnitude, rounding)


# ----------------------------------------------------------------- encodings


INTEGER_RANGE = {"S4X2": (-8, 7), "S8": (-128, 127), "S16": (-32768, 32767),
                 "S32": (-(1 << 31), (1 << 31) - 1), "U32": (0, MASK32)}
INTEGER_BITS = {"S4X2": 4, "S8": 8, "S16": 16, "S32": 32, "U32": 32}


def normalize_integer(value: int, name: str) -> int:
    """NormalizeTileInteger: the type's low bits, sign- or zero-extended to a Word."""
    bits = INTEGER_BITS[name]
    low = value & ((1 << bits) - 1)
    if name != "U32" and low >> (bits - 1):
        low -= 1 << bits
    return low & MASK64


def encode_integer(value: Fraction, name: str, control: Control) -> tuple[int, int]:
    """ReferenceMatrixIntegerEncoding: round, clamp only when saturating, wrap;
    OF|NX when the rounded value is out of range (saturating or not), else NX
    when rounding changed it."""
    rounded = to_integer(value, control.rounding)
    lo, hi = INTEGER_RANGE[name]
    overflow = not lo <= rounded <= hi
    flags = OF | NX if overflow else NX if rounded != value else 0
    if control.saturating:
        rounded = min(max(rounded, lo), hi)
    return normalize_integer(rounded, name), flags


@dataclass(frozen=True)
class FloatFormat:
    """A binary format: fraction bits, exponent bias, largest finite and infinity patterns."""
    fraction_bits: int
    bias: int
    max_finite: int
    infinity: int
    sign: int


FLOAT_FORMATS = {
    "FP32": FloatFormat(23, 127, 0x7F7FFFFF, 0x7F800000, 0x80000000),
    "FP16": FloatFormat(10, 15, 0x7BFF, 0x7C00, 0x8000),
    "BF16": FloatFormat(7, 127, 0x7F7F, 0x7F80, 0x8000),
}
CANONICAL_NAN = {"FP32": 0x7FC00000, "FP16": 0x7E00, "BF16": 0x7FC0, "E4M3": 0x7F, "HiF8": 0x80}
# signed zero (-0 source, MatrixFloatingSignedZero): HiF8 has no -0
NEGATIVE_ZERO = {"FP32": 0x80000000, "FP16": 0x8000, "BF16": 0x8000, "E4M3": 0x80, "HiF8": 0}


def encode_float(value: Fraction, name: str, control: Control) -> tuple[int, int]:
    """ReferenceFP32FiniteEncoding / ReferenceBinary16Encoding: round to the
    format (normal or subnormal), carry into the exponent; an exponent past the
    largest is infinity, or the largest finite when saturating (OF|NX). A value
    below the smallest normal (before rounding) raises UF|NX when inexact; any
    other inexact result NX."""
    f = FLOAT_FORMATS[name]
    if value == 0:
        return 0, 0
    negative = value < 0
    magnitude = -value if negative else value
    sign = f.sign if negative else 0
    exponent = math.floor(math.log2(magnitude))
    # log2 of a Fraction may be off by one at exact powers: settle it exactly
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    overflow = sign | (f.max_finite if control.saturating else f.infinity)
    max_exponent, min_exponent = f.bias, 1 - f.bias
    if exponent > max_exponent:
        return overflow, OF | NX
    unit = 1 << f.fraction_bits
    if exponent < min_exponent:
        scaled = magnitude / Fraction(2) ** (min_exponent - f.fraction_bits)
        rounded = round_magnitude(scaled, control.rounding, negative)
        # a carry to `unit` is the smallest normal
        return sign | rounded, (UF | NX if rounded != scaled else 0)
    scaled = magnitude / Fraction(2) ** (exponent - f.fraction_bits)
    rounded = round_magnitude(scaled, control.rounding, negative)
    biased = exponent + f.bias
    inexact = NX if rounded != scaled else 0
    if rounded == 2 * unit:
        rounded, biased = unit, biased + 1
    if biased >= 2 * f.bias + 1:
        return overflow, OF | NX
    return sign | biased << f.fraction_bits | (rounded - unit), inexact


# 8-bit floating outputs: the largest finite magnitude, the saturated codes
# (+, -) and the overflow codes without saturation (+, -).
FP8_LIMITS = {"E4M3": (448, (0x7E, 0xFE), (0x7F, 0x7F)),
              "HiF8": (32768, (0x6E, 0xEE), (0x6F, 0xEF))}


def fp8_candidates(name: str) -> list[tuple[int, Fraction]]:
    """(code, value) of every finite code, ascending code order."""
    out = []
    for code in range(256):
        d = minifloat.decompose(name, code)
        if d.kind == minifloat.FINITE:
            out.append((code, d.exact()))
    return out


def encode_fp8(value: Fraction, name: str, control: Control) -> tuple[int, int]:
    """ReferenceFP8Encoding: a search over the finite codes in ascending order.
    Directed modes take the nearest eligible code; the nearest modes break a
    tie by the mode's rule (RNE even code, RNA larger magnitude, RTO odd code,
    RHB the larger value), an earlier code winning any remaining tie; RTO then
    moves an inexact even result one code away from zero. Past the largest
    finite magnitude OF|NX; an inexact result below the smallest normal
    (2^-6 E4M3, 2^-15 HiF8) UF|NX, any other inexact one NX."""
    if value == 0:
        return 0, 0
    negative = value < 0
    maximum, saturated, overflow = FP8_LIMITS[name]
    if abs(value) > maximum:
        return (saturated if control.saturating else overflow)[negative], OF | NX
    mode = control.rounding
    best = None
    for code, candidate in fp8_candidates(name):
        if mode == "RTP" and candidate < value or mode == "RTM" and candidate > value:
            continue
        if mode in ("RTZ", "RTO") and not (value <= candidate <= 0 if negative
                                           else 0 <= candidate <= value):
            continue
        if best is None or better(value, code, candidate, *best, mode, negative):
            best = (code, candidate)
    assert best is not None         # a finite value within the maximum has a candidate
    code, chosen = best
    if mode == "RTO" and chosen != value and code % 2 == 0:
        away = [(c, v) for c, v in fp8_candidates(name) if c % 2 == 1
                and (v < chosen if negative else v > chosen)]
        if away:
            code, chosen = (max if negative else min)(away, key=lambda cv: cv[1])
    if chosen == value:
        return code, 0
    return code, UF | NX if abs(value) < FP8_MIN_NORMAL[name] else NX


FP8_MIN_NORMAL = {"E4M3": Fraction(1, 1 << 6), "HiF8": Fraction(1, 1 << 15)}


def better(target: Fraction, code: int, candidate: Fraction, best_code: int, best: Fraction,
           mode: str, negative: bool) -> bool:
    """Whether a later candidate replaces the best so far (strict: a tie keeps the earlier)."""
    if mode == "RTP":
        return candidate < best
    if mode == "RTM":
        return candidate > best
    if mode in ("RTZ", "RTO"):
        return candidate < best if negative else candidate > best
    distance, best_distance = abs(candidate - target), abs(best - target)
    if distance != best_distance:
        return distance < best_distance
    if mode == "RNE":
        return code % 2 == 0 and best_code % 2 != 0
    if mode == "RNA":
        return abs(candidate) > abs(best)
    return candidate > best                                   # RHB


def encode(value: Fraction, name: str, control: Control) -> tuple[int, int]:
    """MatrixEncodeReal: (Word, flags)."""
    if name in INTEGER_RANGE:
        return encode_integer(value, name, control)
    if name in FP8_LIMITS:
        return encode_fp8(value, name, control)
    return encode_float(value, name, control)


# ----------------------------------------------------------------- FP32 source values


def fp32_class(word: int) -> str:
    """The value class of a binary32 pattern (the low 32 bits of a Word)."""
    w = word & MASK32
    exponent, fraction, negative = w >> 23 & 0xFF, w & 0x7FFFFF, bool(w >> 31)
    if exponent == 0xFF:
        if fraction == 0:
            return "-inf" if negative else "+inf"
        return "nan"
    if exponent == 0 and fraction == 0:
        return "-0" if negative else "+0"
    return "-" if negative else "+"


def fp32_signaling(word: int) -> bool:
    """A signaling NaN: exponent all ones, quiet bit 22 clear, fraction nonzero."""
    return fp32_class(word) == "nan" and not word >> 22 & 1


def fp32_value(word: int) -> Fraction:
    w = word & MASK32
    exponent, fraction = w >> 23 & 0xFF, w & 0x7FFFFF
    if exponent == 0:
        magnitude = Fraction(fraction, 1 << 149)
    else:
        magnitude = Fraction((1 << 23) + fraction, 1 << 23) * Fraction(2) ** (exponent - 127)
    return -magnitude if w >> 31 else magnitude


# ----------------------------------------------------------------- one element


def shift_to_s16(word: int, parameter: int) -> tuple[int, int]:
    """Shift modes: the S32 value >> (parameter[35:32] + 1), saturated to S16
    (OF|NX when it saturates)."""
    value = word & MASK32
    value -= (value >> 31) << 32
    shifted = value >> ((parameter >> 32 & 0xF) + 1)
    saturated = min(max(shifted, -32768), 32767)
    return normalize_integer(saturated, "S16"), (OF | NX if saturated != shifted else 0)


def special_result(word: int, out: str, control: Control) -> tuple[int, int]:
    """MatrixPostQuantSpecialValue for a NaN or infinite FP32 source Word.
    A NaN raises NV into an integer type, else NV only when signaling; an
    infinity raises OF|NX when saturated, NV into a wrapping integer type, OF|NX
    into E4M3 (which has no infinity), nothing into a binary infinity."""
    cls = fp32_class(word)
    integer = out in INTEGER_RANGE
    if cls == "nan":
        flags = NV if integer or fp32_signaling(word) else 0
        if integer:
            return (0 if control.saturating else normalize_integer(INTEGER_RANGE[out][0], out)), flags
        return (0 if control.saturating else CANONICAL_NAN[out]), flags
    negative = cls == "-inf"
    if integer:
        lo, hi = INTEGER_RANGE[out]
        end = hi if control.saturating and not negative else lo
        return normalize_integer(end, out), (OF | NX if control.saturating else NV)
    if out in FP8_LIMITS:                      # E4M3 has no infinity: its NaN
        _, saturated, overflow = FP8_LIMITS[out]
        flags = OF | NX if control.saturating or out == "E4M3" else 0
        return (saturated if control.saturating else overflow)[negative], flags
    f = FLOAT_FORMATS[out]
    sign = f.sign if negative else 0
    if control.saturating:
        return sign | f.max_finite, OF | NX
    return sign | f.infinity, 0


def post_process(word: int, mode: int, relu: int, accumulator: str, quant: int, relu_param: int,
                 control: Control) -> tuple[int, int]:
    """TileProfileMatrixPostProcessWithFlags of one raw accumulator Word
    (reference profile): (D's Word, the flags it raises)."""
    if mode == 0 and relu == 0:
        return word, 0
    if mode in SHIFT_MODES:
        return shift_to_s16(word, quant)
    out = output_type(mode, accumulator)
    source = accumulator if mode == 0 else ("S32" if mode in S32_MODES else "FP32")
    cls = fp32_class(word) if source == "FP32" else "+"
    if source == "S32":
        negative = bool(word >> 31 & 1)
    else:
        negative = cls in ("-", "-0", "-inf")
    uses_parameter = mode in SCALAR_MODES or mode in VECTOR_MODES
    scale = fp19_value(quant >> 13 & 0x7FFFF) if uses_parameter else Fraction(1)
    if not negative or relu == 0:
        multiplier = scale
    elif relu == 1:
        multiplier = Fraction(0)
    else:
        multiplier = fp19_value(relu_param & 0x7FFFF)
    if cls in ("nan", "+inf") or (cls == "-inf" and multiplier != 0):
        return special_result(word, out, control)
    if source == "S32":
        value = Fraction((word & MASK32) - ((word >> 31 & 1) << 32))
    elif source == "U32":
        value = Fraction(word & MASK32)
    elif cls == "-inf":
        value = Fraction(0)
    else:
        value = fp32_value(word)
    activated = value * multiplier
    width = offset_width(mode)
    offset = 0
    if width:
        field = quant >> 37 & ((1 << width) - 1)
        offset = field - ((field >> (width - 1)) << width)
    if cls == "-0" and multiplier != 0 and offset == 0 and out in NEGATIVE_ZERO:
        return NEGATIVE_ZERO[out], 0
    if width:
        # MatrixQuantizedAffine: round and saturate at the signed intermediate
        # (MatrixRoundAndSaturateSigned: OF|NX out of range, else NX if inexact)
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        rounded = to_integer(activated, control.rounding)
        intermediate = min(max(rounded, lo), hi)
        flags = OF | NX if intermediate != rounded else NX if rounded != activated else 0
        word, final = encode(Fraction(intermediate + offset), out, control)
        return word, flags | final
    return encode(activated + offset, out, control)


# ----------------------------------------------------------------- RowMax / GroupMax


def fp32_key(word: int) -> int:
    """HardwareNumericFloatingOrderKey: bits 31:0 mapped to an unsigned order."""
    w = word & MASK32
    return (~w & MASK32) if w >> 31 else w ^ 0x80000000


def maximum(left: int, right: int, accumulator: str) -> tuple[int, int]:
    """TileProfileBinaryWithFlags(MAX): S32/U32 compare bits 31:0 and return the
    larger normalized (left on a tie), no flags; FP32 returns a source Word
    unchanged (both NaN: the canonical NaN; one NaN: the other; +0 against
    either zero: a fresh +0), else the larger by value, left on a tie; NV when
    either Word is a signaling NaN."""
    if accumulator in ("S32", "U32"):
        lv, rv = (normalize_integer(w & MASK32, accumulator) for w in (left, right))
        signed: Callable[[int], int] = lambda w: w - (1 << 64) if accumulator == "S32" and w >> 63 else w
        return (lv if signed(lv) >= signed(rv) else rv), 0
    flags = NV if fp32_signaling(left) or fp32_signaling(right) else 0
    lc, rc = fp32_class(left), fp32_class(right)
    if lc == "nan" and rc == "nan":
        return CANONICAL_NAN["FP32"], flags
    if lc == "nan":
        return right, flags
    if rc == "nan":
        return left, flags
    if lc in ("+0", "-0") and rc in ("+0", "-0"):
        return (left if lc == rc == "-0" else 0), flags
    return (left if fp32_key(left) >= fp32_key(right) else right), flags


def absolute(word: int, accumulator: str) -> tuple[int, int]:
    """MatrixReductionAbsoluteWithFlags: U32 bits 31:0; S32 its magnitude
    sign-extended (-2^31 gives 0x7FFFFFFF and OF); FP32 bits 30:0."""
    if accumulator == "U32":
        return word & MASK32, 0
    if accumulator == "S32":
        w = word & MASK32
        if not w >> 31:
            return w, 0
        return (0x7FFFFFFF, OF) if w == 0x80000000 else ((-w) & MASK32, 0)
    return word & 0x7FFFFFFF, 0


def reduction_step(current: int, candidate: int, max_abs: bool,
                   accumulator: str) -> tuple[int, int]:
    """TileProfileMatrixReductionStepWithFlags: MAX, of the absolute values
    with MaxAbsEn; the flags of both absolutes and of the MAX."""
    flags = 0
    if max_abs:
        (current, f1), (candidate, f2) = (absolute(current, accumulator),
                                          absolute(candidate, accumulator))
        flags = f1 | f2
    value, f = maximum(current, candidate, accumulator)
    return value, flags | f


def reduce_run(words: list[int], max_abs: bool, accumulator: str) -> tuple[int, int]:
    """One row (or group) of raw accumulator Words: the first Word (its own
    absolute step with MaxAbsEn), then a step per later Word; (value, flags)."""
    value, flags = words[0], 0
    if max_abs:
        value, flags = reduction_step(value, value, True, accumulator)
    for w in words[1:]:
        value, f = reduction_step(value, w, max_abs, accumulator)
        flags |= f
    return value, flags


def row_max(result: list[list[int]], initial: Optional[list[int]], max_abs: bool,
            accumulator: str) -> tuple[list[int], int]:
    """MatrixRowMaxResult: each row's reduction, then RowMaxIn's Word (left)
    against it; (the Words, the flags of every step)."""
    out, flags = [], 0
    for i, words in enumerate(result):
        value, f = reduce_run(words, max_abs, accumulator)
        flags |= f
        if initial is not None:
            value, f = reduction_step(initial[i], value, max_abs, accumulator)
            flags |= f
        out.append(value)
    return out, flags


def group_max(result: list[list[int]], group_n: int, max_abs: bool,
              accumulator: str) -> tuple[list[list[int]], int]:
    """MatrixGroupMaxResult: each row's reduction over each run of GroupN
    columns; (the Words, the flags of every step)."""
    n = tables.FPATR_GROUP_N[group_n]
    runs = [[reduce_run(words[g:g + n], max_abs, accumulator) for g in range(0, len(words), n)]
            for words in result]
    flags = 0
    for row in runs:
        for _, f in row:
            flags |= f
    return [[v for v, _ in row] for row in runs], flags


def scalar_parameters(gprs: Optional[list[int]], mode: int, relu: int) -> tuple[int, int]:
    """(quant, relu) parameter Words: dense B.IOR sources, quant first; zero
    without a B.IOR (tile-schema.asl: the operands' reset values)."""
    if gprs is None:
        return 0, 0
    it = iter(gprs)
    quant = next(it) if mode in SCALAR_MODES else 0
    relu_word = next(it) if relu == 2 else 0
    return quant, relu_word
