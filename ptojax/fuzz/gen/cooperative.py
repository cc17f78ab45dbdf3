"""Seeded random Core cases: cooperative TMATMUL* and Shared TLSU
(docs/shared-decisions.md).

`random_coop_case(rng, cfg)` / `random_coop_cases(seed, n, cfg)` draw
cooperative TMATMUL* and Shared TLOAD/TSTORE/TSTORE.SPART Cases from
`COOP_KINDS` (right-only with each active PE's own Local A, both-Shared, Trans
bits, a Shared operand TLOAD in the stream, zero-mask blocks, sh_load /
sh_store) over the six forms `COOP_FORMS`, with mutations `COOP_MUTATIONS`,
one per check of shared-decisions.md section 5 and most of sections 3-4;
`COOP_AIMS[label]` is the fault each aims at. The default machine is
pj.preset("small") (`COOP_MACHINE`).

Every cooperative Case has core=True: it runs with pj.run_core /
pj.batch.run(core=True), and its setup with pj.reference.run_core. Shared
operands come from Shared TLOADs (shared_transport.py: a B.IOS destination, mask
1111, the same base/stride in every PE's GPRs); each active PE's Local A /
sA / C / Bias from a TLOAD whose bindings select only that PE (PEMode i+1),
so under run_core only PE i loads it, through its own GPRs (one register pair
per role, a different value in each PE's file), at the same TileIndex on
every active PE. Shapes keep within the machine's tile_words and
shared_words. sh_* kinds exercise Shared TLOAD / TSTORE / TSTORE.SPART on
their own (shared_transport.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ... import tables
from ...isa.encode import FPATR0, bstart, datr, dim, ior, iot_dst
from ...state import PRESETS
from .driver import (Bundle, Case, Family, GenConfig, Builder, flatten, gen_config, compatible,
                     draw_kind, draw_many, draw_mutations, finish_case)
from .matrix_bundle import mi_zero_mask_block, mm_bundle, mm_zero_mask_junk
from .matrix_tiles import (E8M0, MM_LOAD_CODE, MM_MX_SCALED, cube_fits, cube_min_size, d_size_short,
                           MmGM, MmTile, mm_acc_type, mm_flags, mm_style, mm_tile, mm_types,
                           other_dtype)
from .shared_transport import (ShTile, coop_codes, coop_reg, not_pow2, sh_fit, sh_program,
                          sh_setup_loads)
from .values import (BITS, CUBE_DTYPES, DT_CODE, DTYPES, PEMODE_MASK, SIZE_CODE, TA, TL, elem_bytes,
                     pick_one, pow2, rowbytes)

COOP_FORMS = ("TMATMUL", "TMATMUL.ACC", "TMATMUL.BIAS", "TMATMULMX", "TMATMULMX.ACC", "TMATMULMX.BIAS")
COOP_MACHINE = PRESETS["small"]          # tile_words 1024, hand_slots 4, shared 8 x 1024 Words
COOP_GROUP_M = (1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 97, 98, 99, 100, 127, 128)
COOP_BUDGET = 8192                  # group_M * N * K: keeps the oracle's loops short

COOP_KINDS = {
    # kind: weight
    "coop_right": 10,      # Local A[, sA] per active PE, Shared B[, sB] (right-only)
    "coop_both": 10,       # Shared A[, sA], B[, sB]
    "coop_trans": 4,       # both Shared, TransA / TransB with the operands stored transposed
    "coop_in_stream": 3,   # the last Shared operand TLOAD in the stream before the matrix block
    "coop_zero_mask": 2,   # every binding PEMode 000 on an otherwise illegal block: strict no-op
    "sh_load": 5,          # Shared TLOAD in the stream (partial masks, per-PE bases, reloads)
    "sh_store": 5,         # Shared TSTORE / TSTORE.SPART of a setup record (uninitialized quarters)
}
COOP_MATRIX_KINDS = ("coop_right", "coop_both", "coop_trans", "coop_in_stream", "coop_zero_mask")

# mutation label -> weight; COOP_AIMS[label] is the fault each aims at
COOP_MUTATIONS = {
    # shared-decisions.md 5 (cooperative TMATMUL)
    "coop_no_fpatr": 1,         # 1 B.FPATR missing
    "coop_sparse_mask": 4,      # 3 every binding PEMode 1..6 (a sparse nonzero mask)
    "coop_zero_mask_block": 2,  # 0 every binding PEMode 000: no-op
    "coop_group_m_zero": 2,     # 3 LB0 = group_M = 0 (B.DIM)
    "coop_group_m_big": 2,      # 3 group_M 129..
    "coop_n_not_pow2": 2,       # 3 N not a power of two
    "coop_k_not_pow2": 2,       # 3 K not a power of two
    "coop_ios_size": 2,         # 3 a B.IOS with SizeCode != 0
    "coop_shared_count": 2,     # 3 one B.IOS too many or too few
    "coop_gemv": 1,             # 3 a TGEMV* with B.IOS operands
    "coop_trans_a_local": 2,    # 5 TransA with a Local A
    "coop_trans_flip": 2,       # 7s a Trans bit that does not match the stored shape
    "coop_not_ready": 3,        # 7s a Shared source loaded with a partial mask (and reloaded)
    "coop_shared_dtype": 2,     # 7s a Shared source of another dtype
    "coop_shared_cols": 2,      # 7s a Shared source with other stored columns
    "coop_shared_rows": 2,      # 7s a Shared source with too few valid rows / columns
    "coop_unallocated_sid": 2,  # 7s a B.IOS naming a SharedTileID without a record
    "coop_local_a_rows": 2,     # 7 an active PE's Local A with valid rows != valid_M[i]
    "coop_idle_garbage": 3,     # idle PEs' Local files hold other tiles at the block's indices (legal)
    "coop_c_capacity": 2,       # 7 C capacity != D TSize on one active PE
    "coop_c_is_d_hand": 1,      # 8 C's TileIndex == D's hand value
    "coop_d_size": 2,           # 10 D SizeCode below an active PE's fragment
    "coop_hand_full": 2,        # 10 no free slot in D's hand on one active PE
    "coop_pool": 2,             # 10 one active PE's Local pool cannot take D
    # shared-decisions.md 3-4 (Shared TLOAD / TSTORE / TSTORE.SPART)
    "sh_ios_count": 1,          # 1 two B.IOS bindings
    "sh_ior_surplus": 1,        # 2 B.IOR RegDst / RegSrc2 nonzero
    "sh_cube_code": 1,          # pre: a B.DATR CUBE code with a B.IOS
    "sh_layout_mismatch": 2,    # 5/6 TSTORE in another layout than the record's; off-grid ZN/NZ
    "sh_ios_dir": 2,            # 4 TLOAD with a source B.IOS / TSTORE with a destination one
    "sh_iot": 1,                # 4 a B.IOT next to the B.IOS
    "sh_store_mask": 2,         # 4 TSTORE (function 1) with a mask != 1111
    "sh_lb_missing": 1,         # 4 a TLOAD without LB0 / LB1 / LB2
    "sh_cols_not_pow2": 1,      # 5 TLOAD columns not a power of two (no derived rows)
    "sh_update_mismatch": 2,    # 6 a reload with another descriptor or a mask outside the allocation
    "sh_too_big": 1,            # 7 rows * columns > shared_words
    "sh_records_full": 1,       # 7 a new SharedTileID with every record taken
    "sh_mem_page": 2,           # 8 one quarter's PE base past the end of GM
    "sh_mem_align": 2,          # 8 one quarter's PE base misaligned
}
COOP_AIMS = {m: TL for m in COOP_MUTATIONS}
COOP_AIMS.update({
    "coop_no_fpatr": "Fault_BundleControl", "coop_zero_mask_block": "Fault_None",
    "coop_idle_garbage": "Fault_None", "coop_d_size": TA, "coop_hand_full": TA, "coop_pool": TA,
    "sh_ior_surplus": "Fault_BundleControl", "sh_too_big": TA, "sh_records_full": TA,
    "sh_mem_page": "Fault_DataPage", "sh_mem_align": "Fault_DataAlignment",
})
assert set(COOP_AIMS) == set(COOP_MUTATIONS)
_SH_MUTATIONS = tuple(m for m in COOP_MUTATIONS if m.startswith("sh_"))
_COOP_CONFLICTS = {frozenset(p) for p in (
    ("coop_sparse_mask", "coop_zero_mask_block"), ("coop_group_m_zero", "coop_group_m_big"),
    ("coop_hand_full", "coop_pool"), ("coop_hand_full", "coop_d_size"), ("coop_pool", "coop_d_size"),
    ("coop_c_is_d_hand", "coop_hand_full"), ("coop_c_is_d_hand", "coop_pool"),
    ("coop_no_fpatr", "coop_trans_a_local"), ("coop_no_fpatr", "coop_trans_flip"),
    ("coop_trans_a_local", "coop_trans_flip"), ("coop_not_ready", "coop_unallocated_sid"),
    ("sh_mem_page", "sh_mem_align"), ("sh_ios_dir", "sh_store_mask"))}


COOP = Family("cooperative", COOP_KINDS, COOP_MUTATIONS, "coop_zero_mask",
              lambda m, kind, drawn: compatible(m, drawn, _COOP_CONFLICTS))


@dataclass
class _CoopPlan:
    kind: str
    form: str
    atype: int
    btype: int
    acc: int
    G: int
    N: int
    K: int
    both: bool
    trans_a: bool
    trans_b: bool
    lays: list                    # per PE: D's layout ("M16" / "M32"), None when idle
    d_size: int
    shared: dict                  # role -> ShTile, B.IOS order a, sa, b, sb
    local: dict                   # role -> {pe: MmTile}, stream order c, a, sa, bias
    style: dict
    c_is_d_hand: bool = False
    hand_full_pe: Optional[int] = None
    pool_pe: Optional[int] = None
    garbage: bool = False
    flip: Optional[str] = None    # coop_trans_flip: the Trans bit ("a" / "b") flipped in B.FPATR

    @property
    def f(self) -> dict:
        return mm_flags(self.form)

    @property
    def per(self) -> int:
        return 16 if self.G <= 64 else 32

    @property
    def vm(self) -> list:
        return [max(0, min(self.G - i * self.per, self.per)) for i in range(tables.NUM_PES)]

    @property
    def active(self) -> list:
        return [i for i, m in enumerate(self.vm) if m > 0]


def _coop_group_m(rng) -> int:
    return pick_one(rng, COOP_GROUP_M) if rng.random() < 0.7 else int(rng.integers(1, 129))


def _coop_plan(rng, kind: str, form: str, muts: list) -> _CoopPlan:
    """A plan's types, group_M, N, K (within COOP_BUDGET), Shared A or not and
    Trans bits; its layouts, D's size and operands still to draw."""
    f = mm_flags(form)
    atype, btype = mm_types(rng, "coop", f, ())
    acc = mm_acc_type(f["mx"], atype)
    if kind == "coop_right":
        both = False
    elif kind in ("coop_both", "coop_trans"):
        both = True
    else:
        both = rng.random() < 0.5 and not {"coop_trans_a_local", "coop_local_a_rows"} & set(muts)
    G = _coop_group_m(rng)
    if "coop_idle_garbage" in muts and G > 96:
        G = pick_one(rng, [1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96])
    K = 1 << int(rng.integers(0, 7))
    N = 1 << int(rng.integers(0, 7))
    if f["mx"] and rng.random() < 0.3:
        K = 64                                       # two scale blocks
    while G * N * K > COOP_BUDGET:
        if N >= K and N > 1:
            N //= 2
        elif K > 1:
            K //= 2
        else:
            break
    trans_a = both and pow2(G) and (rng.random() < (0.6 if kind == "coop_trans" else 0.1))
    trans_b = rng.random() < (0.6 if kind == "coop_trans" else 0.1)
    if kind == "coop_trans" and not (trans_a or trans_b):
        trans_b = True
    return _CoopPlan(kind, form, atype, btype, acc, G, N, K, both, trans_a, trans_b,
                     [None] * 4, 1, {}, {}, mm_style(rng, kind))


def _coop_layouts(rng, plan: _CoopPlan, W: int) -> bool:
    """Each active PE's D layout and D's SizeCode; False when a D does not fit."""
    vm, per, N = plan.vm, plan.per, plan.N
    # per-PE layouts: M16 only for valid_M[i] <= 16; both Shared without ACC: by M_per_PE
    for i in plan.active:
        if plan.both and not plan.f["acc"]:
            plan.lays[i] = "M16" if per == 16 else "M32"
        else:
            plan.lays[i] = "M16" if vm[i] <= 16 and rng.random() < 0.6 else "M32"
    if not all(cube_fits(plan.lays[i], 32, vm[i], N, W) for i in plan.active):
        return False
    need = max(cube_min_size(plan.lays[i], 32, vm[i], N) for i in plan.active)
    plan.d_size = min(10, need + (int(rng.integers(1, 3)) if rng.random() < 0.2 else 0))
    return True


def _coop_shared_tile(rng, Wsh: int, role: str, dt: int, vr: int, vc: int, cols: int) -> Optional[ShTile]:
    """A Shared operand of vr x vc (sometimes more rows), its smallest SizeCode
    (sometimes one more), or None when no descriptor holds it."""
    if rng.random() < 0.2:
        vr2 = vr + int(rng.integers(1, 9))
        if sh_fit(BITS[dt], vr2, vc, cols, Wsh):
            vr = vr2
    size = sh_fit(BITS[dt], vr, vc, cols, Wsh)
    if size is None:
        return None
    if rng.random() < 0.2 and sh_fit(BITS[dt], vr, vc, cols, Wsh, size + 1):
        size += 1
    return ShTile(role, 0, dt, vr, vc, cols, size)


def _coop_shared(rng, plan: _CoopPlan, Wsh: int) -> Optional[dict]:
    """The Shared operands in B.IOS order (A and sA when both, B, sB; stored
    transposed under a Trans bit) with distinct SharedTileIDs, or None."""
    f, G, N, K = plan.f, plan.G, plan.N, plan.K
    kb = -(-K // 32)
    shapes = []
    if plan.both:
        shapes.append(("a", plan.atype, *((K, G, G) if plan.trans_a else (G, K, K))))
        if f["mx"] and plan.atype in MM_MX_SCALED:
            shapes.append(("sa", E8M0, G, kb, kb))
    shapes.append(("b", plan.btype, *((N, K, K) if plan.trans_b else (K, N, N))))
    if f["mx"] and plan.btype in MM_MX_SCALED:
        shapes.append(("sb", E8M0, kb, N, N))
    sh = {role: _coop_shared_tile(rng, Wsh, role, *shape) for role, *shape in shapes}
    if any(t is None for t in sh.values()):
        return None
    sids = [int(x) for x in rng.choice(256, size=len(sh), replace=False)]
    for t, sid in zip(sh.values(), sids):
        assert t is not None            # none is (returned above)
        t.sid = sid
    return sh


def _coop_local(rng, plan: _CoopPlan, W: int) -> Optional[dict]:
    """Each active PE's Local tiles {role: {pe: tile}} in stream order c, a,
    sa, bias (C with D's size; A and sA when B alone is Shared), or None."""
    f, vm, N, K, acc = plan.f, plan.vm, plan.N, plan.K, plan.acc
    kb = -(-K // 32)
    loc: dict[str, dict[int, MmTile]] = {}
    for i in plan.active:
        tiles = {}
        if f["acc"]:
            tiles["c"] = mm_tile(rng, "c", acc, vm[i], N, plan.lays[i], W, size=plan.d_size)
        if not plan.both:
            tiles["a"] = mm_tile(rng, "a", plan.atype, vm[i], K, plan.lays[i], W)
            if f["mx"] and plan.atype in MM_MX_SCALED:
                tiles["sa"] = mm_tile(rng, "sa", E8M0, vm[i], kb, "RowMajor", W)
        if f["bias"]:
            tiles["bias"] = mm_tile(rng, "bias", acc, 1, N, "RowMajor", W)
        if any(t is None for t in tiles.values()):
            return None
        for role, t in tiles.items():
            assert t is not None        # none is (returned above)
            t.pemode = i + 1
            loc.setdefault(role, {})[i] = t
    return {r: loc[r] for r in ("c", "a", "sa", "bias") if r in loc}


def _coop_draw(b: Builder, kind: str, form: str, muts) -> Optional[_CoopPlan]:
    """A legal cooperative plan for this kind and form."""
    rng, W, Wsh = b.rng, b.m.tile_words, b.m.shared_words
    assert Wsh is not None          # MachineConfig sets it (tile_words when None)
    for _ in range(60):
        plan = _coop_plan(rng, kind, form, muts)
        if not _coop_layouts(rng, plan, W):
            continue
        shared = _coop_shared(rng, plan, Wsh)
        if shared is None:
            continue
        plan.shared = shared
        local = _coop_local(rng, plan, W)
        if local is None:
            continue
        plan.local = local
        return plan
    return None


# ---- plan mutations


def _cp_not_ready(b, plan):
    rng = b.rng
    t = plan.shared[pick_one(rng, list(plan.shared))]
    t.pemode = int(rng.integers(1, 7))
    subs = [p for p in range(1, 8) if PEMODE_MASK[p] & PEMODE_MASK[t.pemode] == PEMODE_MASK[p]]
    if rng.random() < 0.5:
        t.reload = pick_one(rng, subs)
    b.notes.append(f"not_ready:{t.role} S{t.sid} PEMode {t.pemode} reload {t.reload}")
    return True


def _cp_shared_dtype(b, plan):
    rng = b.rng
    t = plan.shared[pick_one(rng, list(plan.shared))]
    return other_dtype(b, t, [c for c in DTYPES if BITS[c] == BITS[t.dt] and c != t.dt], "shared_dtype")


def _cp_shared_cols(b, plan):
    rng = b.rng
    roles = list(plan.shared)
    rng.shuffle(roles)
    for role in roles:
        t = plan.shared[role]
        for cols in (t.cols * 2, t.cols * 4):
            size = sh_fit(BITS[t.dt], t.vr, t.vc, cols, b.m.shared_words)
            if size is not None:
                t.cols, t.size = cols, size
                b.notes.append(f"shared_cols:{role} {cols}")
                return True
    return False


def _cp_shared_rows(b, plan):
    rng = b.rng
    # logical rows / columns each Shared source needs (stored orientation)
    need = {"a": (plan.K, plan.G) if plan.trans_a else (plan.G, plan.K),
            "b": (plan.N, plan.K) if plan.trans_b else (plan.K, plan.N),
            "sa": (plan.G, -(-plan.K // 32)), "sb": (-(-plan.K // 32), plan.N)}
    opts = [(r, k) for r in plan.shared for k in (0, 1) if need[r][k] >= 2]
    if not opts:
        return False
    role, k = pick_one(rng, opts)
    t = plan.shared[role]
    if k == 0:
        t.vr = need[role][0] - int(rng.integers(1, need[role][0]))
    else:
        t.vc = need[role][1] - int(rng.integers(1, need[role][1]))
    b.notes.append(f"shared_rows:{role} {t.vr}x{t.vc}")
    return True


def _cp_trans_flip(b, plan):
    opts = []
    if plan.both and plan.G != plan.K:
        opts.append("a")
    if plan.N != plan.K:
        opts.append("b")
    if not opts:
        return False
    which = pick_one(b.rng, opts)
    b.notes.append(f"trans_flip:{which}")
    plan.flip = which
    return True


def _cp_local_a_rows(b, plan):
    rng, W = b.rng, b.m.tile_words
    if "a" not in plan.local:
        return False
    pes = list(plan.local["a"])
    rng.shuffle(pes)
    for i in pes:
        t = plan.local["a"][i]
        for vr in rng.permutation([t.vr + 1, t.vr - 1]):
            n = mm_tile(rng, "a", t.dt, int(vr), t.vc, t.layout, W) if vr >= 1 else None
            if n is not None:
                n.pemode = t.pemode
                plan.local["a"][i] = n
                b.notes.append(f"local_a_rows:PE{i} {t.vr}->{vr}")
                return True
    return False


def _cp_idle_garbage(b, plan):
    if len(plan.active) == 4:
        return False
    plan.garbage = True
    return True


def _cp_c_capacity(b, plan):
    rng = b.rng
    if "c" not in plan.local:
        return False
    i = pick_one(rng, list(plan.local["c"]))
    t = plan.local["c"][i]
    need = cube_min_size(t.layout, 32, t.vr, t.vc)
    opts = [s for s in (plan.d_size - 1, plan.d_size + 1) if need <= s <= 10]
    if not opts:
        return False
    t.size = pick_one(rng, opts)
    b.notes.append(f"c_capacity:PE{i} C size {t.size} D size {plan.d_size}")
    return True


def _cp_c_is_d_hand(b, plan):
    if "c" not in plan.local:
        return False
    plan.c_is_d_hand = True
    return True


def _cp_d_size(b, plan):
    if plan.f["acc"]:
        return False                          # C's capacity must equal D's TSize (check 7 first)
    return d_size_short(b, plan, max(cube_min_size(plan.lays[i], 32, plan.vm[i], plan.N)
                                      for i in plan.active))


def _cp_one_pe(name):
    def apply(b, plan):
        act = plan.active
        pe = act[-1] if b.rng.random() < 0.6 else pick_one(b.rng, act)
        setattr(plan, name, pe)
        return True
    return apply


COOP_PLAN_MUTATIONS = {
    "coop_not_ready": _cp_not_ready, "coop_shared_dtype": _cp_shared_dtype,
    "coop_shared_cols": _cp_shared_cols, "coop_shared_rows": _cp_shared_rows,
    "coop_trans_flip": _cp_trans_flip, "coop_local_a_rows": _cp_local_a_rows,
    "coop_idle_garbage": _cp_idle_garbage, "coop_c_capacity": _cp_c_capacity,
    "coop_c_is_d_hand": _cp_c_is_d_hand, "coop_d_size": _cp_d_size,
    "coop_hand_full": _cp_one_pe("hand_full_pe"), "coop_pool": _cp_one_pe("pool_pe"),
}


# ---- spec mutations (the matrix block)


def _cs_sparse(b, spec, plan):
    spec["pemode"] = int(b.rng.integers(1, 7))
    b.notes.append(f"sparse_mask:PEMode {spec['pemode']}")
    return True


def _cs_lb(n, values):
    def apply(b, spec, plan):
        spec["lb"][n] = values(b.rng, spec["lb"][n])
        spec["lb_forced"].add(n)
        b.notes.append(f"LB{n}={spec['lb'][n]}")
        return True
    return apply


def _cs_shared_count(b, spec, plan):
    rng = b.rng
    if len(spec["ios"]) > 1 and (rng.random() < 0.5 or len(spec["ios"]) >= 4):   # 4 B.IOS slots
        k = int(rng.integers(0, len(spec["ios"])))
        b.notes.append(f"shared_count:-1 (dropped #{k})")
        del spec["ios"][k]
    else:
        others = [x for x in range(256) if x not in spec["ios"]]
        extra = pick_one(rng, others)                    # (a repeated SharedTileID: BundleControl)
        spec["ios"].insert(int(rng.integers(0, len(spec["ios"]) + 1)), extra)
        b.notes.append(f"shared_count:+1 (S{extra})")
    return True


def _cs_unallocated(b, spec, plan):
    rng = b.rng
    k = int(rng.integers(0, len(spec["ios"])))
    used = {t.sid for t in plan.shared.values()}
    spec["ios"][k] = pick_one(rng, [x for x in range(256) if x not in used])
    b.notes.append(f"unallocated_sid:#{k}=S{spec['ios'][k]}")
    return True


def _cs_gemv(b, spec, plan):
    spec["form"] = "TGEMV" + spec["form"][len("TMATMUL"):]
    return True


def _cs_trans_a_local(b, spec, plan):
    if plan.both:
        return False
    spec["fpatr"] |= 1 << 7
    return True


def _cs_no_fpatr(b, spec, plan):
    spec["fpatr"] = None
    return True


def _cs_ios_size(b, spec, plan):
    spec["ios_size"] = int(b.rng.integers(1, 13))
    return True


COOP_SPEC_MUTATIONS = {
    "coop_no_fpatr": _cs_no_fpatr, "coop_sparse_mask": _cs_sparse,
    "coop_group_m_zero": _cs_lb(0, lambda rng, v: 0),
    "coop_group_m_big": _cs_lb(0, lambda rng, v: pick_one(rng, [129, 130, int(rng.integers(129, 256)),
                                                             int(rng.integers(256, 65536))])),
    "coop_n_not_pow2": _cs_lb(1, not_pow2), "coop_k_not_pow2": _cs_lb(2, not_pow2),
    "coop_ios_size": _cs_ios_size, "coop_shared_count": _cs_shared_count,
    "coop_unallocated_sid": _cs_unallocated, "coop_gemv": _cs_gemv,
    "coop_trans_a_local": _cs_trans_a_local,
}


COOP_ITEM_MUTATIONS = {"coop_zero_mask_block": mi_zero_mask_block}


assert set(COOP_PLAN_MUTATIONS) | set(COOP_SPEC_MUTATIONS) | set(COOP_ITEM_MUTATIONS) \
    | set(_SH_MUTATIONS) == set(COOP_MUTATIONS)


_COOP_NEEDS = {     # (plan) -> can the mutation apply
    "coop_trans_a_local": lambda p: not p.both, "coop_local_a_rows": lambda p: not p.both,
    "coop_c_capacity": lambda p: p.f["acc"], "coop_c_is_d_hand": lambda p: p.f["acc"],
    "coop_idle_garbage": lambda p: len(p.active) < 4,
}


# ---- the program


def _coop_garbage(rng, W) -> MmTile:
    """Some legal tile that is not what the block names (any dtype / layout / shape)."""
    for _ in range(20):
        dt = pick_one(rng, CUBE_DTYPES)
        lay = pick_one(rng, ["RowMajor", "M16", "M32", "N8"])
        t = mm_tile(rng, "junk", dt, int(rng.integers(1, 9)), int(rng.integers(1, 17)), lay, W)
        if t is not None:
            return t
    return MmTile("junk", DT_CODE["U8"], 1, 1, "RowMajor", size=1, col=1)


def _local_load(b: Builder, t: MmTile, pe: int, base: int, stride: int, regs: tuple) -> Bundle:
    """A TLOAD of tile t whose bindings select PE pe only (its GPRs `regs` hold
    base/stride there)."""
    if t.cube:
        items = [("datr", datr(MM_LOAD_CODE[t.layout], 31, t.pad)), ("dim0", dim(0, t.vc)),
                 ("dim1", dim(1, t.vr))]
    else:
        items = [("dim0", dim(0, t.vc)), ("dim1", dim(1, t.vr)), ("dim2", dim(2, t.col))]
    items += [("iot", iot_dst(t.hand, t.size, pe + 1, 1)), ("ior", ior(*regs))]
    return Bundle(bstart("TLOAD", t.dt), items, True, dict(op="TLOAD", role=t.role, pe=pe))


def _coop_hands(b: Builder, plan: _CoopPlan) -> Optional[tuple]:
    """(hand per Local role (the same TileIndex on every active PE), D's hand,
    the roles in load order, their TileIndices), or None after 32 tries."""
    rng, HS = b.rng, b.m.hand_slots
    roles = list(plan.local)
    for _ in range(32):
        hands = {r: int(rng.integers(0, 4)) for r in roles}
        d_hand = int(rng.integers(0, 4))
        order = list(roles)
        rng.shuffle(order)
        if plan.c_is_d_hand:                  # C first in hand 0: TileIndex 0 = D's hand 0
            hands["c"] = d_hand = 0
            order.remove("c")
            order.insert(0, "c")
        counts = [0] * 4
        index = {}
        for r in order:
            index[r] = hands[r] * tables.HAND_SLOTS + counts[hands[r]]
            counts[hands[r]] += 1
        if any(c > HS for c in counts) or counts[d_hand] >= HS:
            continue
        if "c" in index and (index["c"] == d_hand) != plan.c_is_d_hand:
            continue
        return hands, d_hand, order, index
    return None


def _coop_local_loads(b: Builder, plan: _CoopPlan, gm: MmGM, hands: dict, order: list) -> tuple:
    """(the Local loads, slots used [pe][hand], Local charge per PE): one
    register pair per role, PE i's base/stride in PE i's file; idle PEs may
    load garbage tiles at the same indices (coop_idle_garbage)."""
    rng, HS, W = b.rng, b.m.hand_slots, b.m.tile_words
    used = {pe: [0] * 4 for pe in range(tables.NUM_PES)}
    charge = [0] * 4
    loads = []
    for r in order:
        addr = {}
        tiles = {}
        for pe in range(tables.NUM_PES):
            t = plan.local[r].get(pe)
            if t is None and plan.garbage and rng.random() < 0.85:
                t = _coop_garbage(rng, W)
                t.pemode = pe + 1
            if t is None:
                continue
            t.hand = hands[r]
            if used[pe][t.hand] >= HS:
                continue
            used[pe][t.hand] += 1
            charge[pe] += 128 << (t.size - 1)
            bits = BITS[t.dt]
            base, stride = gm.region(t.vr, rowbytes(t.vc, bits), elem_bytes(bits))
            gm.write(base, stride, t.dt, [coop_codes(rng, t.dt, t.vc, plan.style)
                                          for _ in range(t.vr)])
            addr[pe] = (base, stride)
            tiles[pe] = t
        if not tiles:
            continue
        regs = (coop_reg(b, {pe: a[0] for pe, a in addr.items()}),
                coop_reg(b, {pe: a[1] for pe, a in addr.items()}))
        for pe, t in tiles.items():
            loads.append(_local_load(b, t, pe, *addr[pe], regs))
    return loads, used, charge


def _fill_load(dt: int, hand: int, size: int, pe: int) -> Bundle:
    """A 1 x 1 TLOAD into PE pe's `hand` (its only binding selects pe)."""
    return Bundle(bstart("TLOAD", dt), [("iot", iot_dst(hand, size, pe + 1, 1))], True,
                  dict(op="TLOAD", role="fill", pe=pe))


def _coop_fills(b: Builder, plan: _CoopPlan, d_hand: int, used: dict, charge: list) -> list:
    """Loads that fill D's hand: on coop_hand_full's PE, and sometimes on idle
    PEs holding garbage (no D there)."""
    HS = b.m.hand_slots
    idle_fill = [pe for pe in range(4) if plan.garbage and pe not in plan.active and b.rng.random() < 0.4]
    loads = []
    for pe in idle_fill + ([plan.hand_full_pe] if plan.hand_full_pe is not None else []):
        while used[pe][d_hand] < HS:
            used[pe][d_hand] += 1
            charge[pe] += 128
            loads.append(_fill_load(DT_CODE["U8"], d_hand, 1, pe))
    return loads


def _coop_pool(b: Builder, plan: _CoopPlan, d_hand: int, used: dict, charge: list) -> Optional[tuple]:
    """coop_pool: (loads that raise the PE's Local charge, a TILE_CAPACITY every
    other PE and the Shared records fit while that PE cannot take D); None
    when its hands run out."""
    rng, HS, p = b.rng, b.m.hand_slots, plan.pool_pe
    assert p is not None            # called for a coop_pool plan only
    active = plan.active
    d_tsize = 128 << (plan.d_size - 1)
    shared_total = sum(4 * (64 << t.size) for t in plan.shared.values())
    others = max([charge[q] for q in active if q != p], default=0)
    idle = max([charge[q] for q in range(4) if q not in active], default=0)
    need = max(others + 1, shared_total - d_tsize + 1, idle - d_tsize + 1) - charge[p]
    loads = []
    while need > 0:
        hs = [h for h in range(4) if h != d_hand and used[p][h] < HS]
        if not hs:
            return None
        h = pick_one(rng, hs)
        s = next((s for s in range(1, 11) if (128 << (s - 1)) >= need), 10)
        used[p][h] += 1
        charge[p] += 128 << (s - 1)
        need -= 128 << (s - 1)
        loads.append(_fill_load(DT_CODE["U32"], h, s, p))
    lower = max(others + d_tsize, shared_total, max(charge))
    cap = charge[p] + d_tsize - int(rng.integers(1, charge[p] + d_tsize - lower + 1))
    b.notes.append(f"pool:PE{p} charge {charge[p]} D {d_tsize} tile_capacity {cap}")
    return loads, cap


def _coop_spec(plan: _CoopPlan, index: dict, d_hand: int) -> dict:
    """The cooperative block's spec (matrix_bundle): group_M, N, K; the Local
    sources; the Shared ones' B.IOS; mask 1111; the Trans bits (one flipped
    for coop_trans_flip)."""
    fp = FPATR0 | int(plan.trans_a) << 7 | int(plan.trans_b) << 8
    if plan.flip:
        fp ^= 1 << (7 if plan.flip == "a" else 8)
    srcs = [index[r] for r in ("c", "a", "sa", "bias") if r in index]
    return dict(form=plan.form, atype=plan.atype, btype=plan.btype, lb=[plan.G, plan.N, plan.K],
                srcs=srcs, extra_srcs=[], d_hand=d_hand, d_size=plan.d_size, extra_dsts=[], pemode=7,
                fpatr=fp, datr=None, ior=None, ios=[t.sid for t in plan.shared.values()], catr=None,
                lb_forced=set())


def _coop_block(b: Builder, spec: dict, item_muts: list, in_stream: list) -> tuple:
    """(the matrix block, minimal when the stream would not fit, with its item
    mutations, the applied ones); coop_ios_size's SizeCode on one B.IOS."""
    rng = b.rng

    def build(minimal):
        bd = mm_bundle(b, spec, minimal=minimal)
        if spec.get("ios_size"):
            ks = [k for k, (t, _) in enumerate(bd.items) if t == "ios"]
            k = pick_one(rng, ks)
            bd.items[k] = ("ios", bd.items[k][1] | SIZE_CODE.insert(spec["ios_size"]))
        return bd

    main = build(False)
    if len(flatten(in_stream + [main])) > b.g.max_words:
        main = build(True)
    return main, [m for m in item_muts if COOP_ITEM_MUTATIONS[m](b, main)]


def _coop_program(b: Builder, plan: _CoopPlan, spec_muts: list, item_muts: list):
    """(setup, words, GM, tile_capacity, applied bundle mutations) or None."""
    rng = b.rng
    gm = MmGM(rng, b.gm_bytes)
    placed = _coop_hands(b, plan)
    if placed is None:
        return None
    hands, d_hand, order, index = placed
    # Shared operands (mask 1111 unless coop_not_ready), in a random order
    sh = list(plan.shared.values())
    rng.shuffle(sh)
    setup = [bd for t in sh for bd in sh_setup_loads(b, gm, t, plan.style)]
    local, used, charge = _coop_local_loads(b, plan, gm, hands, order)
    setup += local + _coop_fills(b, plan, d_hand, used, charge)
    cap = None
    if plan.pool_pe is not None:
        pool = _coop_pool(b, plan, d_hand, used, charge)
        if pool is None:
            return None
        setup += pool[0]
        cap = pool[1]
    if plan.hand_full_pe is not None:
        b.notes.append(f"hand_full:PE{plan.hand_full_pe} hand {d_hand}")
    spec = _coop_spec(plan, index, d_hand)
    if plan.kind == "coop_zero_mask":
        mm_zero_mask_junk(b, spec)
        item_muts = ["coop_zero_mask_block"]
    applied = [m for m in spec_muts if COOP_SPEC_MUTATIONS[m](b, spec, plan)]
    in_stream = []
    if plan.kind == "coop_in_stream" and sh and sh[-1].reload is None:
        # the last Shared operand load runs in the stream, after the Local loads
        k = max(i for i, bd in enumerate(setup) if bd.info.get("sid") == sh[-1].sid)
        in_stream = [setup.pop(k)]
    main, item_applied = _coop_block(b, spec, item_muts, in_stream)
    if len(flatten(in_stream + [main])) > b.g.max_words:
        setup += in_stream
        in_stream = []
    if in_stream:
        b.notes.append(f"in_stream:S{in_stream[0].info['sid']}")
    words = b.cut(flatten(in_stream + [main]))
    return flatten(setup), words, bytes(gm.gm), cap, applied + item_applied


# ---- the Case


def _coop_mutate(b: Builder, plan: _CoopPlan, muts: list) -> list:
    """Apply the plan mutations the plan can take; the labels that took."""
    applied = []
    for m in muts:
        if not _COOP_NEEDS.get(m, lambda p: True)(plan):
            continue
        fn = COOP_PLAN_MUTATIONS.get(m)
        if fn is not None and fn(b, plan):
            applied.append(m)
    return applied


def _coop_matrix(b: Builder, kind: str, forms: tuple, muts: list) -> Optional[tuple]:
    """(builder, plan, (setup, words, GM, tile_capacity, applied)) of a
    cooperative matrix case: a form, a plan, its mutations, its program;
    a fresh builder and draw whenever the plan or the placement fails (None
    after 24 tries)."""
    rng, g = b.rng, b.g
    for _ in range(24):
        plan = _coop_draw(b, kind, pick_one(rng, forms), muts)
        if plan is None:
            b = Builder(rng, g)
            continue
        applied = _coop_mutate(b, plan, muts)
        spec_muts = [m for m in muts if m in COOP_SPEC_MUTATIONS
                     and _COOP_NEEDS.get(m, lambda p: True)(plan)]
        item_muts = [m for m in muts if m in COOP_ITEM_MUTATIONS]
        if kind == "coop_zero_mask":
            spec_muts, item_muts = [], []
        out = _coop_program(b, plan, spec_muts, item_muts)
        if out is not None:
            setup, words, gm, cap, bundle_applied = out
            return b, plan, (setup, words, gm, cap, applied + bundle_applied)
        b = Builder(rng, g)
    return None


def _coop_note(plan: _CoopPlan) -> str:
    return (f"coop:{plan.form} {tables.DTYPE_BY_CODE[plan.atype].name}x"
            f"{tables.DTYPE_BY_CODE[plan.btype].name}->{tables.DTYPE_BY_CODE[plan.acc].name} "
            f"G{plan.G} N{plan.N} K{plan.K} {'both' if plan.both else 'right'}"
            f"{' transA' if plan.trans_a else ''}{' transB' if plan.trans_b else ''} "
            f"vm{plan.vm} D:{'/'.join(l or '-' for l in plan.lays)} size{plan.d_size}")


def random_coop_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                     mutations: Optional[list] = None) -> Case:
    """One random cooperative / Shared Case (COOP_KINDS, COOP_MUTATIONS), core=True.

    The forms drawn are COOP_FORMS (GenConfig.matmul_forms restricts them when
    it names some). `kind` and `mutations` force the draw (labels that could
    not be applied are left out of Case.mutations). Without a GenConfig the
    machine is COOP_MACHINE (pj.preset("small")).
    """
    g = GenConfig(machine=COOP_MACHINE, core=True) if cfg is None else gen_config(cfg)
    if not g.core:
        g = dataclasses.replace(g, core=True)
    forms = tuple(f for f in (g.matmul_forms or COOP_FORMS) if f in COOP_FORMS) or COOP_FORMS
    kind = draw_kind(rng, COOP, kind)
    matrix = kind in COOP_MATRIX_KINDS
    pool = [m for m in COOP_MUTATIONS if (m in _SH_MUTATIONS) != matrix]
    mutations = draw_mutations(rng, g, COOP, kind, mutations,
                               table={m: COOP_MUTATIONS[m] for m in pool})
    muts = [m for m in mutations if m in pool]
    b = Builder(rng, g)
    if not matrix:
        setup, words, gm, cap, applied = sh_program(b, kind, muts)
        b.notes.insert(0, f"sh:{kind}")
    else:
        out = _coop_matrix(b, kind, forms, muts)
        if out is None:
            raise RuntimeError(f"no cooperative case for kind {kind} mutations {mutations}")
        b, plan, (setup, words, gm, cap, applied) = out
        b.notes.insert(0, _coop_note(plan))
    applied = [m for m in mutations if m in applied]
    return finish_case(b, kind, applied, words, gm, tile_capacity=cap, pe=0, core=True,
                       setup=tuple(int(w) & 0xFFFFFFFF for w in setup))


def random_coop_cases(seed: int, n: int, cfg=None) -> list:
    """n cooperative Cases from one seed (case i is random_coop_case(case_rng(seed, i), cfg))."""
    return draw_many(random_coop_case, seed, n, cfg)
