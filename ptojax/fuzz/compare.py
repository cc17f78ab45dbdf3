"""What differs between two runs of a case: outcomes as numpy, compared a
batch at a time, and field by field where they differ.

`Outcome` is one run (every State leaf as numpy, the executed count, or the
exception a model raised); `Results` is a batch of them as stacked leaves,
and `mismatches` compares rows of two batches with one vectorized pass per
leaf. `differences` then names, for a case that differs, every field that
does (the report and the case files show them), and `signature` is the
coarse label mismatches are grouped by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import tables
from ..report import index_ranges
from ..state import (MachineConfig, State, leaf_differences, own_words, state_leaves, tile_words,
                     tile_leaves as tile_leaves_of)
from .engine import reset_leaves

STACK_BYTES = 1 << 20        # States up to this size travel stacked (Results.collect)


@dataclass
class Outcome:
    """One run's result as numpy: every State leaf, and the executed count.
    `error` holds the exception a model raised instead of a result (leaves empty)."""
    leaves: dict
    executed: int
    error: Optional[str] = None

    @property
    def fault(self) -> str:
        if self.error is not None:
            return "(exception)"
        return tables.FAULTS[int(self.leaves[".fault"])]

    @property
    def fault_address(self) -> int:
        return int(self.leaves[".fault_address"]) if self.error is None else 0

    @property
    def pc(self) -> int:
        return int(self.leaves[".pc"]) if self.error is None else 0

    @classmethod
    def of(cls, result) -> "Outcome":
        """From a RunResult (pj.run / pj.reference.run)."""
        return cls(state_leaves(result.state), int(result.executed))

    @classmethod
    def failed(cls, e: BaseException) -> "Outcome":
        return cls({}, -1, f"{type(e).__name__}: {e}")

    def state(self, cfg: MachineConfig) -> State:
        """The final State (numpy leaves)."""
        import jax
        if self.error is not None:
            raise ValueError(f"no State: the run raised {self.error}")
        base = reset_leaves(cfg)
        treedef = jax.tree_util.tree_structure(base)
        return jax.tree_util.tree_unflatten(treedef, list(self.leaves.values()))

    def same(self, other: "Outcome") -> bool:
        if self.error is not None or other.error is not None:
            return False
        return self.executed == other.executed and not leaf_differences(self.leaves, other.leaves,
                                                                        limit=1)


@dataclass
class Results:
    """Runs of a batch of cases: every State leaf stacked ([n, ...], state_leaves'
    keys), the executed counts, and per row the exception a model raised
    instead (`errors`, None where it returned) or, for a row whose leaves came
    back in another shape or dtype, those leaves (`odd`)."""
    leaves: dict
    executed: np.ndarray
    errors: Optional[list] = None
    odd: dict = field(default_factory=dict)
    outcomes: Optional[list] = None   # kept row by row instead (leaves: the fault codes alone)

    def __len__(self) -> int:
        return len(self.executed)

    def __getitem__(self, i: int) -> Outcome:
        if self.outcomes is not None:
            return self.outcomes[i]
        if self.errors is not None and self.errors[i] is not None:
            return Outcome({}, -1, self.errors[i])
        if i in self.odd:
            return Outcome(self.odd[i], int(self.executed[i]))
        return Outcome({k: v[i] for k, v in self.leaves.items()}, int(self.executed[i]))

    @property
    def fault_code(self) -> np.ndarray:
        return self.leaves[".fault"]

    @classmethod
    def collect(cls, outcomes: list, cfg: MachineConfig) -> "Results":
        """Outcomes as a batch: stacked where States are small; where they are
        large (the model's own bounds: 15 MB), kept row by row, since stacking
        them cost more than comparing them."""
        if cfg.state_bytes <= STACK_BYTES:
            return cls.stack(outcomes, cfg)
        faults = np.array([int(o.leaves[".fault"]) if o.error is None and ".fault" in o.leaves
                           else 0 for o in outcomes], np.int32)
        errors = [o.error for o in outcomes]
        return cls({".fault": faults}, np.array([o.executed for o in outcomes], np.int64),
                   errors if any(e is not None for e in errors) else None, {}, list(outcomes))

    @classmethod
    def stack(cls, outcomes: list, cfg: MachineConfig) -> "Results":
        """Outcomes (one per case) as one batch: a row that raised or whose
        leaves do not have the reset State's shapes and dtypes is zero-filled
        and kept aside (errors, odd)."""
        base = {k: np.asarray(v) for k, v in state_leaves(reset_leaves(cfg)).items()}
        n = len(outcomes)
        errors = [o.error for o in outcomes]
        odd = {i: o.leaves for i, o in enumerate(outcomes) if o.error is None
               and (o.leaves.keys() != base.keys() or any(
                   o.leaves[k].shape != v.shape or o.leaves[k].dtype != v.dtype
                   for k, v in base.items()))}
        fill = {k: np.zeros_like(v) for k, v in base.items()}
        # one stack per leaf: a row that raised or came back odd contributes zeros
        ok = [o.leaves if o.error is None and i not in odd else fill for i, o in enumerate(outcomes)]
        leaves = {k: np.stack([x[k] for x in ok]) if n else np.zeros((0,) + v.shape, v.dtype)
                  for k, v in base.items()}
        return cls(leaves, np.array([o.executed for o in outcomes], np.int64),
                   errors if any(e is not None for e in errors) else None, odd)


# the old name (tests and callers of the runner)
BatchOutcomes = Results


def mismatches(got: Results, rows, want: Results) -> np.ndarray:
    """bool[len(rows)]: row rows[i] of `got` differs from row i of `want` in
    any leaf or the executed count; a row that raised or came back in other
    shapes differs. One vectorized comparison per leaf."""
    rows = np.asarray(rows, np.int64)
    m = len(rows)
    if not m:
        return np.zeros(0, bool)
    bad = np.asarray(got.executed)[rows] != np.asarray(want.executed)
    for side, idx in ((got, rows), (want, np.arange(m))):
        if side.errors is not None:
            bad |= np.array([side.errors[i] is not None for i in idx])
        if side.odd:
            bad |= np.isin(idx, list(side.odd))
    if want.outcomes is not None:           # row by row, on views of the batch's leaves
        for i, (r, w) in enumerate(zip(rows.tolist(), want.outcomes)):
            bad[i] = bad[i] or w.error is not None or len(w.leaves) != len(got.leaves) or not all(
                k in w.leaves and w.leaves[k].shape == a.shape[1:] and w.leaves[k].dtype == a.dtype
                and np.array_equal(a[r], w.leaves[k]) for k, a in got.leaves.items())
        return bad
    for k, a in got.leaves.items():
        b = want.leaves[k]
        bad |= (np.asarray(a)[rows] != b).reshape(m, -1).any(axis=1)
    return bad


def _tile_name(slot: int, hand_slots: int) -> str:
    return tables.tile_name((slot // hand_slots) * tables.HAND_SLOTS + slot % hand_slots)


def _code_name(leaf: str, v: int):
    if leaf == "dtype":
        d = tables.DTYPE_BY_CODE.get(v)
        return d.name if d else v
    if leaf == "layout":
        return tables.TILE_LAYOUTS[v] if 0 <= v < len(tables.TILE_LAYOUTS) else v
    if leaf == "location":
        return tables.TILE_LOCATIONS[v] if 0 <= v < len(tables.TILE_LOCATIONS) else v
    if leaf == "mask":
        return tables.mask_str(v)
    if leaf == "allocated":
        return bool(v)
    return v


def _py(v):
    a = np.asarray(v)
    if a.ndim == 0:
        x = a.item()
        return bool(x) if a.dtype == bool else int(x)
    return [_py(x) for x in a]


def differences(a: Outcome, b: Outcome, names: tuple = ("jax", "reference"), limit: int = 8) -> list:
    """Field-by-field differences of two outcomes, as JSON-ready dicts.

    Each entry has "field" and the two values under `names`: fault,
    executed, pc, fault_address, GM byte ranges (hex), GPRs by PE and name,
    TILE_CAPACITY, the numeric flags by name, per tile (by assembly name) each descriptor field and the
    payload Words / defined bits that differ (slot lists, at most `limit`
    shown with the count), and each block field.
    """
    x, y = names
    out = []

    def add(fieldname, va, vb, **extra):
        out.append({"field": fieldname, **extra, x: va, y: vb})

    if a.error is not None or b.error is not None:
        add("exception", a.error, b.error)
        return out

    la, lb = dict(a.leaves), dict(b.leaves)
    for k in list(la):
        if la[k].shape != lb[k].shape or la[k].dtype != lb[k].dtype:
            add(f"shape {k[1:]}", f"{la[k].dtype}{list(la[k].shape)}", f"{lb[k].dtype}{list(lb[k].shape)}")
            la[k], lb[k] = None, None          # compared no further
    scalar = lambda k: la[k] is not None
    if scalar(".fault") and a.fault != b.fault:
        add("fault", a.fault, b.fault)
    if a.executed != b.executed:
        add("executed", a.executed, b.executed)
    if scalar(".pc") and a.pc != b.pc:
        add("pc", hex(a.pc), hex(b.pc))
    if scalar(".fault_address") and a.fault_address != b.fault_address:
        add("fault_address", hex(a.fault_address), hex(b.fault_address))
    ga, gb = la[".gm"], lb[".gm"]
    if ga is not None:
        for s, e in index_ranges(np.flatnonzero(ga != gb), gap=8):
            add("gm", ga[s:e].tobytes().hex(), gb[s:e].tobytes().hex(), address=hex(s), length=e - s)
    ra, rb = la[".gpr"], lb[".gpr"]
    if ra is not None:
        for pe, r in np.argwhere(ra != rb).tolist():
            add(f"gpr PE{pe} {tables.GPR_NAMES[r]}", hex(int(ra[pe, r])), hex(int(rb[pe, r])))
    if la[".tile_capacity"] is not None and int(la[".tile_capacity"]) != int(lb[".tile_capacity"]):
        add("tile_capacity", int(la[".tile_capacity"]), int(lb[".tile_capacity"]))
    fa, fb = la.get(".numeric_flags"), lb.get(".numeric_flags")
    if fa is not None and fb is not None and int(fa) != int(fb):
        add("numeric_flags", tables.flag_names(int(fa)), tables.flag_names(int(fb)))
    tile_leaves = [k for k in la if k.startswith(".tiles.") and la[k] is not None]
    ta, tb = tile_leaves_of(la), tile_leaves_of(lb)
    hs = (la[".tiles.base"].shape[1] // 4) if ".tiles.base" in tile_leaves else 0
    pool_reported = set()
    for pe, slot in ((p, q) for p in range(tables.NUM_PES) for q in range(hs * 4)):
        name = f"PE{pe} {_tile_name(slot, hs)}"
        for k in tile_leaves:
            leaf = k[len(".tiles."):]
            if leaf in ("words", "defined"):     # the Words the slot owns on either side
                part = ("words", "defined").index(leaf)
                n = max(own_words(t, pe, slot)[part].size for t in (ta, tb))
                va, vb = (tile_words(t, pe, slot)[part][:n] for t in (ta, tb))
            else:
                va, vb = la[k][pe, slot], lb[k][pe, slot]
            if np.array_equal(va, vb):
                continue
            pool_reported.add(k)
            if va.ndim == 0:
                add(f"tile {name} {leaf}", _code_name(leaf, int(va)), _code_name(leaf, int(vb)))
            else:
                where = np.flatnonzero(va != vb)
                shown = where[:limit].tolist()
                fmt = (lambda v: bool(v)) if va.dtype == bool else (lambda v: f"0x{int(v):016x}")
                add(f"tile {name} {leaf}", [fmt(va[i]) for i in shown], [fmt(vb[i]) for i in shown],
                    slots=shown, count=int(where.size))
    for k in (".tiles.words", ".tiles.defined"):     # pool Words no tile owns
        if k in tile_leaves and k not in pool_reported and not np.array_equal(la[k], lb[k]):
            at = np.argwhere(la[k] != lb[k])
            add(f"tile pool {k[len('.tiles.'):]}", f"{len(at)} Words differ",
                f"first at PE{at[0][0]} Word {at[0][1] * la[k].shape[-1] + at[0][2]}")
    for k in la:
        if k.startswith(".shared.") and la[k] is not None and not np.array_equal(la[k], lb[k]):
            rec = np.flatnonzero((la[k] != lb[k]).reshape(la[k].shape[0], -1).any(axis=1))
            add(f"shared {k[len('.shared.'):]}", f"records {rec.tolist()}",
                [_py(la[k][i]) if la[k].ndim == 1 else int(np.sum(la[k][i] != lb[k][i]))
                 for i in rec[:limit]])
    for k in la:
        if k.startswith(".block.") and la[k] is not None and not np.array_equal(la[k], lb[k]):
            add(f"block {k[len('.block.'):]}", _py(la[k]), _py(lb[k]))
    return out


def format_difference(d: dict, names: tuple = ("jax", "reference")) -> str:
    x, y = names
    f = d["field"]
    if f == "gm":
        return f"gm[{d['address']}..+{d['length']}]: {x} {d[x]} | {y} {d[y]}"
    if "slots" in d:
        more = f" (of {d['count']})" if d["count"] > len(d["slots"]) else ""
        return f"{f} at slots {d['slots']}{more}: {x} {d[x]} | {y} {d[y]}"
    return f"{f}: {x} {d[x]} | {y} {d[y]}"


def signature(diffs: list, names: tuple = ("jax", "reference")) -> tuple:
    """A coarse label of a mismatch: the two faults when they differ, else the
    fault and the kinds of field that differ (gm, tile, block, gpr, ...)."""
    x, y = names
    for d in diffs:
        if d["field"] == "exception":
            return ("exception",)
        if d["field"].startswith("shape "):
            return ("shape",)
        if d["field"] == "fault":
            return (f"{d[x]} vs {d[y]}",)
    return ("same fault",) + tuple(sorted({d["field"].split(" ")[0] for d in diffs}))


__all__ = ["BatchOutcomes", "Outcome", "Results", "differences", "format_difference", "mismatches",
           "signature"]
