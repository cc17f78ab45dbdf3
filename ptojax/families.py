"""The operation families: the one place a family of the slice is declared.

A family is the completion of one kind of block (docs/architecture.md,
"Where a new operation family plugs in"). Its record names what both models
and the campaigns derive from it:

* `ops`: the BSTART operations (tables.OPS names) whose blocks it completes;
* `selects`: which of those blocks it takes, in words (each side writes the
  predicate in its own terms: ops/dispatch.py over the decoded Header,
  reference/run.py over the oracle's Block) after the zero-mask no-op and the
  CUBE-transport selection, which come first (C5.1, C.5);
* `effect`: the effect group (machine.possible_effects) whose words make a
  program trace its completion; None: every program does (the default family);
* `steps`: its ordered check lists (tables.STEP_LISTS keys), whose ids both
  models carry;
* `generator`: its module in fuzz/gen, and `weight`, the GenConfig field that
  weights its draws (None: it gets the share left by the others).

ops/<name>.py and reference/<name>.py each export `FAMILY` for the record of
the same name, and tests/test_families.py checks that the two sides, the
effect table, the step lists and the generator agree with these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import tables


@dataclass(frozen=True)
class Family:
    name: str
    ops: tuple[str, ...]
    selects: str
    effect: Optional[str]
    steps: tuple[str, ...]
    generator: str
    weight: Optional[str]


_CUBE_OPS = tuple(n for n, engine, _ in tables.OPS if engine == "CUBE")
_TMOV_OPS = tuple(n for n, _, _ in tables.OPS if n.split(".")[0] == "TMOV")

# the order of the routed families is the order dispatch composes them in; the
# default family (transport) completes every block no other one selects
FAMILIES = (
    Family("transport", ("TLOAD", "TSTORE"),
           "the CUBE TLOAD/TSTORE (any BSTART with a B.DATR Layout 21..26) and the ordinary "
           "Local TLOAD/TSTORE; the default: every block no other family selects",
           None, ("C5", "C6", "C7", "C8"), "transport", None),
    Family("shared_transport", ("TLOAD", "TSTORE", "TSTORE.SPART"),
           "a TLOAD or TSTORE with a B.IOS binding, and TSTORE.SPART always",
           "SHARED", ("SH3", "SH4"), "cooperative", "coop_weight"),
    Family("mgather_cas", ("MGATHER.CAS",), "MGATHER.CAS",
           "MGATHER.CAS", ("CAS",), "mgather_cas", "cas_weight"),
    Family("matrix", _CUBE_OPS, "the CUBE-engine operations (TMATMUL*, TGEMV*)",
           "MATMUL", ("MM",), "matrix", "matmul_weight"),
    Family("tmov", _TMOV_OPS, "BSTART.TMOV, every Function (2 and 9..12), a B.IOS or not",
           "TMOV", ("MV", "MS"), "tmov", "tmov_weight"),
)
BY_NAME = {f.name: f for f in FAMILIES}
DEFAULT = FAMILIES[0]
ROUTED = FAMILIES[1:]
