"""The operands of matrix cases (TMATMUL* / TGEMV*, docs/matmul-decisions.md)
and of cooperative ones: the input classes and MX sets, the forms' flags,
element codes by value class (realistic, NaN / inf / subnormal / -0 heavy, or
raw), the tiles a load makes (`MmTile`: CUBE M16/M32/N8 or RowMajor) and
their shapes within tile_words, the types and dimensions of a plan, and GM
regions taken in turn (`MmGM`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ... import tables
from .values import (BITS, CELL, DT_CODE, PEMODE_MASK, encode_elements, pick_one, rand_bits,
                     size_for_bytes)

# matrix.md A.5 input classes and the MX sets (docs/matmul-decisions.md step 3)
MM_FLOAT = tuple(DT_CODE[n] for n in ("FP32", "TF32", "HF32", "FP16", "BF16", "HiF8", "E4M3", "E5M2",
                                      "E3M2", "E2M3", "E2M1X2", "E1M2X2"))
MM_SIGNED = tuple(DT_CODE[n] for n in ("S16", "S8", "S4X2"))
MM_UNSIGNED = tuple(DT_CODE[n] for n in ("U16", "U8", "U4X2"))
MM_MX = tuple(DT_CODE[n] for n in ("FP16", "BF16", "E4M3", "E5M2", "E2M1X2", "E1M2X2"))
MM_MX_SCALED = tuple(DT_CODE[n] for n in ("E4M3", "E5M2", "E2M1X2", "E1M2X2"))
E8M0, FP32, S32, U32 = DT_CODE["E8M0"], DT_CODE["FP32"], DT_CODE["S32"], DT_CODE["U32"]
MM_LOAD_CODE = {"M32": 21, "M16": 22, "N8": 23}
MM_STORE_CODE = {"M32": 24, "M16": 25}
# B.DATR Layout codes that decode but are neither 0 nor a CUBE conversion
MM_OTHER_LAYOUTS = (1, 3, 4, 6, 8, 9, 17, 18, 20, 27, 28, 30)
# B.FPATR PreQuantMode sets (encoding.md 5.9)
MM_VECTOR_MODES = (2, 4, 12, 18, 20, 23, 28, 33, 36, 37, 38, 39)
MM_SCALAR_MODES = (3, 5, 13, 17, 19, 24, 25, 26, 27, 32, 34, 35)
MM_S32_MODES = (2, 3, 4, 5, 12, 13, 17, 18, 19, 20, 35, 39)
MM_FP32_MODES = (1, 16, 23, 24, 25, 26, 27, 28, 32, 33, 34, 36, 37, 38)


def mm_flags(form: str) -> dict:
    return dict(bias=form.endswith(".BIAS"), acc=form.endswith(".ACC"), mx="MX" in form,
                gemv=form.startswith("TGEMV"))


def mm_name(mx: bool, gemv: bool, suffix: str = "") -> str:
    return ("TGEMV" if gemv else "TMATMUL") + ("MX" if mx else "") + suffix


# ---- element codes


@functools.lru_cache(maxsize=None)
def _mm_code_classes(dt: int) -> dict:
    """Raw codes of a <= 16-bit floating type by class (nan, inf, zero, tiny, moderate)."""
    from ... import numerics
    d = tables.DTYPE_BY_CODE[dt]
    n = 64 if d.name in ("E3M2", "E2M3") else 1 << d.bits          # the valid encodings
    codes = np.arange(n, dtype=np.uint64)
    v = numerics.decode_float(d.name, codes)
    fin = np.isfinite(v)
    a = np.abs(np.where(fin, v, 0.0))
    if d.name in ("FP16", "BF16"):
        tiny = fin & (a > 0) & (a < {"FP16": 2.0 ** -14, "BF16": 2.0 ** -126}[d.name])
    else:
        pos = np.unique(a[fin & (a > 0)])
        tiny = fin & (a > 0) & (a <= pos[min(3, len(pos) - 1)])
    moderate = fin & (a >= 0.125) & (a <= 8.0)
    if not moderate.any():
        moderate = fin & (a > 0)
    out = {"nan": np.isnan(v), "inf": np.isinf(v), "zero": fin & (a == 0), "tiny": tiny,
           "moderate": moderate}
    return {k: [int(c) for c in codes[m]] for k, m in out.items() if m.any()}


def _mm_float32_code(rng, cls: str) -> int:
    sign = int(rng.integers(0, 2)) << 31
    mant = int(rng.integers(0, 1 << 23))
    if cls == "moderate":
        return sign | int(rng.integers(124, 131)) << 23 | mant
    if cls == "tiny":
        return sign | max(1, mant)
    if cls == "zero":
        return sign
    if cls == "inf":
        return sign | 0x7F800000
    if cls == "nan":
        return sign | 0x7F800000 | max(1, mant)
    return rand_bits(rng, 32)


_SPECIAL_CLASSES = ("nan", "inf", "zero", "tiny")


def mm_codes(rng, dt: int, n: int, style: dict) -> list:
    """n raw element codes of dtype dt in a value style (see mm_style)."""
    d = tables.DTYPE_BY_CODE[dt]
    bits = d.bits
    out = []
    for _ in range(n):
        u = rng.random()
        if u < style["raw"]:
            out.append(rand_bits(rng, bits))
            continue
        special = u < style["raw"] + style["special"]
        if dt == E8M0:
            out.append(pick_one(rng, [0, 1, 254, 255]) if special
                       else 127 + int(rng.integers(-6, 7)))
        elif d.is_integer:
            if special:
                out.append(pick_one(rng, [0, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1]))
            elif rng.random() < 0.75:
                v = int(rng.integers(-7, 8)) if d.signed or d.name == "S4X2" else int(rng.integers(0, 16))
                out.append(v & ((1 << bits) - 1))
            else:
                out.append(rand_bits(rng, bits))
        elif bits == 32:
            cls = pick_one(rng, _SPECIAL_CLASSES) if special else "moderate"
            w = _mm_float32_code(rng, cls)
            if d.name in ("TF32", "HF32") and rng.random() < 0.8:      # a valid encoding mostly
                w &= 0xFFFFE000 if d.name == "TF32" else 0xFFFFF000
                if cls == "tiny" and not w & 0x7FFFFF:
                    w |= 0x2000
                if cls == "nan" and not w & 0x7FFFFF:
                    w |= 0x400000
            out.append(w)
        else:
            classes = _mm_code_classes(dt)
            cls = pick_one(rng, [c for c in _SPECIAL_CLASSES if c in classes]) if special else "moderate"
            out.append(pick_one(rng, classes[cls]))
    return out


def mm_style(rng, kind: str) -> dict:
    """Per-case value style: realistic codes (sometimes with special values) or raw random."""
    if kind == "mm_specials":
        return dict(raw=0.02, special=0.3)
    if rng.random() < 0.2:
        return dict(raw=1.0, special=0.0)
    return dict(raw=0.02, special=pick_one(rng, [0.0, 0.0, 0.04, 0.1]))


# ---- tiles and shapes


@dataclass
class MmTile:
    """One tile a load makes: CUBE (layout M16/M32/N8) or ordinary RowMajor."""
    role: str                     # a, b, c, sa, sb, bias, fill
    dt: int
    vr: int
    vc: int
    layout: str                   # "M16" | "M32" | "N8" | "RowMajor"
    size: int = 1
    col: int = 0                  # RowMajor Col
    pad: int = 0
    pemode: int = 1
    hand: int = 0
    index: int = -1
    in_stream: bool = False
    values: Optional[list] = None     # its rows' codes when drawn by purpose (parameter Words)

    @property
    def cube(self) -> bool:
        return self.layout != "RowMajor"

    @property
    def charge(self) -> int:
        return bin(PEMODE_MASK[self.pemode]).count("1") * (128 << (self.size - 1))


def _cube_cells(lay: str, bits: int, vr: int, vc: int) -> int:
    cr, cc = CELL[(lay, bits)]
    if lay == "N8":
        return -(-vr // cr) * -(-vc // 8)
    return -(-vc // cc)


def cube_fits(lay: str, bits: int, vr: int, vc: int, W: int) -> bool:
    """B.6 within the model bound: rows fit an M CELL, cells * CELL words <= tile_words."""
    if vr < 1 or vc < 1 or (lay, bits) not in CELL:
        return False
    cr, cc = CELL[(lay, bits)]
    if lay != "N8" and vr > cr:
        return False
    return _cube_cells(lay, bits, vr, vc) * cr * cc <= W


def cube_min_size(lay: str, bits: int, vr: int, vc: int) -> int:
    return size_for_bytes(_cube_cells(lay, bits, vr, vc) * 128)


def other_dtype(b, t, opts: list, what: str) -> bool:
    """A source tile loaded as one of `opts` instead of its dtype (False when
    there is none)."""
    if not opts:
        return False
    t.dt = pick_one(b.rng, opts)
    b.notes.append(f"{what}:{t.role}={tables.DTYPE_BY_CODE[t.dt].name}")
    return True


def d_size_short(b, plan, need: int) -> bool:
    """D's SizeCode one step below the `need` of its CELLs (none below 1)."""
    if need < 2:
        return False
    plan.d_size = need - 1
    b.notes.append(f"d_size:{plan.d_size} (needs {need})")
    return True


def _ord_fit(bits: int, vr: int, vc: int, W: int, col: int = 0):
    """(Col, smallest SizeCode) of an ordinary RowMajor tile of vr x vc (Col the
    next power of two >= vc unless given), or None."""
    col = col or 1 << max(0, (vc - 1).bit_length())
    if col < vc or col & (col - 1):
        return None
    for s in range(1, 11):
        cap_bits = (128 << (s - 1)) * 8
        if cap_bits % (col * bits):
            continue
        rows = cap_bits // (col * bits)
        if vr <= rows <= 65535 and vr * col <= W and vr * vc <= cap_bits // bits:
            return col, s
    return None


def mm_tile(rng, role, dt, vr, vc, layout, W, size=None) -> Optional[MmTile]:
    """A tile of this shape with the smallest size (sometimes one or two more)."""
    bits = BITS[dt]
    if layout == "RowMajor":
        fit = _ord_fit(bits, vr, vc, W)
        if fit is None:
            return None
        if rng.random() < 0.2 and _ord_fit(bits, vr, vc, W, 2 * fit[0]) is not None:
            fit = _ord_fit(bits, vr, vc, W, 2 * fit[0])      # a wider physical row
        return MmTile(role, dt, vr, vc, "RowMajor", size=fit[1], col=fit[0],
                       pemode=int(rng.integers(1, 8)))
    if not cube_fits(layout, bits, vr, vc, W):
        return None
    need = cube_min_size(layout, bits, vr, vc)
    if size is None:
        size = need + (int(rng.integers(1, 3)) if rng.random() < 0.25 else 0)
    size = min(size, 10)
    if size < need:
        return None
    return MmTile(role, dt, vr, vc, layout, size=size, pad=int(rng.integers(0, 4)),
                   pemode=int(rng.integers(1, 8)))


def mm_acc_type(mx: bool, atype: int) -> int:
    if not mx and atype in MM_SIGNED:
        return S32
    if not mx and atype in MM_UNSIGNED:
        return U32
    return FP32


def _one_of(rng, x: int, y: int, other) -> tuple:
    """(x, y) with one of them (x with probability 1/2) redrawn from `other`."""
    if rng.random() < 0.5:
        return pick_one(rng, other), y
    return x, pick_one(rng, other)


def mm_types(rng, kind: str, f: dict, muts) -> tuple:
    """(AType, BType) for the kind, honouring mm_type_class / mm_mx_type."""
    if f["mx"]:
        a, bt = pick_one(rng, MM_MX), pick_one(rng, MM_MX)
        if "mm_aux_cube" in muts and not f["bias"] and a not in MM_MX_SCALED and bt not in MM_MX_SCALED:
            a = pick_one(rng, MM_MX_SCALED)
        if kind == "mm_specials" and rng.random() < 0.5:
            a = pick_one(rng, MM_MX_SCALED)
        if "mm_mx_type" in muts:
            a, bt = _one_of(rng, a, bt, [c for c in MM_FLOAT + MM_SIGNED + MM_UNSIGNED if c not in MM_MX])
        return a, bt
    if kind in ("mm_float", "mm_specials"):
        cls = MM_FLOAT
    elif kind == "mm_int":
        cls = pick_one(rng, [MM_SIGNED, MM_UNSIGNED])
    else:
        u = rng.random()
        cls = MM_FLOAT if u < 0.55 else MM_SIGNED if u < 0.775 else MM_UNSIGNED
    a = pick_one(rng, cls)
    bt = a if rng.random() < 0.3 else pick_one(rng, cls)
    if "mm_type_class" in muts:
        if rng.random() < 0.2:
            a = pick_one(rng, [S32, U32, E8M0])        # in no class (each has a CELL mapping)
        else:
            bt, a = _one_of(rng, bt, a, [c for c in MM_FLOAT + MM_SIGNED + MM_UNSIGNED if c not in cls])
    return a, bt


def mm_dims(rng, W: int, a_lay: str, abits: int, bbits: int, gemv: bool, *, n_min: int = 1,
             big_k: bool = False, budget: int = 4096):
    """(M, N, K) whose A (M x K, a_lay), B (K x N, N8) and D (M x N, 32-bit,
    a_lay) fit tile_words W; None when no such shape exists."""
    cr_a, cc_a = CELL[(a_lay, abits)]
    cr_b = CELL[("N8", bbits)][0]
    b_cells = W // (cr_b * 8)
    kmax = min((W // (cr_a * cc_a)) * cc_a, (b_cells // -(-n_min // 8)) * cr_b)
    d_words = 32                                       # a 32-bit CELL: 16 x 2 or 32 x 1
    nmax_d = (W // d_words) * (2 if a_lay == "M16" else 1)
    if kmax < 1 or nmax_d < n_min:
        return None
    if big_k and kmax > 32:
        K = int(rng.integers(33, min(kmax, 80) + 1))
    elif rng.random() < 0.6:
        K = int(rng.integers(1, min(kmax, 16) + 1))
    else:
        K = int(rng.integers(1, min(kmax, 48) + 1))
    nmax = min((b_cells // -(-K // cr_b)) * 8, nmax_d)
    if nmax < n_min:
        return None
    N = int(rng.integers(n_min, min(nmax, 24 if rng.random() < 0.8 else 64) + 1)) \
        if nmax > n_min else n_min
    mmax = 1 if gemv else (16 if a_lay == "M16" else 32)
    if mmax == 1:
        M = 1
    elif a_lay == "M32" and rng.random() < 0.4:
        M = int(rng.integers(1, 17))                   # an M32 A holding M <= 16
    elif rng.random() < 0.25:
        M = pick_one(rng, [1, mmax])
    else:
        M = int(rng.integers(1, mmax + 1))
    # keep the oracle's per-element loops short
    while M * N * K > budget:
        if M > 1 and M >= N and not big_k:
            M = max(1, M // 2)
        elif N > n_min and (N >= K or big_k):
            N = max(n_min, N // 2)
        elif K > 1 and not big_k:
            K = max(1, K // 2)
        elif M > 1:
            M = max(1, M // 2)
        elif N > n_min:
            N = max(n_min, N // 2)
        else:
            break
    return M, N, K


class MmGM:
    """GM bytes with operand regions taken in turn (overlapping once GM is used up)."""

    def __init__(self, rng, n: int):
        self.rng, self.n = rng, n
        self.gm = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes() if rng.random() < 0.85
                            else bytes(n))
        self.cursor = int(rng.integers(0, 64))

    def region(self, vr: int, dense: int, align: int):
        """(base, stride) of vr rows of `dense` bytes, aligned."""
        rng, n = self.rng, self.n
        stride = dense
        if rng.random() < 0.3:
            stride = dense + align * int(rng.integers(1, 5))
        stride += (-stride) % align
        total = (vr - 1) * stride + dense
        if total > n:
            stride = dense + (-dense) % align
            total = (vr - 1) * stride + dense
            if total > n:                                  # rows overlap: a short stride
                stride = max(0, (n - dense) // max(1, vr - 1))
                stride -= stride % align
                total = (vr - 1) * stride + dense
        base = self.cursor + (-self.cursor) % align
        if base + total > n:
            base = int(rng.integers(0, max(1, n - total + 1)))
            base -= base % align
        else:
            self.cursor = base + total + int(rng.integers(0, 24))
        return base, stride

    def write(self, base: int, stride: int, dt: int, rows: list):
        for r, row in enumerate(rows):
            raw = encode_elements(dt, row)
            at = base + r * stride
            self.gm[at: at + len(raw)] = raw[: max(0, self.n - at)]
