"""Campaign coverage: the operations a case names (decoded from its words) and
the counts per axis that `ptojax fuzz` reports, with what was never hit.

Split from campaign.py: what a campaign counts, apart from how it runs.
"""

from __future__ import annotations

import collections
import functools
from typing import Optional

from .. import tables
from ..state import MachineConfig
from . import gen as G

# ----------------------------------------------------------------- operations


def op_token(name: str) -> str:
    """Command-line spelling of an operation: "MGATHER.CAS" -> "mgather_cas"."""
    return name.lower().replace(".", "_")


OP_TOKENS = {op_token(name): name for name, _, _ in tables.OPS}
MATRIX_OPS = tuple(name for name, engine, _ in tables.OPS if engine == "CUBE")    # the 12 forms
IMPLEMENTED_OPS = ("TLOAD", "TSTORE", "MGATHER.CAS") + MATRIX_OPS
NO_OP = "(no BSTART)"
NO_DATR = "(no B.DATR)"


def parse_ops(text: str) -> Optional[frozenset]:
    """`tload,tstore,mgather_cas` -> {"TLOAD", ...}; "all" (or empty) -> None."""
    toks = [t.strip().lower() for t in (text or "").split(",") if t.strip()]
    if not toks or "all" in toks:
        return None
    bad = [t for t in toks if t not in OP_TOKENS]
    if bad:
        raise ValueError(f"unknown operation {', '.join(bad)}; expected a comma list of "
                         f"{', '.join(OP_TOKENS)} (or all)")
    return frozenset(OP_TOKENS[t] for t in toks)


@functools.lru_cache(maxsize=1 << 16)
def word_features(word: int) -> tuple:
    """(operation named by a BSTART word or None, its DataType code or None,
    B.DATR Layout code or None) of one word, from ptojax.isa's decoder."""
    from ..isa.decode import decode
    c = decode(word)
    mn = c.mnemonic
    if mn.startswith("BSTART."):
        op = c.variant or mn[len("BSTART."):]
        return op, c.fields.get("DataType"), None
    if mn == "B.DATR":
        return None, None, c.fields.get("Layout")
    return None, None, None


def case_ops(case) -> frozenset:
    """Operations the Case's BSTART words name (decoded, legal or not)."""
    return frozenset(f[0] for f in map(word_features, case.words) if f[0] is not None)


# ----------------------------------------------------------------- coverage


def _dtype_label(code: int) -> str:
    d = tables.DTYPE_BY_CODE.get(code)
    return d.name if d else f"reserved:{code}"


def _layout_label(code: int) -> str:
    return tables.LAYOUT_CODES.get(code, f"reserved:{code}")


class Coverage:
    """Counts per operation (cases with a BSTART of it), BSTART dtype, B.DATR
    Layout code, final fault, the generator's kind / mutation labels, and the
    edge kinds' `edge:` notes (large tiles, the budget edge)."""

    AXES = ("operations", "dtypes", "layouts", "faults", "kinds", "mutations", "edges")

    def __init__(self, selected_ops: Optional[frozenset] = None, cas_weight: float = 0.0,
                 matmul_weight: float = 0.0, coop_weight: float = 0.0, edge_weight: float = 0.0,
                 machine: Optional[MachineConfig] = None):
        self.selected_ops = selected_ops
        self.cas_weight = cas_weight
        self.matmul_weight = matmul_weight
        self.coop_weight = coop_weight
        self.edge_weight = edge_weight
        self.edge = G.edge_coverage(machine or G.GenConfig().machine, edge_weight, cas_weight > 0,
                                    matmul_weight > 0)
        self.counts = {a: collections.Counter() for a in self.AXES}
        self.fault_by_label = collections.defaultdict(collections.Counter)

    def add(self, case: G.Case, fault: str):
        ops, dts, lays = set(), set(), set()
        for w in case.words:
            op, dt, lay = word_features(w)
            if op is not None:
                ops.add(op)
                dts.add(_dtype_label(dt))
            if lay is not None:
                lays.add(_layout_label(lay))
        c = self.counts
        c["operations"].update(ops or {NO_OP})
        c["dtypes"].update(dts)
        c["layouts"].update(lays or {NO_DATR})
        c["faults"][fault] += 1
        c["kinds"][case.kind] += 1
        c["mutations"].update(case.mutations)
        c["edges"].update(n[len("edge:"):] for n in case.notes if n.startswith("edge:"))
        for label in case.labels:
            self.fault_by_label[label][fault] += 1

    def merge(self, other: "Coverage"):
        for a in self.AXES:
            self.counts[a].update(other.counts[a])
        for k, v in other.fault_by_label.items():
            self.fault_by_label[k].update(v)

    def universe(self) -> dict:
        if self.selected_ops:
            ops = sorted(self.selected_ops)
        else:                        # the matrix family only when its kinds are drawn
            ops = [o for o in IMPLEMENTED_OPS if o not in MATRIX_OPS or self.matmul_weight > 0
                   or (self.coop_weight > 0 and o in G.COOP_FORMS)]
            ops += ["TSTORE.SPART"] if self.coop_weight > 0 else []     # the Shared kinds
        return {"operations": ops,
                "dtypes": [d.name for d in tables.DATATYPES],
                "layouts": list(tables.LAYOUT_CODES.values()),
                "faults": list(tables.FAULTS),
                "kinds": self._labels("PROGRAM_KINDS", "CAS_KINDS", "MATMUL_KINDS", "COOP_KINDS")
                + self.edge["kinds"],
                "mutations": self._labels("MUTATIONS", "CAS_MUTATIONS", "MATMUL_MUTATIONS",
                                          "COOP_MUTATIONS"),
                "edges": self.edge["edges"]}

    def _labels(self, transport: str, cas: str, matmul: str, coop: str) -> list:
        """The labels the generator can draw with this campaign's CAS, matrix,
        cooperative and edge weights (edge kinds: those the machine allows)."""
        rest = self.cas_weight + self.matmul_weight + self.coop_weight + self.edge_weight
        out = list(getattr(G, transport)) if rest < 1 else []
        out += list(getattr(G, cas, {})) if self.cas_weight > 0 else []
        out += list(getattr(G, matmul, {})) if self.matmul_weight > 0 else []
        return out + (list(getattr(G, coop, {})) if self.coop_weight > 0 else [])

    def never_hit(self) -> dict:
        return {a: [v for v in vals if self.counts[a][v] == 0] for a, vals in self.universe().items()}

    def not_applicable(self) -> dict:
        """Edge kinds and labels the machine cannot draw: neither counted nor never hit."""
        return self.edge["not_applicable"]

    def to_json(self) -> dict:
        order = self.universe()

        def ordered(axis):
            c = self.counts[axis]
            known = [k for k in order[axis] if k in c]
            rest = sorted(k for k in c if k not in order[axis])
            return {k: c[k] for k in known + rest}

        return {a: ordered(a) for a in self.AXES}
