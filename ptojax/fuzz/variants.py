"""Variants of drawn cases, made a whole batch at a time.

A campaign with `--variants M` runs every drawn Case (gen.random_case: a
program aimed at some check) followed by M - 1 variants of it: the same
initial State (its setup words run once) and the same program with one to
three small changes, as a mutation fuzzer makes them:

- `field`: one field of one word (the word's catalog encoding, a field of it)
  set to a random value, 0, all ones, its value plus or minus one, or its
  value with one bit flipped;
- `bit`: one bit of one word flipped (the change a word with no encoding gets);
- `drop` / `dup` / `swap`: a word removed, repeated, or swapped with the next;
- `gpr`: a GPR of the case's PE (any PE on the Core) set to 0, 1, all ones,
  2^63 or a random value, after the setup (a base, stride or B.DIM source);
- `gm`: one GM byte set to a random value, after the setup.

Each variant is a function of (seed, draw index, variant number) alone, from
a counter-based generator (splitmix64), so it does not depend on the batch,
the pool or the shard it is made in. Labels say what changed:
`variant:field B.IOT.SizeCode`, `variant:drop`, ...; pokes are the GPR and GM
writes (gen.Case.pokes) applied after the drawn case's setup.
"""

from __future__ import annotations

import numpy as np

from .. import tables
from ..isa import words as IW

OPS = ("field", "bit", "drop", "dup", "swap", "gpr", "gm")
WEIGHTS = np.array([8, 1, 1, 1, 1, 1, 1], float)
MAX_CHANGES = 3
LABELS = tuple(f"variant:{op}" for op in OPS if op != "field") \
    + tuple(f"variant:field {name}" for name in IW.FIELD_NAMES)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_CUM = np.cumsum(WEIGHTS) / WEIGHTS.sum()
# per encoding: its fields' global numbers (words.FIELDS), -1 padded
_NF = np.array([len(f) for f in IW.FIELDS_OF], np.int64)
_FIELD_TABLE = np.full((len(IW.FIELDS_OF), max(_NF.max(), 1)), -1, np.int64)
for _e, _fs in enumerate(IW.FIELDS_OF):
    _FIELD_TABLE[_e, : len(_fs)] = _fs


def mix64(x):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, np.uint64) + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


class _Stream:
    """Counter-based random numbers: draw i of row r is mix64(key[r] + i)."""

    def __init__(self, seed: int, index, variant):
        with np.errstate(over="ignore"):
            base = mix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ np.uint64(0x5EED))
            self.key = mix64(mix64(base ^ np.asarray(index, np.uint64)) + np.asarray(variant, np.uint64))
        self.i = 0

    def bits(self) -> np.ndarray:
        self.i += 1
        with np.errstate(over="ignore"):
            return mix64(self.key + np.uint64(self.i) * _GOLDEN)

    def below(self, n) -> np.ndarray:
        """int64 in [0, n) per row (n >= 1, an int or an array)."""
        u = (self.bits() >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return np.minimum((u * np.asarray(n, np.float64)).astype(np.int64), np.asarray(n) - 1)

    def uniform(self) -> np.ndarray:
        return (self.bits() >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _new_field_value(old, width, pick, rnd, bit):
    """Per row: a random value, 0, all ones, old +- 1, or old with one bit flipped."""
    top = (np.int64(1) << width) - 1
    return np.select([pick == 0, pick == 1, pick == 2, pick == 3, pick == 4],
                     [rnd & top, 0, top, old + 1, old - 1], old ^ (np.int64(1) << (bit % width))) & top


def make(seed: int, index, variant, words, lengths, pe, core, gm_bytes: int):
    """Variants of rows of drawn programs: (words uint32[n, L], lengths int32[n],
    labels [tuple per row], pokes [tuple per row] as gen.Case.pokes holds them).

    index / variant: each row's draw index and variant number (>= 1); words /
    lengths: the drawn programs; pe: each row's PE; core: whether it runs on
    the Core (a GPR change then goes to any PE)."""
    w = np.array(words, np.uint32, copy=True)
    n, L = w.shape
    length = np.array(lengths, np.int64, copy=True)
    st = _Stream(seed, index, variant)
    rows = np.arange(n)
    changes = 1 + (st.uniform() > 0.6).astype(np.int64) + (st.uniform() > 0.85).astype(np.int64)
    labels: list[list[str]] = [[] for _ in range(n)]
    pokes: list[list[tuple[str | int, ...]]] = [[] for _ in range(n)]
    for c in range(MAX_CHANGES):
        active = changes > c
        op = np.searchsorted(_CUM, st.uniform(), side="right").clip(0, len(OPS) - 1)
        p = st.below(np.maximum(length, 1))
        has_word = active & (length > 0)
        word = w[rows, np.minimum(p, L - 1)]
        enc = IW.encodings(word)
        nf = np.where(enc >= 0, _NF[np.maximum(enc, 0)], 0)
        fsel = _FIELD_TABLE[np.maximum(enc, 0), st.below(np.maximum(nf, 1))]
        # a field change of a word without fields flips a bit instead
        is_field = has_word & (op == 0) & (nf > 0)
        is_bit = has_word & ((op == 1) | ((op == 0) & (nf == 0)))
        # every change slot draws the same numbers whatever it does: a row's
        # variant depends on its own counter only
        pick, rnd, bit = st.below(6), (st.bits() >> np.uint64(32)).astype(np.int64), st.below(32)
        new = word.copy()
        for f in np.unique(fsel[is_field]):
            sel = is_field & (fsel == f)
            field = IW.FIELDS[f][1]
            value = _new_field_value(IW.extract(word[sel], field), field.width, pick[sel],
                                     rnd[sel], bit[sel])
            new[sel] = IW.insert(word[sel], field, value)
        new = np.where(is_bit, word ^ (np.uint32(1) << bit.astype(np.uint32)), new)
        w[rows, np.minimum(p, L - 1)] = np.where(is_field | is_bit, new, word)
        # stream changes: drop p, repeat p, swap p with p + 1
        j = np.arange(L)[None, :]
        drop = has_word & (op == 2) & (length > 1)
        dup = has_word & (op == 3) & (length < L)
        swap = has_word & (op == 4) & (length > 1)
        q = np.minimum(p, np.maximum(length - 2, 0))[:, None]
        src = np.where(drop[:, None], j + (j >= p[:, None]),
                       np.where(dup[:, None], j - (j > p[:, None]),
                                np.where(swap[:, None] & (j == q), q + 1,
                                         np.where(swap[:, None] & (j == q + 1), q, j))))
        w = np.take_along_axis(w, np.clip(src, 0, L - 1), axis=1)
        length = length - drop + dup
        w[j >= length[:, None]] = 0
        # state changes after the setup: a GPR, a GM byte
        gpr = active & (op == 5)
        gpe = np.where(np.asarray(core, bool), st.below(tables.NUM_PES), np.asarray(pe, np.int64))
        reg = 1 + st.below(tables.NUM_GPRS - 1)
        kind = st.below(5)
        rnd = st.bits()
        value = np.select([kind == 0, kind == 1, kind == 2, kind == 3],
                          [np.uint64(0), np.uint64(1), np.uint64(0xFFFFFFFFFFFFFFFF),
                           np.uint64(1 << 63)], rnd)
        gmw = active & (op == 6)
        addr = st.below(gm_bytes)
        byte = st.bits() & np.uint64(0xFF)
        for r in np.flatnonzero(active).tolist():
            o = int(op[r])
            if is_field[r]:
                labels[r].append(f"variant:field {IW.FIELD_NAMES[fsel[r]]}")
            elif is_bit[r]:
                labels[r].append("variant:bit")
            elif drop[r] or dup[r] or swap[r]:
                labels[r].append(f"variant:{OPS[o]}")
            elif gpr[r]:
                labels[r].append("variant:gpr")
                pokes[r].append(("gpr", int(gpe[r]), int(reg[r]), int(value[r])))
            elif gmw[r]:
                labels[r].append("variant:gm")
                pokes[r].append(("gm", int(addr[r]), int(byte[r])))
    return (w, length.astype(np.int32), [tuple(x) for x in labels], [tuple(x) for x in pokes])


__all__ = ["LABELS", "OPS", "make", "mix64"]
