"""Shared TLOAD / TSTORE / TSTORE.SPART programs (docs/shared-decisions.md
sections 3-4): the Shared registers cooperative cases load their operands
into (`ShTile`, one B.IOS destination), the per-PE GPRs that address them,
and the sh_load / sh_store kinds on their own (partial masks, per-PE bases,
reloads, uninitialized quarters) with their sh_* mutations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ... import tables
from ...isa.encode import bstart, datr, dim, ior, ios, iot_dst
from .driver import Bundle, Builder, flatten
from .matrix_tiles import MmGM, mm_codes
from ...layouts.ordinary import payload_index
from .values import (BITS, DT_CODE, DTYPES, LOAD_CODES, MASK64, PEMODE, PEMODE_MASK, REG_DST,
                     REG_SRC2, RELAYOUT_CODES, RELAYOUT_TO, SIZE_CODE, STORE_CODES, elem_bytes,
                     pick_one, pow2, rowbytes)


def sh_fit(bits: int, vr: int, vc: int, cols: int, Wsh: int, size: int = 0):
    """Smallest B.IOS SizeCode (>= size) whose Shared descriptor holds vr x vc of
    `cols` columns within shared_words (section 3 steps 5 and 7), or None."""
    if not pow2(cols) or vc > cols:
        return None
    for s in range(max(1, size), 13):
        cap_bits = (64 << s) * 8
        if cap_bits % (cols * bits):
            continue
        rows = cap_bits // (cols * bits)
        if rows > 65535 or rows * cols > Wsh:
            return None
        if vr <= rows and vr * vc <= cap_bits // bits:
            return s
    return None


def _sh_quarter(e: int, bits: int, size: int) -> int:
    return (4 * ((e * bits) // 8)) // (64 << size)


def _sh_rows(bits: int, cols: int, size: int) -> int:
    return (64 << size) * 8 // (cols * bits)


def _sh_indexable(t: "ShTile") -> bool:
    """A ZN/NZ register must be whole fractals (16 rows x 32 bytes)."""
    if RELAYOUT_TO.get(t.code, "RowMajor") not in ("ZN", "NZ"):
        return True
    return _sh_rows(BITS[t.dt], t.cols, t.size) % 16 == 0 and (t.cols * BITS[t.dt]) % 256 == 0


def _sh_index(t: "ShTile", r: int, c: int, size: int) -> int:
    """Element (r, c)'s payload index in the register's layout."""
    return int(payload_index(RELAYOUT_TO.get(t.code, "RowMajor"), t.dt,
                             _sh_rows(BITS[t.dt], t.cols, size), t.cols, r, c))


@dataclass
class ShTile:
    """A Shared register a Shared TLOAD makes (one B.IOS destination)."""
    role: str                     # a, sa, b, sb (matrix operands) or x (sh_* kinds)
    sid: int
    dt: int
    vr: int
    vc: int
    cols: int
    size: int
    pemode: int = 7
    reload: Optional[int] = None  # PEMode of a second (subset) load of the same register
    in_stream: bool = False
    code: int = 0                 # B.DATR Layout: 0 (no B.DATR, RowMajor) or a relayout code


def coop_reg(b: Builder, values: dict) -> int:
    """A fresh GPR holding values[pe] in PE pe's file (junk in the others)."""
    r = b.free_regs.pop()
    for pe in range(tables.NUM_PES):
        b.gprs[pe][r] = (values[pe] if pe in values else
                         int(b.rng.integers(0, 1 << 63)) * 2 + 1) & MASK64
    return r


def _coop_ior(b: Builder, addr: dict) -> tuple:
    """("ior", word) reading base/stride {pe: (base, stride)} from PE pe's GPRs."""
    rng = b.rng
    bases = {pe: v[0] for pe, v in addr.items()}
    strides = {pe: v[1] for pe, v in addr.items()}
    rb = 0 if all(v == 0 for v in bases.values()) and rng.random() < 0.6 else coop_reg(b, bases)
    rs = 0 if all(v == 0 for v in strides.values()) and rng.random() < 0.6 else coop_reg(b, strides)
    return ("ior", ior(rb, rs))


def _sh_load_bundle(b: Builder, t: ShTile, addr: dict, pemode: int, *, vr=None) -> Bundle:
    """A Shared TLOAD: LB0 valid columns, LB1 valid rows, LB2 columns, B.IOS, B.IOR."""
    items = [("dim0", dim(0, t.vc)), ("dim1", dim(1, t.vr if vr is None else vr)),
             ("dim2", dim(2, t.cols)), ("ios", ios(t.sid, pemode, t.size)), _coop_ior(b, addr)]
    if t.code:
        items.insert(0, ("datr", datr(t.code, 0, 0)))
    if b.rng.random() < 0.3:
        b.rng.shuffle(items)
    return Bundle(bstart("TLOAD", t.dt), items, True, dict(op="TLOAD", role=t.role, sid=t.sid))


def coop_codes(rng, dt: int, n: int, style: dict) -> list:
    """mm_codes, raw bits for the dtypes it has no value classes for."""
    if tables.DTYPE_BY_CODE[dt].name in ("FP64", "HiF4X2"):
        style = dict(raw=1.0, special=0.0)
    return mm_codes(rng, dt, n, style)


def _sh_write(b: Builder, gm: "MmGM", t: ShTile, style: dict, rows=None):
    """GM data for t (one region every PE's GPRs name); the {pe: (base, stride)}."""
    bits = BITS[t.dt]
    rows = t.vr if rows is None else rows
    base, stride = gm.region(rows, rowbytes(t.vc, bits), elem_bytes(bits))
    gm.write(base, stride, t.dt, [coop_codes(b.rng, t.dt, t.vc, style) for _ in range(rows)])
    return {pe: (base, stride) for pe in range(tables.NUM_PES)}


def sh_setup_loads(b: Builder, gm: "MmGM", t: ShTile, style: dict) -> list:
    bundles = [_sh_load_bundle(b, t, _sh_write(b, gm, t, style), t.pemode)]
    if t.reload is not None:
        bundles.append(_sh_load_bundle(b, t, _sh_write(b, gm, t, style), t.reload))
    return bundles


def not_pow2(rng, v):
    while True:
        x = int(rng.integers(3, 130)) if rng.random() < 0.7 else v + int(rng.integers(1, 4))
        if not pow2(x):
            return x


# ---- Shared TLOAD / TSTORE / TSTORE.SPART kinds


def _sh_draw_tile(b: Builder, role="x", sid=None) -> ShTile:
    rng, Wsh = b.rng, b.m.shared_words
    assert Wsh is not None      # MachineConfig sets it (tile_words when None)
    while True:
        dt = pick_one(rng, DTYPES)
        cols = 1 << int(rng.integers(0, 7))
        vc = cols if rng.random() < 0.5 else int(rng.integers(1, cols + 1))
        vr = int(rng.integers(1, 9)) if rng.random() < 0.6 else int(rng.integers(1, 65))
        size = sh_fit(BITS[dt], vr, vc, cols, Wsh)
        if size is None:
            continue
        if rng.random() < 0.2 and sh_fit(BITS[dt], vr, vc, cols, Wsh, size + 1):
            size += 1
        t = ShTile(role, int(rng.integers(0, 256)) if sid is None else sid, dt, vr, vc, cols,
                   size, pemode=7 if rng.random() < 0.4 else int(rng.integers(1, 7)))
        if role == "x" and rng.random() < 0.3:
            # a relayout register (on the fractal grid when ZN/NZ), or the code is dropped
            t.code = pick_one(rng, RELAYOUT_CODES)
            if not _sh_indexable(t):
                t.code = pick_one(rng, [c for c in RELAYOUT_CODES
                                        if RELAYOUT_TO[c] in ("RowMajor", "ColumnMajor")])
        return t


def _sh_addr(b: Builder, gm: "MmGM", t: ShTile, pes, store: bool = False) -> dict:
    """{pe: (base, stride)}: every PE its own region (TSTORE) or data (TLOAD)."""
    rng = b.rng
    bits = BITS[t.dt]
    out: dict[int, tuple[int, int]] = {}
    shared = rng.random() < 0.4
    for pe in pes:
        if shared and out:
            out[pe] = next(iter(out.values()))
            continue
        base, stride = gm.region(t.vr, rowbytes(t.vc, bits), elem_bytes(bits))
        if not store:
            gm.write(base, stride, t.dt, [mm_codes(rng, t.dt, t.vc, dict(raw=1.0, special=0.0))
                                          for _ in range(t.vr)])
        out[pe] = (base, stride)
    return out


def _sh_fault_pe(b: Builder, t: ShTile, mask: int, size: int) -> Optional[int]:
    """A PE in the mask whose quarter holds a valid element."""
    qs = {_sh_quarter(_sh_index(t, r, c, size), BITS[t.dt], size)
          for r in range(t.vr) for c in range(t.vc)}
    pes = [q for q in sorted(qs) if 0 <= q < 4 and mask & (1 << (3 - q))]
    return pick_one(b.rng, pes) if pes else None


def _sh_others(b: Builder, t: ShTile, kind: str, muts: list, applied: list) -> list:
    """Other Shared registers the setup loads: every record (sh_records_full on
    sh_load), or now and then one more."""
    rng = b.rng
    others = []
    if "sh_records_full" in muts and kind == "sh_load":
        sids = [x for x in range(256) if x != t.sid]
        for sid in rng.choice(sids, size=b.m.shared_slots, replace=False):
            o = ShTile("other", int(sid), DT_CODE["U8"], 1, 1, 1, 1, pemode=int(rng.integers(1, 8)))
            others.append(o)
        applied.append("sh_records_full")
    elif rng.random() < 0.3:
        others.append(_sh_draw_tile(b, "other", sid=pick_one(rng, [x for x in range(256) if x != t.sid])))
    return others


def _sh_prior(b: Builder, t: ShTile, kind: str, muts: list, applied: list) -> Optional[ShTile]:
    """The register t as the setup leaves it, when it exists already (sh_load:
    reloaded, with a mask that holds t's; sh_store: what is stored), or None."""
    rng = b.rng
    if "sh_records_full" in applied:
        return None                            # every record taken by the others
    if not (kind == "sh_store" or rng.random() < 0.3 or "sh_update_mismatch" in muts):
        return None
    prior = ShTile(**{**t.__dict__})
    if kind == "sh_load":
        prior.pemode = pick_one(rng, [p for p in range(1, 8)
                                   if PEMODE_MASK[p] & PEMODE_MASK[t.pemode] == PEMODE_MASK[t.pemode]])
    elif rng.random() < 0.5:
        prior.reload = pick_one(rng, [p for p in range(1, 8)
                                   if PEMODE_MASK[p] & PEMODE_MASK[prior.pemode] == PEMODE_MASK[p]])
    if kind == "sh_store" and rng.random() < 0.1:
        return None                            # a TSTORE of a register without a record: legal
    return prior


def _sh_update_mismatch(b: Builder, t: ShTile, prior: ShTile, applied: list):
    """sh_update_mismatch: the reload t differs from the record in its mask
    (outside the allocation), size, dtype or shape."""
    rng, Wsh = b.rng, b.m.shared_words
    assert Wsh is not None      # MachineConfig sets it (tile_words when None)
    how = pick_one(rng, ["mask", "size", "cols", "vr", "dtype"])
    if how == "mask" and PEMODE_MASK[prior.pemode] != 15:
        t.pemode = pick_one(rng, [p for p in range(1, 8) if PEMODE_MASK[p] & ~PEMODE_MASK[prior.pemode]])
    elif how == "size" and sh_fit(BITS[t.dt], t.vr, t.vc, t.cols, Wsh, t.size + 1):
        t.size += 1
    elif how == "dtype":
        t.dt = pick_one(rng, [c for c in DTYPES if c != t.dt and BITS[c] == BITS[t.dt]] or [t.dt])
    else:
        t.vr = t.vr + 1 if sh_fit(BITS[t.dt], t.vr + 1, t.vc, t.cols, Wsh) else t.vr
        if t.vr == prior.vr:
            t.vc = t.vc - 1 if t.vc > 1 else t.vc
    if (t.pemode, t.size, t.dt, t.vr, t.vc) != (prior.pemode if how == "mask" else t.pemode,
                                                 prior.size, prior.dt, prior.vr, prior.vc) \
            or (how == "mask" and t.pemode != prior.pemode):
        applied.append("sh_update_mismatch")
        b.notes.append(f"update_mismatch:{how}")


def _sh_too_big(b: Builder, t: ShTile, applied: list):
    """sh_too_big (a new register only): a narrow dtype and a SizeCode whose
    rows x columns pass shared_words."""
    assert b.m.shared_words is not None     # MachineConfig sets it (tile_words when None)
    for dt in (DT_CODE["U8"], DT_CODE["S8"], DT_CODE["U4X2"]):
        s = next((s for s in range(1, 13) if (64 << s) * 8 // BITS[dt] > b.m.shared_words
                  and (64 << s) * 8 // (t.cols * BITS[dt]) <= 65535), None)
        if s is not None:
            t.dt, t.size = dt, s
            applied.append("sh_too_big")
            return


def _sh_store_bundle(b: Builder, gm: MmGM, store_t: ShTile, kind: str, prior) -> Bundle:
    """A TSTORE (mask 1111) or TSTORE.SPART (any nonzero mask) of the register,
    maybe of fewer valid rows / columns, every PE to its own region."""
    rng = b.rng
    st = ShTile(**{**store_t.__dict__})
    spart = rng.random() < 0.4
    pemode = int(rng.integers(1, 8)) if spart else 7
    if rng.random() < 0.4:
        st.vr = int(rng.integers(1, st.vr + 1))
        st.vc = int(rng.integers(1, st.vc + 1))
    addr = _sh_addr(b, gm, st, range(4), store=True)
    items = [("ios", ios(st.sid, pemode, 0)), _coop_ior(b, addr)]
    if st.code and rng.random() < 0.5:
        # any code naming the record's layout reads it alike
        st.code = pick_one(rng, [c for c in RELAYOUT_CODES if RELAYOUT_TO[c] == RELAYOUT_TO[st.code]])
    if st.code:
        items.insert(0, ("datr", datr(st.code, 0, 0)))
    for n, v in ((0, st.vc), (1, st.vr), (2, st.cols)):
        if rng.random() < 0.6 or (n == 2 and prior is None and kind == "sh_store"):
            items.insert(0, (f"dim{n}", dim(n, v)))
    return Bundle(bstart("TSTORE.SPART" if spart else "TSTORE", st.dt), items, True,
                  dict(op="TSTORE", spart=spart, tile=st, pemode=pemode))


def _sh_mem_fault(b: Builder, bd: Bundle, m: str, st: ShTile, w: int, prior) -> bool:
    """sh_mem_page / sh_mem_align: one PE's base (a quarter holding a valid
    element) past the end of GM, or misaligned."""
    rng = b.rng
    is_load = bd.info["op"] == "TLOAD"
    mask = PEMODE_MASK[(w >> 9) & 7]
    size = st.size if is_load else (prior.size if prior is not None else None)
    if size is None or (m == "sh_mem_align" and BITS[st.dt] < 16):
        return False
    q = _sh_fault_pe(b, st, mask, size)
    if q is None:
        return False
    j = bd.find("ior")[0]
    rb = (bd.items[j][1] >> 15) & 0x1F
    if rb == 0:
        return False
    base = b.gprs[q][rb]
    b.gprs[q] = dict(b.gprs[q])
    if m == "sh_mem_page":
        b.gprs[q][rb] = pick_one(rng, [b.gm_bytes, b.gm_bytes + 64, 1 << 40])
    else:
        b.gprs[q][rb] = base + int(rng.integers(1, elem_bytes(BITS[st.dt])))
    b.notes.append(f"{m}:PE{q} x{rb}")
    return True


def _sh_edit(b: Builder, bd: Bundle, m: str, t: ShTile, prior) -> bool:
    """One sh_* bundle mutation on bd (its B.IOS, B.IOR, B.DIMs); applied?"""
    rng = b.rng
    is_load = bd.info["op"] == "TLOAD"
    k = bd.find("ios")[0]
    w = bd.items[k][1]
    if m == "sh_ios_count":
        bd.items.insert(k + 1, ("ios", ios(int(rng.integers(0, 256)), PEMODE.extract(w),
                                           int(rng.integers(1, 13)) if is_load else 0)))
    elif m == "sh_ior_surplus":
        j = bd.find("ior")[0]
        bd.items[j] = ("ior", bd.items[j][1] | (REG_DST.insert(int(rng.integers(1, 24)))
                                                if rng.random() < 0.5
                                                else REG_SRC2.insert(int(rng.integers(1, 24)))))
    elif m == "sh_cube_code":
        code = pick_one(rng, LOAD_CODES + STORE_CODES)
        bd.items = [it for it in bd.items if it[0] != "datr"]
        bd.items.insert(0, ("datr", datr(code, 31, int(rng.integers(0, 4)))))
    elif m == "sh_layout_mismatch":
        # a TSTORE naming another layout than the record's; a TLOAD into a
        # ZN/NZ register off the fractal grid (ptojax: Fault_TileLegality)
        tile = bd.info.get("tile", t)
        have = RELAYOUT_TO.get(tile.code, "RowMajor")
        if is_load:
            codes = [c for c in RELAYOUT_CODES if RELAYOUT_TO[c] in ("ZN", "NZ")]
            off = ShTile(**{**tile.__dict__, "code": pick_one(rng, codes)})
            if _sh_indexable(off):
                return False
        else:
            codes = [c for c in (0,) + RELAYOUT_CODES if RELAYOUT_TO[c] != have]
            off = ShTile(**{**tile.__dict__, "code": pick_one(rng, codes)})
        bd.items = [it for it in bd.items if it[0] != "datr"]
        if off.code:
            bd.items.insert(0, ("datr", datr(off.code, 0, 0)))
    elif m == "sh_ios_dir":
        bd.items[k] = ("ios", SIZE_CODE.replace(w, 0 if is_load else int(rng.integers(1, 13))))
    elif m == "sh_iot":
        bd.items.insert(int(rng.integers(0, len(bd.items) + 1)),
                        ("iot", iot_dst(int(rng.integers(0, 4)), 1, PEMODE.extract(w), 1)))
    elif m == "sh_store_mask":
        bd.items[k] = ("ios", PEMODE.replace(w, int(rng.integers(1, 7))))
    elif m == "sh_lb_missing":
        j = pick_one(rng, bd.find("dim0") + bd.find("dim1") + bd.find("dim2"))
        del bd.items[j]
    elif m == "sh_cols_not_pow2":
        if not bd.find("dim2"):             # sh_lb_missing took LB2 out first
            return False
        j = bd.find("dim2")[0]
        bd.items[j] = ("dim2", dim(2, not_pow2(rng, bd.info.get("tile", t).cols)))
    elif m in ("sh_mem_page", "sh_mem_align"):
        return _sh_mem_fault(b, bd, m, bd.info.get("tile", t), w, prior)
    else:
        return False
    return True


def _sh_mutate(b: Builder, bundles: list, muts: list, t: ShTile, prior, applied: list):
    """The bundle mutations: on the last bundle of the stream (sh_lb_missing,
    sh_cols_not_pow2: on the load), where they apply."""
    for m in muts:
        if m in ("sh_records_full", "sh_update_mismatch", "sh_too_big"):
            continue
        bd = bundles[-1] if m not in ("sh_lb_missing", "sh_cols_not_pow2") else bundles[0]
        is_load = bd.info["op"] == "TLOAD"
        if m in ("sh_lb_missing", "sh_cols_not_pow2") and not is_load:
            continue
        if m == "sh_store_mask" and (is_load or bd.info["spart"]):
            continue
        if _sh_edit(b, bd, m, t, prior):
            applied.append(m)


def sh_program(b: Builder, kind: str, muts: list):
    """(setup, words, GM, tile_capacity, applied) of an sh_load / sh_store case."""
    rng, W = b.rng, b.g.max_words
    gm = MmGM(rng, b.gm_bytes)
    applied: list[str] = []
    setup = []
    t = _sh_draw_tile(b)
    others = _sh_others(b, t, kind, muts, applied)
    prior = _sh_prior(b, t, kind, muts, applied)
    for o in others + ([prior] if prior else []):
        addr = {pe: v for pe, v in _sh_addr(b, gm, o, range(4)).items()}
        setup.append(_sh_load_bundle(b, o, addr, o.pemode))
        if o.reload is not None:
            setup.append(_sh_load_bundle(b, o, _sh_addr(b, gm, o, range(4)), o.reload))
    bundles = []
    if kind == "sh_load":
        if "sh_update_mismatch" in muts and prior is not None:
            _sh_update_mismatch(b, t, prior, applied)
        if "sh_too_big" in muts and prior is None:
            _sh_too_big(b, t, applied)
        mask = PEMODE_MASK[t.pemode]
        addr = _sh_addr(b, gm, t, [pe for pe in range(4) if mask & (1 << (3 - pe))])
        bundles.append(_sh_load_bundle(b, t, addr, t.pemode))
        store_t = t
    else:
        store_t = prior if prior is not None else t
    if kind == "sh_store" or rng.random() < 0.5:
        bundles.append(_sh_store_bundle(b, gm, store_t, kind, prior))
    _sh_mutate(b, bundles, muts, t, prior, applied)
    words = flatten(bundles)
    if len(words) > W:
        words = flatten(bundles[:1])[:W]
    return flatten(setup), words, bytes(gm.gm), None, applied
