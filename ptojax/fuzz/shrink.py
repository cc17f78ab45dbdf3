"""Shrink a mismatching Case to a minimal one (greedy, keep a change iff the mismatch persists).

`shrink(case, fails)` tries simpler variants of the Case in passes and keeps
the first variant for which the mismatch persists (`fails`), then tries again
from it, until a whole round of passes changes nothing or the time budget is
spent. The passes, in order:

1. fewer words: drop whole bundles (a BSTART and the words up to the next
   BSTART; the words before the first BSTART count as one group), then chunks
   of words, halving the chunk size down to single words (delta debugging);
2. smaller shapes: every B.DIM reads its value from the zero register
   (uimm17 = the value it had), then lower LB values (0, 1, v/2, v-1); lower
   B.IOT/B.IOS SizeCodes (1, s/2, s-1);
3. simpler words: B.IOR register fields to the zero register;
4. simpler values: TILE_CAPACITY back to the config's, PC 0; a variant's
   pokes dropped (all, then one at a time); GPRs zero (the
   other PEs' files at once, then the current PE's, then one register at a
   time), then smaller (lowest set bit, low 8/16/32 bits); GM bytes zero (all at once, then aligned chunks halving down to
   single bytes, only chunks holding nonzero bytes).

`fails(cases)` yields, lazily and in order, whether each candidate still
mismatches; `reference_predicate` runs candidates through one `JaxRunner`
(its batch shape: candidates are evaluated `capacity` at a time) and the
reference oracle, stopping at the first candidate that still fails.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import numpy as np

from .. import tables
from ..isa import forms

if TYPE_CHECKING:
    from ..state import State

MASK64 = (1 << 64) - 1


def set_field(word: int, name: str, value: int) -> int:
    """`word` with its decoded field `name` set to `value` (same form)."""
    enc = forms.match(word)
    assert enc is not None          # the word decodes: its fields are being edited
    for f in enc.form.fields:
        if f.name == name:
            ones = f.insert((1 << f.width) - 1)
            return (word & ~ones & 0xFFFFFFFF) | f.insert(value & ((1 << f.width) - 1))
    raise KeyError(name)


def _decoded(word: int):
    from ..isa.decode import decode
    return decode(word)


def groups(words: list) -> list:
    """[(start, end)] bundles: split before every BSTART word."""
    cuts = [0] + [i for i, w in enumerate(words) if i and _decoded(w).mnemonic.startswith("BSTART")]
    cuts = sorted(set(cuts)) + [len(words)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _with_words(case, words, label):
    return label, dataclasses.replace(case, words=list(words))


def _drop_groups(case):
    w = case.words
    gs = groups(w)
    out = []
    if len(gs) > 1:
        for a, b in sorted(gs, key=lambda g: g[0] - g[1]):
            out.append(_with_words(case, w[:a] + w[b:], f"drop words {a}..{b - 1} (a bundle)"))
    return out


def _drop_chunks(size):
    def make(case):
        w = case.words
        return [_with_words(case, w[:i] + w[i + size:], f"drop words {i}..{min(i + size, len(w)) - 1}")
                for i in range(0, len(w), size)]
    return make


def _gpr(case, reg: int) -> int:
    return case.gprs.get(case.pe, {}).get(reg, 0) if reg else 0


def _lower(v: int) -> list:
    return sorted({t for t in (0, 1, v // 2, v - 1) if 0 <= t < v})


def _dims(case):
    out = []
    for i, w in enumerate(case.words):
        c = _decoded(w)
        if c.fault or c.mnemonic != "B.DIM":
            continue
        reg, imm = c.fields["RegSrc"], c.fields["uimm17"]
        v = (_gpr(case, reg) + imm) & 0xFFFF
        if reg or imm > 0xFFFF:
            nw = set_field(set_field(w, "RegSrc", 0), "uimm17", v)
            out.append(_with_words(case, case.words[:i] + [nw] + case.words[i + 1:],
                                   f"word {i}: B.DIM value {v} from the zero register"))
            continue
        for t in _lower(v):
            nw = set_field(w, "uimm17", t)
            out.append(_with_words(case, case.words[:i] + [nw] + case.words[i + 1:],
                                   f"word {i}: B.DIM value {v} -> {t}"))
    return out


def _sizes(case):
    out = []
    for i, w in enumerate(case.words):
        c = _decoded(w)
        if c.fault or c.mnemonic not in ("B.IOT", "B.IOS") or "SizeCode" not in c.fields:
            continue
        s = c.fields["SizeCode"]
        for t in _lower(s):
            if t == 0 and c.mnemonic == "B.IOT":
                continue
            nw = set_field(w, "SizeCode", t)
            out.append(_with_words(case, case.words[:i] + [nw] + case.words[i + 1:],
                                   f"word {i}: {c.mnemonic} SizeCode {s} -> {t}"))
    return out


def _ior_regs(case):
    out = []
    for i, w in enumerate(case.words):
        c = _decoded(w)
        if c.fault or c.mnemonic != "B.IOR":
            continue
        for name in ("RegSrc0", "RegSrc1", "RegSrc2", "RegDst"):
            if c.fields.get(name):
                nw = set_field(w, name, 0)
                out.append(_with_words(case, case.words[:i] + [nw] + case.words[i + 1:],
                                       f"word {i}: B.IOR {name} -> zero"))
    return out


def _scalars(case):
    out = []
    if case.tile_capacity is not None:
        out.append(("TILE_CAPACITY -> the config's", dataclasses.replace(case, tile_capacity=None)))
    if case.pc:
        out.append(("pc -> 0", dataclasses.replace(case, pc=0)))
    return out


def _pokes(case):
    """Fewer pokes (a variant's GPR and GM changes after the setup): none, then one
    fewer at a time."""
    if not case.pokes:
        return []
    out = [("drop the pokes", dataclasses.replace(case, pokes=()))] if len(case.pokes) > 1 else []
    for i, p in enumerate(case.pokes):
        out.append((f"drop poke {p}", dataclasses.replace(case, pokes=case.pokes[:i] + case.pokes[i + 1:])))
    return out


def _nonzero(regs: dict) -> dict:
    return {r: v for r, v in regs.items() if r and v & MASK64}


def _gprs(case):
    out = []
    others = {pe: r for pe, r in case.gprs.items() if pe != case.pe and _nonzero(r)}
    if others:
        g = {pe: (dict(r) if pe == case.pe else {}) for pe, r in case.gprs.items()}
        out.append(("zero the other PEs' GPRs", dataclasses.replace(case, gprs=g)))
    mine = _nonzero(case.gprs.get(case.pe, {}))
    if mine:
        g = {pe: ({} if pe == case.pe else dict(r)) for pe, r in case.gprs.items()}
        out.append((f"zero PE{case.pe}'s GPRs", dataclasses.replace(case, gprs=g)))
    for pe in sorted(case.gprs, key=lambda p: p != case.pe):
        for r in sorted(_nonzero(case.gprs[pe])):
            g = {p: dict(rs) for p, rs in case.gprs.items()}
            g[pe][r] = 0
            out.append((f"zero PE{pe} {tables.GPR_NAMES[r]}", dataclasses.replace(case, gprs=g)))
    return out


def _gpr_values(case):
    """Smaller values of the current PE's nonzero GPRs: the lowest set bit, then
    the low 8/16/32 bits."""
    out = []
    for r, v in sorted(_nonzero(case.gprs.get(case.pe, {})).items()):
        v &= MASK64
        for t in sorted({v & -v, v & 0xFF, v & 0xFFFF, v & 0xFFFFFFFF}):
            if 0 < t < v:
                g = {p: dict(rs) for p, rs in case.gprs.items()}
                g[case.pe][r] = t
                out.append((f"PE{case.pe} {tables.GPR_NAMES[r]} {v:#x} -> {t:#x}",
                            dataclasses.replace(case, gprs=g)))
    return out


def _gm_chunks(size):
    def make(case):
        gm = np.frombuffer(bytes(case.gm), np.uint8)
        nz = np.flatnonzero(gm)
        out = []
        for start in np.unique(nz // size * size).tolist():
            g = gm.copy()
            g[start: start + size] = 0
            out.append((f"zero GM {start:#x}..{min(start + size, gm.size) - 1:#x}",
                        dataclasses.replace(case, gm=g.tobytes())))
        return out
    return make


def _pow2_down(n: int) -> list:
    out, s = [], 1
    while s < n:
        out.append(s)
        s *= 2
    return out[::-1]


def shrink(case, fails: Callable, *, seconds: float = 120.0, log: Optional[Callable] = None):
    """(smallest failing Case found, stats). `fails(cases)` yields a bool per
    candidate, in order (lazily: it is not resumed after the first True)."""
    t0 = time.perf_counter()
    stats: dict[str, Any] = {"tried": 0, "kept": 0, "steps": [], "rounds": 0, "seconds": 0.0,
                             "complete": True, "words_before": len(case.words)}

    def out_of_time():
        return time.perf_counter() - t0 > seconds

    def first_failing(cands):
        cands = [(label, c) for label, c in cands if not _same(c, cur)]
        if not cands:
            return None
        gen = fails([c for _, c in cands])
        try:
            for (label, c), bad in zip(cands, gen):
                stats["tried"] += 1
                if bad:
                    return label, c
                if out_of_time():
                    return None
        finally:
            close = getattr(gen, "close", None)
            if close:
                close()
        return None

    def greedy(make):
        nonlocal cur
        changed = False
        while not out_of_time():
            hit = first_failing(make(cur))
            if hit is None:
                break
            label, cur = hit
            stats["kept"] += 1
            stats["steps"].append(label)
            changed = True
            if log:
                log(label, cur)
        return changed

    cur = case
    while True:
        stats["rounds"] += 1
        changed = greedy(_drop_groups)
        for size in _pow2_down(len(cur.words)) + ([1] if len(cur.words) == 1 else []):
            changed |= greedy(_drop_chunks(size))
        changed |= greedy(_dims)
        changed |= greedy(_sizes)
        changed |= greedy(_ior_regs)
        changed |= greedy(_scalars)
        changed |= greedy(_pokes)
        changed |= greedy(_gprs)
        changed |= greedy(_gpr_values)
        changed |= greedy(lambda c: [("zero GM", dataclasses.replace(c, gm=bytes(len(c.gm))))]
                          if any(c.gm) else [])
        for size in _pow2_down(len(cur.gm)):
            if out_of_time():
                break
            changed |= greedy(_gm_chunks(size))
        if not changed or out_of_time():
            break
    stats["complete"] = not out_of_time()
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    stats["words_after"] = len(cur.words)
    return cur, stats


def _same(a, b) -> bool:
    return (a.words == b.words and a.gm == b.gm and a.pc == b.pc
            and a.tile_capacity == b.tile_capacity and a.pokes == b.pokes
            and {p: _nonzero(r) for p, r in a.gprs.items()} == {p: _nonzero(r) for p, r in b.gprs.items()})


def reference_predicate(runner, on_fault: str, cfg, other=None) -> Callable:
    """fails(cases): pj.batch.run (through `runner`, `capacity` candidates per
    call) against pj.reference.run, or against `other.run(case, state)`. A
    candidate whose initial State cannot be built (its setup words no longer
    complete) does not fail."""
    from .cases import initial_state
    from .oracle import reference_outcome

    def fails(cands) -> Iterator[bool]:
        for i in range(0, len(cands), runner.capacity):
            part = cands[i: i + runner.capacity]
            states: list[Optional[State]] = []
            for c in part:
                try:
                    states.append(initial_state(c, cfg))
                except RuntimeError:
                    states.append(None)
            ok = [r for r, st in enumerate(states) if st is not None]
            got = runner.run([(states[r], part[r].words) for r in ok]) if ok else None
            row = {r: n for n, r in enumerate(ok)}
            for r, c in enumerate(part):
                if states[r] is None:
                    yield False
                    continue
                st = states[r]
                assert st is not None and got is not None      # row r was built and run
                want = (other.run(c, st) if other is not None
                        else reference_outcome(st, c.words, c.pe, on_fault, cfg))
                yield not got[row[r]].same(want)
    return fails


__all__ = ["shrink", "reference_predicate", "groups", "set_field"]
