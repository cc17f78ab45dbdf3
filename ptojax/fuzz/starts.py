"""The initial States of a batch of campaign rows, as arrays.

A row starts from the reset State, or from the result of its drawn case's
setup words (a row of `prepared`, state_leaves' leaves of a stack of States,
shared by the case's variants), with its own GM, GPRs, PC and TILE_CAPACITY
(the setup's, then the row's pokes). `Starts` holds exactly that, so the oracle's
workers, the case files and the batched export and DUT request rebuild any
row's State without a State per row ever being built or sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np

from ..state import MachineConfig, State, state_leaves
from .batchfile import POOLS
from .engine import reset_leaves


@dataclass
class Starts:
    """Rows' initial States and words (one entry per row): GM, GPR files, PC,
    TILE_CAPACITY, `which` (an index into `prepared`, -1: the reset State),
    words, lengths and whether the row runs on the Core."""
    gm: np.ndarray
    gpr: np.ndarray
    pc: np.ndarray
    tile_capacity: np.ndarray
    which: np.ndarray
    words: np.ndarray
    lengths: np.ndarray
    core: np.ndarray
    prepared: dict = field(default_factory=dict)     # state_leaves path -> [P, ...]

    def __len__(self) -> int:
        return len(self.pc)

    def take(self, rows) -> "Starts":
        """The rows `rows`, with the prepared States they start from, renumbered."""
        rows = np.asarray(rows, np.int64)
        which = self.which[rows]
        used, inverse = np.unique(which[which >= 0], return_inverse=True)
        renum = np.full(len(which), -1, np.int32)
        renum[which >= 0] = inverse
        return Starts(self.gm[rows], self.gpr[rows], self.pc[rows], self.tile_capacity[rows],
                      renum, self.words[rows], self.lengths[rows], self.core[rows],
                      {k: v[used] for k, v in self.prepared.items()} if len(used) else {})

    def part(self, a: int, b: int) -> "Starts":
        return self.take(np.arange(a, b))

    def state(self, i: int, cfg: MachineConfig) -> State:
        """Row i's initial State (numpy leaves)."""
        base = reset_leaves(cfg)
        if self.which[i] >= 0:
            base = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(base),
                                                [v[self.which[i]] for v in self.prepared.values()])
        return base.replace(gm=self.gm[i], gpr=self.gpr[i], pc=self.pc[i],
                            tile_capacity=self.tile_capacity[i], fault=np.int32(0),
                            fault_address=np.uint64(0))

    def words_of(self, i: int) -> list:
        return [int(w) for w in self.words[i, : self.lengths[i]]]

    def tensors(self, prefix: str, cfg: MachineConfig) -> dict:
        """The rows' initial States as batchfile tensors (pools sparse), built
        from the arrays: the reset State's leaves, a prepared State's where a row
        has one, then the rows' own GM, GPRs, PC and TILE_CAPACITY."""
        n = len(self)
        base = {k: np.asarray(v) for k, v in state_leaves(reset_leaves(cfg)).items()}
        own = {".gm": self.gm, ".gpr": self.gpr, ".pc": self.pc,
               ".tile_capacity": self.tile_capacity}
        has = np.flatnonzero(self.which >= 0)
        src = self.which[has]
        out = {}
        for path, b in base.items():
            if path[1:] in POOLS:
                continue
            if path in own:
                a = np.asarray(own[path], b.dtype)
            else:
                a = np.broadcast_to(b, (n,) + b.shape).copy()
                if path not in (".fault", ".fault_address") and len(has):
                    a[has] = self.prepared[path][src]
            out[f"{prefix}.{path[1:]}"] = a
        W = base[".tiles.words"].shape[-1]
        WS = base[".shared.words"].shape[-1]
        if not len(has):
            out[f"{prefix}.tiles.pages"] = np.zeros((0, 3), np.int32)
            out[f"{prefix}.tiles.words"] = np.zeros((0, W), base[".tiles.words"].dtype)
            out[f"{prefix}.tiles.defined"] = np.zeros((0, W), np.bool_)
            out[f"{prefix}.shared.records"] = np.zeros((0, 2), np.int32)
            out[f"{prefix}.shared.words"] = np.zeros((0, WS), np.uint64)
            out[f"{prefix}.shared.defined"] = np.zeros((0, WS), np.bool_)
            return out
        # the prepared States' non-zero pages, each given to every row starting from it
        w, d = self.prepared[".tiles.words"], self.prepared[".tiles.defined"]
        used = (w != 0).any(axis=-1) | d.any(axis=-1)                   # [P, 4, K]
        at = np.argwhere(used)                                            # sorted by prepared
        take, dest = _spread(at[:, 0], len(w), has, src)
        out[f"{prefix}.tiles.pages"] = np.column_stack([dest, at[take, 1:]]).astype(np.int32)
        out[f"{prefix}.tiles.words"] = w[used][take]
        out[f"{prefix}.tiles.defined"] = d[used][take]
        sw, sd = self.prepared[".shared.words"], self.prepared[".shared.defined"]
        su = (sw != 0).any(axis=-1) | sd.any(axis=-1)                     # [P, R]
        sat = np.argwhere(su)
        take, dest = _spread(sat[:, 0], len(sw), has, src)
        out[f"{prefix}.shared.records"] = np.column_stack([dest, sat[take, 1:]]).astype(np.int32)
        out[f"{prefix}.shared.words"] = sw[su][take]
        out[f"{prefix}.shared.defined"] = sd[su][take]
        return out


def _spread(owner, P: int, rows, src):
    """Entries (sorted by `owner`, each owned by one of P prepared States) given
    to the rows starting from their owner: (entry index, row) pairs, by row."""
    count = np.bincount(owner, minlength=P)
    first = np.cumsum(count) - count
    rep = count[src]
    dest = np.repeat(rows, rep)
    within = np.arange(int(rep.sum())) - np.repeat(np.cumsum(rep) - rep, rep)
    return np.repeat(first[src], rep) + within, dest


__all__ = ["Starts"]
