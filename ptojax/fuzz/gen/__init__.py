"""Seeded random programs and initial States for differential testing.

`random_case(rng, cfg)` draws one `Case`: a word stream of at most
`cfg.max_words` 32-bit words plus the initial GM bytes, GPR files, PC and
TILE_CAPACITY it runs on (and, for the families that need source tiles, the
`setup` words that make them). `build_state(case, cfg)` turns a Case into a
`State`; `random_cases(seed, n, cfg)` draws n Cases from one seed.

The families, one module each over a shared driver (driver.py: GenConfig,
Case, the program builder, the draw-kind / draw-mutations loop):

- transport.py (+ transport_mutations.py): TLOAD/TSTORE programs,
  `PROGRAM_KINDS` and `MUTATIONS`; what random_case draws by default.
- mgather_cas.py (+ mgather_cas_plan.py): MGATHER.CAS, `CAS_KINDS`,
  `CAS_MUTATIONS`, `CAS_AIMS`; `GenConfig.cas_weight` > 0 lets random_case
  draw them too.
- matrix.py (+ matrix_tiles.py, matrix_bundle.py): TMATMUL/TGEMV with
  All-Local operands, `MATMUL_KINDS`, `MATMUL_MUTATIONS`, `MATMUL_AIMS`;
  `GenConfig.matmul_weight`.
- cooperative.py (+ shared_transport.py): cooperative TMATMUL* and Shared TLSU on
  the Core, `COOP_KINDS`, `COOP_MUTATIONS`, `COOP_AIMS`;
  `GenConfig.coop_weight` (with core).
- edges.py: TLOAD/TSTORE of tiles past 256 payload Words up to and over
  tile_words, and allocations at the TILE_CAPACITY edge, `EDGE_KINDS` (those
  a machine allows: `edge_kinds`), the `edges` labels (`edge_labels`);
  `GenConfig.edge_weight`, which also puts some MGATHER.CAS and matrix
  destinations at the TILE_CAPACITY edge (`edge_capacity`).

Weights of zero (the default) leave random_case's draws unchanged; with
several, one uniform draw picks CAS below cas_weight, matrix below cas_weight
+ matmul_weight, cooperative below cas + matmul + coop weight, edge below
that + edge_weight.
`GenConfig.core` makes every Case `core=True` (run with pj.run_core /
pj.batch.run(core=True); its setup with pj.reference.run_core).

Words come from ptojax.isa.encode (encoding.md 4); `Case.text()`
disassembles them for reports.
"""

from __future__ import annotations

import numpy as np

from ...isa.encode import (BSTOP, FPATR0, START, bstart, catr, datr, dim, ior, ios,  # noqa: F401
                           iot_dst, iot_src, iot_src2, iot_src_dst)
from .cooperative import (COOP_AIMS, COOP_FORMS, COOP_KINDS, COOP_MACHINE, COOP_MUTATIONS,
                          random_coop_case, random_coop_cases)
from .driver import (Bundle, Case, GenConfig, apply_pokes, gen_config, prepare_state, build_state,  # noqa: F401
                     case_arrays, case_rng, draw_many, undefine_words)
from .matrix import (MATMUL_AIMS, MATMUL_FORMS, MATMUL_KINDS, MATMUL_MUTATIONS,  # noqa: F401
                     MatmulImpossible, mm_form_ok, mm_mutation_ok, matmul_possible,
                     random_matmul_case, random_matmul_cases)
from .edges import (EDGE_KINDS, EDGE_LABELS, LARGE_LABELS, edge_case, edge_coverage, edge_kinds,
                    edge_labels, large_ok)
from .mgather_cas import CAS_AIMS, CAS_KINDS, CAS_MUTATIONS, random_cas_case, random_cas_cases
from .tmov import TMOV_AIMS, TMOV_KINDS, TMOV_MUTATIONS, random_tmov_case, random_tmov_cases
from .transport import PROGRAM_KINDS, transport_case, random_words_case
from .transport_mutations import MUTATIONS, STREAM_MUTATIONS


def random_case(rng: np.random.Generator, cfg=None) -> Case:
    """One random Case: a TLOAD/TSTORE program, or with GenConfig's weights
    another family's case (see the module docstring)."""
    g = gen_config(cfg)
    if g.cas_weight > 0 or g.matmul_weight > 0 or g.coop_weight > 0 or g.edge_weight > 0 \
            or g.tmov_weight > 0:
        u = rng.random()              # one draw: cas_weight alone leaves the old draws as they were
        if u < g.cas_weight:
            return random_cas_case(rng, g)
        if u < g.cas_weight + g.matmul_weight:
            return random_matmul_case(rng, g)
        if u < g.cas_weight + g.matmul_weight + g.coop_weight:
            return random_coop_case(rng, g)
        if u < g.cas_weight + g.matmul_weight + g.coop_weight + g.edge_weight:
            return edge_case(rng, g)
        if u < g.cas_weight + g.matmul_weight + g.coop_weight + g.edge_weight + g.tmov_weight:
            return random_tmov_case(rng, g)
    return transport_case(rng, g)


def random_cases(seed: int, n: int, cfg=None) -> list:
    """n Cases from one seed (case i is reproducible as random_case(case_rng(seed, i), cfg))."""
    return draw_many(random_case, seed, n, gen_config(cfg))


__all__ = ["GenConfig", "Case", "Bundle", "random_case", "random_cases", "random_words_case",
           "random_cas_case", "random_cas_cases", "random_matmul_case", "random_matmul_cases",
           "build_state", "case_arrays", "case_rng", "PROGRAM_KINDS", "MUTATIONS",
           "STREAM_MUTATIONS", "CAS_KINDS", "CAS_MUTATIONS", "CAS_AIMS", "MATMUL_FORMS",
           "MATMUL_KINDS", "MATMUL_MUTATIONS", "MATMUL_AIMS", "random_coop_case",
           "random_coop_cases", "COOP_FORMS", "COOP_MACHINE", "COOP_KINDS", "COOP_MUTATIONS",
           "COOP_AIMS", "MatmulImpossible", "matmul_possible", "EDGE_KINDS", "EDGE_LABELS", "LARGE_LABELS",
           "edge_case", "edge_coverage", "edge_kinds", "edge_labels", "large_ok",
           "random_tmov_case", "random_tmov_cases", "TMOV_KINDS", "TMOV_MUTATIONS", "TMOV_AIMS"]
