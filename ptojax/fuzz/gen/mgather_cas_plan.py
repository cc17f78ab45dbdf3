"""The plan of an MGATHER.CAS case (state-and-transport.md D): transfer and
index dtypes, the destination's shape, layout and TSize, the lane addresses
and their memory, the Expected / Replacement values and the three source
tiles; and the plan-level mutations (`CAS_PLAN_MUTATIONS`), which edit it
before placement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

import numpy as np

from ... import tables
from .driver import Builder
from .values import (BITS, CELL, CODE_LAYOUT, CUBE_DTYPES, DTYPES, INT_DTYPES, LOAD_CODES, MASK64,
                     NONINT_DTYPES, PACKED_DTYPES, SIGNED, elem_bytes, pick_one, rand_bits, rand_value,
                     size_for_bytes, weighted_key)

CAS_DTYPES = tuple(d for d in DTYPES if BITS[d] >= 8)                        # legal transfer dtypes
# destination layout -> the B.DATR Layout codes selecting it (D; the model's
# TileDataLayoutDestinationLayout); CUBE codes 21..26 take the CUBE path
CAS_LAYOUT_CODES = {"RowMajor": (0, 6, 17, 27), "ColumnMajor": (1, 18, 28), "ZN": (3, 8, 30),
                    "NZ": (4, 9, 20)}


@dataclass
class CasSource:
    """One source tile and the TLOAD that makes it."""
    role: str                     # "index" | "expected" | "replacement"
    dt: int
    values: list                  # rows of raw element bits (VR x VC)
    col: int = 1                  # physical Col of the loaded tile
    hand: int = 0
    size: int = 1
    pemode: int = 1
    in_stream: bool = False
    cube: int = 0                 # CUBE load code (21..23) instead of an ordinary load
    index: int = -1               # TileIndex once placed

    @property
    def vr(self) -> int:
        return len(self.values)

    @property
    def vc(self) -> int:
        return len(self.values[0])

    @property
    def capacity(self) -> int:
        return 128 << (self.size - 1)


@dataclass
class CasPlan:
    td: int                       # transfer dtype (BSTART DataType)
    idt: int                      # index dtype
    vr: int
    vc: int
    col: int
    lb: dict                      # n -> encoded LBn value (absent n: no B.DIM)
    layout: str
    datr: Optional[dict]          # datr() fields, None: no B.DATR
    hand: int
    size: int
    pemode: int
    base: int
    base_mode: str
    addrs: list                   # lane addresses, row-major
    mem: dict                     # address -> initial raw value
    expected: list
    replacement: list
    src_region: tuple
    lane_region: tuple
    sources: list = field(default_factory=list)
    hand2: int = 0                # cas_twice: the second bundle's destination hand
    hand_full: bool = False
    budget: bool = False
    undefine_role: Optional[str] = None
    unallocated_role: Optional[str] = None

    @property
    def bits(self) -> int:
        return BITS[self.td]

    @property
    def ebytes(self) -> int:
        return elem_bytes(BITS[self.td])

    def source(self, role: str) -> CasSource:
        return next(s for s in self.sources if s.role == role)


def _representable(disp: int, dt: int) -> bool:
    """Does an index element of dtype `dt` sign/zero-extend to this 64-bit displacement?"""
    bits = BITS[dt]
    disp &= MASK64
    if bits >= 64 or dt not in INT_DTYPES:
        return True
    if SIGNED[dt]:
        v = disp - (1 << 64) if disp >> 63 else disp
        return -(1 << (bits - 1)) <= v < (1 << (bits - 1))
    return disp < (1 << bits)


def _representable_addresses(lo: int, hi: int, step: int, base: int, dt: int) -> list:
    """The addresses lo, lo + step, ... below hi whose displacement from `base` an
    index element of dtype `dt` holds (_representable, for a whole range at once)."""
    a = np.arange(lo, hi, step, dtype=np.int64)
    bits = BITS[dt]
    if bits >= 64 or dt not in INT_DTYPES:
        return a.tolist()
    with np.errstate(over="ignore"):
        disp = a.astype(np.uint64) - np.uint64(base & MASK64)      # mod 2^64
    if SIGNED[dt]:
        v = disp.view(np.int64)
        keep = (v >= -(1 << (bits - 1))) & (v < (1 << (bits - 1)))
    else:
        keep = disp < np.uint64(1 << bits)
    return a[keep].tolist()


def _cas_rows(size: int, col: int, bits: int) -> int:
    """Derived rows of a TSize code (C.7 step 4); 0 when not derivable."""
    cap_bits = (128 << (size - 1)) * 8
    if col <= 0 or col & (col - 1) or cap_bits % (col * bits):
        return 0
    rows = cap_bits // (col * bits)
    return rows if 1 <= rows <= 65535 else 0


def _fractal_ok(layout: str, rows: int, col: int, bits: int) -> bool:
    return layout not in ("ZN", "NZ") or (rows % 16 == 0 and col % max(1, 256 // bits) == 0)


def _cas_size_ok(size, vr, vc, col, bits, W, layout="RowMajor") -> bool:
    rows = _cas_rows(size, col, bits)
    return (rows > 0 and vr <= rows and vc <= col and vr * vc <= (128 << (size - 1)) * 8 // bits
            and rows * col <= W and _fractal_ok(layout, rows, col, bits))


def _cas_base(b: Builder, idt: int, e: int, region: tuple):
    """(base, mode, candidate lane addresses): aligned addresses in the lane region
    whose displacement from base the index dtype can hold."""
    rng = b.rng
    lo, hi = region
    allowed = {"low": 4, "mid": 3, "high": 1.5, "wrap": 1, "huge": 0.7}
    if lo == 0:
        allowed["zero"] = 1.2
    for _ in range(4):
        mode = weighted_key(rng, allowed)
        if mode == "low":
            base = lo + int(rng.integers(0, 64))
        elif mode == "mid":
            base = int(rng.integers(lo, hi))
        elif mode == "zero":
            base = 0
        elif mode == "high":
            base = hi + int(rng.integers(0, 256))
        elif mode == "wrap":
            base = (1 << 64) - int(rng.integers(1, 2048))
        else:
            base = rand_bits(rng, 64)
        cands = _representable_addresses(lo, hi - e + 1, e, base, idt)
        if cands:
            return base, mode, cands
    base = lo
    return base, "low", _representable_addresses(lo, hi - e + 1, e, base, idt)


def _cas_types(rng, kind: str, muts: list) -> tuple:
    """(transfer dtype, index dtype): each from the first pool whose need holds."""
    wide = kind == "cas_wide"
    td_pools = (("cas_packed" in muts, PACKED_DTYPES),
                ("cas_lane_misaligned" in muts, [d for d in CAS_DTYPES if BITS[d] >= 16]),
                (wide, [d for d in CAS_DTYPES if BITS[d] <= 16]), (True, CAS_DTYPES))
    idt_pools = (("cas_index_float" in muts, NONINT_DTYPES),
                 ("cas_lane_oob" in muts, [d for d in INT_DTYPES if BITS[d] >= 16]),
                 (wide, [d for d in INT_DTYPES if BITS[d] <= 32]), (True, INT_DTYPES))
    td = pick_one(rng, next(pool for need, pool in td_pools if need))
    return td, pick_one(rng, next(pool for need, pool in idt_pools if need))


def _cas_layout(rng, kind: str, muts: list) -> tuple:
    """(destination layout, its B.DATR Layout code; 0 mostly for RowMajor)."""
    layout = "RowMajor"
    if "cas_fractal" in muts:
        layout = pick_one(rng, ["ZN", "NZ"])
    elif kind == "cas_layout" or rng.random() < 0.08:
        layout = pick_one(rng, ["ColumnMajor", "ZN", "NZ", "ColumnMajor", "RowMajor"])
    code = pick_one(rng, CAS_LAYOUT_CODES[layout])
    if layout == "RowMajor" and kind != "cas_layout" and rng.random() < 0.8:
        code = 0
    return layout, code


def _cas_shape(b: Builder, kind: str, muts: list, bits: int) -> Optional[tuple]:
    """(VR, VC, layout, Layout code, Col, TSize) of the destination, or None
    when no TSize holds it (fractal-aligned when the layout asks for it)."""
    rng, W = b.rng, b.m.tile_words
    if kind == "cas_wide":
        vr, vc = int(rng.integers(1, 9)), int(rng.integers(4, 13))
    else:
        vr, vc = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    if (kind == "cas_dup" and vr * vc < 2) or ("cas_vc_gt_col" in muts and vc < 2):
        vc = int(rng.integers(2, 9))
    layout, code = _cas_layout(rng, kind, muts)
    fractal = layout in ("ZN", "NZ") and "cas_fractal" not in muts
    col = 1 << (vc - 1).bit_length()
    if rng.random() < 0.3:
        col <<= int(rng.integers(1, 3))
    if fractal:
        col = max(col, 256 // bits)

    def sizes_for(c):
        out = [s for s in range(1, 11) if _cas_size_ok(s, vr, vc, c, bits, W, layout if fractal else "RowMajor")]
        if "cas_fractal" in muts:
            out = [s for s in out if not _fractal_ok(layout, _cas_rows(s, c, bits), c, bits)]
        return out

    sizes = sizes_for(col)
    if not sizes and fractal:                  # no fractal shape fits tile_words: ColumnMajor
        layout, fractal = "ColumnMajor", False
        code = pick_one(rng, CAS_LAYOUT_CODES[layout])
        col = 1 << (vc - 1).bit_length()
        sizes = sizes_for(col)
    while not sizes and col > max(vc, 1) and not fractal:
        col //= 2
        sizes = sizes_for(col)
    if not sizes:
        return None
    size = sizes[0] if rng.random() < 0.6 else pick_one(rng, sizes)
    return vr, vc, layout, code, col, size


def _cas_header(rng, vr: int, vc: int, col: int, code: int) -> tuple:
    """(LBn values, B.DATR fields or None): the defaults sometimes explicit."""
    lb = {0: vc}
    if vr != 1 or rng.random() < 0.5:
        lb[1] = vr
    if col != vc or rng.random() < 0.4:
        lb[2] = col
    datr_f = None
    if code != 0 or rng.random() < 0.5:
        datr_f = dict(layout=code, dtype=0, pad=int(rng.integers(0, 4)), cmode=0, rmode=0, sat=0,
                      canon=0)
    return lb, datr_f


def _cas_lanes(b: Builder, kind: str, idt: int, e: int, n: int) -> tuple:
    """(source region, lane region, base, base mode, n lane addresses): GM in
    halves, the lanes on aligned addresses the index dtype reaches from base
    (a few of them, shared by many lanes, for cas_dup)."""
    rng = b.rng
    half = b.gm_bytes // 2
    regions = [(0, half), (half, b.gm_bytes)]
    if rng.random() < 0.5:
        regions.reverse()
    src_region, lane_region = regions
    if idt in INT_DTYPES:
        base, base_mode, cands = _cas_base(b, idt, e, lane_region)
    else:                                       # float index: the block faults before the lanes
        base, base_mode = lane_region[0], "low"
        cands = list(range(lane_region[0], lane_region[1] - e + 1, e))
    if kind == "cas_dup":
        g = 1 if n <= 3 or rng.random() < 0.4 else int(rng.integers(2, 4))
        g = min(g, len(cands))
        group = [int(a) for a in rng.choice(cands, g, replace=False)]
        w = rng.dirichlet(np.ones(g) * 0.8) if g > 1 else np.ones(1)
        addrs = [group[int(rng.choice(g, p=w))] for _ in range(n)]
    elif len(cands) >= n and rng.random() < 0.9:
        addrs = [int(a) for a in rng.choice(cands, n, replace=False)]
    else:
        addrs = [int(a) for a in rng.choice(cands, n, replace=True)]
        b.notes.append("lanes:repeats")
    return src_region, lane_region, base, base_mode, addrs


def _cas_values(b: Builder, kind: str, addrs: list, bits: int) -> tuple:
    """(initial memory {address: raw value}, Expected, Replacement): for
    cas_dup each address's lanes compare against a small alphabet of values,
    so that the order of the lanes decides which succeed."""
    rng = b.rng
    mask = (1 << bits) - 1
    mem = {a: rand_value(rng, bits) for a in sorted(set(addrs))}
    expected, replacement = [], []
    if kind == "cas_dup":
        alphabet = {a: [mem[a]] + [rand_value(rng, bits) for _ in range(int(rng.integers(1, 4)))]
                    for a in mem}
        for a in addrs:
            al = alphabet[a]
            p = np.array([0.45, 0.3, 0.15, 0.1][: len(al)])
            x = al[int(rng.choice(len(al), p=p / p.sum()))]
            others = [v for v in al if v != x]
            y = pick_one(rng, others) if others and rng.random() < 0.85 else rand_value(rng, bits)
            expected.append(x)
            replacement.append(y)
        b.notes.append(f"dup:{len(mem)} address(es) for {len(addrs)} lanes")
        return mem, expected, replacement
    for a in addrs:
        u = rng.random()
        if u < 0.5:
            x = mem[a]
        elif u < 0.65:
            x = mem[a] ^ (1 << (bits - 1))            # e.g. -0.0 vs +0.0: raw bits differ
        else:
            x = rand_value(rng, bits)
        expected.append(x & mask)
        replacement.append(rand_value(rng, bits))
    return mem, expected, replacement


def _cas_sources(rng, plan: CasPlan, muts: list, W: int) -> list:
    """The Index (lane displacements from base), Expected and Replacement tiles."""
    vr, vc, idt = plan.vr, plan.vc, plan.idt
    ibits = BITS[idt]
    index_vals = [((a - plan.base) & ((1 << ibits) - 1)) if idt in INT_DTYPES else rand_bits(rng, ibits)
                  for a in plan.addrs]

    def rows(vals):
        return [list(vals[r * vc:(r + 1) * vc]) for r in range(vr)]

    edt = rdt = plan.td
    if "cas_packed" in muts and rng.random() < 0.4:          # sources of some other dtype
        edt = rdt = pick_one(rng, [d for d in DTYPES if BITS[d] == 8])
    sources = [CasSource("index", idt, rows(index_vals)),
               CasSource("expected", edt, rows([v & ((1 << BITS[edt]) - 1) for v in plan.expected])),
               CasSource("replacement", rdt,
                          rows([v & ((1 << BITS[rdt]) - 1) for v in plan.replacement]))]
    for s in sources:
        _size_source(rng, s, W)
    return sources


def cas_draw(b: Builder, kind: str, muts: list) -> Optional[CasPlan]:
    """A legal plan honouring what the drawn mutations need (types, shapes)."""
    rng = b.rng
    td, idt = _cas_types(rng, kind, muts)
    bits = BITS[td]
    shape = _cas_shape(b, kind, muts, bits)
    if shape is None:
        return None
    vr, vc, layout, code, col, size = shape
    lb, datr_f = _cas_header(rng, vr, vc, col, code)
    src_region, lane_region, base, base_mode, addrs = _cas_lanes(b, kind, idt, elem_bytes(bits), vr * vc)
    if idt in INT_DTYPES and BITS[idt] == 4:
        # the model keeps a 4-bit Index in packed carriers and MGATHER.CAS reads
        # its raw Word e: lane e gets element 16e, 0 past the loaded elements
        # (docs/spec-notes.md row 58). An Index of zeros from a lane address as
        # the base sends every lane where the plan says, whatever the geometry
        base, base_mode, addrs = addrs[0], "index4", [addrs[0]] * len(addrs)
    mem, expected, replacement = _cas_values(b, kind, addrs, bits)
    hand = int(rng.integers(0, 4))
    plan = CasPlan(td=td, idt=idt, vr=vr, vc=vc, col=col, lb=lb, layout=layout, datr=datr_f,
                    hand=hand, size=size, pemode=int(rng.integers(1, 8)), base=base,
                    base_mode=base_mode, addrs=addrs, mem=mem, expected=expected,
                    replacement=replacement, src_region=src_region, lane_region=lane_region,
                    hand2=int(rng.integers(0, 4)) if rng.random() < 0.5 else hand)
    plan.sources = _cas_sources(rng, plan, muts, b.m.tile_words)
    b.notes.append(f"cas:{tables.DTYPE_BY_CODE[td].name}/{vr}x{vc}/col{col}/size{size}/"
                   f"{layout}(code {code if datr_f else '-'})/index {tables.DTYPE_BY_CODE[idt].name}/"
                   f"base {base_mode}")
    return plan


def _size_source(rng, s: CasSource, W: int):
    """Physical Col (a power of two >= VC, sometimes more) and a TSize that holds it."""
    bits = BITS[s.dt]
    s.col = 1 << (s.vc - 1).bit_length()
    if rng.random() < 0.25 and s.vr * s.col * 2 <= W:
        s.col *= 2
    s.size = size_for_bytes((s.vr * s.col * bits + 7) // 8)
    if rng.random() < 0.2 and s.size < 10:
        s.size += 1
    s.pemode = int(rng.integers(1, 8))


def _cube_source(rng, s: CasSource, W: int) -> bool:
    """Turn a source into a CUBE load (its dtype must have a CELL class)."""
    if s.dt not in CUBE_DTYPES:
        return False
    bits = BITS[s.dt]
    codes = []
    for code in LOAD_CODES:
        lay = CODE_LAYOUT[code]
        cr, cc = CELL[(lay, bits)]
        if lay == "N8":
            cells = -(-s.vr // cr) * -(-s.vc // 8)
        else:
            if s.vr > cr:
                continue
            cells = -(-s.vc // cc)
        if cells * cr * cc <= W:
            codes.append((code, cells))
    if not codes:
        return False
    s.cube, cells = pick_one(rng, codes)
    s.size = size_for_bytes(cells * 128)
    return True


# ---- plan-level mutations (before placement)


def _cp_vc_gt_col(b, plan):
    if plan.vc < 2:
        return False
    plan.lb[2] = pick_one(b.rng, [1 << k for k in range(8) if 1 << k < plan.vc])
    return True


def _cp_col_not_pow2(b, plan):
    vc = plan.vc
    if vc & (vc - 1) and b.rng.random() < 0.4:
        plan.lb.pop(2, None)                      # LB2 absent: Col = ValidCol, not a power of two
        b.notes.append("col:absent")
        return True
    plan.lb[2] = pick_one(b.rng, [x for x in range(max(vc, 3), max(vc, 3) + 12) if x & (x - 1)])
    return True


def _cp_tsize(b, plan):
    W, bits = b.m.tile_words, plan.bits
    lay = plan.layout if plan.layout in ("ZN", "NZ") else "RowMajor"
    ok = [s for s in range(1, 11) if _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W, lay)]
    small = [s for s in range(1, min(ok)) if not _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W)] \
        if ok else []                          # fail the allocation itself, not D.4 step 7
    big = [s for s in range(max(ok) + 1 if ok else 1, 11)
           if _cas_rows(s, plan.col, bits) and not _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W)]
    if small and (not big or b.rng.random() < 0.6):
        plan.size = pick_one(b.rng, small)
        b.notes.append(f"tsize:small {plan.size}")
    elif big:
        plan.size = pick_one(b.rng, big)
        b.notes.append(f"tsize:big {plan.size}")
    else:
        return False
    return True


def _cp_hand_full(b, plan):
    plan.hand_full = True
    return True


def _cp_budget(b, plan):
    plan.budget = True
    return True


def _set_lane_address(plan, lane: int, address: int):
    """Move one lane: its address and its Index element (if the Index tile is still VR x VC)."""
    address &= MASK64
    plan.addrs[lane] = address
    s = plan.source("index")
    if (s.vr, s.vc) == (plan.vr, plan.vc):
        s.values[lane // plan.vc][lane % plan.vc] = (address - plan.base) & ((1 << BITS[s.dt]) - 1)


def _move_lane(b: Builder, plan: CasPlan, what: str, addresses) -> bool:
    """Move the first, middle or last lane to one of addresses(its address) the
    index dtype reaches from base (False when none does)."""
    rng, n = b.rng, len(plan.addrs)
    where = pick_one(rng, ["first", "middle", "last"])
    lane = {"first": 0, "middle": n // 2, "last": n - 1}[where]
    if plan.idt in INT_DTYPES and BITS[plan.idt] == 4:
        where, lane = "first", 0        # of a 4-bit Index only lane 0 reads its own element (cas_draw)
    opts = [a for a in addresses(plan.addrs[lane]) if _representable(a - plan.base, plan.idt)]
    if not opts:
        return False
    _set_lane_address(plan, lane, pick_one(rng, opts))
    b.notes.append(f"{what}:{where} lane {lane} @ {plan.addrs[lane]:#x}")
    return True


def _cp_lane_oob(b, plan):
    if plan.idt not in INT_DTYPES:
        return False
    e, n = plan.ebytes, b.gm_bytes

    def past_gm(_):
        opts = [n + e * k for k in range(0, 4)] + [(1 << 64) - e * k for k in range(1, 5)] \
            + [n + 4096 * int(b.rng.integers(1, 64))]
        return [a for a in opts if a % e == 0]

    return _move_lane(b, plan, "oob", past_gm)


def _cp_lane_misaligned(b, plan):
    if plan.idt not in INT_DTYPES or plan.ebytes < 2:
        return False
    e = plan.ebytes
    return _move_lane(b, plan, "misaligned", lambda a: [(a + k) & MASK64 for k in range(1, e)]
                      + [(a - k) & MASK64 for k in range(1, e)])


def _cp_src_dtype(b, plan):
    cands = [s for s in plan.sources if s.role != "index" and not s.cube]
    if not cands:
        return False
    s = pick_one(b.rng, cands)
    s.dt = pick_one(b.rng, [d for d in DTYPES if d != plan.td])
    m = (1 << BITS[s.dt]) - 1
    s.values = [[v & m for v in row] for row in s.values]
    _size_source(b.rng, s, b.m.tile_words)
    b.notes.append(f"src_dtype:{s.role}={tables.DTYPE_BY_CODE[s.dt].name}")
    return True


def _cp_src_shape(b, plan):
    rng = b.rng
    cands = [s for s in plan.sources if not s.cube]
    if not cands:
        return False
    s = pick_one(rng, cands)
    while True:
        vr, vc = int(rng.integers(1, plan.vr + 2)), int(rng.integers(1, plan.vc + 2))
        if (vr, vc) != (plan.vr, plan.vc):
            break
    s.values = [[rand_bits(rng, BITS[s.dt]) for _ in range(vc)] for _ in range(vr)]
    _size_source(rng, s, b.m.tile_words)
    b.notes.append(f"src_shape:{s.role}={vr}x{vc}")
    return True


def _cp_src_undefined(b, plan):
    cands = [s.role for s in plan.sources if not s.cube]
    if not cands:
        return False
    plan.undefine_role = pick_one(b.rng, cands)
    return True


def _cp_src_unallocated(b, plan):
    plan.unallocated_role = pick_one(b.rng, ["index", "expected", "replacement"])
    return True


def _cp_src_cube(b, plan):
    roles = [s for s in plan.sources if s.dt in CUBE_DTYPES and s.role != plan.undefine_role]
    if not roles:
        return False
    s = pick_one(b.rng, roles)
    if not _cube_source(b.rng, s, b.m.tile_words):
        return False
    b.notes.append(f"src_cube:{s.role} code {s.cube}")
    return True


CAS_PLAN_MUTATIONS: dict[str, Optional[Callable[[Builder, CasPlan], bool]]] = {
    # satisfied by cas_draw itself
    "cas_packed": None, "cas_index_float": None, "cas_fractal": None,
    "cas_vc_gt_col": _cp_vc_gt_col, "cas_col_not_pow2": _cp_col_not_pow2, "cas_tsize": _cp_tsize,
    "cas_hand_full": _cp_hand_full, "cas_budget": _cp_budget, "cas_lane_oob": _cp_lane_oob,
    "cas_lane_misaligned": _cp_lane_misaligned, "cas_src_dtype": _cp_src_dtype,
    "cas_src_shape": _cp_src_shape, "cas_src_undefined": _cp_src_undefined,
    "cas_src_unallocated": _cp_src_unallocated, "cas_src_cube": _cp_src_cube,
}


def cas_plan_mutate(b: Builder, plan: CasPlan, mutations: list) -> list:
    """Apply the plan-level mutations; the labels that took (the ones the draw
    satisfies when it did)."""
    applied = []
    for m in mutations:
        f: Optional[Callable[[Builder, CasPlan], bool]] | Literal[False] = CAS_PLAN_MUTATIONS.get(m, False)
        if f is None:                         # satisfied by the draw
            ok = {"cas_packed": BITS[plan.td] == 4, "cas_index_float": plan.idt not in INT_DTYPES,
                  "cas_fractal": plan.layout in ("ZN", "NZ")}[m]
            if ok:
                applied.append(m)
        elif f and f(b, plan):
            applied.append(m)
    return applied
