"""Seeded random TMATMUL/TGEMV cases (docs/matmul-decisions.md, All-Local operands).

`random_matmul_case(rng, cfg)` / `random_matmul_cases(seed, n, cfg)` draw from
`MATMUL_KINDS` (floating, signed and unsigned pairs over the non-MX forms, the
36 MX pairs with and without E8M0 scale tiles, K > 32 MX cases with several
scale blocks, ACC chains whose C is an earlier bundle's D, D stored back by a
CUBE TSTORE, an operand TLOAD in the stream, NaN/inf/subnormal/-0-heavy
operands, zero-mask blocks) over all 12 forms (`GenConfig.matmul_forms`
restricts them), with mutations `MATMUL_MUTATIONS`, one or more per check of
the ordered list; `MATMUL_AIMS[label]` is the fault each aims at.

A matrix case runs one TMATMUL*/TGEMV* bundle (matrix_bundle.py) on source
tiles (matrix_tiles.py; the plan that draws them: matrix_plan.py) made by
TLOADs in Case.setup: CUBE TLOADs (ND2M16 / ND2M32 for A and C, ND2N8 for B)
and ordinary TLOADs for the RowMajor E8M0 scale tiles and the Bias row. The bundle and, per kind, an earlier bundle
whose D is C (chaining), a TSTORE of D, or one operand TLOAD are the Case's
words. Shapes follow GenConfig.machine (tile_words bounds every tile,
hand_slots the hands); the GM holds the operands' element codes (realistic
values, sometimes NaN / inf / subnormal / -0 codes, sometimes raw random
codes) and random bytes elsewhere.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ... import tables
from ...isa.encode import FPATR0, bstart, datr, dim, ior, iot_dst, iot_src
from .driver import (Bundle, Case, Family, Builder, core_setup, flatten, gen_config, tload_items,
                     draw_kind, draw_many, draw_mutations, finish_case)
from .edges import edge_capacity
from .matrix_bundle import (MM_ITEM_MUTATIONS, MM_SPEC_MUTATIONS, mi_zero_mask_block, mm_bundle,
                            mm_zero_mask_junk)
from .matrix_plan import MM_PLAN_MUTATIONS, MmPlan, mm_draw
from .matrix_post import POST_MUTATIONS, post_values
from .matrix_tiles import MM_LOAD_CODE, MM_STORE_CODE, MmGM, MmTile, mm_flags
from .values import BITS, DT_CODE, PEMODE_MASK, TA, TL, elem_bytes, pick_one, rowbytes

MATMUL_FORMS = tuple(n for n, e, _ in tables.OPS if e == "CUBE")        # the 12 operations

MATMUL_KINDS = {
    # kind: weight
    "mm_float": 10,        # non-MX form, floating pair (FP32/TF32/HF32/FP16/BF16/HiF8/FP8/FP6/FP4)
    "mm_int": 6,           # non-MX form, signed or unsigned pair
    "mm_mx": 8,            # MX form, one of the 36 MX pairs (E8M0 scale tiles for FP8/FP4 sides)
    "mm_mx_blocks": 4,     # MX form with K > 32 (several scale blocks) where tile_words allows
    "mm_acc_chain": 5,     # X.ACC whose C is the D of an earlier bundle (in the stream or the setup)
    "mm_roundtrip": 3,     # D stored back by a CUBE TSTORE (M162ND / M322ND)
    "mm_in_stream": 3,     # one operand TLOAD in the stream before the matrix bundle
    "mm_specials": 3,      # floating operands dense in NaN / inf / subnormal / -0 codes
    "mm_zero_mask": 2,     # every binding PEMode 000, block otherwise illegal: strict no-op
    "mm_post": 8,          # B.FPATR post-processing: PreQuantMode, ReLU modes, RowMax / GroupMax
}


# mutation label -> weight; MATMUL_AIMS[label] is the fault each aims at
MATMUL_MUTATIONS = {
    "mm_no_fpatr": 2,           # 1 B.FPATR missing
    "mm_type_class": 3,         # 3 AType/BType of two classes (or AType in none)
    "mm_mx_type": 2,            # 3 a non-MX type in an MX form
    "mm_src_count": 3,          # 3 Local source count +-1
    "mm_extra_dst": 2,          # 3 a second destination
    "mm_ior": 2,                # 3 B.IOR RegDst / RegSrc nonzero (no scalar parameters)
    "mm_datr_attr": 3,          # 3 B.DATR Layout (non-CUBE) / PadValue / CMode / Canonicalize nonzero
    "mm_lb_zero": 2,            # 3 an explicit LBn = 0
    "mm_cube_layout": 1,        # pre: B.DATR Layout 21..26 on TMATMUL*: CUBE transport path
    "mm_gemv_cube_layout": 1,   # pre: the same on TGEMV*: not a TLSU Function
    "mm_ios_tmatmul": 1,        # a stray B.IOS on an All-Local TMATMUL*: the Shared count is wrong
    "mm_ios_gemv": 1,           # 3 B.IOS on TGEMV*
    "mm_gemv_m": 2,             # 4 TGEMV* with LB0 = M != 1
    "mm_trans": 2,              # 5 TransA / TransB with Local primaries
    "mm_quant_class": 2,        # 6 PreQuantMode of the other accumulator class
    "mm_post_param": 2,         # 3/6 an illegal quant or LReLU/PReLU parameter Word (mm_post)
    "mm_post_src": 2,           # 6 a post-process source of the wrong shape or dtype (mm_post)
    "mm_post_dst": 2,           # 10 a RowMax/GroupMax output that cannot be allocated (mm_post)
    "mm_a_layout": 2,           # 7 A RowMajor or N8
    "mm_b_layout": 2,           # 7 B not N8
    "mm_c_layout": 2,           # 7 C layout != A layout
    "mm_c_capacity": 2,         # 7 C capacity != D TSize
    "mm_src_dtype": 3,          # 7 a source of the wrong dtype
    "mm_src_shape": 3,          # 7 a source of the wrong valid shape
    "mm_src_undefined": 2,      # 7 a source not fully defined (Case.undefine)
    "mm_src_unallocated": 2,    # 7 a source TileIndex not allocated
    "mm_aux_cube": 2,           # 7 a scale / Bias tile that is a CUBE tile
    "mm_c_is_d_hand": 2,        # 8 C's TileIndex == D's hand value
    "mm_d_size": 2,             # 10 D SizeCode one step too small
    "mm_hand_full": 2,          # 10 no free slot in D's hand
    "mm_budget": 2,             # 10 TILE_CAPACITY below the Core charge with D
    "mm_zero_mask_block": 2,    # 0 every B.IOT PEMode 000: no-op
    "mm_zero_iot": 1,           # an extra PEMode-000 B.IOT: ignored
    "mm_shuffle": 2,            # header order (legal)
    "mm_catr_dr": 1,            # B.CATR DR=1 in a CUBE block
    "mm_catr_trap": 1,          # B.CATR trap: Fault_BundlePostCommit after the commit
}


MATMUL_AIMS = {
    "mm_no_fpatr": "Fault_BundleControl", "mm_type_class": TL, "mm_mx_type": TL,
    "mm_src_count": TL, "mm_extra_dst": TL, "mm_ior": TL, "mm_datr_attr": TL,
    "mm_lb_zero": TL, "mm_cube_layout": TL, "mm_gemv_cube_layout": "Fault_IllegalInstruction",
    "mm_ios_tmatmul": TL, "mm_ios_gemv": TL, "mm_gemv_m": TL, "mm_trans": TL,
    "mm_quant_class": TL, "mm_post_param": TL, "mm_post_src": TL, "mm_post_dst": TA,
    "mm_a_layout": TL, "mm_b_layout": TL,
    "mm_c_layout": TL, "mm_c_capacity": TL, "mm_src_dtype": TL, "mm_src_shape": TL,
    "mm_src_undefined": TL, "mm_src_unallocated": TL, "mm_aux_cube": TL,
    "mm_c_is_d_hand": TL, "mm_d_size": TA, "mm_hand_full": TA, "mm_budget": TA,
    "mm_zero_mask_block": "Fault_None", "mm_zero_iot": "Fault_None", "mm_shuffle": "Fault_None",
    "mm_catr_dr": "Fault_BundleControl", "mm_catr_trap": "Fault_BundlePostCommit",
}


assert set(MATMUL_AIMS) == set(MATMUL_MUTATIONS)


# which forms a mutation can apply to (absent: any); mm_c_is_d_hand / mm_c_layout /
# mm_c_capacity also need a loaded C, so they do not apply to mm_acc_chain (forced there,
# they are left out of Case.mutations; unforced, mm_mutation_ok never draws them)
_MM_FORM_NEEDS = {
    "mm_gemv_m": lambda f: f["gemv"], "mm_ios_gemv": lambda f: f["gemv"],
    "mm_gemv_cube_layout": lambda f: f["gemv"],
    "mm_ios_tmatmul": lambda f: not f["gemv"], "mm_cube_layout": lambda f: not f["gemv"],
    "mm_c_is_d_hand": lambda f: f["acc"], "mm_c_layout": lambda f: f["acc"],
    "mm_c_capacity": lambda f: f["acc"], "mm_mx_type": lambda f: f["mx"],
    "mm_type_class": lambda f: not f["mx"], "mm_d_size": lambda f: not f["acc"],
    "mm_aux_cube": lambda f: f["bias"] or f["mx"],
}


# mutations that change the source tiles or their placement (not with a chained first bundle)
_MM_PLAN_MUTATIONS = ("mm_a_layout", "mm_b_layout", "mm_c_layout", "mm_c_capacity", "mm_src_dtype",
                      "mm_src_shape", "mm_src_undefined", "mm_src_unallocated", "mm_aux_cube",
                      "mm_c_is_d_hand", "mm_d_size", "mm_hand_full")


# forced on mm_acc_chain, these edit a tile (or type) its first bundle reads too, so that
# bundle faults: it then stays in the stream (build_state needs a setup that completes)
_MM_FIRST_FAULTS = ("mm_a_layout", "mm_b_layout", "mm_src_dtype", "mm_src_shape", "mm_src_unallocated",
                    "mm_aux_cube", "mm_type_class", "mm_mx_type")


# not combined in one case (they edit the same field, or the second undoes the first)
_MM_CONFLICTS = {frozenset(p) for p in (
    ("mm_no_fpatr", "mm_trans"), ("mm_no_fpatr", "mm_quant_class"),
    ("mm_no_fpatr", "mm_post_param"), ("mm_no_fpatr", "mm_post_src"), ("mm_no_fpatr", "mm_post_dst"),
    ("mm_quant_class", "mm_post_param"), ("mm_quant_class", "mm_post_src"),
    ("mm_quant_class", "mm_post_dst"), ("mm_post_dst", "mm_budget"), ("mm_post_dst", "mm_hand_full"),
    ("mm_post_dst", "mm_d_size"), ("mm_datr_attr", "mm_cube_layout"),
    ("mm_datr_attr", "mm_gemv_cube_layout"), ("mm_catr_dr", "mm_catr_trap"),
    ("mm_hand_full", "mm_budget"), ("mm_hand_full", "mm_c_is_d_hand"), ("mm_budget", "mm_c_is_d_hand"),
    ("mm_d_size", "mm_hand_full"), ("mm_d_size", "mm_budget"), ("mm_type_class", "mm_mx_type"),
    ("mm_src_undefined", "mm_src_unallocated"))}


def mm_form_ok(form: str, kind: str, muts) -> bool:
    f = mm_flags(form)
    if kind in ("mm_mx", "mm_mx_blocks") and not f["mx"]:
        return False
    if kind in ("mm_float", "mm_int") and f["mx"]:
        return False
    if kind == "mm_acc_chain" and not f["acc"]:
        return False
    return all(_MM_FORM_NEEDS.get(m, lambda f: True)(f) for m in muts)


def mm_mutation_ok(m: str, kind: str, muts) -> bool:
    """Can mutation m join `muts` in a case of this kind (independently of forms)?"""
    if m in muts or any(frozenset((m, x)) in _MM_CONFLICTS for x in muts):
        return False
    if kind == "mm_zero_mask":
        return False
    if m in POST_MUTATIONS and kind != "mm_post":
        return False                     # they edit a post-processing only mm_post draws
    if kind == "mm_post" and m in ("mm_d_size", "mm_c_capacity", "mm_ior"):
        return False                     # a converted D's CELLs, C's free capacity, B.IOR in use
    if kind == "mm_acc_chain" and (m in _MM_PLAN_MUTATIONS or m in ("mm_type_class", "mm_mx_type")):
        return False                     # the first bundle (maybe in the setup) must succeed
    if kind == "mm_roundtrip" and m == "mm_zero_mask_block":
        return False                     # the TSTORE would name a tile never made
    if kind == "mm_mx_blocks" and m == "mm_type_class":
        return False
    return True


MATRIX = Family("matrix", MATMUL_KINDS, MATMUL_MUTATIONS, "mm_zero_mask", mm_mutation_ok)
# every mutation label is applied by the plan, the bundle spec or an item
assert set(MM_PLAN_MUTATIONS) | set(MM_SPEC_MUTATIONS) | set(MM_ITEM_MUTATIONS) == set(MATMUL_MUTATIONS)


class MatmulImpossible(ValueError):
    """random_matmul_case was forced to a kind and mutations that no allowed form
    takes (matmul_possible says False): a legitimate refusal, not a generator bug."""


def matmul_possible(kind: str, mutations=(), forms=()) -> bool:
    """Does some form of `forms` (GenConfig.matmul_forms; empty: all 12) take this
    kind with these forced mutations? random_matmul_case raises MatmulImpossible
    exactly when it does not."""
    forms = tuple(forms) or MATMUL_FORMS
    unknown = ({kind} - set(MATMUL_KINDS)) | (set(mutations) - set(MATMUL_MUTATIONS)) \
        | (set(forms) - set(MATMUL_FORMS))
    if unknown:
        raise ValueError(f"unknown matrix kind, mutations or forms {sorted(unknown)}")
    return any(mm_form_ok(f, kind, list(mutations)) for f in forms)

# ---- the matrix bundle's spec, placement, GM, loads


def _mm_spec(plan: MmPlan, form: str, srcs: list, d_hand: int) -> dict:
    """What a matrix bundle says; bundle mutations edit it before _mm_items encodes it."""
    return dict(form=form, atype=plan.atype, btype=plan.btype, lb=[plan.M, plan.N, plan.K],
                srcs=list(srcs), extra_srcs=[], d_hand=d_hand, d_size=plan.d_size,
                extra_dsts=[], pemode=plan.pemode, fpatr=FPATR0, datr=None, ior=None, ios=[],
                catr=None, lb_forced=set())


def _mm_post_spec(b: Builder, plan: MmPlan, spec: dict) -> None:
    """The main bundle's post-processing: B.FPATR, the auxiliary destinations,
    the B.IOR parameter GPRs (quant first)."""
    spec["fpatr"] = plan.fpatr
    spec["extra_dsts"] = list(zip(plan.aux_hands, plan.aux))
    if plan.scalars is not None:
        regs = [b.reg(w) for w in plan.scalars]
        spec["ior"] = tuple(regs + [0] * (4 - len(regs)))
    b.notes.extend(plan.post_notes)


def _mm_pins(b: Builder, plan: MmPlan, rest: list, fills: list, d_hand: int) -> Optional[tuple]:
    """(tiles pinned to a hand [(tile, hand)], D's hand, hands closed to the
    others) for mm_c_is_d_hand (C at TileIndex 0 and D's hand 0 or 1) and
    mm_hand_full (D's hand full); None: try again. Pinned tiles leave `rest`."""
    rng, HS = b.rng, b.m.hand_slots
    pinned = []
    closed = set()
    if plan.c_is_d_hand:
        c = plan.tiles["c"]
        slot = int(rng.integers(0, 2))
        d_hand = slot
        rest.remove(c)
        if slot == 1:
            x = rest.pop(0) if rest else None
            if x is None:
                return None
            pinned.append((x, 0))
        pinned.append((c, 0))
    if plan.hand_full:
        srcs = list(rest)
        k = int(rng.integers(0, min(HS, len(srcs)) + 1))
        into = srcs[:k] + fills[: HS - k]
        if len(into) != HS:
            return None
        for t in into:
            if t in rest:
                rest.remove(t)
            pinned.append((t, d_hand))
        closed.add(d_hand)
    return pinned, d_hand, closed


def _mm_hands(b: Builder, plan: MmPlan, loads: list) -> Optional[tuple]:
    """One try at the hands: (the loads that get one, in load order, D's hand,
    the chain's first D's hand or None), or None."""
    rng, HS = b.rng, b.m.hand_slots
    for t in loads:
        t.index = -1
    fills = [t for t in loads if t.role == "fill"]
    rest = [t for t in loads if t.role != "fill"]
    rng.shuffle(rest)
    d_hand = int(rng.integers(0, 4))
    d1_hand = int(rng.integers(0, 4)) if plan.chain else None
    pins = _mm_pins(b, plan, rest, fills, d_hand)
    if pins is None:
        return None
    pinned, d_hand, closed = pins
    reserve = [0] * 4
    if not plan.hand_full:
        reserve[d_hand] += 1
    if d1_hand is not None:
        reserve[d1_hand] += 1
    plan.aux_hands = []
    for _ in plan.aux:                       # the auxiliary outputs' hands keep a slot each
        opts = [h for h in range(4) if h not in closed and reserve[h] < HS]
        if not opts:
            return None
        plan.aux_hands.append(pick_one(rng, opts))
        reserve[plan.aux_hands[-1]] += 1
    counts = [0] * 4
    order = []
    for t, h in pinned:
        t.hand = h
        counts[h] += 1
        order.append(t)
    for t in rest:
        opts = [h for h in range(4) if h not in closed and counts[h] + reserve[h] < HS
                and not (t.role == "c" and h == 0 and counts[0] == d_hand)]
        if not opts:
            return None
        t.hand = pick_one(rng, opts)
        counts[t.hand] += 1
        order.append(t)
    if any(counts[h] + reserve[h] > HS for h in range(4)):
        return None
    return order, d_hand, d1_hand


def _mm_indices(b: Builder, plan: MmPlan, order: list, d_hand: int, d1_hand) -> Optional[tuple]:
    """The loads' TileIndices (load order within each hand) and (D's, the
    chain's first D's); None when they break the placement rules."""
    HS = b.m.hand_slots
    seen = [0] * 4
    for t in order:
        t.index = t.hand * tables.HAND_SLOTS + seen[t.hand]
        seen[t.hand] += 1
    d1_index = None
    if d1_hand is not None:
        d1_index = d1_hand * tables.HAND_SLOTS + seen[d1_hand]
        seen[d1_hand] += 1
        if d1_index == d_hand:                       # C (= D1) would be D's hand value
            return None
    if plan.hand_full:
        if seen[d_hand] != HS:
            return None
    elif seen[d_hand] >= HS:
        return None
    d_index = d_hand * tables.HAND_SLOTS + seen[d_hand]
    if "c" in plan.tiles and plan.tiles["c"].index >= 0:
        if (plan.tiles["c"].index == d_hand) != plan.c_is_d_hand:
            return None
    return d_index, d1_index


def _mm_place(b: Builder, plan: MmPlan, loads: list):
    """Hands (and so TileIndices) of the loads in load order, the destination
    hand(s): (order, d_hand, d_index, d1_hand, d1_index) or None.

    Every hand holds at most hand_slots tiles; the destination hands keep a
    free slot (mm_hand_full: D's hand is full); a loaded C never sits at the
    TileIndex equal to D's hand unless mm_c_is_d_hand asks for exactly that.
    """
    for _ in range(64):
        hands = _mm_hands(b, plan, loads)
        if hands is None:
            continue
        order, d_hand, d1_hand = hands
        indices = _mm_indices(b, plan, order, d_hand, d1_hand)
        if indices is not None:
            return order, d_hand, indices[0], d1_hand, indices[1]
    return None


def _mm_load(b: Builder, gm: MmGM, t: MmTile, style: dict) -> Bundle:
    """The TLOAD bundle that makes tile t (its data written to GM)."""
    rng = b.rng
    if t.role == "fill":                      # 1 x 1 from GM address 0, no B.IOR
        return Bundle(bstart("TLOAD", t.dt), [("iot", iot_dst(t.hand, t.size, t.pemode, 1))], True,
                      dict(op="TLOAD", role=t.role, index=t.index, cube=False))
    bits = BITS[t.dt]
    eb = elem_bytes(bits)
    dense = rowbytes(t.vc, bits)
    base, stride = gm.region(t.vr, dense, eb)
    values = post_values(rng, t, style)
    gm.write(base, stride, t.dt, values)

    cube_datr = datr(MM_LOAD_CODE[t.layout], 31, t.pad) if t.cube else None
    items = tload_items(b, cube_datr, t.vr, t.vc, t.col, iot_dst(t.hand, t.size, t.pemode, 1),
                         base, stride, reg_room=12, reg_p=0.2, zero_base_p=0.7)
    if rng.random() < 0.3:
        rng.shuffle(items)
    return Bundle(bstart("TLOAD", t.dt), items, True,
                  dict(op="TLOAD", role=t.role, index=t.index, cube=t.cube))


def _mm_undefine(rng, t: MmTile) -> tuple:
    """(TileIndex, payload Word) of one valid element of t."""
    from ...reference import layouts as ref_layouts
    r, c = int(rng.integers(0, t.vr)), int(rng.integers(0, t.vc))
    if t.cube:
        name = "CUBE_" + t.layout
        word = ref_layouts.payload_index(name, tables.DTYPE_BY_CODE[t.dt], t.vr, t.vc, r, c)
    else:
        word = r * t.col + c
    return (t.index, word), (r, c)


def _mm_loads(b: Builder, plan: MmPlan) -> Optional[tuple]:
    """(the placed loads in load order, d_hand, d_index, d1_hand, d1_index) or
    None: the plan's tiles, a chain's first Bias, mm_hand_full's 1x1 fillers
    (those not needed dropped); mm_in_stream marks the last load for the
    stream (not a tile undefine pokes: the setup must make it)."""
    rng, HS = b.rng, b.m.hand_slots
    loads = list(plan.tiles.values())
    if plan.first_bias is not None:
        loads.append(plan.first_bias)
    if plan.hand_full:
        loads += [MmTile("fill", DT_CODE["U8"], 1, 1, "RowMajor", size=1, col=1,
                          pemode=int(rng.integers(1, 8))) for _ in range(HS)]
    placed = _mm_place(b, plan, loads)
    if placed is None:
        return None
    order, d_hand, d_index, d1_hand, d1_index = placed
    loads = [t for t in order if t.index >= 0]
    if plan.kind == "mm_in_stream" and loads[-1].role not in (plan.undefine_role, "fill"):
        loads[-1].in_stream = True
    return loads, d_hand, d_index, d1_hand, d1_index


def _mm_operands(b: Builder, plan: MmPlan, loads: list, d_index: int, d1_index) -> tuple:
    """({role: the TileIndex the bundle names}, undefine): a chain's C is its
    first D; mm_src_unallocated and mm_src_undefined applied."""
    rng = b.rng
    index = {r: t.index for r, t in plan.tiles.items()}
    if plan.chain:
        index["c"] = d1_index
    allocated = {t.index for t in loads} | {d_index} | ({d1_index} if d1_index is not None else set())
    if plan.unallocated_role is not None:
        free = [x for x in range(64) if x not in allocated]
        index[plan.unallocated_role] = pick_one(rng, free)
        b.notes.append(f"unallocated:{plan.unallocated_role}=T{index[plan.unallocated_role]}")
    undefine: tuple[tuple[int, int], ...] = ()
    if plan.undefine_role is not None:
        u, (r, c) = _mm_undefine(rng, plan.tiles[plan.undefine_role])
        undefine = (u,)
        b.notes.append(f"undefined:{plan.undefine_role} ({r},{c})")
    return index, undefine


def _mm_first(b: Builder, plan: MmPlan, index: dict, d1_hand, d1_index) -> Optional[Bundle]:
    """mm_acc_chain's first bundle (minimal), whose D the main bundle reads as C."""
    if not plan.chain:
        return None
    fsrcs = [index[r] for r in ("a", "sa", "b", "sb") if r in index]
    if plan.first_bias is not None:
        fsrcs.append(plan.first_bias.index)
    first = mm_bundle(b, _mm_spec(plan, plan.first_form, fsrcs, d1_hand), minimal=True)
    b.notes.append(f"chain:{plan.first_form} -> T{d1_index}")
    return first


def _mm_roundtrip(b: Builder, plan: MmPlan, gm: MmGM, d_index: int) -> list:
    """mm_roundtrip: a CUBE TSTORE of D (with D's mask or a subset of it)."""
    if plan.kind != "mm_roundtrip":
        return []
    rng = b.rng
    base, stride = gm.region(plan.M, plan.N * 4, 4)
    pm2 = plan.pemode
    subs = [p for p in range(1, 8) if PEMODE_MASK[p] & PEMODE_MASK[plan.pemode] == PEMODE_MASK[p]]
    if rng.random() < 0.3:
        pm2 = pick_one(rng, subs)
    items = [("datr", datr(MM_STORE_CODE[plan.a_lay], 31, int(rng.integers(0, 4)))),
             ("dim0", dim(0, plan.N)), ("dim1", dim(1, plan.M)), ("iot", iot_src(d_index, pm2, 1)),
             ("ior", ior(b.reg(base) if base else 0, b.reg(stride)))]
    store = Bundle(bstart("TSTORE", plan.acc), items, True, dict(op="TSTORE"))
    b.notes.append(f"roundtrip:TSTORE T{d_index} -> {base:#x}/{stride}")
    return [store]


def _mm_words(b: Builder, plan: MmPlan, spec: dict, item_muts: list, loads: list, bundles: list,
              first: Optional[Bundle], tail: list) -> tuple:
    """(setup, words, applied item mutations): the main bundle (minimal when
    the stream would not fit); then what still does not fit moves to the
    setup (a chain's first bundle, unless it faults too; the in-stream load)."""
    in_stream = [bd for t, bd in zip(loads, bundles) if t.in_stream]

    def stream(main):
        return flatten(in_stream + ([first] if plan.chain == "stream" else []) + [main] + tail)

    max_words = b.g.max_words
    main = mm_bundle(b, spec)
    if len(stream(main)) > max_words:
        main = mm_bundle(b, spec, minimal=True)
    applied = [m for m in item_muts if MM_ITEM_MUTATIONS[m](b, main)]
    if len(stream(main)) > max_words and plan.chain == "stream" and not plan.first_faults:
        plan.chain = "setup"            # (a first bundle that faults stays: the cut drops main's tail)
    if len(stream(main)) > max_words and in_stream:
        in_stream = []
        for t in loads:
            t.in_stream = False
    words = b.cut(stream(main))
    setup = flatten([bd for t, bd in zip(loads, bundles) if not t.in_stream]
                     + ([first] if plan.chain == "setup" else []))
    if in_stream:
        b.notes.append("in_stream:" + ",".join(bd.info["role"] for bd in in_stream))
    if plan.chain:
        b.notes.append(f"chain_in:{plan.chain}")
    return setup, words, applied


def _mm_capacity(b: Builder, plan: MmPlan, loads: list) -> Optional[int]:
    """mm_budget: a TILE_CAPACITY the tiles in use fit and D does not; with an
    edge weight, sometimes one at the edge (edges.edge_capacity)."""
    if not (plan.budget or plan.aux_budget) and b.g.edge_weight <= 0:
        return None
    # core: the setup's bindings take mask 1111 (core_setup), a chained first bundle's D too
    chain_d = (4 * (128 << (plan.d_size - 1)) if b.g.core and plan.chain == "setup"
               else plan.d_charge) if plan.chain else 0
    charge = sum(4 * (128 << (t.size - 1)) if b.g.core else t.charge for t in loads) + chain_d
    if plan.aux_budget:                                 # D fits, the auxiliary outputs do not
        cap = charge + plan.d_charge + plan.aux_charge - 1
        b.notes.append(f"tile_capacity:{cap} (in use {charge}, D {plan.d_charge}, "
                       f"aux {plan.aux_charge})")
        return cap
    cap = edge_capacity(b, "matmul", charge, plan.d_charge + plan.aux_charge, plan.budget)
    if cap is not None:
        b.notes.append(f"tile_capacity:{cap} (in use {charge}, D {plan.d_charge})")
    return cap


def _mm_program(b: Builder, plan: MmPlan, spec_muts: list, item_muts: list):
    """(setup words, stream words, GM, tile_capacity, undefine, applied bundle mutations)."""
    placed = _mm_loads(b, plan)
    if placed is None:
        return None
    loads, d_hand, d_index, d1_hand, d1_index = placed
    gm = MmGM(b.rng, b.gm_bytes)
    bundles = [_mm_load(b, gm, t, plan.style) for t in loads]
    index, undefine = _mm_operands(b, plan, loads, d_index, d1_index)
    srcs = [index[r] for r in ("c", "a", "sa", "b", "sb", "bias")
            if r in index and (r != "c" or plan.f["acc"])] + [index[r] for r in plan.post_roles]
    first = _mm_first(b, plan, index, d1_hand, d1_index)
    spec = _mm_spec(plan, plan.form, srcs, d_hand)
    if plan.kind == "mm_post":
        _mm_post_spec(b, plan, spec)
    applied = [m for m in spec_muts if MM_SPEC_MUTATIONS[m](b, spec, plan)]
    tail = _mm_roundtrip(b, plan, gm, d_index)
    setup, words, item_applied = _mm_words(b, plan, spec, item_muts, loads, bundles, first, tail)
    return setup, words, bytes(gm.gm), _mm_capacity(b, plan, loads), undefine, applied + item_applied


# ---- the case


def _mm_labels(rng, g, forms: tuple, kind: Optional[str], mutations: Optional[list]) -> tuple:
    """(kind, mutations) that some form of `forms` takes: drawn, or forced
    ones checked (MatmulImpossible when no form takes them)."""
    kinds = {k: w for k, w in MATMUL_KINDS.items() if any(mm_form_ok(f, k, ()) for f in forms)}
    kind = draw_kind(rng, MATRIX, kind, kinds)
    if kind not in kinds:
        raise MatmulImpossible(f"matrix kind {kind!r} needs a form outside {forms}")

    def ok(m, kind, drawn):
        return mm_mutation_ok(m, kind, drawn) and any(mm_form_ok(f, kind, drawn + [m]) for f in forms)

    forced = mutations is not None
    mutations = draw_mutations(rng, g, MATRIX, kind, mutations, ok)
    if forced and not any(mm_form_ok(f, kind, mutations) for f in forms):
        raise MatmulImpossible(f"no form in {forms} takes kind {kind} with {mutations}")
    return kind, mutations


def _mm_plan_mutate(b: Builder, plan: MmPlan, mutations: list) -> list:
    """Apply the plan mutations; the labels that took (the type draw's included)."""
    applied = []
    for m in mutations:
        fn = MM_PLAN_MUTATIONS.get(m, False)
        if fn is None:
            applied.append(m)                   # satisfied by the type draw
        elif fn and fn(b, plan):
            applied.append(m)
    plan.first_faults = plan.kind == "mm_acc_chain" and any(m in _MM_FIRST_FAULTS for m in applied)
    return applied


def _mm_note(plan: MmPlan) -> str:
    return (f"mm:{plan.form} {tables.DTYPE_BY_CODE[plan.atype].name}x"
            f"{tables.DTYPE_BY_CODE[plan.btype].name}->{tables.DTYPE_BY_CODE[plan.acc].name} "
            f"M{plan.M} N{plan.N} K{plan.K} A:{plan.a_lay} D:size{plan.d_size}"
            + (" mx" if plan.f["mx"] else ""))


def random_matmul_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                       mutations: Optional[list] = None) -> Case:
    """One random TMATMUL*/TGEMV* Case (kinds MATMUL_KINDS, mutations MATMUL_MUTATIONS).

    `kind` and `mutations` force the draw (labels that could not be applied
    are left out of Case.mutations; a forced combination no allowed form
    takes raises MatmulImpossible, a ValueError: matmul_possible tells which).
    The forms drawn are GenConfig.matmul_forms (all 12 when empty). The
    operand tiles are made by TLOADs in Case.setup (one in the stream for
    mm_in_stream; an mm_acc_chain first bundle in the stream when it fits,
    else in the setup, unless a forced mutation makes it fault); build_state
    prepares them.
    """
    g = gen_config(cfg)
    forms = tuple(g.matmul_forms) or MATMUL_FORMS
    unknown_forms = set(forms) - set(MATMUL_FORMS)
    if unknown_forms:
        raise ValueError(f"unknown matrix forms {sorted(unknown_forms)}")
    b = Builder(rng, g)
    kind, mutations = _mm_labels(rng, g, forms, kind, mutations)
    cands = [f for f in forms if mm_form_ok(f, kind, mutations)]
    for _ in range(16):
        plan = mm_draw(b, kind, pick_one(rng, cands), mutations)
        if plan is None:
            continue
        applied = _mm_plan_mutate(b, plan, mutations)
        if kind == "mm_zero_mask":
            out = _mm_zero_mask_program(b, plan)
        else:
            out = _mm_program(b, plan, [m for m in mutations if m in MM_SPEC_MUTATIONS],
                              [m for m in mutations if m in MM_ITEM_MUTATIONS])
        if out is not None:
            break
        b = Builder(rng, g)                        # a placement failed: draw again
    else:
        raise RuntimeError(f"no matrix case for kind {kind} mutations {mutations} on {g.machine}")
    setup, words, gm, cap, undefine, bundle_applied = out
    applied = [m for m in mutations if m in applied or m in bundle_applied]
    b.notes.insert(0, _mm_note(plan))
    return finish_case(b, kind, applied, words, gm, tile_capacity=cap,
                       setup=core_setup(setup, g.core), undefine=tuple(undefine))


def _mm_zero_mask_program(b: Builder, plan: MmPlan):
    """mm_zero_mask: the sources loaded in the setup, then a matrix block whose every
    binding is PEMode 000 on an otherwise illegal header."""
    plan.kind = "mm_float"                          # no in-stream load, no tail
    out = _mm_program(b, plan, [], [])
    if out is None:
        return None
    setup, _, gm, cap, undefine, _ = out
    rng = b.rng
    spec = _mm_spec(plan, plan.form, [int(rng.integers(0, 64)) for _ in range(2)],
                    int(rng.integers(0, 4)))
    mm_zero_mask_junk(b, spec)
    bd = mm_bundle(b, spec, minimal=rng.random() < 0.5)
    mi_zero_mask_block(b, bd)
    plan.kind = "mm_zero_mask"
    return setup, bd.words()[: b.g.max_words], gm, None, (), []


def random_matmul_cases(seed: int, n: int, cfg=None) -> list:
    """n matrix Cases from one seed (case i is random_matmul_case(case_rng(seed, i), cfg))."""
    return draw_many(random_matmul_case, seed, n, gen_config(cfg))
