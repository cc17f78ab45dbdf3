"""TLOAD/TSTORE mutations (`MUTATIONS`): each edits a drawn program towards
one check of the ordered lists of encoding.md 3-4 and state-and-transport.md
C.5-C.8 (wrong direction, missing/zero/extra LB, B.DATR attributes, B.IOS
with CUBE codes, mask mismatch, B.IOT after last, duplicates, B.IOR surplus
fields, reserved fields, truncated streams, ...). The labels say what was
aimed at, not what the run must give (an earlier check may fire first).
Bundle mutations edit one bundle of the program (`BUNDLE_MUTATIONS`);
stream mutations (`STREAM_MUTATIONS`) act on the words once they fit.
"""

from __future__ import annotations

import functools

from ...isa.encode import (BSTOP, FPATR0, START, catr, datr, dim, ior, ios, iot_dst, iot_src, iot_src2,
                           iot_src_dst)
from .driver import Bundle
from .values import (DATR_FIELDS, DIM_REG_SRC, DTYPES, FRACTAL_CODES, LAST, LOAD_CODES, PEMODE,
                     REG_DST, REG_SRC0, REG_SRC1, REG_SRC2, RELAYOUT_CODES, RESERVED_DATR_DTYPES,
                     RESERVED_LAYOUTS, RESERVED_START_DTYPES, SIZE_CODE, SRC_TILE0, START_DTYPE,
                     STORE_CODES, pick_one)

# mutation label -> weight (the fault each aims at in the comment)
MUTATIONS = {
    "wrong_direction": 4,        # TileLegality (CUBE code of the other direction)
    "lb_missing": 4,             # CUBE: TileLegality; ordinary: default 1
    "lb_zero": 3,                # CUBE: TileLegality; ordinary: default 1
    "lb_huge": 2,                # TileAllocation (shape vs TSize / model bound)
    "lb2_extra": 3,              # CUBE: TileLegality; ordinary: physical Col
    "lb_dup": 2,                 # BundleControl (LB write-once)
    "datr_dtype": 3,             # CUBE: DataType != 31 -> TileLegality; ordinary: != 0
    "datr_attr": 4,              # CMode/RMode/Sat/Canon set -> TileLegality
    "datr_pad_ordinary": 2,      # ordinary PadValue != 0 -> TileLegality
    "datr_dup": 2,               # BundleControl
    "relayout": 2,               # a relayout code on an ordinary bundle (DataType / PadValue too)
    "relayout_off_grid": 2,      # TLOAD to ZN/NZ with 1 or 2 FP64 columns -> TileLegality
    "ior_dup": 2,                # BundleControl
    "ior_surplus": 3,            # RegDst/RegSrc2 != 0 -> CUBE TileLegality / ordinary BundleControl
    "ios_add": 3,                # B.IOS: CUBE TileLegality, ordinary Unimplemented, mask checks
    "zero_mask_block": 3,        # all B.IOT PEMode 000: no-op, even if otherwise illegal
    "zero_mask_extra": 2,        # an extra PEMode-000 B.IOT: ignored
    "mask_mismatch": 3,          # TileLegality at the second B.IOT
    "iot_after_last": 3,         # BundleControl
    "iot_not_last": 3,           # CUBE TileLegality / ordinary BundleControl
    "iot_missing": 2,            # CUBE TileLegality / ordinary BundleControl
    "iot_extra": 2,              # binding counts
    "iot_wrong_form": 3,         # binding counts / forms
    "iot_src_other": 2,          # TSTORE source: another (unallocated, unmaterialized) tile
    "store_mask": 2,             # CUBE TSTORE mask outside the tile's mask -> TileLegality
    "fpatr": 1,                  # BundleControl (non-matrix block)
    "catr": 2,                   # trap -> BundlePostCommit, DR ok on TLSU, duplicate
    "start_op": 3,               # matrix / MGATHER.CAS / SPART start: TileLegality, Illegal, Unimpl.
    "start_dtype": 3,            # CUBE-illegal dtype -> TileLegality; reserved -> Illegal
    "reserved_field": 5,         # decode faults (IllegalInstruction)
    "header_outside": 3,         # BundleControl
    "bstop_extra": 2,            # BundleControl
    "drop_bstop": 3,             # next BSTART completes / stream ends mid-block
    "truncate": 3,               # stream ends mid-block
    "random_word": 3,            # anything
    "shuffle": 3,                # header order (legal)
    "odd_pc": 1,                 # Fault_InstructionPC
    "pc_wrap": 1,                # PC near 2^64 (fault address = PC)
}


# ----------------------------------------------------------------- bundle edits


def zero_all(bd: Bundle):
    for i, (t, w) in enumerate(bd.items):
        if t == "iot":
            bd.items[i] = (t, PEMODE.replace(w, 0))


def real_bundles(bundles):
    return [bd for bd in bundles if not bd.info.get("raw")]


def _target(rng, bundles, pred=lambda bd: True):
    cands = [bd for bd in real_bundles(bundles) if pred(bd)]
    return cands[int(rng.integers(0, len(cands)))] if cands else None


def set_datr(bd: Bundle, **kw):
    """Rewrite (or add) the B.DATR of a bundle, changing the given fields."""
    idx = bd.find("datr")
    cur = dict(layout=0, dtype=31, pad=3, cmode=0, rmode=0, sat=0, canon=0)
    if idx:
        w = bd.items[idx[0]][1]
        cur = {k: f.extract(w) for k, f in DATR_FIELDS.items()}
    cur.update(kw)
    word = datr(**cur)
    if idx:
        bd.items[idx[0]] = ("datr", word)
    else:
        bd.items.insert(0, ("datr", word))


def _iot_index(bd):
    idx = bd.find("iot")
    return idx[-1] if idx else None


def _iot_pemode(bd):
    i = _iot_index(bd)
    return PEMODE.extract(bd.items[i][1]) if i is not None else 1


def _on_target(pred=lambda bd: True):
    """A bundle mutation that edits one real bundle drawn among those `pred`
    accepts: (b, bundles) -> applied (False when there is none)."""
    def wrap(edit):
        @functools.wraps(edit)
        def mutate(b, bundles):
            bd = _target(b.rng, bundles, pred)
            return False if bd is None else edit(b, bd)
        return mutate
    return wrap


# ----------------------------------------------------------------- mutations


@_on_target(lambda x: x.info.get("op") in ("TLOAD", "TSTORE"))
def _m_wrong_direction(b, bd):
    codes = STORE_CODES if bd.info["op"] == "TLOAD" else LOAD_CODES
    set_datr(bd, layout=pick_one(b.rng, codes), dtype=31)
    return True


@_on_target(lambda x: x.find("dim0") or x.find("dim1"))
def _m_lb_missing(b, bd):
    idx = bd.find("dim0") + bd.find("dim1")
    del bd.items[pick_one(b.rng, idx)]
    return True


@_on_target()
def _m_lb_zero(b, bd):
    n = int(b.rng.integers(0, 2))
    tag = f"dim{n}"
    word = b.dim_word(n, 0)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(0, (tag, word))
    return True


@_on_target()
def _m_lb_huge(b, bd):
    n = int(b.rng.integers(0, 3)) if not bd.info.get("cube") else int(b.rng.integers(0, 2))
    tag = f"dim{n}"
    value = pick_one(b.rng, [0xFFFF, 0x8000, 4096, 257, int(b.rng.integers(100, 0x10000))])
    word = b.dim_word(n, value)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(0, (tag, word))
    return True


@_on_target(lambda x: not x.find("dim2"))
def _m_lb2_extra(b, bd):
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)),
                    ("dim2", b.dim_word(2, pick_one(b.rng, [1, 2, 8, 16, 64, 0, 3]))))
    return True


@_on_target(lambda x: any(t.startswith("dim") for t, _ in x.items))
def _m_lb_dup(b, bd):
    i = pick_one(b.rng, [k for k, (t, _) in enumerate(bd.items) if t.startswith("dim")])
    t, w = bd.items[i]
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), (t, w ^ (1 << 20)))
    return True


@_on_target()
def _m_datr_dtype(b, bd):
    if bd.info.get("cube"):
        set_datr(bd, dtype=pick_one(b.rng, list(DTYPES) + [0, 0]))
    else:
        set_datr(bd, dtype=pick_one(b.rng, list(DTYPES[1:]) + [31, 31]), pad=0)
    return True


@_on_target()
def _m_datr_attr(b, bd):
    which = pick_one(b.rng, ["cmode", "rmode", "sat", "canon", "cmode_reserved"])
    if which == "cmode":
        set_datr(bd, cmode=int(b.rng.integers(1, 6)))
    elif which == "cmode_reserved":
        set_datr(bd, cmode=int(b.rng.integers(6, 8)))
    elif which == "rmode":
        set_datr(bd, rmode=int(b.rng.integers(1, 8)))
    else:
        set_datr(bd, **{which: 1})
    if not bd.info.get("cube") and len(bd.find("datr")) == 1:
        set_datr(bd, dtype=0, pad=0)
    b.notes.append(f"datr_attr:{which}")
    return True


@_on_target(lambda x: not x.info.get("cube"))
def _m_datr_pad_ordinary(b, bd):
    set_datr(bd, layout=0, dtype=0, pad=int(b.rng.integers(1, 4)))
    return True


@_on_target()
def _m_datr_dup(b, bd):
    if not bd.find("datr"):
        set_datr(bd, layout=0, dtype=0, pad=0)
    w = bd.items[bd.find("datr")[0]][1]
    bd.items.insert(int(b.rng.integers(bd.find("datr")[0] + 1, len(bd.items) + 1)), ("datr", w))
    return True


@_on_target(lambda x: not x.info.get("cube"))
def _m_relayout(b, bd):
    # mostly applicable fields (DataType raw 0, PadValue 0); sometimes not
    dt = 0 if b.rng.random() < 0.6 else pick_one(b.rng, [31] + list(DTYPES))
    pad = 0 if b.rng.random() < 0.7 else int(b.rng.integers(1, 4))
    set_datr(bd, layout=pick_one(b.rng, RELAYOUT_CODES), dtype=dt, pad=pad)
    return True


@_on_target(lambda x: x.info.get("op") == "TLOAD" and not x.info.get("cube"))
def _m_relayout_off_grid(b, bd):
    # a ZN/NZ destination narrower than one 32-byte fractal row (4 FP64 columns):
    # allocated, then not generically indexable
    set_datr(bd, layout=pick_one(b.rng, FRACTAL_CODES), dtype=0, pad=0)
    cols = pick_one(b.rng, [1, 2])
    for t in ("dim0", "dim2"):
        for i in bd.find(t):
            bd.items[i] = (t, dim(int(t[-1]), 1 if t == "dim0" else cols))
    if not bd.find("dim2"):
        bd.items.insert(0, ("dim2", dim(2, cols)))
    return True


@_on_target()
def _m_ior_dup(b, bd):
    if not bd.find("ior"):
        bd.items.insert(0, ("ior", ior(0, 0)))
    i = bd.find("ior")[0]
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), ("ior", bd.items[i][1]))
    return True


@_on_target()
def _m_ior_surplus(b, bd):
    w = bd.items[bd.find("ior")[0]][1] if bd.find("ior") else ior(0, 0)
    if b.rng.random() < 0.5:
        w |= REG_DST.insert(int(b.rng.integers(1, 24)))
    else:
        w |= REG_SRC2.insert(int(b.rng.integers(1, 24)))
    if bd.find("ior"):
        bd.items[bd.find("ior")[0]] = ("ior", w)
    else:
        bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ior", w))
    return True


@_on_target()
def _m_ios_add(b, bd):
    pm = _iot_pemode(bd) if b.rng.random() < 0.6 else int(b.rng.integers(0, 8))
    word = ios(int(b.rng.integers(0, 256)), pm, 0 if b.rng.random() < 0.5 else int(b.rng.integers(1, 13)))
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ios", word))
    if b.rng.random() < 0.2:                              # same SharedTID twice
        bd.items.append(("ios", word))
    return True


@_on_target()
def _m_zero_mask_block(b, bd):
    zero_all(bd)
    return True


@_on_target()
def _m_zero_mask_extra(b, bd):
    w = pick_one(b.rng, [iot_dst(int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11)), 0, 1),
                      iot_src(int(b.rng.integers(0, 64)), 0, 1),
                      iot_src2(int(b.rng.integers(0, 64)), int(b.rng.integers(0, 64)), 0, 0)])
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("iot0", w))
    return True


@_on_target(lambda x: x.find("iot"))
def _m_mask_mismatch(b, bd):
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    other = pick_one(b.rng, [p for p in range(1, 8) if p != pm])
    w = bd.items[i][1]
    extra = LAST.replace(PEMODE.replace(w, other), 0)     # same binding, other mask, L=0
    bd.items.insert(i, ("iot", extra))
    return True


@_on_target(lambda x: x.find("iot"))
def _m_iot_after_last(b, bd):
    i = _iot_index(bd)
    w = bd.items[i][1]
    if b.rng.random() < 0.3:
        w = PEMODE.replace(w, int(b.rng.integers(1, 8)))
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), ("iot", w))
    return True


@_on_target(lambda x: x.find("iot"))
def _m_iot_not_last(b, bd):
    i = _iot_index(bd)
    bd.items[i] = ("iot", LAST.replace(bd.items[i][1], 0))
    return True


@_on_target(lambda x: x.find("iot"))
def _m_iot_missing(b, bd):
    del bd.items[_iot_index(bd)]
    return True


@_on_target(lambda x: x.find("iot"))
def _m_iot_extra(b, bd):
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    extra = pick_one(b.rng, [iot_dst(int(b.rng.integers(0, 4)), 1, pm, 0), iot_src(1, pm, 0),
                          iot_src2(0, 1, pm, 0)])
    bd.items.insert(i, ("iot", extra))
    return True


@_on_target(lambda x: x.find("iot"))
def _m_iot_wrong_form(b, bd):
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    src = bd.info.get("src", bd.info.get("index", 0))
    w = pick_one(b.rng, [iot_src(src, pm, 1), iot_dst(int(b.rng.integers(0, 4)), 1, pm, 1),
                      iot_src_dst(src, int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11)), pm, 1),
                      iot_src2(src, int(b.rng.integers(0, 64)), pm, 1)])
    bd.items[i] = ("iot", w)
    return True


@_on_target(lambda x: x.info.get("op") == "TSTORE" and x.find("iot"))
def _m_iot_src_other(b, bd):
    i = _iot_index(bd)
    w = bd.items[i][1]
    src = pick_one(b.rng, [int(b.rng.integers(0, 64)), b.m.hand_slots, 16 + b.m.hand_slots,
                        (bd.info.get("src", 0) + 1) % 64])
    bd.items[i] = ("iot", SRC_TILE0.replace(w, src))
    return True


@_on_target(lambda x: x.info.get("op") == "TSTORE" and x.find("iot"))
def _m_store_mask(b, bd):
    i = _iot_index(bd)
    w = bd.items[i][1]
    bd.items[i] = ("iot", PEMODE.replace(w, int(b.rng.integers(1, 8))))
    return True


@_on_target()
def _m_fpatr(b, bd):
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("fpatr", FPATR0))
    return True


@_on_target()
def _m_catr(b, bd):
    rng = b.rng
    w = catr(trap=int(rng.random() < 0.6), dr=int(rng.random() < 0.4), atom=int(rng.integers(0, 2)),
             aq=int(rng.integers(0, 2)), rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
    bd.items.insert(int(rng.integers(0, len(bd.items) + 1)), ("catr", w))
    if rng.random() < 0.15:
        bd.items.append(("catr", catr()))
    return True


@_on_target()
def _m_start_op(b, bd):
    op = pick_one(b.rng, ["TSTORE.SPART", "MGATHER.CAS", "TMATMUL", "TMATMUL.ACC", "TMATMULMX",
                       "TGEMV", "TGEMVMX.ACC", "TLOAD" if bd.info.get("op") == "TSTORE" else "TSTORE"])
    bd.start = (bd.start & 0xF8000000) | START[op]
    b.notes.append(f"start_op:{op}")
    return True


@_on_target()
def _m_start_dtype(b, bd):
    if b.rng.random() < 0.35:
        dt = pick_one(b.rng, RESERVED_START_DTYPES)
    else:
        dt = pick_one(b.rng, [0, 14, 16, 24] + list(DTYPES))
    bd.start = START_DTYPE.replace(bd.start, dt)
    return True


def _reserved_word(rng, kind: str, w: int) -> int:
    """A word of this command kind with a reserved value in a field, or bits
    that are no field (reserved or fixed: the raw shifts) set or flipped."""
    if kind == "datr":
        return pick_one(rng, [DATR_FIELDS["layout"].replace(w, pick_one(rng, RESERVED_LAYOUTS)),
                           DATR_FIELDS["dtype"].replace(w, pick_one(rng, RESERVED_DATR_DTYPES)),
                           w | int(rng.integers(1, 4)) << 18,       # fixed bits 19:18
                           DATR_FIELDS["cmode"].replace(w, 6)])
    if kind.startswith("dim"):
        return pick_one(rng, [DIM_REG_SRC.replace(w, int(rng.integers(24, 32))),
                           (w & ~(7 << 12)) | int(rng.integers(3, 8)) << 12])   # funct3
    if kind == "ior":
        return pick_one(rng, [w | int(rng.integers(1, 4)) << 25,           # fixed bits 26:25
                           REG_SRC0.replace(w, int(rng.integers(24, 32))),
                           REG_SRC1.replace(w, int(rng.integers(24, 32))),
                           REG_DST.replace(w, int(rng.integers(24, 32)))])
    if kind == "iot":
        return pick_one(rng, [SIZE_CODE.replace(w, int(rng.integers(11, 16))),
                           w | int(rng.integers(1, 1 << 12)) << 20,         # fixed bits 31:20
                           (w & ~(7 << 12)) | 7 << 12,                      # funct3
                           w ^ (1 << int(rng.integers(0, 7)))])             # opcode
    if kind == "start":
        return pick_one(rng, [START_DTYPE.replace(w, pick_one(rng, RESERVED_START_DTYPES)),
                           w | int(rng.integers(1, 4)) << 25,               # fixed bits 26:25
                           w ^ (1 << int(rng.integers(7, 25)))])
    return w ^ (1 << int(rng.integers(0, 32)))


@_on_target()
def _m_reserved_field(b, bd):
    rng = b.rng
    if rng.random() < 0.2 or not bd.items:
        bd.start = _reserved_word(rng, "start", bd.start)
        return True
    i = int(rng.integers(0, len(bd.items)))
    t, w = bd.items[i]
    bd.items[i] = (t, _reserved_word(rng, t, w))
    b.notes.append(f"reserved:{t}")
    return True


def _m_header_outside(b, bundles):
    rng = b.rng
    w = pick_one(rng, [datr(22, 31, 1), dim(0, 3), ior(0, 0), iot_dst(0, 1, 1, 1), ios(2, 1),
                    catr(), FPATR0, iot_src(0, 0, 1)])
    raw = Bundle(0, [("outside", w)], False, dict(raw=True))
    if rng.random() < 0.5:
        bundles.insert(0, raw)
    else:
        bundles.append(raw)
    return True


def _m_bstop_extra(b, bundles):
    bundles.insert(int(b.rng.integers(0, len(bundles) + 1)),
                   Bundle(0, [("bstop", BSTOP)], False, dict(raw=True)))
    return True


@_on_target(lambda x: x.stop)
def _m_drop_bstop(b, bd):
    bd.stop = False
    return True


@_on_target(lambda x: len(x.items) > 1)
def m_shuffle(b, bd):
    iots = [it for it in bd.items if it[0] == "iot"]
    rest = [it for it in bd.items if it[0] != "iot"]
    b.rng.shuffle(rest)
    # keep the B.IOT order, interleave at random positions
    out = list(rest)
    for it in iots:
        pos = int(b.rng.integers(0, len(out) + 1))
        later = [k for k, x in enumerate(out) if x[0] == "iot"]
        if later:
            pos = max(pos, later[-1] + 1)
        out.insert(pos, it)
    bd.items = out
    return True


# stream-level mutations (applied to the flattened words)
STREAM_MUTATIONS = ("truncate", "random_word", "odd_pc", "pc_wrap")


BUNDLE_MUTATIONS = {
    "wrong_direction": _m_wrong_direction, "lb_missing": _m_lb_missing, "lb_zero": _m_lb_zero,
    "lb_huge": _m_lb_huge, "lb2_extra": _m_lb2_extra, "lb_dup": _m_lb_dup,
    "datr_dtype": _m_datr_dtype, "datr_attr": _m_datr_attr,
    "datr_pad_ordinary": _m_datr_pad_ordinary, "datr_dup": _m_datr_dup, "relayout": _m_relayout,
    "relayout_off_grid": _m_relayout_off_grid,
    "ior_dup": _m_ior_dup, "ior_surplus": _m_ior_surplus, "ios_add": _m_ios_add,
    "zero_mask_block": _m_zero_mask_block, "zero_mask_extra": _m_zero_mask_extra,
    "mask_mismatch": _m_mask_mismatch, "iot_after_last": _m_iot_after_last,
    "iot_not_last": _m_iot_not_last, "iot_missing": _m_iot_missing, "iot_extra": _m_iot_extra,
    "iot_wrong_form": _m_iot_wrong_form, "iot_src_other": _m_iot_src_other,
    "store_mask": _m_store_mask, "fpatr": _m_fpatr, "catr": _m_catr, "start_op": _m_start_op,
    "start_dtype": _m_start_dtype, "reserved_field": _m_reserved_field,
    "header_outside": _m_header_outside, "bstop_extra": _m_bstop_extra,
    "drop_bstop": _m_drop_bstop, "shuffle": m_shuffle,
}


assert set(BUNDLE_MUTATIONS) | set(STREAM_MUTATIONS) == set(MUTATIONS)
