"""Campaign coverage: the operations a case names (decoded from its words) and
the counts per axis that `ptojax fuzz` reports, with what was never hit.

Split from campaign.py: what a campaign counts, apart from how it runs.
"""

from __future__ import annotations

import collections
import functools
from typing import Optional

import numpy as np

from .. import tables
from ..isa import words as IW
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

_START_ENC, _START_OPS, _DATATYPE = IW.start_fields()
_DATR_ENC = np.array([i for i, m in enumerate(IW.MNEMONICS) if m == "B.DATR"], np.int16)
_LAYOUT = IW.field_of(int(_DATR_ENC[0]), "Layout")
FAULT_NAMES = {i: f for i, f in enumerate(tables.FAULTS)} | {-1: "(exception)"}
VARIANT_OPS = ("field", "bit", "drop", "dup", "swap", "gpr", "gm")


def family_of(case) -> str:
    """The generator family a drawn case comes from (its kind's table)."""
    kind = case.kind
    if kind in G.EDGE_KINDS:
        return "edge"
    if kind in G.CAS_KINDS:
        return "mgather_cas"
    if kind in G.COOP_KINDS:
        return "shared" if kind.startswith("sh_") else "cooperative"
    if kind in G.MATMUL_KINDS:
        return "post_processing" if kind.startswith("mm_post") else "matrix"
    if kind.startswith("relayout"):
        return "relayout"
    return "transport"


def rest_weight(cov) -> float:
    """The share of draws that are none of the weighted families (TLOAD/TSTORE programs)."""
    return cov.cas_weight + cov.matmul_weight + cov.edge_weight \
        + (cov.coop_weight * cov.core_share)


def _dtype_label(code: int) -> str:
    d = tables.DTYPE_BY_CODE.get(code)
    return d.name if d else f"reserved:{code}"


def _layout_label(code: int) -> str:
    return tables.LAYOUT_CODES.get(code, f"reserved:{code}")


class Coverage:
    """Counts per operation (cases with a BSTART of it), BSTART dtype, B.DATR
    Layout code, final fault, the generator's kind / mutation labels, the
    edge kinds' `edge:` notes (large tiles, the budget edge), the variants'
    changes, the families (the kind's generator: transport, relayout,
    MGATHER.CAS, matrix, post-processing, Core / Shared, edge), and the
    numeric status flags set when a case ends (each flag its cases)."""

    AXES = ("families", "operations", "dtypes", "layouts", "faults", "kinds", "mutations",
            "variants", "edges", "flags")

    def __init__(self, selected_ops: Optional[frozenset] = None, cas_weight: float = 0.0,
                 matmul_weight: float = 0.0, coop_weight: float = 0.0, edge_weight: float = 0.0,
                 machine: Optional[MachineConfig] = None, core_share: Optional[float] = None,
                 variants: bool = False):
        self.selected_ops = selected_ops
        self.cas_weight = cas_weight
        self.matmul_weight = matmul_weight
        self.coop_weight = coop_weight
        self.edge_weight = edge_weight
        # a cooperative weight alone means a Core campaign (every draw on the Core)
        self.core_share = (1.0 if coop_weight > 0 else 0.0) if core_share is None else core_share
        self.variants = variants
        self.edge = G.edge_coverage(machine or G.GenConfig().machine, edge_weight, cas_weight > 0,
                                    matmul_weight > 0)
        self.counts: dict[str, collections.Counter[str]] = {a: collections.Counter() for a in self.AXES}
        self.fault_by_label: collections.defaultdict[str, collections.Counter[str]] = \
            collections.defaultdict(collections.Counter)

    def add_batch(self, pool, rows, faults, flags=None) -> None:
        """Count rows `rows` of a cases.Pool with their final fault codes (-1: the
        model raised) and numeric flags (bits, tables.NUMERIC_FLAGS): the word
        features in one pass over the batch's words, the labels from each
        row's drawn case and variant."""
        words, lengths = pool.words[rows], pool.lengths[rows]
        enc = IW.encodings(words)
        enc[np.arange(words.shape[1])[None, :] >= lengths[:, None]] = IW.NONE
        c = self.counts
        starts = np.isin(enc, _START_ENC)
        for e, op in zip(_START_ENC, _START_OPS):
            hit = int((enc == e).any(axis=1).sum())
            if hit:
                c["operations"][op] += hit
        none = int((~starts.any(axis=1)).sum())
        if none:
            c["operations"][NO_OP] += none
        dt = IW.extract(words, _DATATYPE)
        for code in np.unique(dt[starts]).tolist():
            c["dtypes"][_dtype_label(code)] += int(((dt == code) & starts).any(axis=1).sum())
        datr = np.isin(enc, _DATR_ENC)
        lay = IW.extract(words, _LAYOUT)
        for code in np.unique(lay[datr]).tolist():
            c["layouts"][_layout_label(code)] += int(((lay == code) & datr).any(axis=1).sum())
        nodatr = int((~datr.any(axis=1)).sum())
        if nodatr:
            c["layouts"][NO_DATR] += nodatr
        names = [FAULT_NAMES.get(int(f), f"fault {int(f)}") for f in np.asarray(faults).tolist()]
        c["faults"].update(names)
        drawn = [pool.drawn[b] for b in pool.base[rows].tolist()]
        labels = [pool.labels[r] for r in np.asarray(rows).tolist()]
        c["kinds"].update(d.kind for d in drawn)
        c["families"].update(family_of(d) for d in drawn)
        c["mutations"].update(m for d in drawn for m in d.mutations)
        c["variants"].update(x[len("variant:"):] for lab in labels for x in lab)
        c["edges"].update(n[len("edge:"):] for d in drawn for n in d.notes if n.startswith("edge:"))
        if flags is not None:
            bits = np.asarray(flags).astype(np.int64)
            for k, name in enumerate(tables.NUMERIC_FLAGS):
                hit = int(((bits >> k) & 1).sum())
                if hit:
                    c["flags"][name] += hit
        for d, lab, f in zip(drawn, labels, names):
            for label in d.labels:
                self.fault_by_label[label][f] += 1
            if lab:
                self.fault_by_label["variant"][f] += 1

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
        c["families"][family_of(case)] += 1
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
        families = [f for f, w in (("transport", rest_weight(self) < 1),
                                   ("relayout", rest_weight(self) < 1),
                                   ("mgather_cas", self.cas_weight > 0),
                                   ("matrix", self.matmul_weight > 0),
                                   ("post_processing", self.matmul_weight > 0),
                                   ("cooperative", self.coop_weight > 0 and self.core_share > 0),
                                   ("shared", self.coop_weight > 0 and self.core_share > 0),
                                   ("edge", self.edge_weight > 0)) if w]
        return {"families": families, "operations": ops,
                "dtypes": [d.name for d in tables.DATATYPES],
                "layouts": list(tables.LAYOUT_CODES.values()),
                "faults": list(tables.FAULTS),
                "kinds": self._labels("PROGRAM_KINDS", "CAS_KINDS", "MATMUL_KINDS", "COOP_KINDS")
                + self.edge["kinds"],
                "mutations": self._labels("MUTATIONS", "CAS_MUTATIONS", "MATMUL_MUTATIONS",
                                          "COOP_MUTATIONS"),
                "variants": [op for op in VARIANT_OPS] if self.variants else [],
                "edges": self.edge["edges"],
                # the matrix commit's post-processing sets them; nothing in this
                # slice divides, so DZ is never raised (docs/numerics.md)
                "flags": [f for f in tables.NUMERIC_FLAGS if f != "DZ"]
                if self.matmul_weight > 0 else []}

    def _labels(self, transport: str, cas: str, matmul: str, coop: str) -> list:
        """The labels the generator can draw with this campaign's CAS, matrix,
        cooperative and edge weights (edge kinds: those the machine allows)."""
        out = list(getattr(G, transport)) if rest_weight(self) < 1 else []
        out += list(getattr(G, cas, {})) if self.cas_weight > 0 else []
        out += list(getattr(G, matmul, {})) if self.matmul_weight > 0 else []
        drawn = self.coop_weight > 0 and self.core_share > 0
        return out + (list(getattr(G, coop, {})) if drawn else [])

    def never_hit(self) -> dict:
        out = {a: [v for v in vals if self.counts[a][v] == 0] for a, vals in self.universe().items()}
        # a variant's field change counts under its field: "field" is hit by any
        out["variants"] = [v for v in out["variants"]
                           if not any(k.split(" ")[0] == v for k in self.counts["variants"])]
        return out

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
