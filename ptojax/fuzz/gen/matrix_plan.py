"""A matrix case's plan (gen/matrix.py): the operation, element types, shapes
and source tiles drawn for a kind (`mm_draw`), and the plan mutations that
change the sources, their placement or the destination size
(`MM_PLAN_MUTATIONS`: label -> function of the Builder and the plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...isa.encode import FPATR0
from .driver import Builder
from .matrix_post import draw_post
from .matrix_tiles import (E8M0, MM_MX_SCALED, cube_fits, cube_min_size, d_size_short, MmTile,
                           mm_acc_type, mm_dims, mm_flags, mm_name, mm_style, mm_tile, mm_types,
                           other_dtype)
from .values import BITS, CUBE_DTYPES, PEMODE_MASK, pick_one



@dataclass
class MmPlan:
    kind: str
    form: str
    atype: int
    btype: int
    acc: int
    M: int
    N: int
    K: int
    a_lay: str
    tiles: dict                   # role -> MmTile (the sources the main bundle names)
    d_size: int
    pemode: int
    style: dict
    chain: Optional[str] = None   # "stream" / "setup": the first bundle's place
    first_form: str = ""
    first_bias: Optional[MmTile] = None
    hand_full: bool = False
    budget: bool = False
    c_is_d_hand: bool = False
    undefine_role: Optional[str] = None
    unallocated_role: Optional[str] = None
    first_faults: bool = False    # a chain's first bundle faults too (_MM_FIRST_FAULTS)
    fpatr: int = FPATR0           # the main bundle's B.FPATR (mm_post: matrix_post.draw_post)
    post_roles: list = field(default_factory=list)    # post-process sources, stream order
    scalars: Optional[list] = None                    # B.IOR parameter Words (None: no B.IOR)
    aux: list = field(default_factory=list)           # RowMax / GroupMax output SizeCodes
    aux_hands: list = field(default_factory=list)
    aux_budget: bool = False      # mm_post_dst: TILE_CAPACITY one byte short of the aux outputs
    post_notes: list = field(default_factory=list)

    @property
    def f(self) -> dict:
        return mm_flags(self.form)

    @property
    def d_charge(self) -> int:
        """The main bundle's Core charge without its auxiliary outputs (D's)."""
        return bin(PEMODE_MASK[self.pemode]).count("1") * (128 << (self.d_size - 1))

    @property
    def aux_charge(self) -> int:
        return bin(PEMODE_MASK[self.pemode]).count("1") * sum(128 << (s - 1) for s in self.aux)


def mm_draw(b: Builder, kind: str, form: str, muts) -> Optional[MmPlan]:
    """A legal plan for this kind and form (types drawn per the type mutations)."""
    rng, W = b.rng, b.m.tile_words
    f = mm_flags(form)
    for _ in range(24):
        atype, btype = mm_types(rng, kind, f, muts)
        a_lay = "M16" if rng.random() < (0.9 if kind == "mm_mx_blocks" else 0.6) else "M32"
        n_min = 1
        if "mm_d_size" in muts:
            n_min = 3 if a_lay == "M16" else 2                  # D of >= 2 CELLs
        dims = mm_dims(rng, W, a_lay, BITS[atype], BITS[btype], f["gemv"], n_min=n_min,
                        big_k=kind == "mm_mx_blocks")
        if dims is None:
            continue
        M, N, K = dims
        acc = mm_acc_type(f["mx"], atype)
        tiles = {"a": mm_tile(rng, "a", atype, M, K, a_lay, W),
                 "b": mm_tile(rng, "b", btype, K, N, "N8", W)}
        d_need = cube_min_size(a_lay, 32, M, N)
        d_size = min(10, d_need + (int(rng.integers(1, 3)) if rng.random() < 0.25 else 0))
        kb = -(-K // 32)
        if f["mx"] and atype in MM_MX_SCALED:
            tiles["sa"] = mm_tile(rng, "sa", E8M0, M, kb, "RowMajor", W)
        if f["mx"] and btype in MM_MX_SCALED:
            tiles["sb"] = mm_tile(rng, "sb", E8M0, kb, N, "RowMajor", W)
        if f["bias"]:
            tiles["bias"] = mm_tile(rng, "bias", acc, 1, N, "RowMajor", W)
        if f["acc"] and kind != "mm_acc_chain":
            tiles["c"] = mm_tile(rng, "c", acc, M, N, a_lay, W, size=d_size)
        if any(t is None for t in tiles.values()):
            continue
        plan = MmPlan(kind, form, atype, btype, acc, M, N, K, a_lay, tiles, d_size,
                       int(rng.integers(1, 8)), mm_style(rng, kind))
        if kind == "mm_post" and not draw_post(b, plan, muts):
            continue
        if kind == "mm_acc_chain":
            plan.first_form = mm_name(f["mx"], f["gemv"], ".BIAS" if rng.random() < 0.35 else "")
            if plan.first_form.endswith(".BIAS"):
                plan.first_bias = mm_tile(rng, "bias1", acc, 1, N, "RowMajor", W)
                if plan.first_bias is None:
                    plan.first_form = mm_name(f["mx"], f["gemv"])
            plan.chain = "stream"
        return plan
    return None


# ---- plan mutations (the source tiles, their placement, the destination size)


def _mm_roles(plan, pred=lambda t: True) -> list:
    return [r for r in ("c", "a", "sa", "b", "sb", "bias") if r in plan.tiles and pred(plan.tiles[r])]


def _mp_layout(role: str, layouts: tuple):
    """mm_a_layout / mm_b_layout: the operand reloaded in a layout the form does
    not take (one of `layouts` that holds its shape)."""
    def apply(b, plan):
        rng, W, t = b.rng, b.m.tile_words, plan.tiles[role]
        opts = [lay for lay in layouts if mm_tile(rng, role, t.dt, t.vr, t.vc, lay, W)]
        if not opts:
            return False
        plan.tiles[role] = mm_tile(rng, role, t.dt, t.vr, t.vc, pick_one(rng, opts), W)
        b.notes.append(f"{role}_layout:{plan.tiles[role].layout}")
        return True
    return apply


def _mp_c_layout(b, plan):
    if "c" not in plan.tiles:           # mm_acc_chain: C is the first bundle's D, no loaded tile
        return False
    rng, W, t = b.rng, b.m.tile_words, plan.tiles["c"]
    opts = []
    for lay in ("M16", "M32", "N8"):
        if lay != plan.a_lay and cube_fits(lay, 32, t.vr, t.vc, W):
            opts.append(lay)
    if not opts:
        return False
    lay = pick_one(rng, opts)
    size = max(plan.d_size, cube_min_size(lay, 32, t.vr, t.vc))
    plan.tiles["c"] = mm_tile(rng, "c", t.dt, t.vr, t.vc, lay, W, size=size)
    b.notes.append(f"c_layout:{lay}")
    return True


def _mp_c_capacity(b, plan):
    if "c" not in plan.tiles:           # mm_acc_chain: C is the first bundle's D, no loaded tile
        return False
    rng, t = b.rng, plan.tiles["c"]
    need = cube_min_size(t.layout, 32, t.vr, t.vc)
    opts = []
    if plan.d_size < 10:
        opts += ["c_up", "d_up"]
    if plan.d_size > need:
        opts.append("c_down")
    if not opts:
        return False
    how = pick_one(rng, opts)
    if how == "c_up":
        t.size = plan.d_size + 1
    elif how == "c_down":
        t.size = plan.d_size - 1
    else:
        plan.d_size += 1
    b.notes.append(f"c_capacity:{how} C size {t.size} D size {plan.d_size}")
    return True


def _mp_src_dtype(b, plan):
    rng = b.rng
    role = pick_one(rng, _mm_roles(plan))
    t = plan.tiles[role]
    bits = BITS[t.dt]
    if role in ("sa", "sb"):
        opts = [c for c in CUBE_DTYPES if BITS[c] == 8 and c != E8M0]
    else:
        opts = [c for c in CUBE_DTYPES if BITS[c] == bits and c != t.dt]
        want = {"a": plan.atype, "b": plan.btype}.get(role, plan.acc)
        opts = [c for c in opts if c != want]
    return other_dtype(b, t, opts, "src_dtype")


def _mp_src_shape(b, plan):
    rng, W = b.rng, b.m.tile_words
    roles = _mm_roles(plan)
    rng.shuffle(roles)
    for role in roles:
        t = plan.tiles[role]
        cands = [(t.vr + dr, t.vc + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))]
        if role == "bias":
            cands.append((2, t.vc))
        cands = [(vr, vc) for vr, vc in cands if vr >= 1 and vc >= 1]
        rng.shuffle(cands)
        for vr, vc in cands:
            size = t.size if t.cube else None
            if t.cube:
                need = cube_min_size(t.layout, BITS[t.dt], vr, vc) if cube_fits(
                    t.layout, BITS[t.dt], vr, vc, W) else 99
                size = max(t.size, need)
            n = mm_tile(rng, role, t.dt, vr, vc, t.layout, W, size=size)
            if n is not None:
                n.pemode, n.pad = t.pemode, t.pad
                plan.tiles[role] = n
                b.notes.append(f"src_shape:{role} {t.vr}x{t.vc}->{vr}x{vc}")
                return True
    return False


def _mp_src_undefined(b, plan):
    plan.undefine_role = pick_one(b.rng, _mm_roles(plan))
    return True


def _mp_src_unallocated(b, plan):
    plan.unallocated_role = pick_one(b.rng, _mm_roles(plan))
    return True


def _mp_aux_cube(b, plan):
    rng, W = b.rng, b.m.tile_words
    roles = _mm_roles(plan, lambda t: t.role in ("sa", "sb", "bias"))
    if not roles:
        return False
    role = pick_one(rng, roles)
    t = plan.tiles[role]
    opts = [lay for lay in ("M16", "M32", "N8") if cube_fits(lay, BITS[t.dt], t.vr, t.vc, W)]
    if not opts:
        return False
    plan.tiles[role] = mm_tile(rng, role, t.dt, t.vr, t.vc, pick_one(rng, opts), W)
    b.notes.append(f"aux_cube:{role} {plan.tiles[role].layout}")
    return True


def _mp_d_size(b, plan):
    """D's SizeCode one step below its CELLs' bytes, or (sometimes) N so wide that
    D's storage passes tile_words while B, sB and Bias still fit."""
    rng, W = b.rng, b.m.tile_words
    if rng.random() < 0.4:
        n2 = (W // 32) * (2 if plan.a_lay == "M16" else 1) + int(rng.integers(1, 17))
        kb = -(-plan.K // 32)
        new = {"b": mm_tile(rng, "b", plan.btype, plan.K, n2, "N8", W)}
        if "sb" in plan.tiles:
            new["sb"] = mm_tile(rng, "sb", E8M0, kb, n2, "RowMajor", W)
        if "bias" in plan.tiles:
            new["bias"] = mm_tile(rng, "bias", plan.acc, 1, n2, "RowMajor", W)
        need = cube_min_size(plan.a_lay, 32, plan.M, n2)
        if all(t is not None for t in new.values()) and need <= 10:
            plan.tiles.update(new)
            plan.N, plan.d_size = n2, need
            b.notes.append(f"d_size:N {n2} past tile_words (size {need})")
            return True
    return d_size_short(b, plan, cube_min_size(plan.a_lay, 32, plan.M, plan.N))


def _mp_flag(name):
    def apply(b, plan):
        # c_is_d_hand pins a loaded C (mm_acc_chain has none: its C is the first bundle's D)
        if name == "c_is_d_hand" and (b.m.hand_slots < 2 or "c" not in plan.tiles):
            return False
        setattr(plan, name, True)
        return True
    return apply


MM_PLAN_MUTATIONS = {
    # satisfied by the type draw
    "mm_type_class": None, "mm_mx_type": None,
    "mm_a_layout": _mp_layout("a", ("RowMajor", "N8")),
    "mm_b_layout": _mp_layout("b", ("M16", "M32", "RowMajor")),
    "mm_c_layout": _mp_c_layout, "mm_c_capacity": _mp_c_capacity, "mm_src_dtype": _mp_src_dtype,
    "mm_src_shape": _mp_src_shape, "mm_src_undefined": _mp_src_undefined,
    "mm_src_unallocated": _mp_src_unallocated, "mm_aux_cube": _mp_aux_cube, "mm_d_size": _mp_d_size,
    "mm_c_is_d_hand": _mp_flag("c_is_d_hand"), "mm_hand_full": _mp_flag("hand_full"),
    "mm_budget": _mp_flag("budget"),
    # satisfied by the post-processing draw (matrix_post.draw_post)
    "mm_post_param": None, "mm_post_src": None, "mm_post_dst": None,
}
