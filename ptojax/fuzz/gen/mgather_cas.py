"""Seeded random MGATHER.CAS cases (state-and-transport.md D, E7, E8).

`random_cas_case(rng, cfg)` / `random_cas_cases(seed, n, cfg)` draw from
`CAS_KINDS` (legal bundles over every transfer and index dtype,
duplicate-heavy index tiles, ColumnMajor/ZN/NZ destinations, a source load in
the stream, TSTORE round trips, two CAS bundles, wide tiles, zero-mask
blocks) with mutations `CAS_MUTATIONS`, one per D.4 check; `CAS_AIMS[label]`
is the fault each aims at. The plan and its mutations are in
mgather_cas_plan.py.

A CAS case needs three source tiles (Index, Expected, Replacement), each made
by an ordinary TLOAD of GM data, then the BSTART.MGATHER.CAS bundle. Three
loads and the CAS do not fit 16 words, so the loads normally go to the
Case's `setup` (run on the oracle by build_state, see Case); kind
"cas_in_stream" (and ~20% of the others, when it fits) keeps one of them in
the stream, before the CAS. GM is split in two halves: the sources' data
(and a round trip's TSTORE target) in one, the lane addresses in the other,
so later words never rewrite the lanes' memory (cas_check.explains needs
that).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ... import tables
from ...isa.encode import bstart, catr, datr, dim, ior, ios, iot_dst, iot_src, iot_src2, iot_src_dst
from .driver import (Bundle, Case, Family, Builder, core_setup, flatten, gen_config, tload_items,
                     compatible, draw_kind, draw_many, draw_mutations, finish_case)
from .edges import edge_capacity
from .mgather_cas_plan import CAS_PLAN_MUTATIONS, CasPlan, CasSource, cas_draw, cas_plan_mutate
from .transport_mutations import m_shuffle, set_datr
from .values import (BITS, DTYPES, LOAD_CODES, PACKED_DTYPES, PEMODE, PEMODE_MASK,
                     RESERVED_START_DTYPES, START_DTYPE, STORE_CODES, TL, elem_bytes,
                     encode_elements, pick_one, rowbytes)

CAS_KINDS = {
    # kind: weight
    "cas_legal": 10,       # distinct lane addresses (repeats only when the index range forces them)
    "cas_dup": 9,          # duplicate-heavy: many lanes on 1..3 addresses, order-dependent outcome
    "cas_layout": 4,       # B.DATR Layout: ColumnMajor / ZN / NZ / RowMajor relayout destinations
    "cas_in_stream": 4,    # one source TLOAD in the stream before the CAS
    "cas_roundtrip": 3,    # the destination stored back by an ordinary TSTORE
    "cas_twice": 3,        # the CAS bundle twice: the second sees the first's memory
    "cas_wide": 2,         # up to 8 x 16 lanes of 8/16-bit types
    "cas_zero_mask": 2,    # every B.IOT PEMode 000, schema otherwise illegal: strict no-op
}


# mutation label -> weight; CAS_AIMS[label] is the fault it aims at (D.4 order)
CAS_MUTATIONS = {
    "cas_no_ior": 3,            # D.4.3 B.IOR missing
    "cas_ios": 2,               # D.4.3 any B.IOS (or its mask differs: at the B.IOS)
    "cas_bindings": 4,          # D.4.3 two-B.IOT shape: one, swapped, extra, unterminated, ...
    "cas_ior_surplus": 2,       # D.4.3 B.IOR RegSrc1/RegSrc2/RegDst nonzero
    "cas_no_lb0": 2,            # D.4.3 LB0 missing
    "cas_lb_zero": 3,           # D.4.3 LB0/LB1/LB2 = 0
    "cas_vc_gt_col": 2,         # D.4.3 ValidCol > Col
    "cas_col_not_pow2": 2,      # D.4.3 Col not a power of two (LB2, or LB2 absent and VC not)
    "cas_mask_mismatch": 2,     # the second B.IOT's mask differs (header)
    "cas_datr_attr": 3,         # D.4.4 B.DATR DataType/CMode/RMode/Sat/Canonicalize set
    "cas_cube_layout": 2,       # B.DATR CUBE Layout 21..26: the CUBE path rejects Function 8
    "cas_packed": 3,            # D.4.5 4-bit transfer dtype
    "cas_index_float": 2,       # D.4.5 non-integer index tile
    "cas_src_dtype": 3,         # D.4.5 Expected/Replacement dtype != transfer dtype
    "cas_src_shape": 3,         # D.4.5 a source's valid shape != (VR, VC)
    "cas_src_undefined": 2,     # D.4.5 a source not fully defined (Case.undefine)
    "cas_src_unallocated": 2,   # D.4.5 a binding names an unallocated TileIndex
    "cas_src_cube": 2,          # D.4.5 a CUBE source is not generically indexable
    "cas_tsize": 3,             # D.4.6 TSize too small for VR rows (or rows*Col past tile_words)
    "cas_hand_full": 2,         # D.4.6 no free slot in the destination hand
    "cas_budget": 2,            # D.4.6 TILE_CAPACITY below the destination's charge
    "cas_fractal": 2,           # D.4.7 ZN/NZ destination not fractal-aligned (rollback)
    "cas_lane_oob": 4,          # D.4.8 one lane (first/middle/last) past GM or wrapped
    "cas_lane_misaligned": 3,   # D.4.8 one lane misaligned to the element size
    "cas_zero_mask_block": 2,   # D.4.1 every B.IOT PEMode 000
    "cas_start_dtype": 1,       # reserved BSTART DataType (decode)
    "cas_drop_bstop": 2,        # completion by the next BSTART, or the stream ends mid-block
    "cas_shuffle": 2,           # header order (legal)
    "cas_catr": 1,              # B.CATR aq/rl/atom/far: ordering only
    "cas_catr_trap": 1,         # B.CATR trap: Fault_BundlePostCommit after the commit
}


CAS_AIMS = {m: TL for m in CAS_MUTATIONS}
CAS_AIMS.update({
    "cas_tsize": "Fault_TileAllocation", "cas_hand_full": "Fault_TileAllocation",
    "cas_budget": "Fault_TileAllocation", "cas_lane_oob": "Fault_DataPage",
    "cas_lane_misaligned": "Fault_DataAlignment", "cas_zero_mask_block": "Fault_None",
    "cas_start_dtype": "Fault_IllegalInstruction", "cas_drop_bstop": "Fault_None",
    "cas_shuffle": "Fault_None", "cas_catr": "Fault_None", "cas_catr_trap": "Fault_BundlePostCommit",
})
assert set(CAS_AIMS) == set(CAS_MUTATIONS)


# not combined in one case (the second would be a no-op or contradict the first)
_CAS_CONFLICTS = {frozenset(p) for p in (
    ("cas_packed", "cas_lane_misaligned"), ("cas_index_float", "cas_lane_oob"),
    ("cas_index_float", "cas_lane_misaligned"), ("cas_packed", "cas_fractal"),
    ("cas_src_cube", "cas_src_undefined"), ("cas_hand_full", "cas_budget"))}


def _cas_mutation_ok(m: str, kind: str, drawn: list) -> bool:
    # cas_roundtrip with a zero-mask CAS: the TSTORE would name a tile never made
    return not (kind == "cas_roundtrip" and m == "cas_zero_mask_block") \
        and compatible(m, drawn, _CAS_CONFLICTS)


CAS = Family("MGATHER.CAS", CAS_KINDS, CAS_MUTATIONS, "cas_zero_mask", _cas_mutation_ok)


# ---- bundle-level mutations (the CAS bundle's header words)


def _cas_iots(bd):
    return bd.find("iot")


def _cb_no_ior(b, bd):
    if not bd.find("ior"):
        return False
    bd.items = [it for it in bd.items if it[0] != "ior"]
    return True


def _cb_ios(b, bd):
    pm = bd.info["pemode"]
    if b.rng.random() < 0.3:
        pm = pick_one(b.rng, [p for p in range(1, 8) if p != pm])
    w = ios(int(b.rng.integers(0, 256)), pm, int(b.rng.integers(0, 13)))
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ios", w))
    return True


def _cb_bindings(b, bd):
    rng, i = b.rng, bd.info
    pm, x, y, z = i["pemode"], i["src"][0], i["src"][1], i["src"][2]
    dst = dict(hand=i["hand"], size=i["size"], pemode=pm)
    variants = {
        "one": [iot_src_dst(z, **dst)],
        "swapped": [iot_src_dst(z, **dst, last=0), iot_src2(x, y, pm, 1)],
        "first_with_destination": [iot_src2(x, y, pm, 0) | 1 << 15, iot_src_dst(z, **dst)],
        "second_without_destination": [iot_src2(x, y, pm, 0), iot_src(z, pm, 1)],
        "extra_source": [iot_src2(x, y, pm, 0), iot_src(int(rng.integers(0, 64)), pm, 0),
                         iot_src_dst(z, **dst)],
        "not_terminated": [iot_src2(x, y, pm, 0), iot_src_dst(z, **dst, last=0)],
        "separate_sources": [iot_src(x, pm, 0), iot_src(y, pm, 0), iot_src_dst(z, **dst)],
        "no_destination": [iot_src2(x, y, pm, 0), iot_src2(z, int(rng.integers(0, 64)), pm, 1)],
    }
    name = pick_one(rng, sorted(variants))
    first = _cas_iots(bd)[0]
    bd.items = [it for it in bd.items if it[0] != "iot"]
    for k, w in enumerate(variants[name]):
        bd.items.insert(first + k, ("iot", w))
    b.notes.append(f"bindings:{name}")
    return True


def _cb_ior_surplus(b, bd):
    if not bd.find("ior"):
        return False
    k = bd.find("ior")[0]
    w = bd.items[k][1]
    w |= int(b.rng.integers(1, 24)) << pick_one(b.rng, [7, 20, 27])      # RegDst / RegSrc1 / RegSrc2
    bd.items[k] = ("ior", w)
    return True


def _cb_no_lb0(b, bd):
    if not bd.find("dim0"):
        return False
    del bd.items[bd.find("dim0")[0]]
    return True


def _cb_lb_zero(b, bd):
    n = int(b.rng.integers(0, 3))
    tag = f"dim{n}"
    word = b.dim_word(n, 0) if len(b.free_regs) > 2 else dim(n, 0)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), (tag, word))
    b.notes.append(f"lb_zero:LB{n}")
    return True


def _cb_mask_mismatch(b, bd):
    k = _cas_iots(bd)[-1]
    w = bd.items[k][1]
    other = pick_one(b.rng, [p for p in range(1, 8) if p != bd.info["pemode"]])
    bd.items[k] = ("iot", PEMODE.replace(w, other))
    return True


def _cb_datr_attr(b, bd):
    rng = b.rng
    which = pick_one(rng, ["dtype", "dtype_none", "cmode", "rmode", "sat", "canon"])
    val = {"dtype": pick_one(rng, list(DTYPES[1:])), "dtype_none": 31, "cmode": int(rng.integers(1, 6)),
           "rmode": int(rng.integers(1, 8)), "sat": 1, "canon": 1}[which]
    f = dict(bd.info.get("datr") or dict(layout=0, dtype=0, pad=int(rng.integers(0, 4))))
    f[which if which != "dtype_none" else "dtype"] = val
    set_datr(bd, **f)
    b.notes.append(f"datr_attr:{which}")
    return True


def _cb_cube_layout(b, bd):
    rng = b.rng
    set_datr(bd, layout=pick_one(rng, LOAD_CODES + STORE_CODES), dtype=pick_one(rng, [31, 31, 0]),
              pad=int(rng.integers(0, 4)), cmode=0, rmode=0, sat=0, canon=0)
    return True


def _cb_zero_mask_block(b, bd):
    for k, (t, w) in enumerate(bd.items):
        if t in ("iot", "ios"):
            bd.items[k] = (t, PEMODE.replace(w, 0))
    return True


def _cb_start_dtype(b, bd):
    bd.start = START_DTYPE.replace(bd.start, pick_one(b.rng, RESERVED_START_DTYPES))
    return True


def _cb_drop_bstop(b, bd):
    bd.stop = False
    return True


def _cb_shuffle(b, bd):
    return m_shuffle(b, [bd])


def _cb_catr(b, bd, trap=0):
    rng = b.rng
    w = catr(trap=trap, dr=int(rng.integers(0, 2)), atom=int(rng.integers(0, 2)),
             aq=int(rng.integers(0, 2)), rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
    bd.items.insert(int(rng.integers(0, len(bd.items) + 1)), ("catr", w))
    return True


CAS_BUNDLE_MUTATIONS = {
    "cas_no_ior": _cb_no_ior, "cas_ios": _cb_ios, "cas_bindings": _cb_bindings,
    "cas_ior_surplus": _cb_ior_surplus, "cas_no_lb0": _cb_no_lb0, "cas_lb_zero": _cb_lb_zero,
    "cas_mask_mismatch": _cb_mask_mismatch, "cas_datr_attr": _cb_datr_attr,
    "cas_cube_layout": _cb_cube_layout, "cas_zero_mask_block": _cb_zero_mask_block,
    "cas_start_dtype": _cb_start_dtype, "cas_drop_bstop": _cb_drop_bstop,
    "cas_shuffle": _cb_shuffle, "cas_catr": _cb_catr,
    "cas_catr_trap": lambda b, bd: _cb_catr(b, bd, trap=1),
}


assert set(CAS_PLAN_MUTATIONS) | set(CAS_BUNDLE_MUTATIONS) == set(CAS_MUTATIONS)


# ---- placement: hands, TileIndices, GM, GPRs, words


def _place_hands(b: Builder, plan: CasPlan, loads: list, n_dest: int):
    """Hands for the loads (in load order): each hand holds at most hand_slots
    tiles, the destination hand(s) keep free slots (unless hand_full)."""
    rng, HS = b.rng, b.m.hand_slots
    counts = [0] * 4
    reserve = [0] * 4
    reserve[plan.hand] += 1
    if n_dest > 1:
        reserve[plan.hand2] += 1
    if plan.hand_full:
        # fill the destination hand: with sources first, then 1x1 filler loads
        into = [s for s in loads if s.role != "fill"][: min(HS, 3)]
        for s in into:
            s.hand = plan.hand
        counts[plan.hand] = len(into)
        for s in loads:
            if s.role == "fill":
                s.hand = plan.hand
                counts[plan.hand] += 1
        rest = [s for s in loads if s not in into and s.role != "fill"]
        reserve = [0] * 4
        reserve[plan.hand] = HS                                     # nothing else goes there
    else:
        rest = list(loads)
    for s in rest:
        ok = [h for h in range(4) if counts[h] + (0 if plan.hand_full else reserve[h]) < HS
              and not (plan.hand_full and h == plan.hand)]
        if not ok:
            ok = [h for h in range(4) if counts[h] < HS] or [0]
        s.hand = pick_one(rng, ok)
        counts[s.hand] += 1


def _source_bundle(b: Builder, s: CasSource, base: int, stride: int) -> Bundle:
    rng = b.rng

    cube_datr = datr(s.cube, 31, int(rng.integers(0, 4))) if s.cube else None
    items = tload_items(b, cube_datr, s.vr, s.vc, s.col, iot_dst(s.hand, s.size, s.pemode, 1),
                         base, stride, reg_room=6, reg_p=0.5, zero_base_p=0.5)
    return Bundle(bstart("TLOAD", s.dt), items, True,
                  dict(op="TLOAD", cube=bool(s.cube), role=s.role, index=s.index))


def _cas_bundle(b: Builder, plan: CasPlan, src: tuple, hand: int, minimal: bool = False) -> Bundle:
    rng = b.rng
    items = []
    if plan.datr is not None and not (minimal and plan.datr["layout"] == 0 and plan.datr["pad"] == 3):
        items.append(("datr", datr(**plan.datr)))
    for n in (0, 1, 2):
        if n in plan.lb and not (minimal and n == 1 and plan.lb[1] == 1):
            v = plan.lb[n]
            items.append((f"dim{n}", b.dim_word(n, v) if len(b.free_regs) > 4 and not minimal
                          else dim(n, v)))
    pm = plan.pemode
    items.append(("iot", iot_src2(src[0], src[1], pm, 0)))
    items.append(("iot", iot_src_dst(src[2], hand, plan.size, pm, 1)))
    rb = 0 if plan.base == 0 and rng.random() < 0.6 else b.reg(plan.base)
    items.append(("ior", ior(rb)))
    return Bundle(bstart("MGATHER.CAS", plan.td), items, True,
                  dict(op="MGATHER.CAS", src=src, hand=hand, size=plan.size, pemode=pm,
                       datr=plan.datr))


def _cas_loads(b: Builder, plan: CasPlan, kind: str) -> tuple:
    """(the source loads, hand_full's 1x1 fillers first, in load order, with
    their hands, TileIndices and maybe one marked for the stream; the
    destination's TileIndex)."""
    rng, HS = b.rng, b.m.hand_slots
    fills = []
    if plan.hand_full:
        fills = [CasSource("fill", 27, [[int(rng.integers(0, 256))]], col=1, size=1,
                            pemode=int(rng.integers(1, 8))) for _ in range(max(0, HS - 3))]
    order = list(plan.sources)
    rng.shuffle(order)
    if plan.undefine_role is not None:          # undefine pokes a tile the setup made: not last
        order.sort(key=lambda s: s.role != plan.undefine_role)
    loads = fills + order
    _place_hands(b, plan, loads, 2 if kind == "cas_twice" else 1)
    if kind == "cas_in_stream" or (kind not in ("cas_twice",) and rng.random() < 0.2):
        loads[-1].in_stream = True
    counts = [0] * 4
    for s in loads:
        s.index = s.hand * tables.HAND_SLOTS + counts[s.hand]
        counts[s.hand] += 1
    return loads, plan.hand * tables.HAND_SLOTS + counts[plan.hand]


class _SourceArea:
    """The sources' half of GM, taken in turn (row gaps and spacing when roomy)."""

    def __init__(self, rng, plan: CasPlan, loads: list):
        lo, self.hi = plan.src_region
        dense_total = sum(rowbytes(s.vc, BITS[s.dt]) * s.vr + 8 for s in loads) \
            + plan.vr * plan.vc * plan.ebytes
        self.rng = rng
        self.roomy = 2 * dense_total + 200 < self.hi - lo           # room for row gaps and spacing
        self.cursor = lo + (int(rng.integers(0, 16)) if self.roomy else 0)

    def take(self, nbytes: int, align: int) -> int:
        self.cursor += (-self.cursor) % align
        at = self.cursor
        self.cursor += nbytes + (int(self.rng.integers(0, 24)) if self.roomy else 0)
        assert self.cursor <= self.hi, "source data does not fit its GM half"
        return at


def _cas_gm(b: Builder, plan: CasPlan, loads: list) -> tuple:
    """(GM: random (or zero) bytes, the lanes' memory, the sources' rows in the
    other half; that half's _SourceArea; [(source, its TLOAD bundle)])."""
    rng, n = b.rng, b.gm_bytes
    gm = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes() if rng.random() < 0.9
                   else bytes(n))
    e = plan.ebytes
    for a, v in plan.mem.items():
        gm[a:a + e] = encode_elements(plan.td, [v])[:e]
    area = _SourceArea(rng, plan, loads)
    bundles = []
    for s in loads:
        bits = BITS[s.dt]
        eb = elem_bytes(bits)
        dense = rowbytes(s.vc, bits)
        stride = dense + (eb * int(rng.integers(0, 4)) if area.roomy and rng.random() < 0.4 else 0)
        base = area.take(stride * s.vr, eb)
        for r, row in enumerate(s.values):
            raw = encode_elements(s.dt, row)
            gm[base + r * stride: base + r * stride + len(raw)] = raw
        bundles.append((s, _source_bundle(b, s, base, stride)))
    return gm, area, bundles


def _cas_operands(b: Builder, plan: CasPlan, loads: list, dest_index: int) -> tuple:
    """(the Index, Expected and Replacement TileIndices the bundle names, the
    undefine pokes): cas_src_unallocated and cas_src_undefined applied."""
    rng = b.rng
    by_role = {s.role: s.index for s in plan.sources}
    src = [by_role["index"], by_role["expected"], by_role["replacement"]]
    allocated = {s.index for s in loads}
    if plan.unallocated_role is not None:
        k = ("index", "expected", "replacement").index(plan.unallocated_role)
        free = [t for t in range(64) if t not in allocated and t != dest_index]
        src[k] = pick_one(rng, free)
        b.notes.append(f"unallocated:{plan.unallocated_role}=T{src[k]}")
    undefine: tuple[tuple[int, int], ...] = ()
    if plan.undefine_role is not None:
        s = plan.source(plan.undefine_role)
        r, c = int(rng.integers(0, s.vr)), int(rng.integers(0, s.vc))
        undefine = ((s.index, r * s.col + c),)
        b.notes.append(f"undefined:{s.role} ({r},{c})")
    return tuple(src), undefine


def _cas_tail(b: Builder, plan: CasPlan, kind: str, src: tuple, dest_index: int,
              area: _SourceArea) -> list:
    """The bundles after the CAS: cas_roundtrip's TSTORE of the destination,
    cas_twice's second CAS bundle."""
    rng, e = b.rng, plan.ebytes
    if kind == "cas_roundtrip":
        pm2 = int(rng.integers(1, 8))
        stride = plan.vc * e + (e * int(rng.integers(0, 3)) if area.roomy and rng.random() < 0.3 else 0)
        at = area.take(stride * plan.vr, e)
        items = []
        if rng.random() < 0.3:
            items.append(("dim0", dim(0, plan.vc)))
        items += [("iot", iot_src(dest_index, pm2, 1)), ("ior", ior(b.reg(at), b.reg(stride)))]
        store = Bundle(bstart("TSTORE", plan.td if rng.random() < 0.8 else pick_one(rng, DTYPES)),
                       items, True, dict(op="TSTORE"))
        b.notes.append(f"roundtrip:TSTORE T{dest_index} -> {at:#x}/{stride}")
        return [store]
    if kind == "cas_twice":
        second = _cas_bundle(b, plan, src, plan.hand2, minimal=True)
        b.notes.append(f"twice:second destination hand {plan.hand2}")
        return [second]
    return []


def _cas_words(b: Builder, bundles: list, cas: Bundle, tail: list) -> tuple:
    """(setup, words): the in-stream loads that do not fit move to the setup."""
    stream_loads = [bd for s, bd in bundles if s.in_stream]

    def stream():
        return flatten(stream_loads + [cas] + tail)

    while len(stream()) > b.g.max_words and stream_loads:
        stream_loads[-1].info["moved"] = True
        stream_loads.pop()
    words = b.cut(stream())
    in_stream = {id(bd) for bd in stream_loads}
    setup = flatten([bd for _, bd in bundles if id(bd) not in in_stream])
    if stream_loads:
        b.notes.append("in_stream:" + ",".join(bd.info["role"] for bd in stream_loads))
    return setup, words


def _cas_capacity(b: Builder, plan: CasPlan, loads: list) -> Optional[int]:
    """cas_budget: a TILE_CAPACITY the sources fit and the destination does not;
    with an edge weight, sometimes one at the edge (edges.edge_capacity)."""
    if not plan.budget and b.g.edge_weight <= 0:
        return None
    # core: the setup's bindings are mask 1111 (core_setup), each PE charges 4 x TSize
    charge = sum((4 if b.g.core else bin(PEMODE_MASK[s.pemode]).count("1")) * s.capacity
                 for s in loads)
    dest = bin(PEMODE_MASK[plan.pemode]).count("1") * (128 << (plan.size - 1))
    cap = edge_capacity(b, "cas", charge, dest, plan.budget)
    if cap is not None:
        b.notes.append(f"tile_capacity:{cap} (sources {charge}, destination {dest})")
    return cap


def _cas_program(b: Builder, plan: CasPlan, kind: str, bundle_muts: list):
    """(setup words, stream words, GM bytes, tile_capacity, undefine, applied bundle mutations)."""
    loads, dest_index = _cas_loads(b, plan, kind)
    gm, area, bundles = _cas_gm(b, plan, loads)
    src, undefine = _cas_operands(b, plan, loads, dest_index)
    cas = _cas_bundle(b, plan, src, plan.hand)
    applied = [m for m in bundle_muts if CAS_BUNDLE_MUTATIONS[m](b, cas)]
    tail = _cas_tail(b, plan, kind, src, dest_index, area)
    setup, words = _cas_words(b, bundles, cas, tail)
    return setup, words, bytes(gm), _cas_capacity(b, plan, loads), undefine, applied


def _cas_zero_mask(b: Builder, plan: CasPlan) -> list:
    """A CAS block whose bindings are all PEMode 000, with an otherwise illegal
    schema: bogus sources, missing dims/B.IOR, B.DATR attributes, B.IOS."""
    rng = b.rng
    items = []
    if rng.random() < 0.5:
        items.append(("datr", datr(int(rng.integers(0, 2)), pick_one(rng, [0, 31, 27]),
                                   int(rng.integers(0, 4)), int(rng.integers(0, 6)),
                                   int(rng.integers(0, 8)), int(rng.integers(0, 2)))))
    if rng.random() < 0.5:
        items.append(("dim0", dim(0, pick_one(rng, [0, 1, 3, plan.vc]))))
    x, y, z = (int(rng.integers(0, 64)) for _ in range(3))
    items.append(("iot", iot_src2(x, y, 0, 0)))
    items.append(("iot", iot_src_dst(z, int(rng.integers(0, 4)), int(rng.integers(1, 11)), 0, 1)))
    if rng.random() < 0.3:
        items.append(("ios", ios(int(rng.integers(0, 256)), 0, int(rng.integers(0, 13)))))
    if rng.random() < 0.5:
        items.append(("ior", ior(int(rng.integers(0, 24)), int(rng.integers(0, 2)),
                                 int(rng.integers(0, 2)), int(rng.integers(0, 2)))))
    td = plan.td if rng.random() < 0.7 else pick_one(rng, PACKED_DTYPES)
    return Bundle(bstart("MGATHER.CAS", td), items, True, dict(op="MGATHER.CAS")).words()


# ---- the case


def random_cas_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                    mutations: Optional[list] = None) -> Case:
    """One random MGATHER.CAS Case (kinds CAS_KINDS, mutations CAS_MUTATIONS).

    `kind` and `mutations` force the draw (labels a mutation could not be
    applied to are left out of Case.mutations). The sources are loaded by
    ordinary TLOADs in Case.setup (one of them sometimes in the stream);
    build_state prepares them.
    """
    g = gen_config(cfg)
    b = Builder(rng, g)
    kind = draw_kind(rng, CAS, kind)
    mutations = draw_mutations(rng, g, CAS, kind, mutations)
    plan = cas_draw(b, kind, mutations)
    if plan is None:                          # no shape for these needs: drop them
        mutations = [m for m in mutations if m not in ("cas_fractal",)]
        plan = cas_draw(b, kind, mutations)
    assert plan is not None                   # some shape fits without cas_fractal
    applied = cas_plan_mutate(b, plan, mutations)
    bundle_muts = [m for m in mutations if m in CAS_BUNDLE_MUTATIONS]
    if kind == "cas_zero_mask":
        setup, words, cap, undefine, bundle_applied = [], _cas_zero_mask(b, plan), None, (), []
        gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    else:
        setup, words, gm, cap, undefine, bundle_applied = _cas_program(b, plan, kind, bundle_muts)
    applied = [m for m in mutations if m in applied or m in bundle_applied]
    return finish_case(b, kind, applied, words, gm, tile_capacity=cap,
                       setup=core_setup(setup, g.core), undefine=tuple(undefine))


def random_cas_cases(seed: int, n: int, cfg=None) -> list:
    """n MGATHER.CAS Cases from one seed (case i is random_cas_case(case_rng(seed, i), cfg))."""
    return draw_many(random_cas_case, seed, n, gen_config(cfg))
