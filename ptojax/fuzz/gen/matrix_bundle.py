"""The matrix bundle of matrix and cooperative cases: what it says (a spec:
form, types, LB0..LB2, sources, destinations, B.FPATR / B.DATR / B.IOR /
B.IOS / B.CATR), its header items, and the mutations that edit the spec
before it is encoded (`MM_SPEC_MUTATIONS`) or the encoded items after
(`MM_ITEM_MUTATIONS`)."""

from __future__ import annotations

from typing import Optional

from ...isa.encode import (bstart, catr, datr, dim, ior, ios, iot_dst, iot_src, iot_src2,
                           iot_src_dst)
from .driver import Bundle, Builder
from .matrix_tiles import FP32, MM_FP32_MODES, MM_OTHER_LAYOUTS, MM_S32_MODES, MM_SCALAR_MODES, S32
from .values import DST_TILE, LOAD_CODES, PEMODE, SIZE_CODE, STORE_CODES, pick_one



def _iot_word(srcs: list, dst: Optional[tuple], pemode: int, last: int) -> int:
    if len(srcs) == 2:
        w = iot_src2(srcs[0], srcs[1], pemode, last)
        return w | DST_TILE.insert(dst[0]) | SIZE_CODE.insert(dst[1]) if dst else w
    if len(srcs) == 1:
        return iot_src_dst(srcs[0], dst[0], dst[1], pemode, last) if dst else iot_src(srcs[0], pemode, last)
    assert dst is not None          # a B.IOT without sources names a destination
    return iot_dst(dst[0], dst[1], pemode, last)


def _mm_items(b: Builder, spec: dict, minimal: bool = False) -> list:
    """Header items of a matrix bundle: [B.DATR] B.FPATR B.DIMs [B.IOS] [B.IOR] B.IOTs [B.CATR]."""
    rng = b.rng
    items = []
    datr_f = spec["datr"]
    if datr_f is None and spec["btype"] != spec["atype"]:
        datr_f = dict(layout=0, dtype=spec["btype"], pad=0)
    elif datr_f is None and not minimal and rng.random() < 0.2:
        datr_f = dict(layout=0, dtype=pick_one(rng, [31, spec["atype"]]), pad=0)
    if datr_f is not None:
        if "rmode" not in datr_f and not minimal and rng.random() < 0.3:
            datr_f = dict(datr_f, rmode=int(rng.integers(0, 8)), sat=int(rng.integers(0, 2)))
        items.append(("datr", datr(**datr_f)))
    if spec["fpatr"] is not None:
        items.append(("fpatr", spec["fpatr"]))
    for n, v in enumerate(spec["lb"]):
        if v is None:
            continue
        if v != 1 or n in spec["lb_forced"] or (not minimal and rng.random() < 0.3):
            use_reg = not minimal and len(b.free_regs) > 8 and rng.random() < 0.25
            items.append((f"dim{n}", b.dim_word(n, v) if use_reg else dim(n, v)))
    for sid in spec["ios"]:
        items.append(("ios", ios(sid, spec["pemode"], 0)))
    if spec["ior"] is not None:
        items.append(("ior", ior(*spec["ior"])))
    elif not minimal and rng.random() < 0.15:
        items.append(("ior", ior()))
    # bindings: sources in stream order, 1 or 2 per B.IOT; the destination on one of
    # them or alone; extra destinations alone
    srcs = spec["srcs"] + spec["extra_srcs"]
    groups, i = [], 0
    while i < len(srcs):
        k = 2 if len(srcs) - i >= 2 and (minimal or rng.random() < 0.7) else 1
        groups.append([srcs[i:i + k], None])
        i += k
    dst = (spec["d_hand"], spec["d_size"])
    u = rng.random()
    if groups and (minimal or u < 0.5):
        groups[0][1] = dst
    elif groups and u < 0.75:
        groups[int(rng.integers(0, len(groups)))][1] = dst
    else:
        groups.insert(int(rng.integers(0, len(groups) + 1)), [[], dst])
    # extra destinations (in order) after D's and each other's: the stream order
    # of destinations is D, RowMaxOut, GroupMaxOut
    last = next(k for k, g in enumerate(groups) if g[1] is dst)
    for extra in spec["extra_dsts"]:
        free = [k for k, g in enumerate(groups) if k > last and g[1] is None and g[0]]
        if free and rng.random() < 0.5:
            last = pick_one(rng, free)
            groups[last][1] = extra
        else:
            last = int(rng.integers(last + 1, len(groups) + 1))
            groups.insert(last, [[], extra])
    for k, (g, d) in enumerate(groups):
        items.append(("iot", _iot_word(g, d, spec["pemode"], int(k == len(groups) - 1))))
    if spec["catr"] is not None:
        items.insert(int(rng.integers(0, len(items) + 1)), ("catr", spec["catr"]))
    elif not minimal and rng.random() < 0.05:
        w = catr(atom=int(rng.integers(0, 2)), aq=int(rng.integers(0, 2)),
                 rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
        items.insert(int(rng.integers(0, len(items) + 1)), ("catr", w))
    return items


def mm_bundle(b: Builder, spec: dict, minimal: bool = False) -> Bundle:
    return Bundle(bstart(spec["form"], spec["atype"]), _mm_items(b, spec, minimal), True,
                  dict(op=spec["form"], spec=spec))


# spec mutations (before encoding)


def _ms_no_fpatr(b, spec, plan):
    spec["fpatr"] = None
    return True


def _ms_src_count(b, spec, plan):
    rng = b.rng
    if len(spec["srcs"]) > 1 and rng.random() < 0.5:
        k = int(rng.integers(0, len(spec["srcs"])))
        b.notes.append(f"src_count:-1 (dropped #{k})")
        del spec["srcs"][k]
    else:
        k = int(rng.integers(0, len(spec["srcs"]) + 1))
        extra = pick_one(rng, spec["srcs"]) if rng.random() < 0.5 else int(rng.integers(0, 64))
        spec["srcs"].insert(k, extra)
        b.notes.append(f"src_count:+1 (T{extra} at #{k})")
    return True


def _ms_extra_dst(b, spec, plan):
    spec["extra_dsts"].append((int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11))))
    return True


def _ms_ior(b, spec, plan):
    rng = b.rng
    while True:
        f = [int(rng.integers(0, 24)) if rng.random() < 0.5 else 0 for _ in range(4)]
        if any(f):
            break
    spec["ior"] = tuple(f)                    # (src0, src1, src2, dst)
    return True


def _ms_datr_attr(b, spec, plan):
    rng = b.rng
    dt = spec["btype"] if spec["btype"] != spec["atype"] else pick_one(rng, [31, spec["atype"]])
    d = dict(layout=0, dtype=dt, pad=0, cmode=0, canon=0)
    what = pick_one(rng, ["layout", "pad", "cmode", "canon"])
    if what == "layout":
        d["layout"] = pick_one(rng, MM_OTHER_LAYOUTS)
    elif what == "pad":
        d["pad"] = int(rng.integers(1, 4))
    elif what == "cmode":
        d["cmode"] = int(rng.integers(1, 6))
    else:
        d["canon"] = 1
    spec["datr"] = d
    b.notes.append(f"datr_attr:{what}")
    return True


def _ms_cube_layout(b, spec, plan):
    rng = b.rng
    spec["datr"] = dict(layout=pick_one(rng, LOAD_CODES + STORE_CODES),
                        dtype=pick_one(rng, [31, 31, spec["btype"]]), pad=int(rng.integers(0, 4)))
    return True


def _ms_lb_zero(b, spec, plan):
    n = int(b.rng.integers(0, 3))
    spec["lb"][n] = 0
    spec["lb_forced"].add(n)
    b.notes.append(f"lb_zero:LB{n}")
    return True


def _ms_gemv_m(b, spec, plan):
    spec["lb"][0] = pick_one(b.rng, [2, 2, int(b.rng.integers(3, 33)), int(b.rng.integers(33, 65536))])
    return True


def _ms_ios(b, spec, plan):
    rng = b.rng
    sids = [int(s) for s in rng.choice(256, size=int(rng.integers(1, 3)), replace=False)]
    spec["ios"] = sids
    return True


def _ms_trans(b, spec, plan):
    if spec["fpatr"] is None:           # forced after mm_no_fpatr: no B.FPATR to edit
        return False
    which = pick_one(b.rng, [1, 2, 3])
    spec["fpatr"] |= (which & 1) << 7 | (which >> 1) << 8
    return True


def _ms_quant_class(b, spec, plan):
    if spec["fpatr"] is None:           # forced after mm_no_fpatr: no B.FPATR to edit
        return False
    rng = b.rng
    if plan.acc == FP32:
        mode = pick_one(rng, [m for m in MM_S32_MODES if m in MM_SCALAR_MODES])
    elif plan.acc == S32:
        mode = pick_one(rng, [1, 16] + [m for m in MM_FP32_MODES if m in MM_SCALAR_MODES])
    else:
        mode = pick_one(rng, [1, 16, 3, 5, 13, 24, 25])       # U32: no mode matches
    spec["fpatr"] = (spec["fpatr"] & ~(63 << 26)) | mode << 26
    if mode in MM_SCALAR_MODES and rng.random() < 0.4:
        spec["ior"] = (int(rng.integers(1, 24)), 0, 0, 0)  # its scalar parameter
    b.notes.append(f"quant_class:mode {mode}")
    return True


def _ms_catr(trap, dr):
    def apply(b, spec, plan):
        rng = b.rng
        spec["catr"] = catr(trap=trap, dr=dr, atom=int(rng.integers(0, 2)), aq=int(rng.integers(0, 2)),
                            rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
        return True
    return apply


MM_SPEC_MUTATIONS = {
    "mm_no_fpatr": _ms_no_fpatr, "mm_src_count": _ms_src_count, "mm_extra_dst": _ms_extra_dst,
    "mm_ior": _ms_ior, "mm_datr_attr": _ms_datr_attr, "mm_cube_layout": _ms_cube_layout,
    "mm_gemv_cube_layout": _ms_cube_layout, "mm_lb_zero": _ms_lb_zero, "mm_gemv_m": _ms_gemv_m,
    "mm_ios_tmatmul": _ms_ios, "mm_ios_gemv": _ms_ios, "mm_trans": _ms_trans,
    "mm_quant_class": _ms_quant_class,
    "mm_catr_dr": _ms_catr(0, 1), "mm_catr_trap": _ms_catr(1, 0),
}


# item mutations (after encoding)


def mi_zero_mask_block(b, bd):
    bd.items = [(t, PEMODE.replace(w, 0)) if t in ("iot", "ios") else (t, w) for t, w in bd.items]
    return True


def _mi_zero_iot(b, bd):
    rng = b.rng
    x, y = int(rng.integers(0, 64)), int(rng.integers(0, 64))
    w = pick_one(rng, [iot_src2(x, y, 0, int(rng.integers(0, 2))), iot_src(x, 0, int(rng.integers(0, 2))),
                    iot_dst(int(rng.integers(0, 4)), int(rng.integers(1, 11)), 0, int(rng.integers(0, 2)))])
    first = next((k for k, (t, _) in enumerate(bd.items) if t == "fpatr"), -1)
    bd.items.insert(int(rng.integers(first + 1, len(bd.items) + 1)), ("iot", w))
    return True


def _mi_shuffle(b, bd):
    """Header order: B.DATR/B.DIM/B.CATR anywhere, B.FPATR before every B.IOR/B.IOS/B.IOT,
    the bindings in their order."""
    rng = b.rng
    binds = [it for it in bd.items if it[0] in ("iot", "ios")]
    rest = [it for it in bd.items if it[0] not in ("iot", "ios")]
    if len(rest) < 2:
        return False
    rng.shuffle(rest)
    out = list(rest)
    last = -1
    for it in binds:
        pos = max(int(rng.integers(0, len(out) + 1)), last + 1)
        out.insert(pos, it)
        last = pos
    # B.FPATR before the first B.IOR / B.IOS / B.IOT
    fp = next((it for it in out if it[0] == "fpatr"), None)
    if fp is not None:
        out.remove(fp)
        first = next((k for k, it in enumerate(out) if it[0] in ("ior", "ios", "iot")), len(out))
        out.insert(int(rng.integers(0, first + 1)), fp)
    bd.items = out
    return True


MM_ITEM_MUTATIONS = {"mm_zero_mask_block": mi_zero_mask_block, "mm_zero_iot": _mi_zero_iot,
                     "mm_shuffle": _mi_shuffle}


def mm_zero_mask_junk(b: Builder, spec: dict):
    """mm_zero_mask: on top of the zero-mask bindings, an otherwise illegal header."""
    rng = b.rng
    if rng.random() < 0.4:
        spec["fpatr"] = None
    if rng.random() < 0.3:
        spec["datr"] = dict(layout=pick_one(rng, (0,) + MM_OTHER_LAYOUTS), dtype=pick_one(rng, [31, 0, 27]),
                            pad=int(rng.integers(0, 4)), cmode=int(rng.integers(0, 6)))
    if rng.random() < 0.3:
        spec["lb"][int(rng.integers(0, 3))] = 0
    if rng.random() < 0.3:
        spec["ios"] = [int(rng.integers(0, 256))]
    if rng.random() < 0.3:
        spec["ior"] = (int(rng.integers(0, 24)), int(rng.integers(0, 2)), int(rng.integers(0, 2)),
                       int(rng.integers(0, 2)))
    if rng.random() < 0.4:
        spec["srcs"] = [int(rng.integers(0, 64)) for _ in range(int(rng.integers(0, 5)))]
    return True
