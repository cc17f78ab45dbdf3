"""B.FPATR post-processing for the matrix cases (kind mm_post): a PreQuantMode
of the plan's accumulator class, a ReluMode, RowMax / GroupMax with their
options, the post-process source tiles (RowMaxIn, vector quant and PReLU
parameters) and scalar parameter Words, and the auxiliary destinations; with
the aimed mutations mm_post_param (an illegal parameter Word: TileLegality),
mm_post_src (a post-process source of the wrong shape or dtype: TileLegality)
and mm_post_dst (a GroupMax output no RowMajor shape holds, or a
TILE_CAPACITY one byte short of the auxiliary outputs: TileAllocation).
"""

from __future__ import annotations

from typing import Optional

from ... import tables
from ...isa.encode import FPATR0
from .matrix_tiles import (FP32, MM_FP32_MODES, MM_S32_MODES, MM_SCALAR_MODES, MM_VECTOR_MODES,
                           S32, MmTile, mm_codes, mm_tile)
from .values import DT_CODE, pick_one, pow2

U64 = DT_CODE["U64"]
OFFSET_WIDTH = {17: 5, 18: 5, 2: 9, 3: 9, 23: 9, 24: 9, 19: 17, 20: 17}
POST_MUTATIONS = ("mm_post_param", "mm_post_src", "mm_post_dst")


def fpatr_word(pre=0, relu=0, group_n=0, row_max=0, group_max=0, row_max_init=0, max_abs=0,
               trans_a=0, trans_b=0) -> int:
    return (FPATR0 | trans_a << 7 | trans_b << 8 | max_abs << 15 | row_max_init << 16
            | group_max << 17 | row_max << 18 | group_n << 19 | relu << 23 | pre << 26)


def fp19(rng, spread: int = 8) -> int:
    """A positive normal FP19 code near 1.0 (exponent 127 +- spread), sometimes anywhere."""
    e = int(rng.integers(1, 255)) if rng.random() < 0.1 else 127 + int(rng.integers(-spread, spread + 1))
    return e << 10 | int(rng.integers(0, 1024))


def quant_word(rng, mode: int) -> int:
    """A legal quant parameter Word for PreQuantMode `mode`."""
    if mode in (12, 13):
        return int(rng.integers(0, 16)) << 32
    width = OFFSET_WIDTH.get(mode, 0)
    word = fp19(rng) << 13
    if width:
        word |= int(rng.integers(0, 1 << width)) << 37
    return word


def relu_word(rng) -> int:
    return 0 if rng.random() < 0.1 else fp19(rng, 4)


def bad_quant_word(rng, mode: int) -> int:
    """A quant parameter Word its mode rejects: a reserved bit, or a scale that is
    not a positive normal."""
    word = quant_word(rng, mode)
    if mode in (12, 13):
        return word | 1 << pick_one(rng, [0, 13, 31, 36, 50, 63])
    width = OFFSET_WIDTH.get(mode, 0)
    how = pick_one(rng, ["low", "high", "gap", "sign", "zero", "inf"])
    if how == "low":
        return word | 1 << int(rng.integers(0, 13))
    if how == "high":
        return word | 1 << int(rng.integers(37 + width if width else 32, 64))
    if how == "gap" and width:
        return word | 1 << int(rng.integers(32, 37))
    if how == "sign":
        return word | 1 << 31
    if how == "zero":
        return word & ~(0x7FFFF << 13)
    return word | 0xFF << 23                                   # FP19 exponent 255


def bad_relu_word(rng) -> int:
    how = pick_one(rng, ["high", "sign", "inf", "subnormal"])
    if how == "high":
        return relu_word(rng) | 1 << int(rng.integers(19, 64))
    if how == "sign":
        return fp19(rng) | 1 << 18
    if how == "inf":
        return 0xFF << 10 | int(rng.integers(0, 1024))
    return int(rng.integers(1, 1024))                             # exponent 0, fraction != 0


def draw_post(b, plan, muts) -> bool:
    """Fill the plan's post-processing (plan.fpatr, plan.tiles rin / q / alpha,
    plan.scalars, plan.aux) for kind mm_post and the post mutations; False
    when this plan cannot take them (the caller draws again)."""
    rng, W = b.rng, b.m.tile_words
    want_param, want_src, want_dst = (m in muts for m in POST_MUTATIONS)
    modes = [0] + (list(MM_FP32_MODES) if plan.acc == FP32 else
                   list(MM_S32_MODES) if plan.acc == S32 else [])
    for _ in range(16):
        kw = dict(pre=pick_one(rng, modes), relu=int(rng.integers(0, 4)))
        kw["row_max"] = int(rng.random() < 0.35)
        kw["group_max"] = int(rng.random() < 0.3)
        if want_dst and not (kw["row_max"] or kw["group_max"]):
            kw["group_max" if rng.random() < 0.6 else "row_max"] = 1
        if kw["row_max"]:
            kw["row_max_init"] = int(rng.random() < 0.5)
        if kw["row_max"] or kw["group_max"]:
            kw["max_abs"] = int(rng.random() < 0.4)
        scalar = kw["pre"] in MM_SCALAR_MODES
        vector = kw["pre"] in MM_VECTOR_MODES
        has_param = scalar or vector or kw["relu"] in (2, 3)
        has_src = kw.get("row_max_init", 0) or vector or kw["relu"] == 3
        if (want_param and not has_param) or (want_src and not has_src):
            continue
        if kw["pre"] == kw["relu"] == kw["row_max"] == kw["group_max"] == 0:
            continue
        # GroupN: G = ceil(N / GroupN) columns, a power of two; mm_post_dst: not one
        # where N allows (N > 16), else a TILE_CAPACITY short of the auxiliary outputs
        plan.aux_budget = False
        if kw["group_max"]:
            odd = [code for code in range(1, 10) if not pow2(-(-plan.N // tables.FPATR_GROUP_N[code]))]
            if want_dst and odd and rng.random() < 0.7:
                kw["group_n"] = pick_one(rng, odd)
            else:
                kw["group_n"] = pick_one(rng, [code for code in range(1, 10) if code not in odd])
                plan.aux_budget = want_dst
        else:
            plan.aux_budget = want_dst
        break
    else:
        return False
    plan.fpatr = fpatr_word(**kw)
    plan.post_notes = [f"post:pq{kw['pre']} relu{kw['relu']} rmax{kw['row_max']}"
                       f" init{kw.get('row_max_init', 0)} gmax{kw['group_max']}"
                       f" gn{kw.get('group_n', 0)} abs{kw.get('max_abs', 0)}"]
    # the post-process sources, stream order RowMaxIn, quant, PReLU
    # (role, dtype, valid rows, valid columns, values or None)
    shapes: list[tuple[str, int, int, int, Optional[list[list[int]]]]] = []
    if kw.get("row_max_init"):
        shapes.append(("rin", plan.acc, plan.M, 1, None))
    if vector:
        shapes.append(("q", U64, 1, plan.N, [[quant_word(rng, kw["pre"]) for _ in range(plan.N)]]))
    if kw["relu"] == 3:
        shapes.append(("alpha", U64, 1, plan.N, [[relu_word(rng) for _ in range(plan.N)]]))
    bad_src = pick_one(rng, [s[0] for s in shapes]) if want_src else None
    for role, dt, vr, vc, values in shapes:
        if role == bad_src:
            dt, vr, vc, values = _bad_shape(rng, plan, role, dt, vr, vc, values)
        t = mm_tile(rng, role, dt, vr, vc, "RowMajor", W)
        if t is None:
            return False
        t.values = values
        plan.tiles[role] = t
        plan.post_roles.append(role)
    if bad_src:
        plan.post_notes.append(f"post_src:{bad_src}")
    # the scalar parameters: B.IOR RegSrc0 (quant) then the LReLU one; sometimes no B.IOR
    scalars = []
    if scalar:
        scalars.append(quant_word(rng, kw["pre"]))
    if kw["relu"] == 2:
        scalars.append(relu_word(rng))
    if want_param:
        _bad_parameter(rng, plan, kw, scalars)
    plan.scalars = scalars if scalars and (want_param or rng.random() < 0.8) else None
    # the auxiliary destinations: RowMaxOut M x 1, GroupMaxOut M x G, accumulator-typed
    g = -(-plan.N // tables.FPATR_GROUP_N[kw.get("group_n", 0)]) if kw["group_max"] else 0
    for on, cols in ((kw["row_max"], 1), (kw["group_max"], g)):
        if on:
            need = max(1, (4 * plan.M * cols - 1).bit_length() - 6)   # 128 << (s-1) >= 4 M cols
            plan.aux.append(min(10, need + (int(rng.integers(1, 3)) if rng.random() < 0.2 else 0)))
    return True


def _bad_shape(rng, plan, role, dt, vr, vc, values):
    """mm_post_src: the source one row or column off, or of another dtype."""
    how = pick_one(rng, ["rows", "cols", "dtype"])
    if how == "dtype":
        dt = pick_one(rng, [d for d in (DT_CODE["S32"], DT_CODE["U32"], DT_CODE["FP32"],
                                        DT_CODE["S64"], U64) if d != dt])
    elif how == "rows":
        vr = vr + 1 if vr == 1 or rng.random() < 0.5 else vr - 1
    else:
        vc = vc + 1 if vc == 1 or rng.random() < 0.5 else vc - 1
    if values is not None:
        values = [[values[0][min(c, len(values[0]) - 1)] for c in range(vc)] for _ in range(vr)]
    return dt, vr, vc, values


def _bad_parameter(rng, plan, kw, scalars):
    """mm_post_param: one parameter Word its use rejects (a scalar one, or one
    column of a vector source)."""
    opts = [("scalar", i) for i in range(len(scalars))]
    opts += [(role, None) for role in ("q", "alpha") if role in plan.tiles]
    where, i = opts[int(rng.integers(0, len(opts)))]
    if where == "scalar":
        quant = i == 0 and kw["pre"] in MM_SCALAR_MODES
        scalars[i] = bad_quant_word(rng, kw["pre"]) if quant else bad_relu_word(rng)
    else:
        t = plan.tiles[where]
        c = int(rng.integers(0, t.vc))
        t.values[0][c] = bad_quant_word(rng, kw["pre"]) if where == "q" else bad_relu_word(rng)
    plan.post_notes.append(f"post_param:{where}")


def post_values(rng, t: MmTile, style: dict) -> list:
    """A post-process source's rows: its drawn parameter Words, or element codes."""
    if t.values is not None:
        return t.values
    return [mm_codes(rng, t.dt, t.vc, style) for _ in range(t.vr)]

