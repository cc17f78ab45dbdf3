"""Seeded random TLOAD/TSTORE programs and initial States (differential testing).

`random_case(rng, cfg)` draws one `Case`: a word stream of at most
`cfg.max_words` 32-bit words plus the initial GM bytes, GPR files, PC and
TILE_CAPACITY it runs on. `build_state(case, cfg)` turns a Case into a
`State`; `random_cases(seed, n, cfg)` draws n Cases from one seed.

A Case starts from one of the program kinds (`PROGRAM_KINDS`): legal CUBE
(B.DATR Layout 21..26) and ordinary TLOAD bundles over all 25 dtypes
(weighted to the CUBE-legal ones), CUBE/ordinary TLOAD -> TSTORE round trips
of the loaded tile, crossed stores, several bundles in one stream, hands and
budgets filled up, zero-mask blocks, header commands outside a block, and
random words. A Case may then carry mutations (`MUTATIONS`), each aimed at one
check of the ordered lists of encoding.md 3-4 and state-and-transport.md
C.5-C.8 (wrong direction, missing/zero/extra LB, B.DATR attributes, B.IOS
with CUBE codes, mask mismatch, B.IOT after last, duplicates, B.IOR surplus
fields, reserved fields, truncated streams, ...). `Case.kind` and
`Case.mutations` label what was drawn, so tests can report coverage; the
labels say what was aimed at, not what the run must give (an earlier check
may fire first).

MGATHER.CAS (state-and-transport.md D): `random_cas_case(rng, cfg)` /
`random_cas_cases(seed, n, cfg)` draw from `CAS_KINDS` (legal bundles over
every transfer and index dtype, duplicate-heavy index tiles, ColumnMajor/ZN/
NZ destinations, a source load in the stream, TSTORE round trips, two CAS
bundles, wide tiles, zero-mask blocks) with mutations `CAS_MUTATIONS`, one
per D.4 check; `CAS_AIMS[label]` is the fault each aims at. The three source
tiles come from ordinary TLOAD bundles that do not fit the 16-word stream, so
a CAS Case carries them in `Case.setup`: build_state runs those words on the
reference oracle before the case (see Case). `GenConfig.cas_weight` > 0 lets
random_case draw CAS kinds too (0, the default, leaves its draws unchanged).

TMATMUL/TGEMV (docs/matmul-decisions.md, All-Local operands):
`random_matmul_case(rng, cfg)` / `random_matmul_cases(seed, n, cfg)` draw from
`MATMUL_KINDS` (floating, signed and unsigned pairs over the non-MX forms, the
36 MX pairs with and without E8M0 scale tiles, K > 32 MX cases with several
scale blocks, ACC chains whose C is an earlier bundle's D, D stored back by a
CUBE TSTORE, an operand TLOAD in the stream, NaN/inf/subnormal/-0-heavy
operands, zero-mask blocks) over all 12 forms (`GenConfig.matmul_forms`
restricts them), with mutations `MATMUL_MUTATIONS`, one or more per check of
the ordered list; `MATMUL_AIMS[label]` is the fault each aims at. A, B and C
come from CUBE TLOADs (ND2M16/ND2M32/ND2N8), scales and Bias from ordinary
TLOADs, all in Case.setup; shapes (M16 and M32 A, N and K over several CELLs
with tails) fit GenConfig.machine.tile_words. `GenConfig.matmul_weight` > 0
lets random_case draw matrix kinds (0, the default, leaves its draws
unchanged; with cas_weight too, one uniform draw picks CAS below cas_weight,
matrix below cas_weight + matmul_weight).

The Core (docs/shared-decisions.md): `GenConfig.core` makes every Case
`core=True` (run with pj.run_core / pj.batch.run(core=True); its setup with
pj.reference.run_core). `random_coop_case(rng, cfg)` / `random_coop_cases(
seed, n, cfg)` draw cooperative TMATMUL* and Shared TLOAD/TSTORE/TSTORE.SPART
Cases from `COOP_KINDS` (right-only with each active PE's own Local A,
both-Shared, Trans bits, a Shared operand TLOAD in the stream, zero-mask
blocks, sh_load / sh_store) over the six forms `COOP_FORMS`, with mutations
`COOP_MUTATIONS`, one per check of shared-decisions.md section 5 and most of
sections 3-4; `COOP_AIMS[label]` is the fault each aims at. The default
machine is pj.preset("small") (`COOP_MACHINE`). `GenConfig.coop_weight` > 0
(with core) lets random_case draw them (below cas + matmul + coop weight).

Words are encoded here from the digests (encoding.md 4), independently of
`ptojax.isa`; `Case.text()` disassembles them for reports.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import tables
from ..state import PRESETS, MachineConfig, State

MASK64 = (1 << 64) - 1

from ..isa.encode import (BSTOP, FPATR0, START, bstart, catr, datr, dim, ior, ios,  # noqa: F401
                          iot_dst, iot_src, iot_src2, iot_src_dst)

# ----------------------------------------------------------------- value tables

DTYPES = tuple(d.code for d in tables.DATATYPES)                      # the 25 assigned codes
CUBE_DTYPES = tuple(d.code for d in tables.DATATYPES if d.cube_class)  # 20 with a CELL class
BITS = {d.code: d.bits for d in tables.DATATYPES}
RESERVED_START_DTYPES = (15, 21, 22, 23, 29, 30, 31)
RESERVED_DATR_DTYPES = tables.RESERVED_DTYPE_CODES
RESERVED_LAYOUTS = tables.RESERVED_LAYOUT_CODES
RELAYOUT_CODES = (1, 3, 4, 6, 8, 9, 17, 18, 20, 27, 28, 30)
LOAD_CODES = (21, 22, 23)                 # ND2M32, ND2M16, ND2N8
STORE_CODES = (24, 25, 26)                # M322ND, M162ND, N82ND
CODE_LAYOUT = {21: "M32", 22: "M16", 23: "N8", 24: "M32", 25: "M16", 26: "N8"}
STORE_OF = {21: 24, 22: 25, 23: 26}
PEMODE_MASK = tables.PEMODE_MASK
# B.1: (layout, element bits) -> (cell rows, cell columns)
CELL = {("N8", 32): (4, 8), ("N8", 16): (8, 8), ("N8", 8): (16, 8), ("N8", 4): (32, 8),
        ("M32", 32): (32, 1), ("M32", 16): (32, 2), ("M32", 8): (32, 4), ("M32", 4): (32, 8),
        ("M16", 32): (16, 2), ("M16", 16): (16, 4), ("M16", 8): (16, 8), ("M16", 4): (16, 16)}

PROGRAM_KINDS = {
    # kind: weight
    "cube_load": 12,
    "cube_roundtrip": 16,
    "ord_load": 8,
    "ord_roundtrip": 12,
    "cross_store": 4,
    "two_bundles": 6,
    "hand_fill": 3,
    "budget": 3,
    "zero_mask": 5,
    "outside_block": 4,
    "random_words": 3,
    "structured_random": 4,
}

# mutation label -> weight (the fault each aims at in the comment)
MUTATIONS = {
    "wrong_direction": 4,        # TileLegality (CUBE code of the other direction)
    "lb_missing": 4,             # CUBE: TileLegality; ordinary: default 1
    "lb_zero": 3,                # CUBE: TileLegality; ordinary: default 1
    "lb_huge": 2,                # TileAllocation (shape vs TSize / model bound)
    "lb2_extra": 3,              # CUBE: TileLegality; ordinary: physical Col
    "lb_dup": 2,                 # BundleControl (LB write-once)
    "datr_dtype": 3,             # CUBE: DataType != 31 -> TileLegality; ordinary: != 0
    "datr_attr": 4,              # CMode/RMode/Sat/Canon set -> TileLegality
    "datr_pad_ordinary": 2,      # ordinary PadValue != 0 -> TileLegality
    "datr_dup": 2,               # BundleControl
    "relayout": 2,               # ordinary relayout Layout -> Fault_Unimplemented
    "ior_dup": 2,                # BundleControl
    "ior_surplus": 3,            # RegDst/RegSrc2 != 0 -> CUBE TileLegality / ordinary BundleControl
    "ios_add": 3,                # B.IOS: CUBE TileLegality, ordinary Unimplemented, mask checks
    "zero_mask_block": 3,        # all B.IOT PEMode 000: no-op, even if otherwise illegal
    "zero_mask_extra": 2,        # an extra PEMode-000 B.IOT: ignored
    "mask_mismatch": 3,          # TileLegality at the second B.IOT
    "iot_after_last": 3,         # BundleControl
    "iot_not_last": 3,           # CUBE TileLegality / ordinary BundleControl
    "iot_missing": 2,            # CUBE TileLegality / ordinary BundleControl
    "iot_extra": 2,              # binding counts
    "iot_wrong_form": 3,         # binding counts / forms
    "iot_src_other": 2,          # TSTORE source: another (unallocated, unmaterialized) tile
    "store_mask": 2,             # CUBE TSTORE mask outside the tile's mask -> TileLegality
    "fpatr": 1,                  # BundleControl (non-matrix block)
    "catr": 2,                   # trap -> BundlePostCommit, DR ok on TLSU, duplicate
    "start_op": 3,               # matrix / MGATHER.CAS / SPART start: TileLegality, Illegal, Unimpl.
    "start_dtype": 3,            # CUBE-illegal dtype -> TileLegality; reserved -> Illegal
    "reserved_field": 5,         # decode faults (IllegalInstruction)
    "header_outside": 3,         # BundleControl
    "bstop_extra": 2,            # BundleControl
    "drop_bstop": 3,             # next BSTART completes / stream ends mid-block
    "truncate": 3,               # stream ends mid-block
    "random_word": 3,            # anything
    "shuffle": 3,                # header order (legal)
    "odd_pc": 1,                 # Fault_InstructionPC
    "pc_wrap": 1,                # PC near 2^64 (fault address = PC)
}


# ----------------------------------------------------------------- config and case


@dataclass(frozen=True)
class GenConfig:
    """Generation knobs; `machine` is the MachineConfig the States are built for."""
    machine: MachineConfig = MachineConfig(tile_words=512, hand_slots=2)
    max_words: int = 16
    p_mutate: float = 0.5          # a program kind gets mutations with this probability
    max_mutations: int = 3
    pe: int = 0                    # the current PE of every case (static in pj.batch.run)
    cas_weight: float = 0.0        # random_case: probability of an MGATHER.CAS kind instead
    matmul_weight: float = 0.0     # random_case: probability of a TMATMUL/TGEMV kind instead
    matmul_forms: tuple = ()       # matrix kinds draw these operations (empty: all 12)
    core: bool = False             # every case runs on the Core (pj.run_core; Case.core)
    coop_weight: float = 0.0       # random_case: probability of a cooperative / Shared kind

    def __post_init__(self):
        if not (0.0 <= self.cas_weight <= 1.0 and 0.0 <= self.matmul_weight <= 1.0
                and 0.0 <= self.coop_weight <= 1.0
                and self.cas_weight + self.matmul_weight + self.coop_weight <= 1.0 + 1e-12):
            raise ValueError(f"GenConfig: cas_weight {self.cas_weight}, matmul_weight "
                             f"{self.matmul_weight} and coop_weight {self.coop_weight} must be "
                             f"probabilities summing to at most 1")
        if self.coop_weight > 0 and not self.core:
            raise ValueError("GenConfig: coop_weight > 0 needs core=True (cooperative kinds run "
                             "on the Core)")


def _gen_config(cfg) -> GenConfig:
    if cfg is None:
        return GenConfig()
    if isinstance(cfg, GenConfig):
        return cfg
    if isinstance(cfg, MachineConfig):
        return GenConfig(machine=cfg)
    raise TypeError(f"expected a GenConfig or MachineConfig, got {type(cfg).__name__}")


@dataclass
class Case:
    """One generated program and the initial State it runs on.

    words: the stream (<= max_words 32-bit ints); gm: initial GM bytes
    (gm_bytes long); gprs: {pe: {reg: value}} initial GPRs (unlisted = 0);
    pc: initial PC; tile_capacity: TILE_CAPACITY register (None = config's);
    pe: current PE; kind: the program kind; mutations: the mutation labels
    applied in order; notes: free-form details (addressing modes, shapes).

    setup: words that prepare the initial State (MGATHER.CAS cases load their
    source tiles this way when the whole program does not fit max_words):
    `build_state` runs them on the reference oracle (pj.reference.run, PE `pe`,
    on_fault="abandon"), requires Fault_None with no block left open, and
    then sets the PC back to `pc`; they are not part of `words` and no
    executor under test runs them. undefine: (TileIndex, payload Word) pairs
    whose definedness bit build_state clears after the setup (one valid
    element each, defined_valid decremented), making that tile "not fully
    defined", which no instruction can do. Both are empty for TLOAD/TSTORE
    kinds.

    core: the case runs on the Core's four PEs (pj.run_core / pj.batch.run(
    core=True), docs/shared-decisions.md section 2); build_state then runs the
    setup with pj.reference.run_core, and `undefine` pokes every PE whose
    Local file holds that Word defined.
    """
    words: list
    gm: bytes
    gprs: dict
    kind: str
    mutations: tuple = ()
    pc: int = 0
    tile_capacity: Optional[int] = None
    pe: int = 0
    notes: tuple = ()
    setup: tuple = ()
    undefine: tuple = ()
    core: bool = False

    @property
    def labels(self) -> tuple:
        return (self.kind,) + tuple(self.mutations)

    def text(self) -> str:
        """The stream in assembly (undecodable words as .word)."""
        from ..isa.asm import disassemble
        return disassemble(self.words)

    def describe(self) -> str:
        """A readable report: labels, initial PC/GPRs and the disassembly."""
        regs = {pe: {tables.GPR_NAMES[r]: hex(v) for r, v in sorted(rs.items()) if v}
                for pe, rs in sorted(self.gprs.items())}
        lines = [f"kind={self.kind} mutations={list(self.mutations)} notes={list(self.notes)}",
                 f"pc={self.pc:#x} pe={self.pe} tile_capacity={self.tile_capacity}"
                 + (" core=True (run_core)" if self.core else ""),
                 f"gprs={regs}"]
        if self.setup:
            from ..isa.asm import disassemble
            lines.append(f"setup ({len(self.setup)} words, run on the oracle by build_state):")
            for i, (w, t) in enumerate(zip(self.setup, disassemble(list(self.setup)).splitlines())):
                lines.append(f"  (s{i:2d}) {w:08x}  {t}")
        if self.undefine:
            lines.append(f"undefine (TileIndex, Word): {list(self.undefine)}")
        for i, (w, t) in enumerate(zip(self.words, self.text().splitlines())):
            lines.append(f"  [{i:2d}] {w:08x}  {t}")
        return "\n".join(lines)


# ----------------------------------------------------------------- state building


@functools.lru_cache(maxsize=8)
def _reset_leaves(mcfg: MachineConfig):
    from ..state import reset
    return reset(mcfg)


def _machine(cfg) -> MachineConfig:
    if cfg is None:
        return GenConfig().machine
    if isinstance(cfg, MachineConfig):
        return cfg
    return _gen_config(cfg).machine


def case_arrays(case: Case, cfg=None) -> dict:
    """The leaves a Case sets (numpy): gm, gpr, pc, tile_capacity."""
    mcfg = _machine(cfg)
    gm = np.zeros(mcfg.gm_bytes, np.uint8)
    raw = np.frombuffer(bytes(case.gm), np.uint8)[: mcfg.gm_bytes]
    gm[: raw.size] = raw
    gpr = np.zeros((tables.NUM_PES, tables.NUM_GPRS), np.uint64)
    for pe, regs in case.gprs.items():
        for r, v in regs.items():
            if r != 0:
                gpr[pe, r] = v & MASK64
    cap = mcfg.tile_capacity if case.tile_capacity is None else case.tile_capacity
    return dict(gm=gm, gpr=gpr, pc=np.uint64(case.pc & MASK64), tile_capacity=np.uint64(cap))


def build_state(case: Case, cfg=None) -> State:
    """The initial State of a Case: reset, then GM, GPRs, PC and TILE_CAPACITY;
    then, if the Case has them, its `setup` words on the reference oracle and
    its `undefine` pokes (see Case)."""
    import jax
    import jax.numpy as jnp
    mcfg = _machine(cfg)
    base = _reset_leaves(mcfg)
    a = case_arrays(case, cfg)
    with jax.enable_x64(True):
        state = base.replace(gm=jnp.asarray(a["gm"]), gpr=jnp.asarray(a["gpr"]),
                             pc=jnp.asarray(a["pc"], jnp.uint64),
                             tile_capacity=jnp.asarray(a["tile_capacity"], jnp.uint64))
    if case.setup or case.undefine:
        state = _prepare(state, case, mcfg)
    return state


def _prepare(state: State, case: Case, mcfg: MachineConfig) -> State:
    """Run a Case's setup words on the oracle, reset the PC, apply `undefine`."""
    import jax
    import jax.numpy as jnp
    from ..reference import run as reference_run, run_core as reference_run_core
    if case.setup:
        r = reference_run_core(state, list(case.setup), cfg=mcfg) if case.core else \
            reference_run(state, list(case.setup), case.pe, cfg=mcfg)
        if r.fault != "Fault_None" or r.executed != len(case.setup) \
                or bool(np.asarray(r.state.block.active)):
            raise RuntimeError(f"setup of a {case.kind} case did not complete cleanly: {r.fault} "
                               f"after {r.executed}/{len(case.setup)} words\n{case.describe()}")
        state = r.state
    leaves = {k: np.array(getattr(state.tiles, k)) for k in ("defined", "defined_valid")}
    for index, word in case.undefine:
        slot = mcfg.slot_of(index)
        pes = [p for p in (range(tables.NUM_PES) if case.core else [case.pe])
               if slot is not None and leaves["defined"][p, slot, word]]
        if not pes:
            raise RuntimeError(f"undefine ({index}, {word}): no defined Word there")
        for p in pes:
            leaves["defined"][p, slot, word] = False
            leaves["defined_valid"][p, slot] -= 1
    with jax.enable_x64(True):
        tiles = state.tiles.replace(**{k: jnp.asarray(v) for k, v in leaves.items()})
        return state.replace(tiles=tiles, pc=jnp.asarray(np.uint64(case.pc & MASK64), jnp.uint64))


def _core_setup(words, core: bool) -> tuple:
    """Setup words as ints; core=True: every B.IOT gets PEMode 111 (mask 1111), so
    that under run_core each PE holds every source an All-Local bundle of any
    mask names (a single-PE setup loads into the current PE's file whatever
    the mask)."""
    out = []
    for w in words:
        w = int(w) & 0xFFFFFFFF
        if core and (w & 0x7F) == 0x13 and (w >> 12) & 7 in (4, 5, 6) and (w >> 9) & 7:
            w |= 7 << 9
        out.append(w)
    return tuple(out)


def random_cases(seed: int, n: int, cfg=None) -> list:
    """n Cases from one seed (case i is reproducible as random_case(rng_i, cfg))."""
    g = _gen_config(cfg)
    ss = np.random.SeedSequence(seed)
    return [random_case(np.random.default_rng(s), g) for s in ss.spawn(n)]


def case_rng(seed: int, i: int) -> np.random.Generator:
    """The Generator random_cases(seed, ...) used for case i."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(i + 1)[i])


# ----------------------------------------------------------------- building blocks


@dataclass
class Bundle:
    """One block: BSTART word, ordered header items (tag, word), BSTOP or not."""
    start: int
    items: list
    stop: bool = True
    info: dict = field(default_factory=dict)

    def words(self) -> list:
        return [self.start] + [w for _, w in self.items] + ([BSTOP] if self.stop else [])

    def find(self, tag: str) -> list:
        return [i for i, (t, _) in enumerate(self.items) if t == tag]


def _pick(rng, seq, p=None):
    return seq[int(rng.choice(len(seq), p=p))]


def _weighted(rng, table: dict) -> str:
    keys = list(table)
    w = np.array([table[k] for k in keys], float)
    return keys[int(rng.choice(len(keys), p=w / w.sum()))]


def _rowbytes(vc: int, bits: int) -> int:
    return (vc * bits + 7) // 8


def _ebytes(bits: int) -> int:
    return max(1, bits // 8)


class _Builder:
    """Per-case state: GM, GPR files, register allocation, predicted tile slots."""

    def __init__(self, rng: np.random.Generator, g: GenConfig):
        self.rng = rng
        self.g = g
        self.m = g.machine
        self.gm_bytes = g.machine.gm_bytes
        self.pe = g.pe
        self.gprs = {pe: {} for pe in range(tables.NUM_PES)}
        self.free_regs = list(range(1, tables.NUM_GPRS))
        rng.shuffle(self.free_regs)
        self.hand_used = [0, 0, 0, 0]
        self.notes = []
        self.tile_capacity = None
        self.pc = 0

    # ---- registers
    def reg(self, value: int) -> int:
        """A fresh GPR of the current PE holding `value`; other PEs get junk there."""
        if not self.free_regs:
            return 0
        r = self.free_regs.pop()
        self.gprs[self.pe][r] = value & MASK64
        for pe in range(tables.NUM_PES):
            if pe != self.pe:
                junk = int(self.rng.integers(0, 1 << 63)) * 2 + 1
                # core: every PE of a mask executes with its own GPRs, and the setup must
                # succeed on all of them: the same value everywhere (the same draws)
                self.gprs[pe][r] = value & MASK64 if self.g.core else junk
        return r

    def noise_regs(self):
        for pe in range(tables.NUM_PES):
            for _ in range(int(self.rng.integers(0, 4))):
                r = int(self.rng.integers(1, tables.NUM_GPRS))
                if r not in self.gprs[self.pe] or pe != self.pe:
                    self.gprs[pe].setdefault(r, int(self.rng.integers(0, 1 << 62)))

    # ---- B.DIM words for a value (via zero or a GPR, with uimm17 wrap)
    def dim_word(self, n: int, value: int) -> int:
        rng = self.rng
        value &= 0xFFFF
        u = rng.random()
        if u < 0.55:
            return dim(n, value)
        if u < 0.7:
            return dim(n, value + 0x10000)            # uimm17 above 16 bits wraps
        v = int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))
        if rng.random() < 0.3:
            v = int(rng.integers(0, 0x10000))
        imm = (value - v) & 0xFFFF
        if rng.random() < 0.3:
            imm |= 0x10000
        return dim(n, imm, self.reg(v))

    # ---- base and row stride (C.3), with a label
    def addressing(self, vr: int, vc: int, bits: int, mode: Optional[str] = None,
                   aligned_to: Optional[int] = None):
        """(base, stride, mode). `aligned_to` is the alignment the accesses need."""
        rng = self.rng
        eb = _ebytes(bits)
        al = aligned_to or eb
        span = _rowbytes(vc, bits) if bits == 4 else vc * eb
        n = self.gm_bytes
        if mode is None:
            mode = _weighted(rng, {"dense": 6, "gap": 4, "zero": 2, "short": 2, "negative": 2,
                                   "misaligned_base": 1.5, "misaligned_stride": 1.5,
                                   "end_exact": 1.5, "past_end": 2, "huge_base": 1,
                                   "huge_stride": 1, "wrap": 1})
        dense = _rowbytes(vc, bits)

        def aligned_base(lo, hi):
            lo, hi = max(lo, 0), max(hi, 0)
            if hi < lo:
                return lo - lo % al
            b = int(rng.integers(lo, hi + 1))
            return b - b % al

        def fit_base(stride):
            need = (vr - 1) * stride + span
            return aligned_base(0, n - need)

        if mode == "dense":
            stride = dense
            return fit_base(stride), stride, mode
        if mode == "gap":
            stride = dense + al * int(rng.integers(1, 8))
            stride -= stride % al
            return fit_base(stride), stride, mode
        if mode == "zero":
            return fit_base(0), 0, mode
        if mode == "short":
            k = max(1, dense // al - int(rng.integers(1, 4)))
            stride = k * al if dense > al else al
            return fit_base(stride), stride, mode
        if mode == "negative":
            step = dense + al * int(rng.integers(0, 4))
            step += (-step) % al
            lo = (vr - 1) * step
            return aligned_base(lo, n - span), (-step) & MASK64, mode
        if mode == "misaligned_base":
            base, stride, _ = self.addressing(vr, vc, bits, "dense", aligned_to)
            off = int(rng.integers(1, al)) if al > 1 else 0
            return base + off, stride, mode
        if mode == "misaligned_stride":
            stride = dense + (int(rng.integers(1, al)) if al > 1 else 0)
            return fit_base(stride), stride, mode
        if mode == "end_exact":
            stride = _pick(rng, [dense, dense + al, 0])
            base = n - ((vr - 1) * stride + span)
            return max(base, 0), stride, mode
        if mode == "past_end":
            stride = _pick(rng, [dense, dense + al])
            base = n - ((vr - 1) * stride + span) + al * int(rng.integers(1, 3))
            return max(base, 0), stride, mode
        if mode == "huge_base":
            base = _pick(rng, [1 << 63, MASK64 - al + 1, (1 << 32), int(rng.integers(0, 1 << 63)) * 2])
            return base - base % al, dense, mode
        if mode == "huge_stride":
            stride = _pick(rng, [0x8000000000000002, (1 << 63) | al, int(rng.integers(0, 1 << 63)) * 2,
                                 1 << 32])
            return fit_base(0), stride, mode
        if mode == "wrap":
            # row r lands at base + r*stride mod 2^64: rows above 0 wrap around to low GM
            stride = (MASK64 + 1 - int(rng.integers(0, n // 2)) * al) & MASK64
            base = aligned_base(0, n - span)
            return base, stride, mode
        raise ValueError(mode)

    def ior_items(self, vr, vc, bits, p=0.6, mode=None, aligned_to=None):
        """[] (no B.IOR: base 0, dense stride) or [("ior", word)] with base/stride GPRs."""
        rng = self.rng
        if mode is None and rng.random() >= p:
            return [], None
        base, stride, mode = self.addressing(vr, vc, bits, mode, aligned_to)
        self.notes.append(f"addr:{mode}")
        rb = 0 if (base == 0 and rng.random() < 0.7) else self.reg(base)
        if stride == 0 and rng.random() < 0.7:
            rs = 0                                      # the zero register: a real 0
        elif stride == base and rb and rng.random() < 0.5:
            rs = rb
        else:
            rs = self.reg(stride)
        return [("ior", ior(rb, rs))], (base, stride)

    def next_index(self, hand: int) -> int:
        """TileIndex the next successful TLOAD into `hand` will get (A.2)."""
        k = self.hand_used[hand]
        self.hand_used[hand] += 1
        return hand * tables.HAND_SLOTS + k


# ----------------------------------------------------------------- bundles


def _cube_shape(rng, lay: str, bits: int, tile_words: int, mode: str):
    """(vr, vc, cells) for a CUBE layout; mode fit/exact/short/big."""
    cr, cc = CELL[(lay, bits)]
    per = cr * cc
    max_cells = max(1, tile_words // per)

    def shape_for(cells):
        if lay == "N8":
            ks = [k for k in range(1, cells + 1) if cells % k == 0]
            k = _pick(rng, ks)
            nn = cells // k
            vr = int(rng.integers((k - 1) * cr + 1, k * cr + 1))
            vc = int(rng.integers((nn - 1) * 8 + 1, nn * 8 + 1))
        else:
            vr = int(rng.integers(1, cr + 1))
            if rng.random() < 0.3:
                vr = _pick(rng, [1, cr, min(cr, 2)])
            vc = int(rng.integers((cells - 1) * cc + 1, cells * cc + 1))
        return vr, vc

    if mode == "exact":
        opts = [c for c in (1, 2, 4, 8, 16) if c <= max_cells]
        cells = _pick(rng, opts)
    elif mode == "short":
        opts = [c for c in (2, 3, 5, 9, 17) if c <= max_cells] or [2]
        cells = _pick(rng, opts)
    elif mode == "big":
        cells = max_cells + int(rng.integers(1, 4))
    else:
        cells = int(rng.integers(1, max_cells + 1))
        # keep shapes mostly within ~40 x 40
        if rng.random() < 0.6:
            cells = int(rng.integers(1, min(max_cells, 6) + 1))
    vr, vc = shape_for(cells)
    return vr, vc, cells


def _size_for_bytes(nbytes: int) -> int:
    code = 1
    while (128 << (code - 1)) < nbytes and code < 15:
        code += 1
    return code


def _cube_dtype(rng) -> int:
    if rng.random() < 0.88:
        return _pick(rng, CUBE_DTYPES)
    return _pick(rng, [0, 14, 16, 24])                  # FP64, HiF4X2, S64, U64: no CELL class


def cube_tload(b: _Builder, *, dt=None, code=None, shape_mode=None) -> Bundle:
    rng = b.rng
    dt = _cube_dtype(rng) if dt is None else dt
    code = _pick(rng, LOAD_CODES) if code is None else code
    lay = CODE_LAYOUT[code]
    bits = BITS[dt]
    cbits = bits if bits in (4, 8, 16, 32) else 16     # illegal dtypes: any geometry
    shape_mode = shape_mode or _weighted(rng, {"fit": 8, "exact": 2, "short": 1.2, "big": 0.5})
    vr, vc, cells = _cube_shape(rng, lay, cbits, b.m.tile_words, shape_mode)
    need = cells * 128
    if shape_mode == "short":
        size = _size_for_bytes(need - 128)
        if (128 << (size - 1)) >= need:
            size = max(1, size - 1)
    else:
        size = _size_for_bytes(need)
        if shape_mode == "fit" and rng.random() < 0.3:
            size += int(rng.integers(1, 3))
    size = max(1, min(size, 10))
    b.notes.append(f"cube:{lay}/{tables.DTYPE_BY_CODE[dt].name}/{vr}x{vc}/cells{cells}/"
                   f"size{size}/{shape_mode}")
    hand = int(rng.integers(0, 4))
    pemode = int(rng.integers(1, 8))
    pad = int(rng.integers(0, 4))
    items = [("datr", datr(code, 31, pad)), ("dim0", b.dim_word(0, vc)), ("dim1", b.dim_word(1, vr))]
    items += b.ior_items(vr, vc, bits if bits else 16)[0]
    items.append(("iot", iot_dst(hand, size, pemode, 1)))
    info = dict(op="TLOAD", cube=True, code=code, dt=dt, vr=vr, vc=vc, hand=hand,
                mask=PEMODE_MASK[pemode], pemode=pemode, size=size, index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), items, True, info)


def ord_tload(b: _Builder, *, dt=None) -> Bundle:
    rng = b.rng
    dt = _pick(rng, DTYPES) if dt is None else dt
    datr_zero = rng.random() < 0.15                     # present-with-zeros: FP64 destination
    edt = 0 if datr_zero else dt
    ebits = BITS[edt]
    W = b.m.tile_words
    col = 1 << int(rng.integers(0, 7))                  # 1..64
    while col > W:
        col //= 2
    vc = int(rng.integers(1, col + 1))
    vr = int(rng.integers(1, max(1, min(40, W // col)) + 1))
    if rng.random() < 0.05:
        vr = int(rng.integers(1, 3 * W // col + 2))     # past the model bound
    need_bits = vr * col * ebits
    size = _size_for_bytes((need_bits + 7) // 8)
    mode = _weighted(rng, {"exact": 6, "roomy": 3, "short": 1})
    if mode == "roomy":
        size += int(rng.integers(1, 4))
    elif mode == "short":
        size -= 1
    size = max(1, min(size, 10))
    hand = int(rng.integers(0, 4))
    pemode = int(rng.integers(1, 8))
    items = []
    if datr_zero:
        items.append(("datr", datr(0, 0, 0)))
    # LB0 = ValidCol (absent or 0 -> 1), LB1 = ValidRow, LB2 = Col (absent -> ValidCol)
    if vc != 1 or rng.random() < 0.5:
        items.append(("dim0", b.dim_word(0, vc if vc != 1 or rng.random() < 0.5 else 0)))
    if vr != 1 or rng.random() < 0.5:
        items.append(("dim1", b.dim_word(1, vr if vr != 1 or rng.random() < 0.5 else 0)))
    if col != vc or rng.random() < 0.4:
        items.append(("dim2", b.dim_word(2, col)))
    else:
        col = vc if vc & (vc - 1) == 0 else col         # absent: Col = ValidCol
    # accesses use the effective dtype; the dense default stride the BSTART one
    items += b.ior_items(vr, vc, ebits, aligned_to=_ebytes(ebits))[0]
    items.append(("iot", iot_dst(hand, size, pemode, 1)))
    b.notes.append(f"ord:{tables.DTYPE_BY_CODE[edt].name}/{vr}x{vc}/col{col}/size{size}/{mode}")
    info = dict(op="TLOAD", cube=False, code=0, dt=edt, start_dt=dt, vr=vr, vc=vc, col=col,
                hand=hand, mask=PEMODE_MASK[pemode], pemode=pemode, size=size,
                index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), items, True, info)


def cube_tstore(b: _Builder, src: dict) -> Bundle:
    """CUBE TSTORE of a loaded tile: matching codes/shape/dtype, or mismatched."""
    rng = b.rng
    code = STORE_OF.get(src.get("code"), _pick(rng, STORE_CODES))
    dt, vr, vc = src["dt"], src["vr"], src["vc"]
    mism = []
    u = rng.random()
    if u < 0.08:
        code = _pick(rng, [c for c in STORE_CODES if c != code]); mism.append("code")
    elif u < 0.14:
        dt = _pick(rng, [d for d in CUBE_DTYPES if d != dt]); mism.append("dtype")
    elif u < 0.20:
        same_bits = [d for d in CUBE_DTYPES if BITS[d] == BITS.get(dt) and d != dt]
        if same_bits:
            dt = _pick(rng, same_bits); mism.append("dtype_same_width")
    elif u < 0.28:
        vr, vc = (vc, vr) if vr != vc else (vr + 1, vc); mism.append("shape")
    if mism:
        b.notes.append("cube_store_mismatch:" + ",".join(mism))
    bits = BITS.get(dt, 16)
    pad = int(rng.integers(0, 4))
    pemode = src.get("pemode", 7)
    if rng.random() < 0.25:
        subs = [p for p in range(1, 8) if PEMODE_MASK[p] & src.get("mask", 15) == PEMODE_MASK[p]]
        pemode = _pick(rng, subs) if subs else pemode
    items = [("datr", datr(code, 31, pad)), ("dim0", b.dim_word(0, vc)), ("dim1", b.dim_word(1, vr))]
    items += b.ior_items(vr, vc, bits)[0]
    items.append(("iot", iot_src(src["index"], pemode, 1)))
    info = dict(op="TSTORE", cube=True, code=code, dt=dt, vr=vr, vc=vc, src=src["index"],
                pemode=pemode, mask=PEMODE_MASK[pemode])
    return Bundle(bstart("TSTORE", dt), items, True, info)


def ord_tstore(b: _Builder, src: dict) -> Bundle:
    """Ordinary TSTORE of a loaded tile; stride aliasing, nibble stores, LB2 default."""
    rng = b.rng
    tdt = src["dt"]
    bits = BITS[tdt]
    start_dt = tdt if rng.random() < 0.6 else _pick(rng, DTYPES)   # only sizes the default stride
    vr, vc = src["vr"], src["vc"]
    items = []
    if rng.random() < 0.15:
        items.append(("datr", datr(0, 0, 0)))
    if rng.random() < 0.3:
        items.append(("dim0", b.dim_word(0, int(rng.integers(0, 50)))))   # ignored by the model
    if rng.random() < 0.3:
        items.append(("dim1", b.dim_word(1, int(rng.integers(0, 50)))))
    if rng.random() < 0.3:
        items.append(("dim2", b.dim_word(2, _pick(rng, [1, 2, 4, 8, 16, 3, 0]))))
    mode = None
    if rng.random() < 0.5:
        mode = _weighted(rng, {"zero": 3, "short": 3, "negative": 2, "dense": 2, "gap": 1,
                               "misaligned_base": 1, "past_end": 1, "wrap": 1})
    items += b.ior_items(vr, vc, bits, mode=mode)[0]
    pemode = int(rng.integers(1, 8))
    items.append(("iot", iot_src(src["index"], pemode, 1)))
    info = dict(op="TSTORE", cube=False, code=0, dt=start_dt, vr=vr, vc=vc, src=src["index"],
                pemode=pemode, mask=PEMODE_MASK[pemode])
    return Bundle(bstart("TSTORE", start_dt), items, True, info)


def minimal_tload(b: _Builder, hand: int, size: int = 1, pemode: int = 1, dt: int = 27) -> Bundle:
    """BSTART.TLOAD, one dst B.IOT, BSTOP: a 1x1 ordinary load from GM address 0."""
    info = dict(op="TLOAD", cube=False, code=0, dt=dt, vr=1, vc=1, col=1, hand=hand,
                mask=PEMODE_MASK[pemode], pemode=pemode, size=size, index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), [("iot", iot_dst(hand, size, pemode, 1))], True, info)


# ----------------------------------------------------------------- program kinds


def _prog_cube_load(b):
    return [cube_tload(b)]


def _prog_cube_roundtrip(b):
    ld = cube_tload(b, dt=_pick(b.rng, CUBE_DTYPES) if b.rng.random() < 0.95 else None)
    return [ld, cube_tstore(b, ld.info)]


def _prog_ord_load(b):
    return [ord_tload(b)]


def _prog_ord_roundtrip(b):
    ld = ord_tload(b)
    return [ld, ord_tstore(b, ld.info)]


def _prog_cross_store(b):
    if b.rng.random() < 0.5:
        ld = cube_tload(b, dt=_pick(b.rng, CUBE_DTYPES), shape_mode="fit")
        b.notes.append("cross:cube->ordinary")
        return [ld, ord_tstore(b, ld.info)]
    ld = ord_tload(b, dt=_pick(b.rng, CUBE_DTYPES))
    b.notes.append("cross:ordinary->cube")
    return [ld, cube_tstore(b, dict(ld.info, code=_pick(b.rng, LOAD_CODES)))]


def _prog_two_bundles(b):
    """Two or three bundles; a missing BSTOP lets the next BSTART complete a block."""
    rng = b.rng
    first = cube_tload(b, shape_mode="fit") if rng.random() < 0.5 else ord_tload(b)
    out = [first]
    if rng.random() < 0.6:
        out.append(cube_tstore(b, first.info) if first.info["cube"] else ord_tstore(b, first.info))
    else:
        out.append(cube_tload(b, shape_mode="fit") if rng.random() < 0.5 else ord_tload(b))
    for bd in out[:-1]:
        if rng.random() < 0.7:
            bd.stop = False
    if sum(len(x.words()) for x in out) < 12 and rng.random() < 0.5:
        out.append(minimal_tload(b, int(rng.integers(0, 4))))
        if rng.random() < 0.5:
            out[-2].stop = False
    return out


def _prog_hand_fill(b):
    """More TLOADs into one hand than it has slots (Fault_TileAllocation)."""
    rng = b.rng
    hand = int(rng.integers(0, 4))
    n = b.m.hand_slots + 1
    out = [minimal_tload(b, hand, pemode=int(rng.integers(1, 8)),
                         dt=_pick(rng, DTYPES)) for _ in range(n)]
    if rng.random() < 0.4:
        out.append(ord_tstore(b, out[0].info))
    return out


def _prog_budget(b):
    """Core budget: big masks and SizeCodes, or a small TILE_CAPACITY register."""
    rng = b.rng
    if rng.random() < 0.5:
        b.tile_capacity = _pick(rng, [0, 128, 256, 512, 1024, 4096, int(rng.integers(0, 1 << 20)),
                                      int(rng.integers(0, 1 << 20)), (1 << 32) + 128])
        if rng.random() < 0.1:                 # the 64-bit register's top half (hand-made)
            b.tile_capacity = _pick(rng, [1 << 63, MASK64, (1 << 63) + 4096])
        b.notes.append(f"tile_capacity:{b.tile_capacity}")
        if rng.random() < 0.5:
            return [cube_tload(b, shape_mode="fit")]
        return [ord_tload(b), minimal_tload(b, int(rng.integers(0, 4)))]
    out = [minimal_tload(b, int(rng.integers(0, 4)), size=_pick(rng, [9, 10]), pemode=7)]
    out.append(minimal_tload(b, int(rng.integers(0, 4)), size=_pick(rng, [1, 8, 9, 10]),
                             pemode=int(rng.integers(1, 8))))
    if rng.random() < 0.5:
        out.append(minimal_tload(b, int(rng.integers(0, 4)), size=10, pemode=7))
    return out


def _prog_zero_mask(b):
    """Blocks whose only bindings are PEMode 000: no-ops, also when otherwise illegal."""
    rng = b.rng
    out = [cube_tload(b) if rng.random() < 0.5 else ord_tload(b)]
    if rng.random() < 0.5:
        src = dict(out[0].info)
        out.append(cube_tstore(b, src) if src["cube"] else ord_tstore(b, src))
    bd = out[int(rng.integers(0, len(out)))]
    _zero_all(bd)
    # otherwise-illegal schema in the zero-mask block
    r = rng.random()
    if r < 0.2 and bd.find("datr"):
        i = bd.find("datr")[0]
        bd.items[i] = ("datr", datr(_pick(rng, STORE_CODES if bd.info["op"] == "TLOAD" else LOAD_CODES),
                                    int(rng.integers(0, 32)) if rng.random() < 0.3 else 31, 1,
                                    int(rng.integers(0, 6)), int(rng.integers(0, 8))))
        b.notes.append("zero_mask:illegal_datr")
    elif r < 0.4:
        bd.items = [it for it in bd.items if not it[0].startswith("dim")]
        b.notes.append("zero_mask:no_dims")
    elif r < 0.5:
        bd.items.append(("ios", ios(int(rng.integers(0, 256)), 0, int(rng.integers(0, 13)))))
        b.notes.append("zero_mask:zero_ios")
    elif r < 0.6:
        bd.items.append(("ior", ior(0, 0, 5, 3)))
        b.notes.append("zero_mask:ior_surplus")
    return out


def _zero_all(bd: Bundle):
    for i, (t, w) in enumerate(bd.items):
        if t == "iot":
            bd.items[i] = (t, w & ~(7 << 9))


def _prog_outside_block(b):
    """Header commands with no block open, BSTOP with no block, zero-mask B.IOT outside."""
    rng = b.rng
    pool = [("datr", datr(22, 31, 1)), ("dim0", dim(0, 3)), ("ior", ior(0, 0)),
            ("iot", iot_dst(1, 1, 1, 1)), ("iot0", iot_dst(1, 1, 0, 1)),
            ("ios", ios(3, 1)), ("ios0", ios(3, 0)), ("catr", catr()), ("fpatr", FPATR0),
            ("bstop", BSTOP)]
    pre = [pool[int(rng.integers(0, len(pool)))] for _ in range(int(rng.integers(1, 4)))]
    b.notes.append("outside:" + ",".join(t for t, _ in pre))
    body = [] if rng.random() < 0.3 else [cube_tload(b, shape_mode="fit") if rng.random() < 0.5
                                          else ord_tload(b)]
    return [Bundle(0, pre, False, dict(raw=True))] + body


def _structured_word(rng) -> int:
    """A random word of one command class: fixed low bits, random fields."""
    cls = int(rng.integers(0, 9))
    r = int(rng.integers(0, 1 << 32))
    if cls == 0:
        return BSTOP
    if cls == 1:        # BSTART family: random engine/function/dtype
        return (r & 0xFFFF8000) | 0x1181
    if cls == 2:        # TLSU TLOAD/TSTORE starts with random dtype
        return START[_pick(rng, ["TLOAD", "TSTORE"])] | (r & 0xF8000000)
    if cls == 3:        # B.DATR
        return (r & 0xFFFF8F80) | 0x1023 if rng.random() < 0.3 else (r & 0xFFF38F80) | 0x1023
    if cls == 4:        # B.DIM, random target selector
        return (r & 0xFFFFFF80) | 0x43
    if cls == 5:        # B.IOR/B.IOS/B.IOT
        return (r & 0xFFFFFF80) | 0x13
    if cls == 6:        # B.IOT forms with small sources
        return (r & 0x0FF8FF80 & ~(3 << 13)) | 0x4013 | int(rng.integers(0, 3)) << 13
    if cls == 7:        # B.CATR/B.DATR/B.FPATR group
        return (r & 0xFFFFFF80) | 0x23
    return r


def _prog_random_words(b):
    rng = b.rng
    n = int(rng.integers(1, b.g.max_words + 1))
    return [Bundle(0, [("word", int(rng.integers(0, 1 << 32))) for _ in range(n)], False,
                   dict(raw=True))]


def _prog_structured_random(b):
    rng = b.rng
    n = int(rng.integers(1, b.g.max_words + 1))
    return [Bundle(0, [("word", _structured_word(rng)) for _ in range(n)], False, dict(raw=True))]


PROGRAMS = {
    "cube_load": _prog_cube_load, "cube_roundtrip": _prog_cube_roundtrip,
    "ord_load": _prog_ord_load, "ord_roundtrip": _prog_ord_roundtrip,
    "cross_store": _prog_cross_store, "two_bundles": _prog_two_bundles,
    "hand_fill": _prog_hand_fill, "budget": _prog_budget, "zero_mask": _prog_zero_mask,
    "outside_block": _prog_outside_block, "random_words": _prog_random_words,
    "structured_random": _prog_structured_random,
}
assert set(PROGRAMS) == set(PROGRAM_KINDS)


# ----------------------------------------------------------------- mutations


def _real(bundles):
    return [bd for bd in bundles if not bd.info.get("raw")]


def _target(rng, bundles, pred=lambda bd: True):
    cands = [bd for bd in _real(bundles) if pred(bd)]
    return cands[int(rng.integers(0, len(cands)))] if cands else None


def _set_datr(bd: Bundle, **kw):
    """Rewrite (or add) the B.DATR of a bundle, changing the given fields."""
    idx = bd.find("datr")
    cur = dict(layout=0, dtype=31, pad=3, cmode=0, rmode=0, sat=0, canon=0)
    if idx:
        w = bd.items[idx[0]][1]
        cur = dict(layout=(w >> 7) & 0x1F, dtype=(w >> 20) & 0x1F, pad=(w >> 27) & 3,
                   cmode=(w >> 29) & 7, rmode=(w >> 15) & 7, sat=(w >> 26) & 1, canon=(w >> 25) & 1)
    cur.update(kw)
    word = datr(**cur)
    if idx:
        bd.items[idx[0]] = ("datr", word)
    else:
        bd.items.insert(0, ("datr", word))


def _iot_index(bd):
    idx = bd.find("iot")
    return idx[-1] if idx else None


def _iot_pemode(bd):
    i = _iot_index(bd)
    return (bd.items[i][1] >> 9) & 7 if i is not None else 1


def _m_wrong_direction(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.info.get("op") in ("TLOAD", "TSTORE"))
    if bd is None:
        return False
    codes = STORE_CODES if bd.info["op"] == "TLOAD" else LOAD_CODES
    _set_datr(bd, layout=_pick(b.rng, codes), dtype=31)
    return True


def _m_lb_missing(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("dim0") or x.find("dim1"))
    if bd is None:
        return False
    idx = bd.find("dim0") + bd.find("dim1")
    del bd.items[_pick(b.rng, idx)]
    return True


def _m_lb_zero(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    n = int(b.rng.integers(0, 2))
    tag = f"dim{n}"
    word = b.dim_word(n, 0)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(0, (tag, word))
    return True


def _m_lb_huge(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    n = int(b.rng.integers(0, 3)) if not bd.info.get("cube") else int(b.rng.integers(0, 2))
    tag = f"dim{n}"
    value = _pick(b.rng, [0xFFFF, 0x8000, 4096, 257, int(b.rng.integers(100, 0x10000))])
    word = b.dim_word(n, value)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(0, (tag, word))
    return True


def _m_lb2_extra(b, bundles):
    bd = _target(b.rng, bundles, lambda x: not x.find("dim2"))
    if bd is None:
        return False
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)),
                    ("dim2", b.dim_word(2, _pick(b.rng, [1, 2, 8, 16, 64, 0, 3]))))
    return True


def _m_lb_dup(b, bundles):
    bd = _target(b.rng, bundles, lambda x: any(t.startswith("dim") for t, _ in x.items))
    if bd is None:
        return False
    i = _pick(b.rng, [k for k, (t, _) in enumerate(bd.items) if t.startswith("dim")])
    t, w = bd.items[i]
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), (t, w ^ (1 << 20)))
    return True


def _m_datr_dtype(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    if bd.info.get("cube"):
        _set_datr(bd, dtype=_pick(b.rng, list(DTYPES) + [0, 0]))
    else:
        _set_datr(bd, dtype=_pick(b.rng, list(DTYPES[1:]) + [31, 31]), pad=0)
    return True


def _m_datr_attr(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    which = _pick(b.rng, ["cmode", "rmode", "sat", "canon", "cmode_reserved"])
    if which == "cmode":
        _set_datr(bd, cmode=int(b.rng.integers(1, 6)))
    elif which == "cmode_reserved":
        _set_datr(bd, cmode=int(b.rng.integers(6, 8)))
    elif which == "rmode":
        _set_datr(bd, rmode=int(b.rng.integers(1, 8)))
    else:
        _set_datr(bd, **{which: 1})
    if not bd.info.get("cube") and len(bd.find("datr")) == 1:
        _set_datr(bd, dtype=0, pad=0)
    b.notes.append(f"datr_attr:{which}")
    return True


def _m_datr_pad_ordinary(b, bundles):
    bd = _target(b.rng, bundles, lambda x: not x.info.get("cube"))
    if bd is None:
        return False
    _set_datr(bd, layout=0, dtype=0, pad=int(b.rng.integers(1, 4)))
    return True


def _m_datr_dup(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    if not bd.find("datr"):
        _set_datr(bd, layout=0, dtype=0, pad=0)
    w = bd.items[bd.find("datr")[0]][1]
    bd.items.insert(int(b.rng.integers(bd.find("datr")[0] + 1, len(bd.items) + 1)), ("datr", w))
    return True


def _m_relayout(b, bundles):
    bd = _target(b.rng, bundles, lambda x: not x.info.get("cube"))
    if bd is None:
        return False
    # mostly applicable fields (DataType raw 0, PadValue 0); sometimes not
    dt = 0 if b.rng.random() < 0.6 else _pick(b.rng, [31] + list(DTYPES))
    pad = 0 if b.rng.random() < 0.7 else int(b.rng.integers(1, 4))
    _set_datr(bd, layout=_pick(b.rng, RELAYOUT_CODES), dtype=dt, pad=pad)
    return True


def _m_ior_dup(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    if not bd.find("ior"):
        bd.items.insert(0, ("ior", ior(0, 0)))
    i = bd.find("ior")[0]
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), ("ior", bd.items[i][1]))
    return True


def _m_ior_surplus(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    w = bd.items[bd.find("ior")[0]][1] if bd.find("ior") else ior(0, 0)
    if b.rng.random() < 0.5:
        w |= int(b.rng.integers(1, 24)) << 7            # RegDst
    else:
        w |= int(b.rng.integers(1, 24)) << 27           # RegSrc2
    if bd.find("ior"):
        bd.items[bd.find("ior")[0]] = ("ior", w)
    else:
        bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ior", w))
    return True


def _m_ios_add(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    pm = _iot_pemode(bd) if b.rng.random() < 0.6 else int(b.rng.integers(0, 8))
    word = ios(int(b.rng.integers(0, 256)), pm, 0 if b.rng.random() < 0.5 else int(b.rng.integers(1, 13)))
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ios", word))
    if b.rng.random() < 0.2:                              # same SharedTID twice
        bd.items.append(("ios", word))
    return True


def _m_zero_mask_block(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    _zero_all(bd)
    return True


def _m_zero_mask_extra(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    w = _pick(b.rng, [iot_dst(int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11)), 0, 1),
                      iot_src(int(b.rng.integers(0, 64)), 0, 1),
                      iot_src2(int(b.rng.integers(0, 64)), int(b.rng.integers(0, 64)), 0, 0)])
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("iot0", w))
    return True


def _m_mask_mismatch(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    other = _pick(b.rng, [p for p in range(1, 8) if p != pm])
    w = bd.items[i][1]
    extra = (w & ~(7 << 9) & ~(1 << 19)) | other << 9     # same binding, other mask, L=0
    bd.items.insert(i, ("iot", extra))
    return True


def _m_iot_after_last(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    w = bd.items[i][1]
    if b.rng.random() < 0.3:
        w = (w & ~(7 << 9)) | int(b.rng.integers(1, 8)) << 9
    bd.items.insert(int(b.rng.integers(i + 1, len(bd.items) + 1)), ("iot", w))
    return True


def _m_iot_not_last(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    bd.items[i] = ("iot", bd.items[i][1] & ~(1 << 19))
    return True


def _m_iot_missing(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    del bd.items[_iot_index(bd)]
    return True


def _m_iot_extra(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    extra = _pick(b.rng, [iot_dst(int(b.rng.integers(0, 4)), 1, pm, 0), iot_src(1, pm, 0),
                          iot_src2(0, 1, pm, 0)])
    bd.items.insert(i, ("iot", extra))
    return True


def _m_iot_wrong_form(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    pm = _iot_pemode(bd)
    src = bd.info.get("src", bd.info.get("index", 0))
    w = _pick(b.rng, [iot_src(src, pm, 1), iot_dst(int(b.rng.integers(0, 4)), 1, pm, 1),
                      iot_src_dst(src, int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11)), pm, 1),
                      iot_src2(src, int(b.rng.integers(0, 64)), pm, 1)])
    bd.items[i] = ("iot", w)
    return True


def _m_iot_src_other(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.info.get("op") == "TSTORE" and x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    w = bd.items[i][1]
    src = _pick(b.rng, [int(b.rng.integers(0, 64)), b.m.hand_slots, 16 + b.m.hand_slots,
                        (bd.info.get("src", 0) + 1) % 64])
    bd.items[i] = ("iot", (w & ~(0x3F << 20)) | src << 20)
    return True


def _m_store_mask(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.info.get("op") == "TSTORE" and x.find("iot"))
    if bd is None:
        return False
    i = _iot_index(bd)
    w = bd.items[i][1]
    bd.items[i] = ("iot", (w & ~(7 << 9)) | int(b.rng.integers(1, 8)) << 9)
    return True


def _m_fpatr(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("fpatr", FPATR0))
    return True


def _m_catr(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    rng = b.rng
    w = catr(trap=int(rng.random() < 0.6), dr=int(rng.random() < 0.4), atom=int(rng.integers(0, 2)),
             aq=int(rng.integers(0, 2)), rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
    bd.items.insert(int(rng.integers(0, len(bd.items) + 1)), ("catr", w))
    if rng.random() < 0.15:
        bd.items.append(("catr", catr()))
    return True


def _m_start_op(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    op = _pick(b.rng, ["TSTORE.SPART", "MGATHER.CAS", "TMATMUL", "TMATMUL.ACC", "TMATMULMX",
                       "TGEMV", "TGEMVMX.ACC", "TLOAD" if bd.info.get("op") == "TSTORE" else "TSTORE"])
    bd.start = (bd.start & 0xF8000000) | START[op]
    b.notes.append(f"start_op:{op}")
    return True


def _m_start_dtype(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    if b.rng.random() < 0.35:
        dt = _pick(b.rng, RESERVED_START_DTYPES)
    else:
        dt = _pick(b.rng, [0, 14, 16, 24] + list(DTYPES))
    bd.start = (bd.start & 0x07FFFFFF) | dt << 27
    return True


def _reserved_word(rng, kind: str, w: int) -> int:
    """A word of this command kind with a reserved value or a fixed bit flipped."""
    if kind == "datr":
        return _pick(rng, [(w & ~(0x1F << 7)) | _pick(rng, RESERVED_LAYOUTS) << 7,
                           (w & ~(0x1F << 20)) | _pick(rng, RESERVED_DATR_DTYPES) << 20,
                           w | int(rng.integers(1, 4)) << 18, (w & ~(7 << 29)) | 6 << 29])
    if kind.startswith("dim"):
        return _pick(rng, [(w & ~(0x1F << 15)) | int(rng.integers(24, 32)) << 15,
                           (w & ~(7 << 12)) | int(rng.integers(3, 8)) << 12])
    if kind == "ior":
        return _pick(rng, [w | int(rng.integers(1, 4)) << 25,
                           (w & ~(0x1F << 15)) | int(rng.integers(24, 32)) << 15,
                           (w & ~(0x1F << 20)) | int(rng.integers(24, 32)) << 20,
                           (w & ~(0x1F << 7)) | int(rng.integers(24, 32)) << 7])
    if kind == "iot":
        return _pick(rng, [(w & ~(0xF << 15)) | int(rng.integers(11, 16)) << 15,
                           w | int(rng.integers(1, 1 << 12)) << 20,
                           (w & ~(7 << 12)) | 7 << 12, w ^ (1 << int(rng.integers(0, 7)))])
    if kind == "start":
        return _pick(rng, [(w & 0x07FFFFFF) | _pick(rng, RESERVED_START_DTYPES) << 27,
                           w | int(rng.integers(1, 4)) << 25, w ^ (1 << int(rng.integers(7, 25)))])
    return w ^ (1 << int(rng.integers(0, 32)))


def _m_reserved_field(b, bundles):
    bd = _target(b.rng, bundles)
    if bd is None:
        return False
    rng = b.rng
    if rng.random() < 0.2 or not bd.items:
        bd.start = _reserved_word(rng, "start", bd.start)
        return True
    i = int(rng.integers(0, len(bd.items)))
    t, w = bd.items[i]
    bd.items[i] = (t, _reserved_word(rng, t, w))
    b.notes.append(f"reserved:{t}")
    return True


def _m_header_outside(b, bundles):
    rng = b.rng
    w = _pick(rng, [datr(22, 31, 1), dim(0, 3), ior(0, 0), iot_dst(0, 1, 1, 1), ios(2, 1),
                    catr(), FPATR0, iot_src(0, 0, 1)])
    raw = Bundle(0, [("outside", w)], False, dict(raw=True))
    if rng.random() < 0.5:
        bundles.insert(0, raw)
    else:
        bundles.append(raw)
    return True


def _m_bstop_extra(b, bundles):
    bundles.insert(int(b.rng.integers(0, len(bundles) + 1)),
                   Bundle(0, [("bstop", BSTOP)], False, dict(raw=True)))
    return True


def _m_drop_bstop(b, bundles):
    bd = _target(b.rng, bundles, lambda x: x.stop)
    if bd is None:
        return False
    bd.stop = False
    return True


def _m_shuffle(b, bundles):
    bd = _target(b.rng, bundles, lambda x: len(x.items) > 1)
    if bd is None:
        return False
    iots = [it for it in bd.items if it[0] == "iot"]
    rest = [it for it in bd.items if it[0] != "iot"]
    b.rng.shuffle(rest)
    # keep the B.IOT order, interleave at random positions
    out = list(rest)
    for it in iots:
        pos = int(b.rng.integers(0, len(out) + 1))
        later = [k for k, x in enumerate(out) if x[0] == "iot"]
        if later:
            pos = max(pos, later[-1] + 1)
        out.insert(pos, it)
    bd.items = out
    return True


# stream-level mutations (applied to the flattened words)
STREAM_MUTATIONS = ("truncate", "random_word", "odd_pc", "pc_wrap")

BUNDLE_MUTATIONS = {
    "wrong_direction": _m_wrong_direction, "lb_missing": _m_lb_missing, "lb_zero": _m_lb_zero,
    "lb_huge": _m_lb_huge, "lb2_extra": _m_lb2_extra, "lb_dup": _m_lb_dup,
    "datr_dtype": _m_datr_dtype, "datr_attr": _m_datr_attr,
    "datr_pad_ordinary": _m_datr_pad_ordinary, "datr_dup": _m_datr_dup, "relayout": _m_relayout,
    "ior_dup": _m_ior_dup, "ior_surplus": _m_ior_surplus, "ios_add": _m_ios_add,
    "zero_mask_block": _m_zero_mask_block, "zero_mask_extra": _m_zero_mask_extra,
    "mask_mismatch": _m_mask_mismatch, "iot_after_last": _m_iot_after_last,
    "iot_not_last": _m_iot_not_last, "iot_missing": _m_iot_missing, "iot_extra": _m_iot_extra,
    "iot_wrong_form": _m_iot_wrong_form, "iot_src_other": _m_iot_src_other,
    "store_mask": _m_store_mask, "fpatr": _m_fpatr, "catr": _m_catr, "start_op": _m_start_op,
    "start_dtype": _m_start_dtype, "reserved_field": _m_reserved_field,
    "header_outside": _m_header_outside, "bstop_extra": _m_bstop_extra,
    "drop_bstop": _m_drop_bstop, "shuffle": _m_shuffle,
}
assert set(BUNDLE_MUTATIONS) | set(STREAM_MUTATIONS) == set(MUTATIONS)


# ----------------------------------------------------------------- the case


def _flatten(bundles) -> list:
    out = []
    for bd in bundles:
        out.extend([w for _, w in bd.items] if bd.info.get("raw") else bd.words())
    return out


def _fit(rng, bundles, max_words: int) -> list:
    """Drop optional header items until the stream fits max_words, then cut."""
    words = _flatten(bundles)
    tries = 0
    while len(words) > max_words and tries < 64:
        tries += 1
        cands = [(bd, i) for bd in _real(bundles) for i, (t, _) in enumerate(bd.items)
                 if t in ("ior", "dim2", "catr", "fpatr", "iot0") or
                 (t == "datr" and not bd.info.get("cube"))]
        if not cands:
            break
        bd, i = cands[int(rng.integers(0, len(cands)))]
        del bd.items[i]
        words = _flatten(bundles)
    return words[:max_words]


def random_case(rng: np.random.Generator, cfg=None) -> Case:
    """One random Case (see the module docstring)."""
    g = _gen_config(cfg)
    if g.cas_weight > 0 or g.matmul_weight > 0 or g.coop_weight > 0:
        u = rng.random()              # one draw: cas_weight alone leaves the old draws as they were
        if u < g.cas_weight:
            return random_cas_case(rng, g)
        if u < g.cas_weight + g.matmul_weight:
            return random_matmul_case(rng, g)
        if u < g.cas_weight + g.matmul_weight + g.coop_weight:
            return random_coop_case(rng, g)
    b = _Builder(rng, g)
    kind = _weighted(rng, PROGRAM_KINDS)
    bundles = PROGRAMS[kind](b)
    applied = []
    stream_muts = []
    if kind not in ("random_words", "structured_random") and rng.random() < g.p_mutate:
        n = 1 + int(rng.integers(0, g.max_mutations))
        if rng.random() < 0.6:
            n = 1
        for _ in range(n):
            m = _weighted(rng, MUTATIONS)
            if m in STREAM_MUTATIONS:
                stream_muts.append(m)
                applied.append(m)
            elif BUNDLE_MUTATIONS[m](b, bundles):
                applied.append(m)
    elif kind not in ("random_words", "structured_random") and rng.random() < 0.3:
        if _m_shuffle(b, bundles):
            applied.append("shuffle")
    words = _fit(rng, bundles, g.max_words)
    for m in stream_muts:
        if m == "truncate" and len(words) > 1:
            words = words[: int(rng.integers(1, len(words)))]
        elif m == "random_word":
            w = int(rng.integers(0, 1 << 32)) if rng.random() < 0.5 else _structured_word(rng)
            words.insert(int(rng.integers(0, len(words) + 1)), w)
            words = words[: g.max_words]
        elif m == "odd_pc":
            b.pc = (4 * int(rng.integers(0, 1 << 20))) | _pick(rng, [1, 3])
        elif m == "pc_wrap":
            b.pc = (MASK64 + 1 - 4 * int(rng.integers(1, len(words) + 2))) & MASK64
    if not words:
        words = [BSTOP]
    if b.pc == 0 and rng.random() < 0.2:
        b.pc = 4 * int(rng.integers(0, 1 << 28))
    b.noise_regs()
    gm_mode = rng.random()
    if gm_mode < 0.85:
        gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    elif gm_mode < 0.95:
        gm = bytes(g.machine.gm_bytes)
    else:
        gm = (np.arange(g.machine.gm_bytes) & 0xFF).astype(np.uint8).tobytes()
    return Case(words=[int(w) & 0xFFFFFFFF for w in words], gm=gm,
                gprs={pe: dict(r) for pe, r in b.gprs.items()}, kind=kind,
                mutations=tuple(applied), pc=b.pc, tile_capacity=b.tile_capacity, pe=g.pe,
                core=g.core, notes=tuple(b.notes))


def random_words_case(rng: np.random.Generator, cfg=None, structured: bool = True) -> Case:
    """A Case of random (or class-structured random) words only."""
    g = _gen_config(cfg)
    b = _Builder(rng, g)
    bundles = (_prog_structured_random if structured else _prog_random_words)(b)
    b.noise_regs()
    gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    return Case(words=_flatten(bundles)[: g.max_words], gm=gm, gprs=b.gprs,
                kind="structured_random" if structured else "random_words", pe=g.pe, core=g.core)


# ----------------------------------------------------------------- MGATHER.CAS cases (S D, E7, E8)
#
# A CAS case needs three source tiles (Index, Expected, Replacement), each made
# by an ordinary TLOAD of GM data, then the BSTART.MGATHER.CAS bundle. Three
# loads and the CAS do not fit 16 words, so the loads normally go to the
# Case's `setup` (run on the oracle by build_state, see Case); kind
# "cas_in_stream" (and ~20% of the others, when it fits) keeps one of them in
# the stream, before the CAS. GM is split in two halves: the sources' data
# (and a round trip's TSTORE target) in one, the lane addresses in the other,
# so later words never rewrite the lanes' memory (cas_check.explains needs
# that).

INT_DTYPES = tuple(d.code for d in tables.DATATYPES if d.is_integer)        # 10, S4X2/U4X2 too
NONINT_DTYPES = tuple(d.code for d in tables.DATATYPES if not d.is_integer)
PACKED_DTYPES = tuple(d for d in DTYPES if BITS[d] == 4)
CAS_DTYPES = tuple(d for d in DTYPES if BITS[d] >= 8)                        # legal transfer dtypes
SIGNED = {d.code: d.signed for d in tables.DATATYPES}
# destination layout -> the B.DATR Layout codes selecting it (D; the model's
# TileDataLayoutDestinationLayout); CUBE codes 21..26 take the CUBE path
CAS_LAYOUT_CODES = {"RowMajor": (0, 6, 17, 27), "ColumnMajor": (1, 18, 28), "ZN": (3, 8, 30),
                    "NZ": (4, 9, 20)}

CAS_KINDS = {
    # kind: weight
    "cas_legal": 10,       # distinct lane addresses (repeats only when the index range forces them)
    "cas_dup": 9,          # duplicate-heavy: many lanes on 1..3 addresses, order-dependent outcome
    "cas_layout": 4,       # B.DATR Layout: ColumnMajor / ZN / NZ / RowMajor relayout destinations
    "cas_in_stream": 4,    # one source TLOAD in the stream before the CAS
    "cas_roundtrip": 3,    # the destination stored back by an ordinary TSTORE
    "cas_twice": 3,        # the CAS bundle twice: the second sees the first's memory
    "cas_wide": 2,         # up to 8 x 16 lanes of 8/16-bit types
    "cas_zero_mask": 2,    # every B.IOT PEMode 000, schema otherwise illegal: strict no-op
}

# mutation label -> weight; CAS_AIMS[label] is the fault it aims at (D.4 order)
CAS_MUTATIONS = {
    "cas_no_ior": 3,            # D.4.3 B.IOR missing
    "cas_ios": 2,               # D.4.3 any B.IOS (or its mask differs: at the B.IOS)
    "cas_bindings": 4,          # D.4.3 two-B.IOT shape: one, swapped, extra, unterminated, ...
    "cas_ior_surplus": 2,       # D.4.3 B.IOR RegSrc1/RegSrc2/RegDst nonzero
    "cas_no_lb0": 2,            # D.4.3 LB0 missing
    "cas_lb_zero": 3,           # D.4.3 LB0/LB1/LB2 = 0
    "cas_vc_gt_col": 2,         # D.4.3 ValidCol > Col
    "cas_col_not_pow2": 2,      # D.4.3 Col not a power of two (LB2, or LB2 absent and VC not)
    "cas_mask_mismatch": 2,     # the second B.IOT's mask differs (header)
    "cas_datr_attr": 3,         # D.4.4 B.DATR DataType/CMode/RMode/Sat/Canonicalize set
    "cas_cube_layout": 2,       # B.DATR CUBE Layout 21..26: the CUBE path rejects Function 8
    "cas_packed": 3,            # D.4.5 4-bit transfer dtype
    "cas_index_float": 2,       # D.4.5 non-integer index tile
    "cas_src_dtype": 3,         # D.4.5 Expected/Replacement dtype != transfer dtype
    "cas_src_shape": 3,         # D.4.5 a source's valid shape != (VR, VC)
    "cas_src_undefined": 2,     # D.4.5 a source not fully defined (Case.undefine)
    "cas_src_unallocated": 2,   # D.4.5 a binding names an unallocated TileIndex
    "cas_src_cube": 2,          # D.4.5 a CUBE source is not generically indexable
    "cas_tsize": 3,             # D.4.6 TSize too small for VR rows (or rows*Col past tile_words)
    "cas_hand_full": 2,         # D.4.6 no free slot in the destination hand
    "cas_budget": 2,            # D.4.6 TILE_CAPACITY below the destination's charge
    "cas_fractal": 2,           # D.4.7 ZN/NZ destination not fractal-aligned (rollback)
    "cas_lane_oob": 4,          # D.4.8 one lane (first/middle/last) past GM or wrapped
    "cas_lane_misaligned": 3,   # D.4.8 one lane misaligned to the element size
    "cas_zero_mask_block": 2,   # D.4.1 every B.IOT PEMode 000
    "cas_start_dtype": 1,       # reserved BSTART DataType (decode)
    "cas_drop_bstop": 2,        # completion by the next BSTART, or the stream ends mid-block
    "cas_shuffle": 2,           # header order (legal)
    "cas_catr": 1,              # B.CATR aq/rl/atom/far: ordering only
    "cas_catr_trap": 1,         # B.CATR trap: Fault_BundlePostCommit after the commit
}
CAS_AIMS = {
    "cas_no_ior": "Fault_TileLegality", "cas_ios": "Fault_TileLegality",
    "cas_bindings": "Fault_TileLegality", "cas_ior_surplus": "Fault_TileLegality",
    "cas_no_lb0": "Fault_TileLegality", "cas_lb_zero": "Fault_TileLegality",
    "cas_vc_gt_col": "Fault_TileLegality", "cas_col_not_pow2": "Fault_TileLegality",
    "cas_mask_mismatch": "Fault_TileLegality", "cas_datr_attr": "Fault_TileLegality",
    "cas_cube_layout": "Fault_TileLegality", "cas_packed": "Fault_TileLegality",
    "cas_index_float": "Fault_TileLegality", "cas_src_dtype": "Fault_TileLegality",
    "cas_src_shape": "Fault_TileLegality", "cas_src_undefined": "Fault_TileLegality",
    "cas_src_unallocated": "Fault_TileLegality", "cas_src_cube": "Fault_TileLegality",
    "cas_tsize": "Fault_TileAllocation", "cas_hand_full": "Fault_TileAllocation",
    "cas_budget": "Fault_TileAllocation", "cas_fractal": "Fault_TileLegality",
    "cas_lane_oob": "Fault_DataPage", "cas_lane_misaligned": "Fault_DataAlignment",
    "cas_zero_mask_block": "Fault_None", "cas_start_dtype": "Fault_IllegalInstruction",
    "cas_drop_bstop": "Fault_None", "cas_shuffle": "Fault_None", "cas_catr": "Fault_None",
    "cas_catr_trap": "Fault_BundlePostCommit",
}
assert set(CAS_AIMS) == set(CAS_MUTATIONS)
# not combined in one case (the second would be a no-op or contradict the first)
_CAS_CONFLICTS = {frozenset(p) for p in (
    ("cas_packed", "cas_lane_misaligned"), ("cas_index_float", "cas_lane_oob"),
    ("cas_index_float", "cas_lane_misaligned"), ("cas_packed", "cas_fractal"),
    ("cas_src_cube", "cas_src_undefined"), ("cas_hand_full", "cas_budget"))}


@dataclass
class _CasSource:
    """One source tile and the TLOAD that makes it."""
    role: str                     # "index" | "expected" | "replacement"
    dt: int
    values: list                  # rows of raw element bits (VR x VC)
    col: int = 1                  # physical Col of the loaded tile
    hand: int = 0
    size: int = 1
    pemode: int = 1
    in_stream: bool = False
    cube: int = 0                 # CUBE load code (21..23) instead of an ordinary load
    index: int = -1               # TileIndex once placed

    @property
    def vr(self) -> int:
        return len(self.values)

    @property
    def vc(self) -> int:
        return len(self.values[0])

    @property
    def capacity(self) -> int:
        return 128 << (self.size - 1)


@dataclass
class _CasPlan:
    td: int                       # transfer dtype (BSTART DataType)
    idt: int                      # index dtype
    vr: int
    vc: int
    col: int
    lb: dict                      # n -> encoded LBn value (absent n: no B.DIM)
    layout: str
    datr: Optional[dict]          # datr() fields, None: no B.DATR
    hand: int
    size: int
    pemode: int
    base: int
    base_mode: str
    addrs: list                   # lane addresses, row-major
    mem: dict                     # address -> initial raw value
    expected: list
    replacement: list
    src_region: tuple
    lane_region: tuple
    sources: list = field(default_factory=list)
    hand2: int = 0                # cas_twice: the second bundle's destination hand
    hand_full: bool = False
    budget: bool = False
    undefine_role: Optional[str] = None
    unallocated_role: Optional[str] = None

    @property
    def bits(self) -> int:
        return BITS[self.td]

    @property
    def ebytes(self) -> int:
        return _ebytes(BITS[self.td])

    def source(self, role: str) -> _CasSource:
        return next(s for s in self.sources if s.role == role)


def _rand_bits(rng, bits: int) -> int:
    return int(rng.integers(0, 1 << bits, dtype=np.uint64)) if bits < 64 else \
        int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))


def _rand_value(rng, bits: int) -> int:
    """A raw element value; sometimes 0, all-ones, the sign bit, 1, max positive."""
    if rng.random() < 0.2:
        return _pick(rng, [0, (1 << bits) - 1, 1 << (bits - 1), 1, (1 << (bits - 1)) - 1])
    return _rand_bits(rng, bits)


def _representable(disp: int, dt: int) -> bool:
    """Does an index element of dtype `dt` sign/zero-extend to this 64-bit displacement?"""
    bits = BITS[dt]
    disp &= MASK64
    if bits >= 64 or dt not in INT_DTYPES:
        return True
    if SIGNED[dt]:
        v = disp - (1 << 64) if disp >> 63 else disp
        return -(1 << (bits - 1)) <= v < (1 << (bits - 1))
    return disp < (1 << bits)


def _cas_rows(size: int, col: int, bits: int) -> int:
    """Derived rows of a TSize code (C.7 step 4); 0 when not derivable."""
    cap_bits = (128 << (size - 1)) * 8
    if col <= 0 or col & (col - 1) or cap_bits % (col * bits):
        return 0
    rows = cap_bits // (col * bits)
    return rows if 1 <= rows <= 65535 else 0


def _fractal_ok(layout: str, rows: int, col: int, bits: int) -> bool:
    return layout not in ("ZN", "NZ") or (rows % 16 == 0 and col % max(1, 256 // bits) == 0)


def _cas_size_ok(size, vr, vc, col, bits, W, layout="RowMajor") -> bool:
    rows = _cas_rows(size, col, bits)
    return (rows > 0 and vr <= rows and vc <= col and vr * vc <= (128 << (size - 1)) * 8 // bits
            and rows * col <= W and _fractal_ok(layout, rows, col, bits))


def _encode_elements(dt: int, row: list) -> bytes:
    bits = BITS[dt]
    if bits == 4:
        nib = [v & 0xF for v in row] + [0] * (len(row) % 2)
        return bytes(nib[i] | nib[i + 1] << 4 for i in range(0, len(nib), 2))
    n = bits // 8
    return b"".join((v & ((1 << bits) - 1)).to_bytes(n, "little") for v in row)


def _cas_base(b: _Builder, idt: int, e: int, region: tuple):
    """(base, mode, candidate lane addresses): aligned addresses in the lane region
    whose displacement from base the index dtype can hold."""
    rng = b.rng
    lo, hi = region
    allowed = {"low": 4, "mid": 3, "high": 1.5, "wrap": 1, "huge": 0.7}
    if lo == 0:
        allowed["zero"] = 1.2
    for _ in range(4):
        mode = _weighted(rng, allowed)
        if mode == "low":
            base = lo + int(rng.integers(0, 64))
        elif mode == "mid":
            base = int(rng.integers(lo, hi))
        elif mode == "zero":
            base = 0
        elif mode == "high":
            base = hi + int(rng.integers(0, 256))
        elif mode == "wrap":
            base = (1 << 64) - int(rng.integers(1, 2048))
        else:
            base = _rand_bits(rng, 64)
        cands = [a for a in range(lo, hi - e + 1, e) if _representable(a - base, idt)]
        if cands:
            return base, mode, cands
    base = lo
    return base, "low", [a for a in range(lo, hi - e + 1, e) if _representable(a - base, idt)]


def _cas_draw(b: _Builder, kind: str, muts: list) -> Optional[_CasPlan]:
    """A legal plan honouring what the drawn mutations need (types, shapes)."""
    rng = b.rng
    W = b.m.tile_words
    if "cas_packed" in muts:
        td = _pick(rng, PACKED_DTYPES)
    elif "cas_lane_misaligned" in muts:
        td = _pick(rng, [d for d in CAS_DTYPES if BITS[d] >= 16])
    elif kind == "cas_wide":
        td = _pick(rng, [d for d in CAS_DTYPES if BITS[d] <= 16])
    else:
        td = _pick(rng, CAS_DTYPES)
    if "cas_index_float" in muts:
        idt = _pick(rng, NONINT_DTYPES)
    elif "cas_lane_oob" in muts:
        idt = _pick(rng, [d for d in INT_DTYPES if BITS[d] >= 16])
    elif kind == "cas_wide":
        idt = _pick(rng, [d for d in INT_DTYPES if BITS[d] <= 32])
    else:
        idt = _pick(rng, INT_DTYPES)
    bits = BITS[td]
    e = _ebytes(bits)
    if kind == "cas_wide":
        vr, vc = int(rng.integers(1, 9)), int(rng.integers(4, 13))
    else:
        vr, vc = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    if (kind == "cas_dup" and vr * vc < 2) or ("cas_vc_gt_col" in muts and vc < 2):
        vc = int(rng.integers(2, 9))
    layout = "RowMajor"
    if "cas_fractal" in muts:
        layout = _pick(rng, ["ZN", "NZ"])
    elif kind == "cas_layout" or rng.random() < 0.08:
        layout = _pick(rng, ["ColumnMajor", "ZN", "NZ", "ColumnMajor", "RowMajor"])
    code = _pick(rng, CAS_LAYOUT_CODES[layout])
    if layout == "RowMajor" and kind != "cas_layout" and rng.random() < 0.8:
        code = 0
    fractal = layout in ("ZN", "NZ") and "cas_fractal" not in muts
    col = 1 << (vc - 1).bit_length()
    if rng.random() < 0.3:
        col <<= int(rng.integers(1, 3))
    if fractal:
        col = max(col, 256 // bits)

    def sizes_for(c):
        out = [s for s in range(1, 11) if _cas_size_ok(s, vr, vc, c, bits, W, layout if fractal else "RowMajor")]
        if "cas_fractal" in muts:
            out = [s for s in out if not _fractal_ok(layout, _cas_rows(s, c, bits), c, bits)]
        return out

    sizes = sizes_for(col)
    if not sizes and fractal:                  # no fractal shape fits tile_words: ColumnMajor
        layout, fractal = "ColumnMajor", False
        code = _pick(rng, CAS_LAYOUT_CODES[layout])
        col = 1 << (vc - 1).bit_length()
        sizes = sizes_for(col)
    while not sizes and col > max(vc, 1) and not fractal:
        col //= 2
        sizes = sizes_for(col)
    if not sizes:
        return None
    size = sizes[0] if rng.random() < 0.6 else _pick(rng, sizes)
    lb = {0: vc}
    if vr != 1 or rng.random() < 0.5:
        lb[1] = vr
    if col != vc or rng.random() < 0.4:
        lb[2] = col
    datr_f = None
    if code != 0 or rng.random() < 0.5:
        datr_f = dict(layout=code, dtype=0, pad=int(rng.integers(0, 4)), cmode=0, rmode=0, sat=0,
                      canon=0)
    half = b.gm_bytes // 2
    regions = [(0, half), (half, b.gm_bytes)]
    if rng.random() < 0.5:
        regions.reverse()
    src_region, lane_region = regions
    n = vr * vc
    if idt in INT_DTYPES:
        base, base_mode, cands = _cas_base(b, idt, e, lane_region)
    else:                                       # float index: the block faults before the lanes
        base, base_mode = lane_region[0], "low"
        cands = list(range(lane_region[0], lane_region[1] - e + 1, e))
    mask = (1 << bits) - 1
    if kind == "cas_dup":
        g = 1 if n <= 3 or rng.random() < 0.4 else int(rng.integers(2, 4))
        g = min(g, len(cands))
        group = [int(a) for a in rng.choice(cands, g, replace=False)]
        w = rng.dirichlet(np.ones(g) * 0.8) if g > 1 else np.ones(1)
        addrs = [group[int(rng.choice(g, p=w))] for _ in range(n)]
    elif len(cands) >= n and rng.random() < 0.9:
        addrs = [int(a) for a in rng.choice(cands, n, replace=False)]
    else:
        addrs = [int(a) for a in rng.choice(cands, n, replace=True)]
        b.notes.append("lanes:repeats")
    mem = {a: _rand_value(rng, bits) for a in sorted(set(addrs))}
    expected, replacement = [], []
    if kind == "cas_dup":
        alphabet = {a: [mem[a]] + [_rand_value(rng, bits) for _ in range(int(rng.integers(1, 4)))]
                    for a in mem}
        for a in addrs:
            al = alphabet[a]
            p = np.array([0.45, 0.3, 0.15, 0.1][: len(al)])
            x = al[int(rng.choice(len(al), p=p / p.sum()))]
            others = [v for v in al if v != x]
            y = _pick(rng, others) if others and rng.random() < 0.85 else _rand_value(rng, bits)
            expected.append(x)
            replacement.append(y)
        b.notes.append(f"dup:{len(mem)} address(es) for {n} lanes")
    else:
        for a in addrs:
            u = rng.random()
            if u < 0.5:
                x = mem[a]
            elif u < 0.65:
                x = mem[a] ^ (1 << (bits - 1))            # e.g. -0.0 vs +0.0: raw bits differ
            else:
                x = _rand_value(rng, bits)
            expected.append(x & mask)
            replacement.append(_rand_value(rng, bits))
    hand = int(rng.integers(0, 4))
    plan = _CasPlan(td=td, idt=idt, vr=vr, vc=vc, col=col, lb=lb, layout=layout, datr=datr_f,
                    hand=hand, size=size, pemode=int(rng.integers(1, 8)), base=base,
                    base_mode=base_mode, addrs=addrs, mem=mem, expected=expected,
                    replacement=replacement, src_region=src_region, lane_region=lane_region,
                    hand2=int(rng.integers(0, 4)) if rng.random() < 0.5 else hand)
    ibits = BITS[idt]
    index_vals = [((a - base) & ((1 << ibits) - 1)) if idt in INT_DTYPES else _rand_bits(rng, ibits)
                  for a in addrs]

    def rows(vals):
        return [list(vals[r * vc:(r + 1) * vc]) for r in range(vr)]

    edt = rdt = td
    if "cas_packed" in muts and rng.random() < 0.4:          # sources of some other dtype
        edt = rdt = _pick(rng, [d for d in DTYPES if BITS[d] == 8])
    plan.sources = [_CasSource("index", idt, rows(index_vals)),
                    _CasSource("expected", edt, rows([v & ((1 << BITS[edt]) - 1) for v in expected])),
                    _CasSource("replacement", rdt,
                               rows([v & ((1 << BITS[rdt]) - 1) for v in replacement]))]
    for s in plan.sources:
        _size_source(rng, s, W)
    b.notes.append(f"cas:{tables.DTYPE_BY_CODE[td].name}/{vr}x{vc}/col{col}/size{size}/"
                   f"{layout}(code {code if datr_f else '-'})/index {tables.DTYPE_BY_CODE[idt].name}/"
                   f"base {base_mode}")
    return plan


def _size_source(rng, s: _CasSource, W: int):
    """Physical Col (a power of two >= VC, sometimes more) and a TSize that holds it."""
    bits = BITS[s.dt]
    s.col = 1 << (s.vc - 1).bit_length()
    if rng.random() < 0.25 and s.vr * s.col * 2 <= W:
        s.col *= 2
    s.size = _size_for_bytes((s.vr * s.col * bits + 7) // 8)
    if rng.random() < 0.2 and s.size < 10:
        s.size += 1
    s.pemode = int(rng.integers(1, 8))


def _cube_source(rng, s: _CasSource, W: int) -> bool:
    """Turn a source into a CUBE load (its dtype must have a CELL class)."""
    if s.dt not in CUBE_DTYPES:
        return False
    bits = BITS[s.dt]
    codes = []
    for code in LOAD_CODES:
        lay = CODE_LAYOUT[code]
        cr, cc = CELL[(lay, bits)]
        if lay == "N8":
            cells = -(-s.vr // cr) * -(-s.vc // 8)
        else:
            if s.vr > cr:
                continue
            cells = -(-s.vc // cc)
        if cells * cr * cc <= W:
            codes.append((code, cells))
    if not codes:
        return False
    s.cube, cells = _pick(rng, codes)
    s.size = _size_for_bytes(cells * 128)
    return True


# ---- plan-level mutations (before placement)


def _cp_vc_gt_col(b, plan):
    if plan.vc < 2:
        return False
    plan.lb[2] = _pick(b.rng, [1 << k for k in range(8) if 1 << k < plan.vc])
    return True


def _cp_col_not_pow2(b, plan):
    vc = plan.vc
    if vc & (vc - 1) and b.rng.random() < 0.4:
        plan.lb.pop(2, None)                      # LB2 absent: Col = ValidCol, not a power of two
        b.notes.append("col:absent")
        return True
    plan.lb[2] = _pick(b.rng, [x for x in range(max(vc, 3), max(vc, 3) + 12) if x & (x - 1)])
    return True


def _cp_tsize(b, plan):
    W, bits = b.m.tile_words, plan.bits
    lay = plan.layout if plan.layout in ("ZN", "NZ") else "RowMajor"
    ok = [s for s in range(1, 11) if _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W, lay)]
    small = [s for s in range(1, min(ok)) if not _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W)] \
        if ok else []                          # fail the allocation itself, not D.4 step 7
    big = [s for s in range(max(ok) + 1 if ok else 1, 11)
           if _cas_rows(s, plan.col, bits) and not _cas_size_ok(s, plan.vr, plan.vc, plan.col, bits, W)]
    if small and (not big or b.rng.random() < 0.6):
        plan.size = _pick(b.rng, small)
        b.notes.append(f"tsize:small {plan.size}")
    elif big:
        plan.size = _pick(b.rng, big)
        b.notes.append(f"tsize:big {plan.size}")
    else:
        return False
    return True


def _cp_hand_full(b, plan):
    plan.hand_full = True
    return True


def _cp_budget(b, plan):
    plan.budget = True
    return True


def _set_lane_address(plan, lane: int, address: int):
    """Move one lane: its address and its Index element (if the Index tile is still VR x VC)."""
    address &= MASK64
    plan.addrs[lane] = address
    s = plan.source("index")
    if (s.vr, s.vc) == (plan.vr, plan.vc):
        s.values[lane // plan.vc][lane % plan.vc] = (address - plan.base) & ((1 << BITS[s.dt]) - 1)


def _cp_lane_oob(b, plan):
    if plan.idt not in INT_DTYPES:
        return False
    rng, e, n = b.rng, plan.ebytes, len(plan.addrs)
    where = _pick(rng, ["first", "middle", "last"])
    lane = {"first": 0, "middle": n // 2, "last": n - 1}[where]
    opts = [b.gm_bytes + e * k for k in range(0, 4)] + [(1 << 64) - e * k for k in range(1, 5)] \
        + [b.gm_bytes + 4096 * int(rng.integers(1, 64))]
    opts = [a for a in opts if a % e == 0 and _representable(a - plan.base, plan.idt)]
    if not opts:
        return False
    _set_lane_address(plan, lane, _pick(rng, opts))
    b.notes.append(f"oob:{where} lane {lane} @ {plan.addrs[lane]:#x}")
    return True


def _cp_lane_misaligned(b, plan):
    if plan.idt not in INT_DTYPES or plan.ebytes < 2:
        return False
    rng, e, n = b.rng, plan.ebytes, len(plan.addrs)
    where = _pick(rng, ["first", "middle", "last"])
    lane = {"first": 0, "middle": n // 2, "last": n - 1}[where]
    a = plan.addrs[lane]
    opts = [(a + k) & MASK64 for k in range(1, e)] + [(a - k) & MASK64 for k in range(1, e)]
    opts = [x for x in opts if _representable(x - plan.base, plan.idt)]
    if not opts:
        return False
    _set_lane_address(plan, lane, _pick(rng, opts))
    b.notes.append(f"misaligned:{where} lane {lane} @ {plan.addrs[lane]:#x}")
    return True


def _cp_src_dtype(b, plan):
    cands = [s for s in plan.sources if s.role != "index" and not s.cube]
    if not cands:
        return False
    s = _pick(b.rng, cands)
    s.dt = _pick(b.rng, [d for d in DTYPES if d != plan.td])
    m = (1 << BITS[s.dt]) - 1
    s.values = [[v & m for v in row] for row in s.values]
    _size_source(b.rng, s, b.m.tile_words)
    b.notes.append(f"src_dtype:{s.role}={tables.DTYPE_BY_CODE[s.dt].name}")
    return True


def _cp_src_shape(b, plan):
    rng = b.rng
    cands = [s for s in plan.sources if not s.cube]
    if not cands:
        return False
    s = _pick(rng, cands)
    while True:
        vr, vc = int(rng.integers(1, plan.vr + 2)), int(rng.integers(1, plan.vc + 2))
        if (vr, vc) != (plan.vr, plan.vc):
            break
    s.values = [[_rand_bits(rng, BITS[s.dt]) for _ in range(vc)] for _ in range(vr)]
    _size_source(rng, s, b.m.tile_words)
    b.notes.append(f"src_shape:{s.role}={vr}x{vc}")
    return True


def _cp_src_undefined(b, plan):
    cands = [s.role for s in plan.sources if not s.cube]
    if not cands:
        return False
    plan.undefine_role = _pick(b.rng, cands)
    return True


def _cp_src_unallocated(b, plan):
    plan.unallocated_role = _pick(b.rng, ["index", "expected", "replacement"])
    return True


def _cp_src_cube(b, plan):
    roles = [s for s in plan.sources if s.dt in CUBE_DTYPES and s.role != plan.undefine_role]
    if not roles:
        return False
    s = _pick(b.rng, roles)
    if not _cube_source(b.rng, s, b.m.tile_words):
        return False
    b.notes.append(f"src_cube:{s.role} code {s.cube}")
    return True


CAS_PLAN_MUTATIONS = {
    "cas_vc_gt_col": _cp_vc_gt_col, "cas_col_not_pow2": _cp_col_not_pow2, "cas_tsize": _cp_tsize,
    "cas_hand_full": _cp_hand_full, "cas_budget": _cp_budget, "cas_lane_oob": _cp_lane_oob,
    "cas_lane_misaligned": _cp_lane_misaligned, "cas_src_dtype": _cp_src_dtype,
    "cas_src_shape": _cp_src_shape, "cas_src_undefined": _cp_src_undefined,
    "cas_src_unallocated": _cp_src_unallocated, "cas_src_cube": _cp_src_cube,
    # satisfied by _cas_draw itself
    "cas_packed": None, "cas_index_float": None, "cas_fractal": None,
}


# ---- bundle-level mutations (the CAS bundle's header words)


def _cas_iots(bd):
    return bd.find("iot")


def _cb_no_ior(b, bd):
    if not bd.find("ior"):
        return False
    bd.items = [it for it in bd.items if it[0] != "ior"]
    return True


def _cb_ios(b, bd):
    pm = bd.info["pemode"]
    if b.rng.random() < 0.3:
        pm = _pick(b.rng, [p for p in range(1, 8) if p != pm])
    w = ios(int(b.rng.integers(0, 256)), pm, int(b.rng.integers(0, 13)))
    bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), ("ios", w))
    return True


def _cb_bindings(b, bd):
    rng, i = b.rng, bd.info
    pm, x, y, z = i["pemode"], i["src"][0], i["src"][1], i["src"][2]
    dst = dict(hand=i["hand"], size=i["size"], pemode=pm)
    variants = {
        "one": [iot_src_dst(z, **dst)],
        "swapped": [iot_src_dst(z, **dst, last=0), iot_src2(x, y, pm, 1)],
        "first_with_destination": [iot_src2(x, y, pm, 0) | 1 << 15, iot_src_dst(z, **dst)],
        "second_without_destination": [iot_src2(x, y, pm, 0), iot_src(z, pm, 1)],
        "extra_source": [iot_src2(x, y, pm, 0), iot_src(int(rng.integers(0, 64)), pm, 0),
                         iot_src_dst(z, **dst)],
        "not_terminated": [iot_src2(x, y, pm, 0), iot_src_dst(z, **dst, last=0)],
        "separate_sources": [iot_src(x, pm, 0), iot_src(y, pm, 0), iot_src_dst(z, **dst)],
        "no_destination": [iot_src2(x, y, pm, 0), iot_src2(z, int(rng.integers(0, 64)), pm, 1)],
    }
    name = _pick(rng, sorted(variants))
    first = _cas_iots(bd)[0]
    bd.items = [it for it in bd.items if it[0] != "iot"]
    for k, w in enumerate(variants[name]):
        bd.items.insert(first + k, ("iot", w))
    b.notes.append(f"bindings:{name}")
    return True


def _cb_ior_surplus(b, bd):
    if not bd.find("ior"):
        return False
    k = bd.find("ior")[0]
    w = bd.items[k][1]
    w |= int(b.rng.integers(1, 24)) << _pick(b.rng, [7, 20, 27])      # RegDst / RegSrc1 / RegSrc2
    bd.items[k] = ("ior", w)
    return True


def _cb_no_lb0(b, bd):
    if not bd.find("dim0"):
        return False
    del bd.items[bd.find("dim0")[0]]
    return True


def _cb_lb_zero(b, bd):
    n = int(b.rng.integers(0, 3))
    tag = f"dim{n}"
    word = b.dim_word(n, 0) if len(b.free_regs) > 2 else dim(n, 0)
    if bd.find(tag):
        bd.items[bd.find(tag)[0]] = (tag, word)
    else:
        bd.items.insert(int(b.rng.integers(0, len(bd.items) + 1)), (tag, word))
    b.notes.append(f"lb_zero:LB{n}")
    return True


def _cb_mask_mismatch(b, bd):
    k = _cas_iots(bd)[-1]
    w = bd.items[k][1]
    other = _pick(b.rng, [p for p in range(1, 8) if p != bd.info["pemode"]])
    bd.items[k] = ("iot", (w & ~(7 << 9)) | other << 9)
    return True


def _cb_datr_attr(b, bd):
    rng = b.rng
    which = _pick(rng, ["dtype", "dtype_none", "cmode", "rmode", "sat", "canon"])
    val = {"dtype": _pick(rng, list(DTYPES[1:])), "dtype_none": 31, "cmode": int(rng.integers(1, 6)),
           "rmode": int(rng.integers(1, 8)), "sat": 1, "canon": 1}[which]
    f = dict(bd.info.get("datr") or dict(layout=0, dtype=0, pad=int(rng.integers(0, 4))))
    f[which if which != "dtype_none" else "dtype"] = val
    _set_datr(bd, **f)
    b.notes.append(f"datr_attr:{which}")
    return True


def _cb_cube_layout(b, bd):
    rng = b.rng
    _set_datr(bd, layout=_pick(rng, LOAD_CODES + STORE_CODES), dtype=_pick(rng, [31, 31, 0]),
              pad=int(rng.integers(0, 4)), cmode=0, rmode=0, sat=0, canon=0)
    return True


def _cb_zero_mask_block(b, bd):
    for k, (t, w) in enumerate(bd.items):
        if t in ("iot", "ios"):
            bd.items[k] = (t, w & ~(7 << 9))
    return True


def _cb_start_dtype(b, bd):
    bd.start = (bd.start & 0x07FFFFFF) | _pick(b.rng, RESERVED_START_DTYPES) << 27
    return True


def _cb_drop_bstop(b, bd):
    bd.stop = False
    return True


def _cb_shuffle(b, bd):
    return _m_shuffle(b, [bd])


def _cb_catr(b, bd, trap=0):
    rng = b.rng
    w = catr(trap=trap, dr=int(rng.integers(0, 2)), atom=int(rng.integers(0, 2)),
             aq=int(rng.integers(0, 2)), rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
    bd.items.insert(int(rng.integers(0, len(bd.items) + 1)), ("catr", w))
    return True


CAS_BUNDLE_MUTATIONS = {
    "cas_no_ior": _cb_no_ior, "cas_ios": _cb_ios, "cas_bindings": _cb_bindings,
    "cas_ior_surplus": _cb_ior_surplus, "cas_no_lb0": _cb_no_lb0, "cas_lb_zero": _cb_lb_zero,
    "cas_mask_mismatch": _cb_mask_mismatch, "cas_datr_attr": _cb_datr_attr,
    "cas_cube_layout": _cb_cube_layout, "cas_zero_mask_block": _cb_zero_mask_block,
    "cas_start_dtype": _cb_start_dtype, "cas_drop_bstop": _cb_drop_bstop,
    "cas_shuffle": _cb_shuffle, "cas_catr": _cb_catr,
    "cas_catr_trap": lambda b, bd: _cb_catr(b, bd, trap=1),
}
assert set(CAS_PLAN_MUTATIONS) | set(CAS_BUNDLE_MUTATIONS) == set(CAS_MUTATIONS)


# ---- placement: hands, TileIndices, GM, GPRs, words


def _place_hands(b: _Builder, plan: _CasPlan, loads: list, n_dest: int):
    """Hands for the loads (in load order): each hand holds at most hand_slots
    tiles, the destination hand(s) keep free slots (unless hand_full)."""
    rng, HS = b.rng, b.m.hand_slots
    counts = [0] * 4
    reserve = [0] * 4
    reserve[plan.hand] += 1
    if n_dest > 1:
        reserve[plan.hand2] += 1
    if plan.hand_full:
        # fill the destination hand: with sources first, then 1x1 filler loads
        into = [s for s in loads if s.role != "fill"][: min(HS, 3)]
        for s in into:
            s.hand = plan.hand
        counts[plan.hand] = len(into)
        for s in loads:
            if s.role == "fill":
                s.hand = plan.hand
                counts[plan.hand] += 1
        rest = [s for s in loads if s not in into and s.role != "fill"]
        reserve = [0] * 4
        reserve[plan.hand] = HS                                     # nothing else goes there
    else:
        rest = list(loads)
    for s in rest:
        ok = [h for h in range(4) if counts[h] + (0 if plan.hand_full else reserve[h]) < HS
              and not (plan.hand_full and h == plan.hand)]
        if not ok:
            ok = [h for h in range(4) if counts[h] < HS] or [0]
        s.hand = _pick(rng, ok)
        counts[s.hand] += 1


def _tload_items(b: _Builder, cube_datr, vr: int, vc: int, col: int, iot_word: int, base: int,
                 stride: int, *, reg_room: int, reg_p: float, zero_base_p: float) -> list:
    """Header items of a source-tile TLOAD (CUBE when `cube_datr` is its B.DATR word).

    Dimensions come from a GPR (B.DIM RegSrc) with probability `reg_p` while
    more than `reg_room` registers are free; ordinary loads omit dimensions
    equal to their defaults now and then; base 0 reads x0 with probability
    `zero_base_p`.
    """
    rng = b.rng

    def dimw(n, v):
        return b.dim_word(n, v) if len(b.free_regs) > reg_room and rng.random() < reg_p else dim(n, v)

    items = []
    if cube_datr is not None:
        items += [("datr", cube_datr), ("dim0", dimw(0, vc)), ("dim1", dimw(1, vr))]
    else:
        if vc != 1 or rng.random() < 0.5:
            items.append(("dim0", dimw(0, vc)))
        if vr != 1 or rng.random() < 0.5:
            items.append(("dim1", dimw(1, vr)))
        if col != vc or rng.random() < 0.3:
            items.append(("dim2", dimw(2, col)))
    items.append(("iot", iot_word))
    rb = 0 if base == 0 and rng.random() < zero_base_p else b.reg(base)
    items.append(("ior", ior(rb, b.reg(stride))))
    return items


def _source_bundle(b: _Builder, s: _CasSource, base: int, stride: int) -> Bundle:
    rng = b.rng

    cube_datr = datr(s.cube, 31, int(rng.integers(0, 4))) if s.cube else None
    items = _tload_items(b, cube_datr, s.vr, s.vc, s.col, iot_dst(s.hand, s.size, s.pemode, 1),
                         base, stride, reg_room=6, reg_p=0.5, zero_base_p=0.5)
    return Bundle(bstart("TLOAD", s.dt), items, True,
                  dict(op="TLOAD", cube=bool(s.cube), role=s.role, index=s.index))


def _cas_bundle(b: _Builder, plan: _CasPlan, src: tuple, hand: int, minimal: bool = False) -> Bundle:
    rng = b.rng
    items = []
    if plan.datr is not None and not (minimal and plan.datr["layout"] == 0 and plan.datr["pad"] == 3):
        items.append(("datr", datr(**plan.datr)))
    for n in (0, 1, 2):
        if n in plan.lb and not (minimal and n == 1 and plan.lb[1] == 1):
            v = plan.lb[n]
            items.append((f"dim{n}", b.dim_word(n, v) if len(b.free_regs) > 4 and not minimal
                          else dim(n, v)))
    pm = plan.pemode
    items.append(("iot", iot_src2(src[0], src[1], pm, 0)))
    items.append(("iot", iot_src_dst(src[2], hand, plan.size, pm, 1)))
    rb = 0 if plan.base == 0 and rng.random() < 0.6 else b.reg(plan.base)
    items.append(("ior", ior(rb)))
    return Bundle(bstart("MGATHER.CAS", plan.td), items, True,
                  dict(op="MGATHER.CAS", src=src, hand=hand, size=plan.size, pemode=pm,
                       datr=plan.datr))


def _cas_program(b: _Builder, plan: _CasPlan, kind: str, bundle_muts: list):
    """(setup words, stream words, GM bytes, tile_capacity, undefine, applied bundle mutations)."""
    rng, HS = b.rng, b.m.hand_slots
    n_dest = 2 if kind == "cas_twice" else 1
    fills = []
    if plan.hand_full:
        fills = [_CasSource("fill", 27, [[int(rng.integers(0, 256))]], col=1, size=1,
                            pemode=int(rng.integers(1, 8))) for _ in range(max(0, HS - 3))]
    order = list(plan.sources)
    rng.shuffle(order)
    if plan.undefine_role is not None:          # undefine pokes a tile the setup made: not last
        order.sort(key=lambda s: s.role != plan.undefine_role)
    loads = fills + order
    _place_hands(b, plan, loads, n_dest)
    if kind == "cas_in_stream" or (kind not in ("cas_twice",) and rng.random() < 0.2):
        loads[-1].in_stream = True
    counts = [0] * 4
    for s in loads:
        s.index = s.hand * tables.HAND_SLOTS + counts[s.hand]
        counts[s.hand] += 1
    dest_index = plan.hand * tables.HAND_SLOTS + counts[plan.hand]
    # GM: random (or zero) bytes, lane memory, source data in the other half
    n = b.gm_bytes
    gm = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes() if rng.random() < 0.9
                   else bytes(n))
    e = plan.ebytes
    for a, v in plan.mem.items():
        gm[a:a + e] = _encode_elements(plan.td, [v])[:e]
    lo, hi = plan.src_region
    dense_total = sum(_rowbytes(s.vc, BITS[s.dt]) * s.vr + 8 for s in loads) + plan.vr * plan.vc * e
    roomy = 2 * dense_total + 200 < hi - lo           # room for row gaps and spacing
    cursor = lo + (int(rng.integers(0, 16)) if roomy else 0)
    bundles = []

    def take(nbytes, align):
        nonlocal cursor
        cursor += (-cursor) % align
        at = cursor
        cursor += nbytes + (int(rng.integers(0, 24)) if roomy else 0)
        assert cursor <= hi, "source data does not fit its GM half"
        return at

    for s in loads:
        bits = BITS[s.dt]
        eb = _ebytes(bits)
        dense = _rowbytes(s.vc, bits)
        stride = dense + (eb * int(rng.integers(0, 4)) if roomy and rng.random() < 0.4 else 0)
        base = take(stride * s.vr, eb)
        for r, row in enumerate(s.values):
            raw = _encode_elements(s.dt, row)
            gm[base + r * stride: base + r * stride + len(raw)] = raw
        bundles.append((s, _source_bundle(b, s, base, stride)))
    # the CAS bundle(s)
    by_role = {s.role: s.index for s in plan.sources}
    src = [by_role["index"], by_role["expected"], by_role["replacement"]]
    allocated = {s.index for s in loads}
    if plan.unallocated_role is not None:
        k = ("index", "expected", "replacement").index(plan.unallocated_role)
        free = [t for t in range(64) if t not in allocated and t != dest_index]
        src[k] = _pick(rng, free)
        b.notes.append(f"unallocated:{plan.unallocated_role}=T{src[k]}")
    undefine = ()
    if plan.undefine_role is not None:
        s = plan.source(plan.undefine_role)
        r, c = int(rng.integers(0, s.vr)), int(rng.integers(0, s.vc))
        undefine = ((s.index, r * s.col + c),)
        b.notes.append(f"undefined:{s.role} ({r},{c})")
    cas = _cas_bundle(b, plan, tuple(src), plan.hand)
    applied = [m for m in bundle_muts if CAS_BUNDLE_MUTATIONS[m](b, cas)]
    tail = []
    if kind == "cas_roundtrip":
        pm2 = int(rng.integers(1, 8))
        stride = plan.vc * e + (e * int(rng.integers(0, 3)) if roomy and rng.random() < 0.3 else 0)
        at = take(stride * plan.vr, e)
        items = []
        if rng.random() < 0.3:
            items.append(("dim0", dim(0, plan.vc)))
        items += [("iot", iot_src(dest_index, pm2, 1)), ("ior", ior(b.reg(at), b.reg(stride)))]
        tail.append(Bundle(bstart("TSTORE", plan.td if rng.random() < 0.8 else _pick(rng, DTYPES)),
                           items, True, dict(op="TSTORE")))
        b.notes.append(f"roundtrip:TSTORE T{dest_index} -> {at:#x}/{stride}")
    elif kind == "cas_twice":
        tail.append(_cas_bundle(b, plan, tuple(src), plan.hand2, minimal=True))
        b.notes.append(f"twice:second destination hand {plan.hand2}")
    stream_loads = [bd for s, bd in bundles if s.in_stream]

    def stream():
        return _flatten(stream_loads + [cas] + tail)

    while len(stream()) > b.g.max_words and stream_loads:
        stream_loads[-1].info["moved"] = True
        stream_loads.pop()
    words = stream()
    if len(words) > b.g.max_words:
        b.notes.append(f"cut:{len(words)}->{b.g.max_words}")
        words = words[: b.g.max_words]
    in_stream = {id(bd) for bd in stream_loads}
    setup = _flatten([bd for _, bd in bundles if id(bd) not in in_stream])
    if stream_loads:
        b.notes.append("in_stream:" + ",".join(bd.info["role"] for bd in stream_loads))
    cap = None
    if plan.budget:
        # core: the setup's bindings are mask 1111 (_core_setup), each PE charges 4 x TSize
        charge = sum((4 if b.g.core else bin(PEMODE_MASK[s.pemode]).count("1")) * s.capacity
                     for s in loads)
        dest = bin(PEMODE_MASK[plan.pemode]).count("1") * (128 << (plan.size - 1))
        cap = charge + dest - int(rng.integers(1, dest + 1))
        b.notes.append(f"tile_capacity:{cap} (sources {charge}, destination {dest})")
    return setup, words, bytes(gm), cap, undefine, applied


def _cas_zero_mask(b: _Builder, plan: _CasPlan) -> list:
    """A CAS block whose bindings are all PEMode 000, with an otherwise illegal
    schema: bogus sources, missing dims/B.IOR, B.DATR attributes, B.IOS."""
    rng = b.rng
    items = []
    if rng.random() < 0.5:
        items.append(("datr", datr(int(rng.integers(0, 2)), _pick(rng, [0, 31, 27]),
                                   int(rng.integers(0, 4)), int(rng.integers(0, 6)),
                                   int(rng.integers(0, 8)), int(rng.integers(0, 2)))))
    if rng.random() < 0.5:
        items.append(("dim0", dim(0, _pick(rng, [0, 1, 3, plan.vc]))))
    x, y, z = (int(rng.integers(0, 64)) for _ in range(3))
    items.append(("iot", iot_src2(x, y, 0, 0)))
    items.append(("iot", iot_src_dst(z, int(rng.integers(0, 4)), int(rng.integers(1, 11)), 0, 1)))
    if rng.random() < 0.3:
        items.append(("ios", ios(int(rng.integers(0, 256)), 0, int(rng.integers(0, 13)))))
    if rng.random() < 0.5:
        items.append(("ior", ior(int(rng.integers(0, 24)), int(rng.integers(0, 2)),
                                 int(rng.integers(0, 2)), int(rng.integers(0, 2)))))
    td = plan.td if rng.random() < 0.7 else _pick(rng, PACKED_DTYPES)
    return Bundle(bstart("MGATHER.CAS", td), items, True, dict(op="MGATHER.CAS")).words()


def random_cas_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                    mutations: Optional[list] = None) -> Case:
    """One random MGATHER.CAS Case (kinds CAS_KINDS, mutations CAS_MUTATIONS).

    `kind` and `mutations` force the draw (labels a mutation could not be
    applied to are left out of Case.mutations). The sources are loaded by
    ordinary TLOADs in Case.setup (one of them sometimes in the stream);
    build_state prepares them.
    """
    g = _gen_config(cfg)
    b = _Builder(rng, g)
    kind = _weighted(rng, CAS_KINDS) if kind is None else kind
    if kind not in CAS_KINDS:
        raise ValueError(f"unknown MGATHER.CAS kind {kind!r}")
    if mutations is None:
        mutations = []
        if kind != "cas_zero_mask" and rng.random() < g.p_mutate:
            k = 1 if rng.random() < 0.7 else int(rng.integers(2, g.max_mutations + 1))
            for _ in range(8 * k):
                if len(mutations) >= k:
                    break
                m = _weighted(rng, CAS_MUTATIONS)
                if kind == "cas_roundtrip" and m == "cas_zero_mask_block":
                    continue                  # the TSTORE would name a tile never made
                if m not in mutations and not any(frozenset((m, x)) in _CAS_CONFLICTS for x in mutations):
                    mutations.append(m)
    else:
        mutations = list(mutations)
        unknown = set(mutations) - set(CAS_MUTATIONS)
        if unknown:
            raise ValueError(f"unknown MGATHER.CAS mutations {sorted(unknown)}")
    plan = _cas_draw(b, kind, mutations)
    if plan is None:                          # no shape for these needs: drop them
        mutations = [m for m in mutations if m not in ("cas_fractal",)]
        plan = _cas_draw(b, kind, mutations)
    applied = []
    for m in mutations:
        f = CAS_PLAN_MUTATIONS.get(m, False)
        if f is None:                         # satisfied by the draw
            ok = {"cas_packed": BITS[plan.td] == 4, "cas_index_float": plan.idt not in INT_DTYPES,
                  "cas_fractal": plan.layout in ("ZN", "NZ")}[m]
            if ok:
                applied.append(m)
        elif f and f(b, plan):
            applied.append(m)
    bundle_muts = [m for m in mutations if m in CAS_BUNDLE_MUTATIONS]
    if kind == "cas_zero_mask":
        setup, words, cap, undefine, bundle_applied = [], _cas_zero_mask(b, plan), None, (), []
        gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    else:
        setup, words, gm, cap, undefine, bundle_applied = _cas_program(b, plan, kind, bundle_muts)
    applied = [m for m in mutations if m in applied or m in bundle_applied]
    pc = 4 * int(rng.integers(0, 1 << 28)) if rng.random() < 0.2 else 0
    b.noise_regs()
    return Case(words=[int(w) & 0xFFFFFFFF for w in words], gm=gm,
                gprs={pe: dict(r) for pe, r in b.gprs.items()}, kind=kind,
                mutations=tuple(applied), pc=pc, tile_capacity=cap, pe=g.pe, core=g.core,
                notes=tuple(b.notes),
                setup=_core_setup(setup, g.core), undefine=tuple(undefine))


def random_cas_cases(seed: int, n: int, cfg=None) -> list:
    """n MGATHER.CAS Cases from one seed (case i is random_cas_case(case_rng(seed, i), cfg))."""
    g = _gen_config(cfg)
    ss = np.random.SeedSequence(seed)
    return [random_cas_case(np.random.default_rng(s), g) for s in ss.spawn(n)]


# ----------------------------------------------------------------- matrix cases (TMATMUL / TGEMV)
#
# A matrix case runs one TMATMUL*/TGEMV* bundle (All-Local CUBE operands,
# docs/matmul-decisions.md) on source tiles made by TLOADs in Case.setup:
# CUBE TLOADs (ND2M16 / ND2M32 for A and C, ND2N8 for B) and ordinary
# TLOADs for the RowMajor E8M0 scale tiles and the Bias row. The bundle and,
# per kind, an earlier bundle whose D is C (chaining), a TSTORE of D, or one
# operand TLOAD are the Case's words. Shapes follow GenConfig.machine
# (tile_words bounds every tile, hand_slots the hands); the GM holds the
# operands' element codes (realistic values, sometimes NaN / inf / subnormal
# / -0 codes, sometimes raw random codes) and random bytes elsewhere.

MATMUL_FORMS = tuple(n for n, e, _ in tables.OPS if e == "CUBE")        # the 12 operations
START.update({n: 0x00031181 | fn << 20 for n, e, fn in tables.OPS if e == "CUBE"})
DT_CODE = {d.name: d.code for d in tables.DATATYPES}
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

MATMUL_KINDS = {
    # kind: weight
    "mm_float": 10,        # non-MX form, floating pair (FP32/TF32/HF32/FP16/BF16/HiF8/FP8/FP6/FP4)
    "mm_int": 6,           # non-MX form, signed or unsigned pair
    "mm_mx": 8,            # MX form, one of the 36 MX pairs (E8M0 scale tiles for FP8/FP4 sides)
    "mm_mx_blocks": 4,     # MX form with K > 32 (several scale blocks) where tile_words allows
    "mm_acc_chain": 5,     # X.ACC whose C is the D of an earlier bundle (in the stream or the setup)
    "mm_roundtrip": 3,     # D stored back by a CUBE TSTORE (M162ND / M322ND)
    "mm_in_stream": 3,     # one operand TLOAD in the stream before the matrix bundle
    "mm_specials": 3,      # floating operands dense in NaN / inf / subnormal / -0 codes
    "mm_zero_mask": 2,     # every binding PEMode 000, block otherwise illegal: strict no-op
}

# mutation label -> weight; MATMUL_AIMS[label] is the fault each aims at
MATMUL_MUTATIONS = {
    "mm_no_fpatr": 2,           # 1 B.FPATR missing
    "mm_type_class": 3,         # 3 AType/BType of two classes (or AType in none)
    "mm_mx_type": 2,            # 3 a non-MX type in an MX form
    "mm_src_count": 3,          # 3 Local source count +-1
    "mm_extra_dst": 2,          # 3 a second destination
    "mm_ior": 2,                # 3 B.IOR RegDst / RegSrc nonzero (no scalar parameters)
    "mm_datr_attr": 3,          # 3 B.DATR Layout (non-CUBE) / PadValue / CMode / Canonicalize nonzero
    "mm_lb_zero": 2,            # 3 an explicit LBn = 0
    "mm_cube_layout": 1,        # pre: B.DATR Layout 21..26 on TMATMUL*: CUBE transport path
    "mm_gemv_cube_layout": 1,   # pre: the same on TGEMV*: not a TLSU Function
    "mm_ios_tmatmul": 1,        # a stray B.IOS on an All-Local TMATMUL*: the Shared count is wrong
    "mm_ios_gemv": 1,           # 3 B.IOS on TGEMV*
    "mm_gemv_m": 2,             # 4 TGEMV* with LB0 = M != 1
    "mm_trans": 2,              # 5 TransA / TransB with Local primaries
    "mm_quant_class": 2,        # 6 PreQuantMode of the other accumulator class
    "mm_post": 3,               # 6 post-processing (ReLU, quantization, row/group max): not modelled
    "mm_a_layout": 2,           # 7 A RowMajor or N8
    "mm_b_layout": 2,           # 7 B not N8
    "mm_c_layout": 2,           # 7 C layout != A layout
    "mm_c_capacity": 2,         # 7 C capacity != D TSize
    "mm_src_dtype": 3,          # 7 a source of the wrong dtype
    "mm_src_shape": 3,          # 7 a source of the wrong valid shape
    "mm_src_undefined": 2,      # 7 a source not fully defined (Case.undefine)
    "mm_src_unallocated": 2,    # 7 a source TileIndex not allocated
    "mm_aux_cube": 2,           # 7 a scale / Bias tile that is a CUBE tile
    "mm_c_is_d_hand": 2,        # 8 C's TileIndex == D's hand value
    "mm_d_size": 2,             # 10 D SizeCode one step too small
    "mm_hand_full": 2,          # 10 no free slot in D's hand
    "mm_budget": 2,             # 10 TILE_CAPACITY below the Core charge with D
    "mm_zero_mask_block": 2,    # 0 every B.IOT PEMode 000: no-op
    "mm_zero_iot": 1,           # an extra PEMode-000 B.IOT: ignored
    "mm_shuffle": 2,            # header order (legal)
    "mm_catr_dr": 1,            # B.CATR DR=1 in a CUBE block
    "mm_catr_trap": 1,          # B.CATR trap: Fault_BundlePostCommit after the commit
}
_TL, _TA, _UN = "Fault_TileLegality", "Fault_TileAllocation", "Fault_Unimplemented"
MATMUL_AIMS = {
    "mm_no_fpatr": "Fault_BundleControl", "mm_type_class": _TL, "mm_mx_type": _TL,
    "mm_src_count": _TL, "mm_extra_dst": _TL, "mm_ior": _TL, "mm_datr_attr": _TL,
    "mm_lb_zero": _TL, "mm_cube_layout": _TL, "mm_gemv_cube_layout": "Fault_IllegalInstruction",
    "mm_ios_tmatmul": _TL, "mm_ios_gemv": _TL, "mm_gemv_m": _TL, "mm_trans": _TL,
    "mm_quant_class": _TL, "mm_post": _UN, "mm_a_layout": _TL, "mm_b_layout": _TL,
    "mm_c_layout": _TL, "mm_c_capacity": _TL, "mm_src_dtype": _TL, "mm_src_shape": _TL,
    "mm_src_undefined": _TL, "mm_src_unallocated": _TL, "mm_aux_cube": _TL,
    "mm_c_is_d_hand": _TL, "mm_d_size": _TA, "mm_hand_full": _TA, "mm_budget": _TA,
    "mm_zero_mask_block": "Fault_None", "mm_zero_iot": "Fault_None", "mm_shuffle": "Fault_None",
    "mm_catr_dr": "Fault_BundleControl", "mm_catr_trap": "Fault_BundlePostCommit",
}
assert set(MATMUL_AIMS) == set(MATMUL_MUTATIONS)

# which forms a mutation can apply to (absent: any); mm_c_is_d_hand / mm_c_layout /
# mm_c_capacity also need a loaded C, so they do not apply to mm_acc_chain (forced there,
# they are left out of Case.mutations; unforced, _mm_mutation_ok never draws them)
_MM_FORM_NEEDS = {
    "mm_gemv_m": lambda f: f["gemv"], "mm_ios_gemv": lambda f: f["gemv"],
    "mm_gemv_cube_layout": lambda f: f["gemv"],
    "mm_ios_tmatmul": lambda f: not f["gemv"], "mm_cube_layout": lambda f: not f["gemv"],
    "mm_c_is_d_hand": lambda f: f["acc"], "mm_c_layout": lambda f: f["acc"],
    "mm_c_capacity": lambda f: f["acc"], "mm_mx_type": lambda f: f["mx"],
    "mm_type_class": lambda f: not f["mx"], "mm_d_size": lambda f: not f["acc"],
    "mm_aux_cube": lambda f: f["bias"] or f["mx"],
}
# mutations that change the source tiles or their placement (not with a chained first bundle)
_MM_PLAN_MUTATIONS = ("mm_a_layout", "mm_b_layout", "mm_c_layout", "mm_c_capacity", "mm_src_dtype",
                      "mm_src_shape", "mm_src_undefined", "mm_src_unallocated", "mm_aux_cube",
                      "mm_c_is_d_hand", "mm_d_size", "mm_hand_full")
# forced on mm_acc_chain, these edit a tile (or type) its first bundle reads too, so that
# bundle faults: it then stays in the stream (build_state needs a setup that completes)
_MM_FIRST_FAULTS = ("mm_a_layout", "mm_b_layout", "mm_src_dtype", "mm_src_shape", "mm_src_unallocated",
                    "mm_aux_cube", "mm_type_class", "mm_mx_type")
# not combined in one case (they edit the same field, or the second undoes the first)
_MM_CONFLICTS = {frozenset(p) for p in (
    ("mm_no_fpatr", "mm_trans"), ("mm_no_fpatr", "mm_quant_class"), ("mm_no_fpatr", "mm_post"),
    ("mm_quant_class", "mm_post"), ("mm_datr_attr", "mm_cube_layout"),
    ("mm_datr_attr", "mm_gemv_cube_layout"), ("mm_catr_dr", "mm_catr_trap"),
    ("mm_hand_full", "mm_budget"), ("mm_hand_full", "mm_c_is_d_hand"), ("mm_budget", "mm_c_is_d_hand"),
    ("mm_d_size", "mm_hand_full"), ("mm_d_size", "mm_budget"), ("mm_type_class", "mm_mx_type"),
    ("mm_src_undefined", "mm_src_unallocated"))}


def _mm_flags(form: str) -> dict:
    return dict(bias=form.endswith(".BIAS"), acc=form.endswith(".ACC"), mx="MX" in form,
                gemv=form.startswith("TGEMV"))


def _mm_name(mx: bool, gemv: bool, suffix: str = "") -> str:
    return ("TGEMV" if gemv else "TMATMUL") + ("MX" if mx else "") + suffix


def _mm_form_ok(form: str, kind: str, muts) -> bool:
    f = _mm_flags(form)
    if kind in ("mm_mx", "mm_mx_blocks") and not f["mx"]:
        return False
    if kind in ("mm_float", "mm_int") and f["mx"]:
        return False
    if kind == "mm_acc_chain" and not f["acc"]:
        return False
    return all(_MM_FORM_NEEDS.get(m, lambda f: True)(f) for m in muts)


def _mm_mutation_ok(m: str, kind: str, muts) -> bool:
    """Can mutation m join `muts` in a case of this kind (independently of forms)?"""
    if m in muts or any(frozenset((m, x)) in _MM_CONFLICTS for x in muts):
        return False
    if kind == "mm_zero_mask":
        return False
    if kind == "mm_acc_chain" and (m in _MM_PLAN_MUTATIONS or m in ("mm_type_class", "mm_mx_type")):
        return False                     # the first bundle (maybe in the setup) must succeed
    if kind == "mm_roundtrip" and m == "mm_zero_mask_block":
        return False                     # the TSTORE would name a tile never made
    if kind == "mm_mx_blocks" and m == "mm_type_class":
        return False
    return True


class MatmulImpossible(ValueError):
    """random_matmul_case was forced to a kind and mutations that no allowed form
    takes (matmul_possible says False): a legitimate refusal, not a generator bug."""


def matmul_possible(kind: str, mutations=(), forms=()) -> bool:
    """Does some form of `forms` (GenConfig.matmul_forms; empty: all 12) take this
    kind with these forced mutations? random_matmul_case raises MatmulImpossible
    exactly when it does not."""
    forms = tuple(forms) or MATMUL_FORMS
    unknown = ({kind} - set(MATMUL_KINDS)) | (set(mutations) - set(MATMUL_MUTATIONS)) \
        | (set(forms) - set(MATMUL_FORMS))
    if unknown:
        raise ValueError(f"unknown matrix kind, mutations or forms {sorted(unknown)}")
    return any(_mm_form_ok(f, kind, list(mutations)) for f in forms)


# ---- element codes


@functools.lru_cache(maxsize=None)
def _mm_code_classes(dt: int) -> dict:
    """Raw codes of a <= 16-bit floating type by class (nan, inf, zero, tiny, moderate)."""
    from .. import numerics
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
    return _rand_bits(rng, 32)


_SPECIAL_CLASSES = ("nan", "inf", "zero", "tiny")


def _mm_codes(rng, dt: int, n: int, style: dict) -> list:
    """n raw element codes of dtype dt in a value style (see _mm_style)."""
    d = tables.DTYPE_BY_CODE[dt]
    bits = d.bits
    out = []
    for _ in range(n):
        u = rng.random()
        if u < style["raw"]:
            out.append(_rand_bits(rng, bits))
            continue
        special = u < style["raw"] + style["special"]
        if dt == E8M0:
            out.append(_pick(rng, [0, 1, 254, 255]) if special
                       else 127 + int(rng.integers(-6, 7)))
        elif d.is_integer:
            if special:
                out.append(_pick(rng, [0, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1]))
            elif rng.random() < 0.75:
                v = int(rng.integers(-7, 8)) if d.signed or d.name == "S4X2" else int(rng.integers(0, 16))
                out.append(v & ((1 << bits) - 1))
            else:
                out.append(_rand_bits(rng, bits))
        elif bits == 32:
            cls = _pick(rng, _SPECIAL_CLASSES) if special else "moderate"
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
            cls = _pick(rng, [c for c in _SPECIAL_CLASSES if c in classes]) if special else "moderate"
            out.append(_pick(rng, classes[cls]))
    return out


def _mm_style(rng, kind: str) -> dict:
    """Per-case value style: realistic codes (sometimes with special values) or raw random."""
    if kind == "mm_specials":
        return dict(raw=0.02, special=0.3)
    if rng.random() < 0.2:
        return dict(raw=1.0, special=0.0)
    return dict(raw=0.02, special=_pick(rng, [0.0, 0.0, 0.04, 0.1]))


# ---- tiles and shapes


@dataclass
class _MmTile:
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


def _cube_fits(lay: str, bits: int, vr: int, vc: int, W: int) -> bool:
    """B.6 within the model bound: rows fit an M CELL, cells * CELL words <= tile_words."""
    if vr < 1 or vc < 1 or (lay, bits) not in CELL:
        return False
    cr, cc = CELL[(lay, bits)]
    if lay != "N8" and vr > cr:
        return False
    return _cube_cells(lay, bits, vr, vc) * cr * cc <= W


def _cube_min_size(lay: str, bits: int, vr: int, vc: int) -> int:
    return _size_for_bytes(_cube_cells(lay, bits, vr, vc) * 128)


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


def _mm_tile(rng, role, dt, vr, vc, layout, W, size=None) -> Optional[_MmTile]:
    """A tile of this shape with the smallest size (sometimes one or two more)."""
    bits = BITS[dt]
    if layout == "RowMajor":
        fit = _ord_fit(bits, vr, vc, W)
        if fit is None:
            return None
        if rng.random() < 0.2 and _ord_fit(bits, vr, vc, W, 2 * fit[0]) is not None:
            fit = _ord_fit(bits, vr, vc, W, 2 * fit[0])      # a wider physical row
        return _MmTile(role, dt, vr, vc, "RowMajor", size=fit[1], col=fit[0],
                       pemode=int(rng.integers(1, 8)))
    if not _cube_fits(layout, bits, vr, vc, W):
        return None
    need = _cube_min_size(layout, bits, vr, vc)
    if size is None:
        size = need + (int(rng.integers(1, 3)) if rng.random() < 0.25 else 0)
    size = min(size, 10)
    if size < need:
        return None
    return _MmTile(role, dt, vr, vc, layout, size=size, pad=int(rng.integers(0, 4)),
                   pemode=int(rng.integers(1, 8)))


def _mm_acc_type(mx: bool, atype: int) -> int:
    if not mx and atype in MM_SIGNED:
        return S32
    if not mx and atype in MM_UNSIGNED:
        return U32
    return FP32


def _mm_types(rng, kind: str, f: dict, muts) -> tuple:
    """(AType, BType) for the kind, honouring mm_type_class / mm_mx_type."""
    if f["mx"]:
        a, bt = _pick(rng, MM_MX), _pick(rng, MM_MX)
        if "mm_aux_cube" in muts and not f["bias"] and a not in MM_MX_SCALED and bt not in MM_MX_SCALED:
            a = _pick(rng, MM_MX_SCALED)
        if kind == "mm_specials" and rng.random() < 0.5:
            a = _pick(rng, MM_MX_SCALED)
        if "mm_mx_type" in muts:
            other = [c for c in MM_FLOAT + MM_SIGNED + MM_UNSIGNED if c not in MM_MX]
            if rng.random() < 0.5:
                a = _pick(rng, other)
            else:
                bt = _pick(rng, other)
        return a, bt
    if kind in ("mm_float", "mm_specials"):
        cls = MM_FLOAT
    elif kind == "mm_int":
        cls = _pick(rng, [MM_SIGNED, MM_UNSIGNED])
    else:
        u = rng.random()
        cls = MM_FLOAT if u < 0.55 else MM_SIGNED if u < 0.775 else MM_UNSIGNED
    a = _pick(rng, cls)
    bt = a if rng.random() < 0.3 else _pick(rng, cls)
    if "mm_type_class" in muts:
        if rng.random() < 0.2:
            a = _pick(rng, [S32, U32, E8M0])        # in no class (each has a CELL mapping)
        else:
            other = [c for c in MM_FLOAT + MM_SIGNED + MM_UNSIGNED if c not in cls]
            if rng.random() < 0.5:
                bt = _pick(rng, other)
            else:
                a = _pick(rng, other)
    return a, bt


def _mm_dims(rng, W: int, a_lay: str, abits: int, bbits: int, gemv: bool, *, n_min: int = 1,
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
        M = _pick(rng, [1, mmax])
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


@dataclass
class _MmPlan:
    kind: str
    form: str
    atype: int
    btype: int
    acc: int
    M: int
    N: int
    K: int
    a_lay: str
    tiles: dict                   # role -> _MmTile (the sources the main bundle names)
    d_size: int
    pemode: int
    style: dict
    chain: Optional[str] = None   # "stream" / "setup": the first bundle's place
    first_form: str = ""
    first_bias: Optional[_MmTile] = None
    hand_full: bool = False
    budget: bool = False
    c_is_d_hand: bool = False
    undefine_role: Optional[str] = None
    unallocated_role: Optional[str] = None
    first_faults: bool = False    # a chain's first bundle faults too (_MM_FIRST_FAULTS)

    @property
    def f(self) -> dict:
        return _mm_flags(self.form)

    @property
    def d_charge(self) -> int:
        return bin(PEMODE_MASK[self.pemode]).count("1") * (128 << (self.d_size - 1))


def _mm_draw(b: _Builder, kind: str, form: str, muts) -> Optional[_MmPlan]:
    """A legal plan for this kind and form (types drawn per the type mutations)."""
    rng, W = b.rng, b.m.tile_words
    f = _mm_flags(form)
    for _ in range(24):
        atype, btype = _mm_types(rng, kind, f, muts)
        a_lay = "M16" if rng.random() < (0.9 if kind == "mm_mx_blocks" else 0.6) else "M32"
        n_min = 1
        if "mm_d_size" in muts:
            n_min = 3 if a_lay == "M16" else 2                  # D of >= 2 CELLs
        dims = _mm_dims(rng, W, a_lay, BITS[atype], BITS[btype], f["gemv"], n_min=n_min,
                        big_k=kind == "mm_mx_blocks")
        if dims is None:
            continue
        M, N, K = dims
        acc = _mm_acc_type(f["mx"], atype)
        tiles = {"a": _mm_tile(rng, "a", atype, M, K, a_lay, W),
                 "b": _mm_tile(rng, "b", btype, K, N, "N8", W)}
        d_need = _cube_min_size(a_lay, 32, M, N)
        d_size = min(10, d_need + (int(rng.integers(1, 3)) if rng.random() < 0.25 else 0))
        kb = -(-K // 32)
        if f["mx"] and atype in MM_MX_SCALED:
            tiles["sa"] = _mm_tile(rng, "sa", E8M0, M, kb, "RowMajor", W)
        if f["mx"] and btype in MM_MX_SCALED:
            tiles["sb"] = _mm_tile(rng, "sb", E8M0, kb, N, "RowMajor", W)
        if f["bias"]:
            tiles["bias"] = _mm_tile(rng, "bias", acc, 1, N, "RowMajor", W)
        if f["acc"] and kind != "mm_acc_chain":
            tiles["c"] = _mm_tile(rng, "c", acc, M, N, a_lay, W, size=d_size)
        if any(t is None for t in tiles.values()):
            continue
        plan = _MmPlan(kind, form, atype, btype, acc, M, N, K, a_lay, tiles, d_size,
                       int(rng.integers(1, 8)), _mm_style(rng, kind))
        if kind == "mm_acc_chain":
            plan.first_form = _mm_name(f["mx"], f["gemv"], ".BIAS" if rng.random() < 0.35 else "")
            if plan.first_form.endswith(".BIAS"):
                plan.first_bias = _mm_tile(rng, "bias1", acc, 1, N, "RowMajor", W)
                if plan.first_bias is None:
                    plan.first_form = _mm_name(f["mx"], f["gemv"])
            plan.chain = "stream"
        return plan
    return None


# ---- plan mutations (the source tiles, their placement, the destination size)


def _mm_roles(plan, pred=lambda t: True) -> list:
    return [r for r in ("c", "a", "sa", "b", "sb", "bias") if r in plan.tiles and pred(plan.tiles[r])]


def _mp_a_layout(b, plan):
    rng, W, t = b.rng, b.m.tile_words, plan.tiles["a"]
    opts = [lay for lay in ("RowMajor", "N8") if _mm_tile(rng, "a", t.dt, t.vr, t.vc, lay, W)]
    if not opts:
        return False
    plan.tiles["a"] = _mm_tile(rng, "a", t.dt, t.vr, t.vc, _pick(rng, opts), W)
    b.notes.append(f"a_layout:{plan.tiles['a'].layout}")
    return True


def _mp_b_layout(b, plan):
    rng, W, t = b.rng, b.m.tile_words, plan.tiles["b"]
    opts = [lay for lay in ("M16", "M32", "RowMajor") if _mm_tile(rng, "b", t.dt, t.vr, t.vc, lay, W)]
    if not opts:
        return False
    plan.tiles["b"] = _mm_tile(rng, "b", t.dt, t.vr, t.vc, _pick(rng, opts), W)
    b.notes.append(f"b_layout:{plan.tiles['b'].layout}")
    return True


def _mp_c_layout(b, plan):
    if "c" not in plan.tiles:           # mm_acc_chain: C is the first bundle's D, no loaded tile
        return False
    rng, W, t = b.rng, b.m.tile_words, plan.tiles["c"]
    opts = []
    for lay in ("M16", "M32", "N8"):
        if lay != plan.a_lay and _cube_fits(lay, 32, t.vr, t.vc, W):
            opts.append(lay)
    if not opts:
        return False
    lay = _pick(rng, opts)
    size = max(plan.d_size, _cube_min_size(lay, 32, t.vr, t.vc))
    plan.tiles["c"] = _mm_tile(rng, "c", t.dt, t.vr, t.vc, lay, W, size=size)
    b.notes.append(f"c_layout:{lay}")
    return True


def _mp_c_capacity(b, plan):
    if "c" not in plan.tiles:           # mm_acc_chain: C is the first bundle's D, no loaded tile
        return False
    rng, t = b.rng, plan.tiles["c"]
    need = _cube_min_size(t.layout, 32, t.vr, t.vc)
    opts = []
    if plan.d_size < 10:
        opts += ["c_up", "d_up"]
    if plan.d_size > need:
        opts.append("c_down")
    if not opts:
        return False
    how = _pick(rng, opts)
    if how == "c_up":
        t.size = plan.d_size + 1
    elif how == "c_down":
        t.size = plan.d_size - 1
    else:
        plan.d_size += 1
    b.notes.append(f"c_capacity:{how} C size {t.size} D size {plan.d_size}")
    return True


def _mp_src_dtype(b, plan):
    rng = b.rng
    role = _pick(rng, _mm_roles(plan))
    t = plan.tiles[role]
    bits = BITS[t.dt]
    if role in ("sa", "sb"):
        opts = [c for c in CUBE_DTYPES if BITS[c] == 8 and c != E8M0]
    else:
        opts = [c for c in CUBE_DTYPES if BITS[c] == bits and c != t.dt]
        want = {"a": plan.atype, "b": plan.btype}.get(role, plan.acc)
        opts = [c for c in opts if c != want]
    if not opts:
        return False
    t.dt = _pick(rng, opts)
    b.notes.append(f"src_dtype:{role}={tables.DTYPE_BY_CODE[t.dt].name}")
    return True


def _mp_src_shape(b, plan):
    rng, W = b.rng, b.m.tile_words
    roles = _mm_roles(plan)
    rng.shuffle(roles)
    for role in roles:
        t = plan.tiles[role]
        cands = [(t.vr + dr, t.vc + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))]
        if role == "bias":
            cands.append((2, t.vc))
        cands = [(vr, vc) for vr, vc in cands if vr >= 1 and vc >= 1]
        rng.shuffle(cands)
        for vr, vc in cands:
            size = t.size if t.cube else None
            if t.cube:
                need = _cube_min_size(t.layout, BITS[t.dt], vr, vc) if _cube_fits(
                    t.layout, BITS[t.dt], vr, vc, W) else 99
                size = max(t.size, need)
            n = _mm_tile(rng, role, t.dt, vr, vc, t.layout, W, size=size)
            if n is not None:
                n.pemode, n.pad = t.pemode, t.pad
                plan.tiles[role] = n
                b.notes.append(f"src_shape:{role} {t.vr}x{t.vc}->{vr}x{vc}")
                return True
    return False


def _mp_src_undefined(b, plan):
    plan.undefine_role = _pick(b.rng, _mm_roles(plan))
    return True


def _mp_src_unallocated(b, plan):
    plan.unallocated_role = _pick(b.rng, _mm_roles(plan))
    return True


def _mp_aux_cube(b, plan):
    rng, W = b.rng, b.m.tile_words
    roles = _mm_roles(plan, lambda t: t.role in ("sa", "sb", "bias"))
    if not roles:
        return False
    role = _pick(rng, roles)
    t = plan.tiles[role]
    opts = [lay for lay in ("M16", "M32", "N8") if _cube_fits(lay, BITS[t.dt], t.vr, t.vc, W)]
    if not opts:
        return False
    plan.tiles[role] = _mm_tile(rng, role, t.dt, t.vr, t.vc, _pick(rng, opts), W)
    b.notes.append(f"aux_cube:{role} {plan.tiles[role].layout}")
    return True


def _mp_d_size(b, plan):
    """D's SizeCode one step below its CELLs' bytes, or (sometimes) N so wide that
    D's storage passes tile_words while B, sB and Bias still fit."""
    rng, W = b.rng, b.m.tile_words
    if rng.random() < 0.4:
        n2 = (W // 32) * (2 if plan.a_lay == "M16" else 1) + int(rng.integers(1, 17))
        kb = -(-plan.K // 32)
        new = {"b": _mm_tile(rng, "b", plan.btype, plan.K, n2, "N8", W)}
        if "sb" in plan.tiles:
            new["sb"] = _mm_tile(rng, "sb", E8M0, kb, n2, "RowMajor", W)
        if "bias" in plan.tiles:
            new["bias"] = _mm_tile(rng, "bias", plan.acc, 1, n2, "RowMajor", W)
        need = _cube_min_size(plan.a_lay, 32, plan.M, n2)
        if all(t is not None for t in new.values()) and need <= 10:
            plan.tiles.update(new)
            plan.N, plan.d_size = n2, need
            b.notes.append(f"d_size:N {n2} past tile_words (size {need})")
            return True
    need = _cube_min_size(plan.a_lay, 32, plan.M, plan.N)
    if need < 2:
        return False
    plan.d_size = need - 1
    b.notes.append(f"d_size:{plan.d_size} (needs {need})")
    return True


def _mp_flag(name):
    def apply(b, plan):
        # c_is_d_hand pins a loaded C (mm_acc_chain has none: its C is the first bundle's D)
        if name == "c_is_d_hand" and (b.m.hand_slots < 2 or "c" not in plan.tiles):
            return False
        setattr(plan, name, True)
        return True
    return apply


MM_PLAN_MUTATIONS = {
    "mm_a_layout": _mp_a_layout, "mm_b_layout": _mp_b_layout, "mm_c_layout": _mp_c_layout,
    "mm_c_capacity": _mp_c_capacity, "mm_src_dtype": _mp_src_dtype, "mm_src_shape": _mp_src_shape,
    "mm_src_undefined": _mp_src_undefined, "mm_src_unallocated": _mp_src_unallocated,
    "mm_aux_cube": _mp_aux_cube, "mm_d_size": _mp_d_size,
    "mm_c_is_d_hand": _mp_flag("c_is_d_hand"), "mm_hand_full": _mp_flag("hand_full"),
    "mm_budget": _mp_flag("budget"),
    # satisfied by the type draw
    "mm_type_class": None, "mm_mx_type": None,
}


# ---- the matrix bundle


def _mm_spec(plan: _MmPlan, form: str, srcs: list, d_hand: int) -> dict:
    """What a matrix bundle says; bundle mutations edit it before _mm_items encodes it."""
    return dict(form=form, atype=plan.atype, btype=plan.btype, lb=[plan.M, plan.N, plan.K],
                srcs=list(srcs), extra_srcs=[], d_hand=d_hand, d_size=plan.d_size,
                extra_dsts=[], pemode=plan.pemode, fpatr=FPATR0, datr=None, ior=None, ios=[],
                catr=None, lb_forced=set())


def _iot_word(srcs: list, dst: Optional[tuple], pemode: int, last: int) -> int:
    if len(srcs) == 2:
        w = iot_src2(srcs[0], srcs[1], pemode, last)
        return w | (dst[0] & 3) << 7 | (dst[1] & 0xF) << 15 if dst else w
    if len(srcs) == 1:
        return iot_src_dst(srcs[0], dst[0], dst[1], pemode, last) if dst else iot_src(srcs[0], pemode, last)
    return iot_dst(dst[0], dst[1], pemode, last)


def _mm_items(b: _Builder, spec: dict, minimal: bool = False) -> list:
    """Header items of a matrix bundle: [B.DATR] B.FPATR B.DIMs [B.IOS] [B.IOR] B.IOTs [B.CATR]."""
    rng = b.rng
    items = []
    datr_f = spec["datr"]
    if datr_f is None and spec["btype"] != spec["atype"]:
        datr_f = dict(layout=0, dtype=spec["btype"], pad=0)
    elif datr_f is None and not minimal and rng.random() < 0.2:
        datr_f = dict(layout=0, dtype=_pick(rng, [31, spec["atype"]]), pad=0)
    if datr_f is not None:
        if "rmode" not in datr_f and not minimal and rng.random() < 0.3:
            datr_f = dict(datr_f, rmode=int(rng.integers(0, 8)), sat=int(rng.integers(0, 2)))
        items.append(("datr", datr(**datr_f)))
    if spec["fpatr"] is not None:
        items.append(("fpatr", spec["fpatr"]))
    for n, v in enumerate(spec["lb"]):
        if v is None:
            continue
        if v != 1 or n in spec["lb_forced"] or (not minimal and rng.random() < 0.3):
            use_reg = not minimal and len(b.free_regs) > 8 and rng.random() < 0.25
            items.append((f"dim{n}", b.dim_word(n, v) if use_reg else dim(n, v)))
    for sid in spec["ios"]:
        items.append(("ios", ios(sid, spec["pemode"], 0)))
    if spec["ior"] is not None:
        items.append(("ior", ior(*spec["ior"])))
    elif not minimal and rng.random() < 0.15:
        items.append(("ior", ior()))
    # bindings: sources in stream order, 1 or 2 per B.IOT; the destination on one of
    # them or alone; extra destinations alone
    srcs = spec["srcs"] + spec["extra_srcs"]
    groups, i = [], 0
    while i < len(srcs):
        k = 2 if len(srcs) - i >= 2 and (minimal or rng.random() < 0.7) else 1
        groups.append([srcs[i:i + k], None])
        i += k
    dst = (spec["d_hand"], spec["d_size"])
    u = rng.random()
    if groups and (minimal or u < 0.5):
        groups[0][1] = dst
    elif groups and u < 0.75:
        groups[int(rng.integers(0, len(groups)))][1] = dst
    else:
        groups.insert(int(rng.integers(0, len(groups) + 1)), [[], dst])
    for extra in spec["extra_dsts"]:
        free = [g for g in groups if g[1] is None and g[0]]
        if free and rng.random() < 0.5:
            _pick(rng, free)[1] = extra
        else:
            groups.insert(int(rng.integers(0, len(groups) + 1)), [[], extra])
    for k, (g, d) in enumerate(groups):
        items.append(("iot", _iot_word(g, d, spec["pemode"], int(k == len(groups) - 1))))
    if spec["catr"] is not None:
        items.insert(int(rng.integers(0, len(items) + 1)), ("catr", spec["catr"]))
    elif not minimal and rng.random() < 0.05:
        w = catr(atom=int(rng.integers(0, 2)), aq=int(rng.integers(0, 2)),
                 rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
        items.insert(int(rng.integers(0, len(items) + 1)), ("catr", w))
    return items


def _mm_bundle(b: _Builder, spec: dict, minimal: bool = False) -> Bundle:
    return Bundle(bstart(spec["form"], spec["atype"]), _mm_items(b, spec, minimal), True,
                  dict(op=spec["form"], spec=spec))


# spec mutations (before encoding)


def _ms_no_fpatr(b, spec, plan):
    spec["fpatr"] = None
    return True


def _ms_src_count(b, spec, plan):
    rng = b.rng
    if len(spec["srcs"]) > 1 and rng.random() < 0.5:
        k = int(rng.integers(0, len(spec["srcs"])))
        b.notes.append(f"src_count:-1 (dropped #{k})")
        del spec["srcs"][k]
    else:
        k = int(rng.integers(0, len(spec["srcs"]) + 1))
        extra = _pick(rng, spec["srcs"]) if rng.random() < 0.5 else int(rng.integers(0, 64))
        spec["srcs"].insert(k, extra)
        b.notes.append(f"src_count:+1 (T{extra} at #{k})")
    return True


def _ms_extra_dst(b, spec, plan):
    spec["extra_dsts"].append((int(b.rng.integers(0, 4)), int(b.rng.integers(1, 11))))
    return True


def _ms_ior(b, spec, plan):
    rng = b.rng
    while True:
        f = [int(rng.integers(0, 24)) if rng.random() < 0.5 else 0 for _ in range(4)]
        if any(f):
            break
    spec["ior"] = tuple(f)                    # (src0, src1, src2, dst)
    return True


def _ms_datr_attr(b, spec, plan):
    rng = b.rng
    dt = spec["btype"] if spec["btype"] != spec["atype"] else _pick(rng, [31, spec["atype"]])
    d = dict(layout=0, dtype=dt, pad=0, cmode=0, canon=0)
    what = _pick(rng, ["layout", "pad", "cmode", "canon"])
    if what == "layout":
        d["layout"] = _pick(rng, MM_OTHER_LAYOUTS)
    elif what == "pad":
        d["pad"] = int(rng.integers(1, 4))
    elif what == "cmode":
        d["cmode"] = int(rng.integers(1, 6))
    else:
        d["canon"] = 1
    spec["datr"] = d
    b.notes.append(f"datr_attr:{what}")
    return True


def _ms_cube_layout(b, spec, plan):
    rng = b.rng
    spec["datr"] = dict(layout=_pick(rng, LOAD_CODES + STORE_CODES),
                        dtype=_pick(rng, [31, 31, spec["btype"]]), pad=int(rng.integers(0, 4)))
    return True


def _ms_lb_zero(b, spec, plan):
    n = int(b.rng.integers(0, 3))
    spec["lb"][n] = 0
    spec["lb_forced"].add(n)
    b.notes.append(f"lb_zero:LB{n}")
    return True


def _ms_gemv_m(b, spec, plan):
    spec["lb"][0] = _pick(b.rng, [2, 2, int(b.rng.integers(3, 33)), int(b.rng.integers(33, 65536))])
    return True


def _ms_ios(b, spec, plan):
    rng = b.rng
    sids = [int(s) for s in rng.choice(256, size=int(rng.integers(1, 3)), replace=False)]
    spec["ios"] = sids
    return True


def _ms_trans(b, spec, plan):
    if spec["fpatr"] is None:           # forced after mm_no_fpatr: no B.FPATR to edit
        return False
    which = _pick(b.rng, [1, 2, 3])
    spec["fpatr"] |= (which & 1) << 7 | (which >> 1) << 8
    return True


def _fpatr_word(pre=0, relu=0, group_n=0, row_max=0, group_max=0, row_max_init=0, max_abs=0,
                trans_a=0, trans_b=0) -> int:
    return (FPATR0 | trans_a << 7 | trans_b << 8 | max_abs << 15 | row_max_init << 16
            | group_max << 17 | row_max << 18 | group_n << 19 | relu << 23 | pre << 26)


def _ms_quant_class(b, spec, plan):
    if spec["fpatr"] is None:           # forced after mm_no_fpatr: no B.FPATR to edit
        return False
    rng = b.rng
    if plan.acc == FP32:
        mode = _pick(rng, [m for m in MM_S32_MODES if m in MM_SCALAR_MODES])
    elif plan.acc == S32:
        mode = _pick(rng, [1, 16] + [m for m in MM_FP32_MODES if m in MM_SCALAR_MODES])
    else:
        mode = _pick(rng, [1, 16, 3, 5, 13, 24, 25])       # U32: no mode matches
    spec["fpatr"] = (spec["fpatr"] & ~(63 << 26)) | mode << 26
    if mode in MM_SCALAR_MODES and rng.random() < 0.4:
        spec["ior"] = (int(rng.integers(1, 24)), 0, 0, 0)  # its scalar parameter
    b.notes.append(f"quant_class:mode {mode}")
    return True


def _ms_post(b, spec, plan):
    """A consistent post-processing request the gate accepts."""
    rng = b.rng
    opts = ["relu1", "relu2", "relu3", "rowmax", "groupmax"]
    if plan.acc in (FP32, S32):
        opts += ["quant_scalar", "quant_vector", "quant_none"] if plan.acc == FP32 else \
            ["quant_scalar", "quant_vector"]
    what = _pick(rng, opts)
    kw = {}
    extra_src = lambda: spec["extra_srcs"].append(int(rng.integers(0, 64)))
    extra_dst = lambda: spec["extra_dsts"].append((int(rng.integers(0, 4)), int(rng.integers(1, 11))))
    if what.startswith("relu"):
        kw["relu"] = int(what[-1])
        if kw["relu"] == 3:
            extra_src()
        elif kw["relu"] == 2 and rng.random() < 0.5:
            spec["ior"] = (int(rng.integers(1, 24)), 0, 0, 0)
    elif what == "rowmax":
        kw["row_max"] = 1
        extra_dst()
        if rng.random() < 0.5:
            kw["row_max_init"] = 1
            extra_src()
        kw["max_abs"] = int(rng.integers(0, 2))
    elif what == "groupmax":
        kw.update(group_max=1, group_n=int(rng.integers(1, 10)), max_abs=int(rng.integers(0, 2)))
        extra_dst()
    else:
        modes = MM_FP32_MODES if plan.acc == FP32 else MM_S32_MODES
        if what == "quant_scalar":
            kw["pre"] = _pick(rng, [m for m in modes if m in MM_SCALAR_MODES])
            if rng.random() < 0.5:
                spec["ior"] = (int(rng.integers(1, 24)), 0, 0, 0)
        elif what == "quant_vector":
            kw["pre"] = _pick(rng, [m for m in modes if m in MM_VECTOR_MODES])
            extra_src()
        else:
            kw["pre"] = _pick(rng, [1, 16])
    spec["fpatr"] = _fpatr_word(**kw)
    b.notes.append(f"post:{what}")
    return True


def _ms_catr(trap, dr):
    def apply(b, spec, plan):
        rng = b.rng
        spec["catr"] = catr(trap=trap, dr=dr, atom=int(rng.integers(0, 2)), aq=int(rng.integers(0, 2)),
                            rl=int(rng.integers(0, 2)), far=int(rng.integers(0, 2)))
        return True
    return apply


MM_SPEC_MUTATIONS = {
    "mm_no_fpatr": _ms_no_fpatr, "mm_src_count": _ms_src_count, "mm_extra_dst": _ms_extra_dst,
    "mm_ior": _ms_ior, "mm_datr_attr": _ms_datr_attr, "mm_cube_layout": _ms_cube_layout,
    "mm_gemv_cube_layout": _ms_cube_layout, "mm_lb_zero": _ms_lb_zero, "mm_gemv_m": _ms_gemv_m,
    "mm_ios_tmatmul": _ms_ios, "mm_ios_gemv": _ms_ios, "mm_trans": _ms_trans,
    "mm_quant_class": _ms_quant_class, "mm_post": _ms_post,
    "mm_catr_dr": _ms_catr(0, 1), "mm_catr_trap": _ms_catr(1, 0),
}


def _mi_zero_mask_block(b, bd):
    bd.items = [(t, w & ~(7 << 9)) if t in ("iot", "ios") else (t, w) for t, w in bd.items]
    return True


def _mi_zero_iot(b, bd):
    rng = b.rng
    x, y = int(rng.integers(0, 64)), int(rng.integers(0, 64))
    w = _pick(rng, [iot_src2(x, y, 0, int(rng.integers(0, 2))), iot_src(x, 0, int(rng.integers(0, 2))),
                    iot_dst(int(rng.integers(0, 4)), int(rng.integers(1, 11)), 0, int(rng.integers(0, 2)))])
    first = next((k for k, (t, _) in enumerate(bd.items) if t == "fpatr"), -1)
    bd.items.insert(int(rng.integers(first + 1, len(bd.items) + 1)), ("iot", w))
    return True


def _mi_shuffle(b, bd):
    """Header order: B.DATR/B.DIM/B.CATR anywhere, B.FPATR before every B.IOR/B.IOS/B.IOT,
    the bindings in their order."""
    rng = b.rng
    binds = [it for it in bd.items if it[0] in ("iot", "ios")]
    rest = [it for it in bd.items if it[0] not in ("iot", "ios")]
    if len(rest) < 2:
        return False
    rng.shuffle(rest)
    out = list(rest)
    last = -1
    for it in binds:
        pos = max(int(rng.integers(0, len(out) + 1)), last + 1)
        out.insert(pos, it)
        last = pos
    # B.FPATR before the first B.IOR / B.IOS / B.IOT
    fp = next((it for it in out if it[0] == "fpatr"), None)
    if fp is not None:
        out.remove(fp)
        first = next((k for k, it in enumerate(out) if it[0] in ("ior", "ios", "iot")), len(out))
        out.insert(int(rng.integers(0, first + 1)), fp)
    bd.items = out
    return True


MM_ITEM_MUTATIONS = {"mm_zero_mask_block": _mi_zero_mask_block, "mm_zero_iot": _mi_zero_iot,
                     "mm_shuffle": _mi_shuffle}
assert set(MM_PLAN_MUTATIONS) | set(MM_SPEC_MUTATIONS) | set(MM_ITEM_MUTATIONS) == set(MATMUL_MUTATIONS)


# ---- placement, GM, loads


def _mm_place(b: _Builder, plan: _MmPlan, loads: list):
    """Hands (and so TileIndices) of the loads in load order, the destination
    hand(s): (order, d_hand, d_index, d1_hand, d1_index) or None.

    Every hand holds at most hand_slots tiles; the destination hands keep a
    free slot (mm_hand_full: D's hand is full); a loaded C never sits at the
    TileIndex equal to D's hand unless mm_c_is_d_hand asks for exactly that.
    """
    rng, HS = b.rng, b.m.hand_slots
    for _ in range(64):
        counts = [0] * 4
        order = []
        reserve = [0] * 4
        pinned = []
        for t in loads:
            t.index = -1
        fills = [t for t in loads if t.role == "fill"]
        rest = [t for t in loads if t.role != "fill"]
        rng.shuffle(rest)
        d_hand = int(rng.integers(0, 4))
        d1_hand = int(rng.integers(0, 4)) if plan.chain else None
        closed = set()
        if plan.c_is_d_hand:
            c = plan.tiles["c"]
            slot = int(rng.integers(0, 2))
            d_hand = slot
            rest.remove(c)
            if slot == 1:
                x = rest.pop(0) if rest else None
                if x is None:
                    continue
                pinned.append((x, 0))
            pinned.append((c, 0))
        if plan.hand_full:
            srcs = list(rest)
            k = int(rng.integers(0, min(HS, len(srcs)) + 1))
            into = srcs[:k] + fills[: HS - k]
            if len(into) != HS:
                continue
            for t in into:
                if t in rest:
                    rest.remove(t)
                pinned.append((t, d_hand))
            closed.add(d_hand)
        else:
            reserve[d_hand] += 1
        if d1_hand is not None:
            reserve[d1_hand] += 1
        for t, h in pinned:
            t.hand = h
            counts[h] += 1
            order.append(t)
        ok = True
        for t in rest:
            opts = [h for h in range(4) if h not in closed and counts[h] + reserve[h] < HS
                    and not (t.role == "c" and h == 0 and counts[0] == d_hand)]
            if not opts:
                ok = False
                break
            t.hand = _pick(rng, opts)
            counts[t.hand] += 1
            order.append(t)
        if not ok or any(counts[h] + reserve[h] > HS for h in range(4)):
            continue
        seen = [0] * 4
        for t in order:
            t.index = t.hand * tables.HAND_SLOTS + seen[t.hand]
            seen[t.hand] += 1
        d1_index = None
        if d1_hand is not None:
            d1_index = d1_hand * tables.HAND_SLOTS + seen[d1_hand]
            seen[d1_hand] += 1
            if d1_index == d_hand:                       # C (= D1) would be D's hand value
                continue
        if plan.hand_full:
            if seen[d_hand] != HS:
                continue
        elif seen[d_hand] >= HS:
            continue
        d_index = d_hand * tables.HAND_SLOTS + seen[d_hand]
        if "c" in plan.tiles and plan.tiles["c"].index >= 0:
            if (plan.tiles["c"].index == d_hand) != plan.c_is_d_hand:
                continue
        return order, d_hand, d_index, d1_hand, d1_index
    return None


class _MmGM:
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
            raw = _encode_elements(dt, row)
            at = base + r * stride
            self.gm[at: at + len(raw)] = raw[: max(0, self.n - at)]


def _mm_load(b: _Builder, gm: _MmGM, t: _MmTile, style: dict) -> Bundle:
    """The TLOAD bundle that makes tile t (its data written to GM)."""
    rng = b.rng
    if t.role == "fill":                      # 1 x 1 from GM address 0, no B.IOR
        return Bundle(bstart("TLOAD", t.dt), [("iot", iot_dst(t.hand, t.size, t.pemode, 1))], True,
                      dict(op="TLOAD", role=t.role, index=t.index, cube=False))
    bits = BITS[t.dt]
    eb = _ebytes(bits)
    dense = _rowbytes(t.vc, bits)
    base, stride = gm.region(t.vr, dense, eb)
    values = [_mm_codes(rng, t.dt, t.vc, style) for _ in range(t.vr)]
    gm.write(base, stride, t.dt, values)

    cube_datr = datr(MM_LOAD_CODE[t.layout], 31, t.pad) if t.cube else None
    items = _tload_items(b, cube_datr, t.vr, t.vc, t.col, iot_dst(t.hand, t.size, t.pemode, 1),
                         base, stride, reg_room=12, reg_p=0.2, zero_base_p=0.7)
    if rng.random() < 0.3:
        rng.shuffle(items)
    return Bundle(bstart("TLOAD", t.dt), items, True,
                  dict(op="TLOAD", role=t.role, index=t.index, cube=t.cube))


def _mm_undefine(rng, t: _MmTile) -> tuple:
    """(TileIndex, payload Word) of one valid element of t."""
    from ..reference import layouts as ref_layouts
    r, c = int(rng.integers(0, t.vr)), int(rng.integers(0, t.vc))
    if t.cube:
        name = "CUBE_" + t.layout
        word = ref_layouts.payload_index(name, tables.DTYPE_BY_CODE[t.dt], t.vr, t.vc, r, c)
    else:
        word = r * t.col + c
    return (t.index, word), (r, c)


def _mm_program(b: _Builder, plan: _MmPlan, spec_muts: list, item_muts: list):
    """(setup words, stream words, GM, tile_capacity, undefine, applied bundle mutations)."""
    rng, HS, g = b.rng, b.m.hand_slots, b.g
    loads = list(plan.tiles.values())
    if plan.first_bias is not None:
        loads.append(plan.first_bias)
    if plan.hand_full:
        loads += [_MmTile("fill", DT_CODE["U8"], 1, 1, "RowMajor", size=1, col=1,
                          pemode=int(rng.integers(1, 8))) for _ in range(HS)]
    placed = _mm_place(b, plan, loads)
    if placed is None:
        return None
    order, d_hand, d_index, d1_hand, d1_index = placed
    loads = order                                   # fills not needed are dropped
    loads = [t for t in loads if t.index >= 0]
    # undefine pokes a tile the setup made; in_stream moves the last load into the stream
    undefine = ()
    if plan.kind == "mm_in_stream" and loads[-1].role not in (plan.undefine_role, "fill"):
        loads[-1].in_stream = True
    gm = _MmGM(rng, b.gm_bytes)
    bundles = [_mm_load(b, gm, t, plan.style) for t in loads]
    index = {r: t.index for r, t in plan.tiles.items()}
    if plan.chain:
        index["c"] = d1_index
    allocated = {t.index for t in loads} | {d_index} | ({d1_index} if d1_index is not None else set())
    if plan.unallocated_role is not None:
        free = [x for x in range(64) if x not in allocated]
        index[plan.unallocated_role] = _pick(rng, free)
        b.notes.append(f"unallocated:{plan.unallocated_role}=T{index[plan.unallocated_role]}")
    if plan.undefine_role is not None:
        u, (r, c) = _mm_undefine(rng, plan.tiles[plan.undefine_role])
        undefine = (u,)
        b.notes.append(f"undefined:{plan.undefine_role} ({r},{c})")
    srcs = [index[r] for r in ("c", "a", "sa", "b", "sb", "bias")
            if r in index and (r != "c" or plan.f["acc"])]
    first = None
    if plan.chain:
        fsrcs = [index[r] for r in ("a", "sa", "b", "sb") if r in index]
        if plan.first_bias is not None:
            fsrcs.append(plan.first_bias.index)
        first = _mm_bundle(b, _mm_spec(plan, plan.first_form, fsrcs, d1_hand), minimal=True)
        b.notes.append(f"chain:{plan.first_form} -> T{d1_index}")
    spec = _mm_spec(plan, plan.form, srcs, d_hand)
    applied = [m for m in spec_muts if MM_SPEC_MUTATIONS[m](b, spec, plan)]
    tail = []
    if plan.kind == "mm_roundtrip":
        base, stride = gm.region(plan.M, plan.N * 4, 4)
        pm2 = plan.pemode
        subs = [p for p in range(1, 8) if PEMODE_MASK[p] & PEMODE_MASK[plan.pemode] == PEMODE_MASK[p]]
        if rng.random() < 0.3:
            pm2 = _pick(rng, subs)
        items = [("datr", datr(MM_STORE_CODE[plan.a_lay], 31, int(rng.integers(0, 4)))),
                 ("dim0", dim(0, plan.N)), ("dim1", dim(1, plan.M)), ("iot", iot_src(d_index, pm2, 1)),
                 ("ior", ior(b.reg(base) if base else 0, b.reg(stride)))]
        tail.append(Bundle(bstart("TSTORE", plan.acc), items, True, dict(op="TSTORE")))
        b.notes.append(f"roundtrip:TSTORE T{d_index} -> {base:#x}/{stride}")
    in_stream = [bd for t, bd in zip(loads, bundles) if t.in_stream]

    def stream(main):
        return _flatten(in_stream + ([first] if plan.chain == "stream" else []) + [main] + tail)

    main = _mm_bundle(b, spec)
    if len(stream(main)) > g.max_words:
        main = _mm_bundle(b, spec, minimal=True)
    applied += [m for m in item_muts if MM_ITEM_MUTATIONS[m](b, main)]
    if len(stream(main)) > g.max_words and plan.chain == "stream" and not plan.first_faults:
        plan.chain = "setup"            # (a first bundle that faults stays: the cut drops main's tail)
    if len(stream(main)) > g.max_words and in_stream:
        in_stream = []
        for t in loads:
            t.in_stream = False
    words = stream(main)
    if len(words) > g.max_words:
        b.notes.append(f"cut:{len(words)}->{g.max_words}")
        words = words[: g.max_words]
    setup = _flatten([bd for t, bd in zip(loads, bundles) if not t.in_stream]
                     + ([first] if plan.chain == "setup" else []))
    if in_stream:
        b.notes.append("in_stream:" + ",".join(bd.info["role"] for bd in in_stream))
    if plan.chain:
        b.notes.append(f"chain_in:{plan.chain}")
    cap = None
    if plan.budget:
        charge = sum(4 * (128 << (t.size - 1)) if g.core else t.charge for t in loads) \
            + (plan.d_charge if plan.chain else 0)          # core: mask 1111 (_core_setup)
        cap = charge + plan.d_charge - int(rng.integers(1, plan.d_charge + 1))
        b.notes.append(f"tile_capacity:{cap} (in use {charge}, D {plan.d_charge})")
    return setup, words, bytes(gm.gm), cap, undefine, applied


def _mm_zero_mask_junk(b: _Builder, spec: dict):
    """mm_zero_mask: on top of the zero-mask bindings, an otherwise illegal header."""
    rng = b.rng
    if rng.random() < 0.4:
        spec["fpatr"] = None
    if rng.random() < 0.3:
        spec["datr"] = dict(layout=_pick(rng, (0,) + MM_OTHER_LAYOUTS), dtype=_pick(rng, [31, 0, 27]),
                            pad=int(rng.integers(0, 4)), cmode=int(rng.integers(0, 6)))
    if rng.random() < 0.3:
        spec["lb"][int(rng.integers(0, 3))] = 0
    if rng.random() < 0.3:
        spec["ios"] = [int(rng.integers(0, 256))]
    if rng.random() < 0.3:
        spec["ior"] = (int(rng.integers(0, 24)), int(rng.integers(0, 2)), int(rng.integers(0, 2)),
                       int(rng.integers(0, 2)))
    if rng.random() < 0.4:
        spec["srcs"] = [int(rng.integers(0, 64)) for _ in range(int(rng.integers(0, 5)))]
    return True


def random_matmul_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                       mutations: Optional[list] = None) -> Case:
    """One random TMATMUL*/TGEMV* Case (kinds MATMUL_KINDS, mutations MATMUL_MUTATIONS).

    `kind` and `mutations` force the draw (labels that could not be applied
    are left out of Case.mutations; a forced combination no allowed form
    takes raises MatmulImpossible, a ValueError: matmul_possible tells which).
    The forms drawn are GenConfig.matmul_forms (all 12 when empty). The
    operand tiles are made by TLOADs in Case.setup (one in the stream for
    mm_in_stream; an mm_acc_chain first bundle in the stream when it fits,
    else in the setup, unless a forced mutation makes it fault); build_state
    prepares them.
    """
    g = _gen_config(cfg)
    forms = tuple(g.matmul_forms) or MATMUL_FORMS
    unknown_forms = set(forms) - set(MATMUL_FORMS)
    if unknown_forms:
        raise ValueError(f"unknown matrix forms {sorted(unknown_forms)}")
    b = _Builder(rng, g)
    kinds = {k: w for k, w in MATMUL_KINDS.items() if any(_mm_form_ok(f, k, ()) for f in forms)}
    if kind is None:
        kind = _weighted(rng, kinds)
    elif kind not in MATMUL_KINDS:
        raise ValueError(f"unknown matrix kind {kind!r}")
    elif kind not in kinds:
        raise MatmulImpossible(f"matrix kind {kind!r} needs a form outside {forms}")
    if mutations is None:
        mutations = []
        if kind != "mm_zero_mask" and rng.random() < g.p_mutate:
            k = 1 if rng.random() < 0.7 else int(rng.integers(2, g.max_mutations + 1))
            for _ in range(8 * k):
                if len(mutations) >= k:
                    break
                m = _weighted(rng, MATMUL_MUTATIONS)
                if _mm_mutation_ok(m, kind, mutations) and \
                        any(_mm_form_ok(f, kind, mutations + [m]) for f in forms):
                    mutations.append(m)
    else:
        mutations = list(mutations)
        unknown = set(mutations) - set(MATMUL_MUTATIONS)
        if unknown:
            raise ValueError(f"unknown matrix mutations {sorted(unknown)}")
        if not any(_mm_form_ok(f, kind, mutations) for f in forms):
            raise MatmulImpossible(f"no form in {forms} takes kind {kind} with {mutations}")
    cands = [f for f in forms if _mm_form_ok(f, kind, mutations)]
    for attempt in range(16):
        form = _pick(rng, cands)
        plan = _mm_draw(b, kind, form, mutations)
        if plan is None:
            continue
        applied = []
        for m in mutations:
            fn = MM_PLAN_MUTATIONS.get(m, False)
            if fn is None:
                applied.append(m)                   # satisfied by the type draw
            elif fn and fn(b, plan):
                applied.append(m)
        plan.first_faults = kind == "mm_acc_chain" and any(m in _MM_FIRST_FAULTS for m in applied)
        spec_muts = [m for m in mutations if m in MM_SPEC_MUTATIONS]
        item_muts = [m for m in mutations if m in MM_ITEM_MUTATIONS]
        if kind == "mm_zero_mask":
            item_muts = ["mm_zero_mask_block"]
            spec_muts = []
        out = _mm_program(b, plan, spec_muts, item_muts) if kind != "mm_zero_mask" else \
            _mm_zero_mask_program(b, plan)
        if out is not None:
            break
        b = _Builder(rng, g)                        # a placement failed: draw again
    else:
        raise RuntimeError(f"no matrix case for kind {kind} mutations {mutations} on {g.machine}")
    setup, words, gm, cap, undefine, bundle_applied = out
    applied = [m for m in mutations if m in applied or m in bundle_applied]
    f = plan.f
    b.notes.insert(0, f"mm:{plan.form} {tables.DTYPE_BY_CODE[plan.atype].name}x"
                      f"{tables.DTYPE_BY_CODE[plan.btype].name}->{tables.DTYPE_BY_CODE[plan.acc].name} "
                      f"M{plan.M} N{plan.N} K{plan.K} A:{plan.a_lay} D:size{plan.d_size}"
                      + (" mx" if f["mx"] else ""))
    pc = 4 * int(rng.integers(0, 1 << 28)) if rng.random() < 0.2 else 0
    b.noise_regs()
    return Case(words=[int(w) & 0xFFFFFFFF for w in words], gm=gm,
                gprs={pe: dict(r) for pe, r in b.gprs.items()}, kind=kind,
                mutations=tuple(applied), pc=pc, tile_capacity=cap, pe=g.pe, core=g.core,
                notes=tuple(b.notes),
                setup=_core_setup(setup, g.core), undefine=tuple(undefine))


def _mm_zero_mask_program(b: _Builder, plan: _MmPlan):
    """mm_zero_mask: the sources loaded in the setup, then a matrix block whose every
    binding is PEMode 000 on an otherwise illegal header."""
    plan.kind = "mm_float"                          # no in-stream load, no tail
    out = _mm_program(b, plan, [], [])
    if out is None:
        return None
    setup, _, gm, cap, undefine, _ = out
    rng = b.rng
    spec = _mm_spec(plan, plan.form, [int(rng.integers(0, 64)) for _ in range(2)],
                    int(rng.integers(0, 4)))
    _mm_zero_mask_junk(b, spec)
    bd = _mm_bundle(b, spec, minimal=rng.random() < 0.5)
    _mi_zero_mask_block(b, bd)
    plan.kind = "mm_zero_mask"
    return setup, bd.words()[: b.g.max_words], gm, None, (), []


def random_matmul_cases(seed: int, n: int, cfg=None) -> list:
    """n matrix Cases from one seed (case i is random_matmul_case(case_rng(seed, i), cfg))."""
    g = _gen_config(cfg)
    ss = np.random.SeedSequence(seed)
    return [random_matmul_case(np.random.default_rng(s), g) for s in ss.spawn(n)]


# ----------------------------------------------------------------- cooperative TMATMUL and Shared TLSU (issue 5)
#
# docs/shared-decisions.md. Every cooperative Case has core=True: it runs with
# pj.run_core / pj.batch.run(core=True), and its setup with
# pj.reference.run_core. Shared operands come from Shared TLOADs (a B.IOS
# destination, mask 1111, the same base/stride in every PE's GPRs); each
# active PE's Local A / sA / C / Bias from a TLOAD whose bindings select only
# that PE (PEMode i+1), so under run_core only PE i loads it, through its own
# GPRs (one register pair per role, a different value in each PE's file), at
# the same TileIndex on every active PE. The default machine is
# pj.preset("small") (COOP_MACHINE); shapes keep within its tile_words and
# shared_words. sh_* kinds exercise Shared TLOAD / TSTORE / TSTORE.SPART on
# their own (partial masks, per-PE bases, uninitialized quarters).

COOP_FORMS = ("TMATMUL", "TMATMUL.ACC", "TMATMUL.BIAS", "TMATMULMX", "TMATMULMX.ACC", "TMATMULMX.BIAS")
COOP_MACHINE = PRESETS["small"]          # tile_words 1024, hand_slots 4, shared 8 x 1024 Words
COOP_GROUP_M = (1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 97, 98, 99, 100, 127, 128)
COOP_BUDGET = 8192                  # group_M * N * K: keeps the oracle's loops short

COOP_KINDS = {
    # kind: weight
    "coop_right": 10,      # Local A[, sA] per active PE, Shared B[, sB] (right-only)
    "coop_both": 10,       # Shared A[, sA], B[, sB]
    "coop_trans": 4,       # both Shared, TransA / TransB with the operands stored transposed
    "coop_in_stream": 3,   # the last Shared operand TLOAD in the stream before the matrix block
    "coop_zero_mask": 2,   # every binding PEMode 000 on an otherwise illegal block: strict no-op
    "sh_load": 5,          # Shared TLOAD in the stream (partial masks, per-PE bases, reloads)
    "sh_store": 5,         # Shared TSTORE / TSTORE.SPART of a setup record (uninitialized quarters)
}
COOP_MATRIX_KINDS = ("coop_right", "coop_both", "coop_trans", "coop_in_stream", "coop_zero_mask")

# mutation label -> weight; COOP_AIMS[label] is the fault each aims at
COOP_MUTATIONS = {
    # shared-decisions.md 5 (cooperative TMATMUL)
    "coop_no_fpatr": 1,         # 1 B.FPATR missing
    "coop_sparse_mask": 4,      # 3 every binding PEMode 1..6 (a sparse nonzero mask)
    "coop_zero_mask_block": 2,  # 0 every binding PEMode 000: no-op
    "coop_group_m_zero": 2,     # 3 LB0 = group_M = 0 (B.DIM)
    "coop_group_m_big": 2,      # 3 group_M 129..
    "coop_n_not_pow2": 2,       # 3 N not a power of two
    "coop_k_not_pow2": 2,       # 3 K not a power of two
    "coop_ios_size": 2,         # 3 a B.IOS with SizeCode != 0
    "coop_shared_count": 2,     # 3 one B.IOS too many or too few
    "coop_gemv": 1,             # 3 a TGEMV* with B.IOS operands
    "coop_trans_a_local": 2,    # 5 TransA with a Local A
    "coop_trans_flip": 2,       # 7s a Trans bit that does not match the stored shape
    "coop_not_ready": 3,        # 7s a Shared source loaded with a partial mask (and reloaded)
    "coop_shared_dtype": 2,     # 7s a Shared source of another dtype
    "coop_shared_cols": 2,      # 7s a Shared source with other stored columns
    "coop_shared_rows": 2,      # 7s a Shared source with too few valid rows / columns
    "coop_unallocated_sid": 2,  # 7s a B.IOS naming a SharedTileID without a record
    "coop_local_a_rows": 2,     # 7 an active PE's Local A with valid rows != valid_M[i]
    "coop_idle_garbage": 3,     # idle PEs' Local files hold other tiles at the block's indices (legal)
    "coop_c_capacity": 2,       # 7 C capacity != D TSize on one active PE
    "coop_c_is_d_hand": 1,      # 8 C's TileIndex == D's hand value
    "coop_d_size": 2,           # 10 D SizeCode below an active PE's fragment
    "coop_hand_full": 2,        # 10 no free slot in D's hand on one active PE
    "coop_pool": 2,             # 10 one active PE's Local pool cannot take D
    # shared-decisions.md 3-4 (Shared TLOAD / TSTORE / TSTORE.SPART)
    "sh_ios_count": 1,          # 1 two B.IOS bindings
    "sh_ior_surplus": 1,        # 2 B.IOR RegDst / RegSrc2 nonzero
    "sh_cube_code": 1,          # pre: a B.DATR CUBE code with a B.IOS
    "sh_ios_dir": 2,            # 4 TLOAD with a source B.IOS / TSTORE with a destination one
    "sh_iot": 1,                # 4 a B.IOT next to the B.IOS
    "sh_store_mask": 2,         # 4 TSTORE (function 1) with a mask != 1111
    "sh_lb_missing": 1,         # 4 a TLOAD without LB0 / LB1 / LB2
    "sh_cols_not_pow2": 1,      # 5 TLOAD columns not a power of two (no derived rows)
    "sh_update_mismatch": 2,    # 6 a reload with another descriptor or a mask outside the allocation
    "sh_too_big": 1,            # 7 rows * columns > shared_words
    "sh_records_full": 1,       # 7 a new SharedTileID with every record taken
    "sh_mem_page": 2,           # 8 one quarter's PE base past the end of GM
    "sh_mem_align": 2,          # 8 one quarter's PE base misaligned
}
COOP_AIMS = {m: _TL for m in COOP_MUTATIONS}
COOP_AIMS.update({
    "coop_no_fpatr": "Fault_BundleControl", "coop_zero_mask_block": "Fault_None",
    "coop_idle_garbage": "Fault_None", "coop_d_size": _TA, "coop_hand_full": _TA, "coop_pool": _TA,
    "sh_ior_surplus": "Fault_BundleControl", "sh_too_big": _TA, "sh_records_full": _TA,
    "sh_mem_page": "Fault_DataPage", "sh_mem_align": "Fault_DataAlignment",
})
assert set(COOP_AIMS) == set(COOP_MUTATIONS)
_SH_MUTATIONS = tuple(m for m in COOP_MUTATIONS if m.startswith("sh_"))
_COOP_CONFLICTS = {frozenset(p) for p in (
    ("coop_sparse_mask", "coop_zero_mask_block"), ("coop_group_m_zero", "coop_group_m_big"),
    ("coop_hand_full", "coop_pool"), ("coop_hand_full", "coop_d_size"), ("coop_pool", "coop_d_size"),
    ("coop_c_is_d_hand", "coop_hand_full"), ("coop_c_is_d_hand", "coop_pool"),
    ("coop_no_fpatr", "coop_trans_a_local"), ("coop_no_fpatr", "coop_trans_flip"),
    ("coop_trans_a_local", "coop_trans_flip"), ("coop_not_ready", "coop_unallocated_sid"),
    ("sh_mem_page", "sh_mem_align"), ("sh_ios_dir", "sh_store_mask"))}


def _pow2(v: int) -> bool:
    return v > 0 and not v & (v - 1)


def _sh_fit(bits: int, vr: int, vc: int, cols: int, Wsh: int, size: int = 0):
    """Smallest B.IOS SizeCode (>= size) whose Shared descriptor holds vr x vc of
    `cols` columns within shared_words (section 3 steps 5 and 7), or None."""
    if not _pow2(cols) or vc > cols:
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


@dataclass
class _ShTile:
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


def _coop_reg(b: _Builder, values: dict) -> int:
    """A fresh GPR holding values[pe] in PE pe's file (junk in the others)."""
    r = b.free_regs.pop()
    for pe in range(tables.NUM_PES):
        b.gprs[pe][r] = (values[pe] if pe in values else
                         int(b.rng.integers(0, 1 << 63)) * 2 + 1) & MASK64
    return r


def _coop_ior(b: _Builder, addr: dict) -> tuple:
    """("ior", word) reading base/stride {pe: (base, stride)} from PE pe's GPRs."""
    rng = b.rng
    bases = {pe: v[0] for pe, v in addr.items()}
    strides = {pe: v[1] for pe, v in addr.items()}
    rb = 0 if all(v == 0 for v in bases.values()) and rng.random() < 0.6 else _coop_reg(b, bases)
    rs = 0 if all(v == 0 for v in strides.values()) and rng.random() < 0.6 else _coop_reg(b, strides)
    return ("ior", ior(rb, rs))


def _sh_load_bundle(b: _Builder, t: _ShTile, addr: dict, pemode: int, *, vr=None) -> Bundle:
    """A Shared TLOAD: LB0 valid columns, LB1 valid rows, LB2 columns, B.IOS, B.IOR."""
    items = [("dim0", dim(0, t.vc)), ("dim1", dim(1, t.vr if vr is None else vr)),
             ("dim2", dim(2, t.cols)), ("ios", ios(t.sid, pemode, t.size)), _coop_ior(b, addr)]
    if b.rng.random() < 0.3:
        b.rng.shuffle(items)
    return Bundle(bstart("TLOAD", t.dt), items, True, dict(op="TLOAD", role=t.role, sid=t.sid))


def _coop_codes(rng, dt: int, n: int, style: dict) -> list:
    """_mm_codes, raw bits for the dtypes it has no value classes for."""
    if tables.DTYPE_BY_CODE[dt].name in ("FP64", "HiF4X2"):
        style = dict(raw=1.0, special=0.0)
    return _mm_codes(rng, dt, n, style)


def _sh_write(b: _Builder, gm: "_MmGM", t: _ShTile, style: dict, rows=None):
    """GM data for t (one region every PE's GPRs name); the {pe: (base, stride)}."""
    bits = BITS[t.dt]
    rows = t.vr if rows is None else rows
    base, stride = gm.region(rows, _rowbytes(t.vc, bits), _ebytes(bits))
    gm.write(base, stride, t.dt, [_coop_codes(b.rng, t.dt, t.vc, style) for _ in range(rows)])
    return {pe: (base, stride) for pe in range(tables.NUM_PES)}


def _sh_setup_loads(b: _Builder, gm: "_MmGM", t: _ShTile, style: dict) -> list:
    bundles = [_sh_load_bundle(b, t, _sh_write(b, gm, t, style), t.pemode)]
    if t.reload is not None:
        bundles.append(_sh_load_bundle(b, t, _sh_write(b, gm, t, style), t.reload))
    return bundles


def _local_load(b: _Builder, t: _MmTile, pe: int, base: int, stride: int, regs: tuple) -> Bundle:
    """A TLOAD of tile t whose bindings select PE pe only (its GPRs `regs` hold
    base/stride there)."""
    if t.cube:
        items = [("datr", datr(MM_LOAD_CODE[t.layout], 31, t.pad)), ("dim0", dim(0, t.vc)),
                 ("dim1", dim(1, t.vr))]
    else:
        items = [("dim0", dim(0, t.vc)), ("dim1", dim(1, t.vr)), ("dim2", dim(2, t.col))]
    items += [("iot", iot_dst(t.hand, t.size, pe + 1, 1)), ("ior", ior(*regs))]
    return Bundle(bstart("TLOAD", t.dt), items, True, dict(op="TLOAD", role=t.role, pe=pe))


@dataclass
class _CoopPlan:
    kind: str
    form: str
    atype: int
    btype: int
    acc: int
    G: int
    N: int
    K: int
    both: bool
    trans_a: bool
    trans_b: bool
    lays: list                    # per PE: D's layout ("M16" / "M32"), None when idle
    d_size: int
    shared: dict                  # role -> _ShTile, B.IOS order a, sa, b, sb
    local: dict                   # role -> {pe: _MmTile}, stream order c, a, sa, bias
    style: dict
    c_is_d_hand: bool = False
    hand_full_pe: Optional[int] = None
    pool_pe: Optional[int] = None
    garbage: bool = False
    flip: Optional[str] = None    # coop_trans_flip: the Trans bit ("a" / "b") flipped in B.FPATR

    @property
    def f(self) -> dict:
        return _mm_flags(self.form)

    @property
    def per(self) -> int:
        return 16 if self.G <= 64 else 32

    @property
    def vm(self) -> list:
        return [max(0, min(self.G - i * self.per, self.per)) for i in range(tables.NUM_PES)]

    @property
    def active(self) -> list:
        return [i for i, m in enumerate(self.vm) if m > 0]


def _coop_group_m(rng) -> int:
    return _pick(rng, COOP_GROUP_M) if rng.random() < 0.7 else int(rng.integers(1, 129))


def _coop_draw(b: _Builder, kind: str, form: str, muts) -> Optional[_CoopPlan]:
    """A legal cooperative plan for this kind and form."""
    rng, W, Wsh = b.rng, b.m.tile_words, b.m.shared_words
    f = _mm_flags(form)
    for _ in range(60):
        atype, btype = _mm_types(rng, "coop", f, ())
        acc = _mm_acc_type(f["mx"], atype)
        if kind == "coop_right":
            both = False
        elif kind in ("coop_both", "coop_trans"):
            both = True
        else:
            both = rng.random() < 0.5 and not {"coop_trans_a_local", "coop_local_a_rows"} & set(muts)
        G = _coop_group_m(rng)
        if "coop_idle_garbage" in muts and G > 96:
            G = _pick(rng, [1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96])
        K = 1 << int(rng.integers(0, 7))
        N = 1 << int(rng.integers(0, 7))
        if f["mx"] and rng.random() < 0.3:
            K = 64                                       # two scale blocks
        while G * N * K > COOP_BUDGET:
            if N >= K and N > 1:
                N //= 2
            elif K > 1:
                K //= 2
            else:
                break
        trans_a = both and _pow2(G) and (rng.random() < (0.6 if kind == "coop_trans" else 0.1))
        trans_b = rng.random() < (0.6 if kind == "coop_trans" else 0.1)
        if kind == "coop_trans" and not (trans_a or trans_b):
            trans_b = True
        plan = _CoopPlan(kind, form, atype, btype, acc, G, N, K, both, trans_a, trans_b,
                         [None] * 4, 1, {}, {}, _mm_style(rng, kind))
        vm, per = plan.vm, plan.per
        # per-PE layouts: M16 only for valid_M[i] <= 16; both Shared without ACC: by M_per_PE
        for i in plan.active:
            if both and not f["acc"]:
                plan.lays[i] = "M16" if per == 16 else "M32"
            else:
                plan.lays[i] = "M16" if vm[i] <= 16 and rng.random() < 0.6 else "M32"
        if not all(_cube_fits(plan.lays[i], 32, vm[i], N, W) for i in plan.active):
            continue
        need = max(_cube_min_size(plan.lays[i], 32, vm[i], N) for i in plan.active)
        plan.d_size = min(10, need + (int(rng.integers(1, 3)) if rng.random() < 0.2 else 0))
        kb = -(-K // 32)
        sh = {}
        ok = True

        def shared(role, dt, vr, vc, cols, extra_rows=True):
            nonlocal ok
            if extra_rows and rng.random() < 0.2:
                vr2 = vr + int(rng.integers(1, 9))
                if _sh_fit(BITS[dt], vr2, vc, cols, Wsh):
                    vr = vr2
            size = _sh_fit(BITS[dt], vr, vc, cols, Wsh)
            if size is None:
                ok = False
                return
            if rng.random() < 0.2 and _sh_fit(BITS[dt], vr, vc, cols, Wsh, size + 1):
                size += 1
            sh[role] = _ShTile(role, 0, dt, vr, vc, cols, size)

        if both:
            shared("a", atype, *((K, G, G) if trans_a else (G, K, K)))
            if f["mx"] and atype in MM_MX_SCALED:
                shared("sa", E8M0, G, kb, kb)
        shared("b", btype, *((N, K, K) if trans_b else (K, N, N)))
        if f["mx"] and btype in MM_MX_SCALED:
            shared("sb", E8M0, kb, N, N)
        if not ok:
            continue
        sids = [int(x) for x in rng.choice(256, size=len(sh), replace=False)]
        for t, sid in zip(sh.values(), sids):
            t.sid = sid
        plan.shared = sh
        loc = {}
        for i in plan.active:
            tiles = {}
            if f["acc"]:
                tiles["c"] = _mm_tile(rng, "c", acc, vm[i], N, plan.lays[i], W, size=plan.d_size)
            if not both:
                tiles["a"] = _mm_tile(rng, "a", atype, vm[i], K, plan.lays[i], W)
                if f["mx"] and atype in MM_MX_SCALED:
                    tiles["sa"] = _mm_tile(rng, "sa", E8M0, vm[i], kb, "RowMajor", W)
            if f["bias"]:
                tiles["bias"] = _mm_tile(rng, "bias", acc, 1, N, "RowMajor", W)
            if any(t is None for t in tiles.values()):
                ok = False
                break
            for role, t in tiles.items():
                t.pemode = i + 1
                loc.setdefault(role, {})[i] = t
        if not ok:
            continue
        plan.local = {r: loc[r] for r in ("c", "a", "sa", "bias") if r in loc}
        return plan
    return None


# ---- plan mutations


def _cp_not_ready(b, plan):
    rng = b.rng
    t = plan.shared[_pick(rng, list(plan.shared))]
    t.pemode = int(rng.integers(1, 7))
    subs = [p for p in range(1, 8) if PEMODE_MASK[p] & PEMODE_MASK[t.pemode] == PEMODE_MASK[p]]
    if rng.random() < 0.5:
        t.reload = _pick(rng, subs)
    b.notes.append(f"not_ready:{t.role} S{t.sid} PEMode {t.pemode} reload {t.reload}")
    return True


def _cp_shared_dtype(b, plan):
    rng = b.rng
    t = plan.shared[_pick(rng, list(plan.shared))]
    opts = [c for c in DTYPES if BITS[c] == BITS[t.dt] and c != t.dt]
    if not opts:
        return False
    t.dt = _pick(rng, opts)
    b.notes.append(f"shared_dtype:{t.role}={tables.DTYPE_BY_CODE[t.dt].name}")
    return True


def _cp_shared_cols(b, plan):
    rng = b.rng
    roles = list(plan.shared)
    rng.shuffle(roles)
    for role in roles:
        t = plan.shared[role]
        for cols in (t.cols * 2, t.cols * 4):
            size = _sh_fit(BITS[t.dt], t.vr, t.vc, cols, b.m.shared_words)
            if size is not None:
                t.cols, t.size = cols, size
                b.notes.append(f"shared_cols:{role} {cols}")
                return True
    return False


def _cp_shared_rows(b, plan):
    rng = b.rng
    # logical rows / columns each Shared source needs (stored orientation)
    need = {"a": (plan.K, plan.G) if plan.trans_a else (plan.G, plan.K),
            "b": (plan.N, plan.K) if plan.trans_b else (plan.K, plan.N),
            "sa": (plan.G, -(-plan.K // 32)), "sb": (-(-plan.K // 32), plan.N)}
    opts = [(r, k) for r in plan.shared for k in (0, 1) if need[r][k] >= 2]
    if not opts:
        return False
    role, k = _pick(rng, opts)
    t = plan.shared[role]
    if k == 0:
        t.vr = need[role][0] - int(rng.integers(1, need[role][0]))
    else:
        t.vc = need[role][1] - int(rng.integers(1, need[role][1]))
    b.notes.append(f"shared_rows:{role} {t.vr}x{t.vc}")
    return True


def _cp_trans_flip(b, plan):
    opts = []
    if plan.both and plan.G != plan.K:
        opts.append("a")
    if plan.N != plan.K:
        opts.append("b")
    if not opts:
        return False
    which = _pick(b.rng, opts)
    b.notes.append(f"trans_flip:{which}")
    plan.flip = which
    return True


def _cp_local_a_rows(b, plan):
    rng, W = b.rng, b.m.tile_words
    if "a" not in plan.local:
        return False
    pes = list(plan.local["a"])
    rng.shuffle(pes)
    for i in pes:
        t = plan.local["a"][i]
        for vr in rng.permutation([t.vr + 1, t.vr - 1]):
            n = _mm_tile(rng, "a", t.dt, int(vr), t.vc, t.layout, W) if vr >= 1 else None
            if n is not None:
                n.pemode = t.pemode
                plan.local["a"][i] = n
                b.notes.append(f"local_a_rows:PE{i} {t.vr}->{vr}")
                return True
    return False


def _cp_idle_garbage(b, plan):
    if len(plan.active) == 4:
        return False
    plan.garbage = True
    return True


def _cp_c_capacity(b, plan):
    rng = b.rng
    if "c" not in plan.local:
        return False
    i = _pick(rng, list(plan.local["c"]))
    t = plan.local["c"][i]
    need = _cube_min_size(t.layout, 32, t.vr, t.vc)
    opts = [s for s in (plan.d_size - 1, plan.d_size + 1) if need <= s <= 10]
    if not opts:
        return False
    t.size = _pick(rng, opts)
    b.notes.append(f"c_capacity:PE{i} C size {t.size} D size {plan.d_size}")
    return True


def _cp_c_is_d_hand(b, plan):
    if "c" not in plan.local:
        return False
    plan.c_is_d_hand = True
    return True


def _cp_d_size(b, plan):
    if plan.f["acc"]:
        return False                          # C's capacity must equal D's TSize (check 7 first)
    need = max(_cube_min_size(plan.lays[i], 32, plan.vm[i], plan.N) for i in plan.active)
    if need < 2:
        return False
    plan.d_size = need - 1
    b.notes.append(f"d_size:{plan.d_size} (needs {need})")
    return True


def _cp_one_pe(name):
    def apply(b, plan):
        act = plan.active
        pe = act[-1] if b.rng.random() < 0.6 else _pick(b.rng, act)
        setattr(plan, name, pe)
        return True
    return apply


COOP_PLAN_MUTATIONS = {
    "coop_not_ready": _cp_not_ready, "coop_shared_dtype": _cp_shared_dtype,
    "coop_shared_cols": _cp_shared_cols, "coop_shared_rows": _cp_shared_rows,
    "coop_trans_flip": _cp_trans_flip, "coop_local_a_rows": _cp_local_a_rows,
    "coop_idle_garbage": _cp_idle_garbage, "coop_c_capacity": _cp_c_capacity,
    "coop_c_is_d_hand": _cp_c_is_d_hand, "coop_d_size": _cp_d_size,
    "coop_hand_full": _cp_one_pe("hand_full_pe"), "coop_pool": _cp_one_pe("pool_pe"),
}


# ---- spec mutations (the matrix block)


def _cs_sparse(b, spec, plan):
    spec["pemode"] = int(b.rng.integers(1, 7))
    b.notes.append(f"sparse_mask:PEMode {spec['pemode']}")
    return True


def _cs_lb(n, values):
    def apply(b, spec, plan):
        spec["lb"][n] = values(b.rng, spec["lb"][n])
        spec["lb_forced"].add(n)
        b.notes.append(f"LB{n}={spec['lb'][n]}")
        return True
    return apply


def _not_pow2(rng, v):
    while True:
        x = int(rng.integers(3, 130)) if rng.random() < 0.7 else v + int(rng.integers(1, 4))
        if not _pow2(x):
            return x


def _cs_shared_count(b, spec, plan):
    rng = b.rng
    if len(spec["ios"]) > 1 and (rng.random() < 0.5 or len(spec["ios"]) >= 4):   # 4 B.IOS slots
        k = int(rng.integers(0, len(spec["ios"])))
        b.notes.append(f"shared_count:-1 (dropped #{k})")
        del spec["ios"][k]
    else:
        others = [x for x in range(256) if x not in spec["ios"]]
        extra = _pick(rng, others)                    # (a repeated SharedTileID: BundleControl)
        spec["ios"].insert(int(rng.integers(0, len(spec["ios"]) + 1)), extra)
        b.notes.append(f"shared_count:+1 (S{extra})")
    return True


def _cs_unallocated(b, spec, plan):
    rng = b.rng
    k = int(rng.integers(0, len(spec["ios"])))
    used = {t.sid for t in plan.shared.values()}
    spec["ios"][k] = _pick(rng, [x for x in range(256) if x not in used])
    b.notes.append(f"unallocated_sid:#{k}=S{spec['ios'][k]}")
    return True


def _cs_gemv(b, spec, plan):
    spec["form"] = "TGEMV" + spec["form"][len("TMATMUL"):]
    return True


def _cs_trans_a_local(b, spec, plan):
    if plan.both:
        return False
    spec["fpatr"] |= 1 << 7
    return True


def _cs_no_fpatr(b, spec, plan):
    spec["fpatr"] = None
    return True


def _cs_ios_size(b, spec, plan):
    spec["ios_size"] = int(b.rng.integers(1, 13))
    return True


COOP_SPEC_MUTATIONS = {
    "coop_no_fpatr": _cs_no_fpatr, "coop_sparse_mask": _cs_sparse,
    "coop_group_m_zero": _cs_lb(0, lambda rng, v: 0),
    "coop_group_m_big": _cs_lb(0, lambda rng, v: _pick(rng, [129, 130, int(rng.integers(129, 256)),
                                                             int(rng.integers(256, 65536))])),
    "coop_n_not_pow2": _cs_lb(1, _not_pow2), "coop_k_not_pow2": _cs_lb(2, _not_pow2),
    "coop_ios_size": _cs_ios_size, "coop_shared_count": _cs_shared_count,
    "coop_unallocated_sid": _cs_unallocated, "coop_gemv": _cs_gemv,
    "coop_trans_a_local": _cs_trans_a_local,
}
COOP_ITEM_MUTATIONS = {"coop_zero_mask_block": _mi_zero_mask_block}
assert set(COOP_PLAN_MUTATIONS) | set(COOP_SPEC_MUTATIONS) | set(COOP_ITEM_MUTATIONS) \
    | set(_SH_MUTATIONS) == set(COOP_MUTATIONS)

_COOP_NEEDS = {     # (plan) -> can the mutation apply
    "coop_trans_a_local": lambda p: not p.both, "coop_local_a_rows": lambda p: not p.both,
    "coop_c_capacity": lambda p: p.f["acc"], "coop_c_is_d_hand": lambda p: p.f["acc"],
    "coop_idle_garbage": lambda p: len(p.active) < 4,
}


def _coop_garbage(rng, W) -> _MmTile:
    """Some legal tile that is not what the block names (any dtype / layout / shape)."""
    for _ in range(20):
        dt = _pick(rng, CUBE_DTYPES)
        lay = _pick(rng, ["RowMajor", "M16", "M32", "N8"])
        t = _mm_tile(rng, "junk", dt, int(rng.integers(1, 9)), int(rng.integers(1, 17)), lay, W)
        if t is not None:
            return t
    return _MmTile("junk", DT_CODE["U8"], 1, 1, "RowMajor", size=1, col=1)


def _coop_program(b: _Builder, plan: _CoopPlan, spec_muts: list, item_muts: list):
    """(setup, words, GM, tile_capacity, applied bundle mutations) or None."""
    rng, HS, W = b.rng, b.m.hand_slots, b.m.tile_words
    gm = _MmGM(rng, b.gm_bytes)
    active = plan.active
    # hands: one per Local role (the same TileIndex on every active PE), D's hand
    roles = list(plan.local)
    for _ in range(32):
        hands = {r: int(rng.integers(0, 4)) for r in roles}
        d_hand = int(rng.integers(0, 4))
        order = list(roles)
        rng.shuffle(order)
        if plan.c_is_d_hand:                  # C first in hand 0: TileIndex 0 = D's hand 0
            hands["c"] = d_hand = 0
            order.remove("c")
            order.insert(0, "c")
        counts = [0] * 4
        index = {}
        for r in order:
            index[r] = hands[r] * tables.HAND_SLOTS + counts[hands[r]]
            counts[hands[r]] += 1
        if any(c > HS for c in counts) or counts[d_hand] >= HS:
            continue
        if "c" in index and (index["c"] == d_hand) != plan.c_is_d_hand:
            continue
        break
    else:
        return None
    setup = []
    # Shared operands (mask 1111 unless coop_not_ready), in a random order
    sh = list(plan.shared.values())
    rng.shuffle(sh)
    for t in sh:
        setup += _sh_setup_loads(b, gm, t, plan.style)
    # Local operands: one register pair per role, PE i's values in PE i's file
    used = {pe: [0] * 4 for pe in range(tables.NUM_PES)}
    charge = [0] * 4
    for r in order:
        addr = {}
        tiles = {}
        for pe in range(tables.NUM_PES):
            t = plan.local[r].get(pe)
            if t is None and plan.garbage and rng.random() < 0.85:
                t = _coop_garbage(rng, W)
                t.pemode = pe + 1
            if t is None:
                continue
            t.hand = hands[r]
            if used[pe][t.hand] >= HS:
                continue
            used[pe][t.hand] += 1
            charge[pe] += 128 << (t.size - 1)
            bits = BITS[t.dt]
            base, stride = gm.region(t.vr, _rowbytes(t.vc, bits), _ebytes(bits))
            gm.write(base, stride, t.dt, [_coop_codes(rng, t.dt, t.vc, plan.style)
                                          for _ in range(t.vr)])
            addr[pe] = (base, stride)
            tiles[pe] = t
        if not tiles:
            continue
        regs = (_coop_reg(b, {pe: a[0] for pe, a in addr.items()}),
                _coop_reg(b, {pe: a[1] for pe, a in addr.items()}))
        for pe, t in tiles.items():
            setup.append(_local_load(b, t, pe, *addr[pe], regs))
    # idle PEs with garbage: sometimes D's hand full there too (no D on an idle PE)
    fill = DT_CODE["U8"]
    idle_fill = [pe for pe in range(4) if plan.garbage and pe not in active and rng.random() < 0.4]
    for pe in idle_fill + ([plan.hand_full_pe] if plan.hand_full_pe is not None else []):
        while used[pe][d_hand] < HS:
            t = _MmTile("fill", fill, 1, 1, "RowMajor", size=1, col=1, hand=d_hand)
            used[pe][d_hand] += 1
            charge[pe] += 128
            setup.append(Bundle(bstart("TLOAD", fill), [("iot", iot_dst(d_hand, 1, pe + 1, 1))],
                                True, dict(op="TLOAD", role="fill", pe=pe)))
    cap = None
    d_tsize = 128 << (plan.d_size - 1)
    if plan.pool_pe is not None:
        p = plan.pool_pe
        shared_total = sum(4 * (64 << t.size) for t in plan.shared.values())
        others = max([charge[q] for q in active if q != p], default=0)
        idle = max([charge[q] for q in range(4) if q not in active], default=0)
        need = max(others + 1, shared_total - d_tsize + 1, idle - d_tsize + 1) - charge[p]
        while need > 0:
            hs = [h for h in range(4) if h != d_hand and used[p][h] < HS]
            if not hs:
                return None
            h = _pick(rng, hs)
            s = next((s for s in range(1, 11) if (128 << (s - 1)) >= need), 10)
            used[p][h] += 1
            charge[p] += 128 << (s - 1)
            need -= 128 << (s - 1)
            setup.append(Bundle(bstart("TLOAD", DT_CODE["U32"]), [("iot", iot_dst(h, s, p + 1, 1))],
                                True, dict(op="TLOAD", role="fill", pe=p)))
        lower = max(others + d_tsize, shared_total, max(charge))
        cap = charge[p] + d_tsize - int(rng.integers(1, charge[p] + d_tsize - lower + 1))
        b.notes.append(f"pool:PE{p} charge {charge[p]} D {d_tsize} tile_capacity {cap}")
    if plan.hand_full_pe is not None:
        b.notes.append(f"hand_full:PE{plan.hand_full_pe} hand {d_hand}")
    # the matrix block
    fp = FPATR0 | int(plan.trans_a) << 7 | int(plan.trans_b) << 8
    if plan.flip:
        fp ^= 1 << (7 if plan.flip == "a" else 8)
    srcs = [index[r] for r in ("c", "a", "sa", "bias") if r in index]
    spec = dict(form=plan.form, atype=plan.atype, btype=plan.btype, lb=[plan.G, plan.N, plan.K],
                srcs=srcs, extra_srcs=[], d_hand=d_hand, d_size=plan.d_size, extra_dsts=[], pemode=7,
                fpatr=fp, datr=None, ior=None, ios=[t.sid for t in plan.shared.values()], catr=None,
                lb_forced=set())
    if plan.kind == "coop_zero_mask":
        _mm_zero_mask_junk(b, spec)
        item_muts = ["coop_zero_mask_block"]
    applied = [m for m in spec_muts if COOP_SPEC_MUTATIONS[m](b, spec, plan)]
    in_stream = []
    if plan.kind == "coop_in_stream" and sh and sh[-1].reload is None:
        # the last Shared operand load runs in the stream, after the Local loads
        k = max(i for i, bd in enumerate(setup) if bd.info.get("sid") == sh[-1].sid)
        in_stream = [setup.pop(k)]

    def build(minimal):
        bd = _mm_bundle(b, spec, minimal=minimal)
        if spec.get("ios_size"):
            ks = [k for k, (t, _) in enumerate(bd.items) if t == "ios"]
            k = _pick(rng, ks)
            bd.items[k] = ("ios", bd.items[k][1] | spec["ios_size"] << 15)
        return bd

    main = build(False)
    if len(_flatten(in_stream + [main])) > b.g.max_words:
        main = build(True)
    applied += [m for m in item_muts if COOP_ITEM_MUTATIONS[m](b, main)]
    if len(_flatten(in_stream + [main])) > b.g.max_words:
        setup += in_stream
        in_stream = []
    if in_stream:
        b.notes.append(f"in_stream:S{in_stream[0].info['sid']}")
    words = _flatten(in_stream + [main])
    if len(words) > b.g.max_words:
        b.notes.append(f"cut:{len(words)}->{b.g.max_words}")
        words = words[: b.g.max_words]
    return _flatten(setup), words, bytes(gm.gm), cap, applied


# ---- Shared TLOAD / TSTORE / TSTORE.SPART kinds


def _sh_draw_tile(b: _Builder, role="x", sid=None) -> _ShTile:
    rng, Wsh = b.rng, b.m.shared_words
    while True:
        dt = _pick(rng, DTYPES)
        cols = 1 << int(rng.integers(0, 7))
        vc = cols if rng.random() < 0.5 else int(rng.integers(1, cols + 1))
        vr = int(rng.integers(1, 9)) if rng.random() < 0.6 else int(rng.integers(1, 65))
        size = _sh_fit(BITS[dt], vr, vc, cols, Wsh)
        if size is None:
            continue
        if rng.random() < 0.2 and _sh_fit(BITS[dt], vr, vc, cols, Wsh, size + 1):
            size += 1
        return _ShTile(role, int(rng.integers(0, 256)) if sid is None else sid, dt, vr, vc, cols,
                       size, pemode=7 if rng.random() < 0.4 else int(rng.integers(1, 7)))


def _sh_addr(b: _Builder, gm: "_MmGM", t: _ShTile, pes, store: bool = False) -> dict:
    """{pe: (base, stride)}: every PE its own region (TSTORE) or data (TLOAD)."""
    rng = b.rng
    bits = BITS[t.dt]
    out = {}
    shared = rng.random() < 0.4
    for pe in pes:
        if shared and out:
            out[pe] = next(iter(out.values()))
            continue
        base, stride = gm.region(t.vr, _rowbytes(t.vc, bits), _ebytes(bits))
        if not store:
            gm.write(base, stride, t.dt, [_mm_codes(rng, t.dt, t.vc, dict(raw=1.0, special=0.0))
                                          for _ in range(t.vr)])
        out[pe] = (base, stride)
    return out


def _sh_fault_pe(b: _Builder, t: _ShTile, mask: int, size: int) -> Optional[int]:
    """A PE in the mask whose quarter holds a valid element."""
    qs = {_sh_quarter(r * t.cols + c, BITS[t.dt], size) for r in range(t.vr) for c in range(t.vc)}
    pes = [q for q in sorted(qs) if 0 <= q < 4 and mask & (1 << (3 - q))]
    return _pick(b.rng, pes) if pes else None


def _sh_program(b: _Builder, kind: str, muts: list):
    """(setup, words, GM, tile_capacity, applied) of an sh_load / sh_store case."""
    rng, W = b.rng, b.g.max_words
    gm = _MmGM(rng, b.gm_bytes)
    applied = []
    setup = []
    t = _sh_draw_tile(b)
    others = []
    if "sh_records_full" in muts and kind == "sh_load":
        sids = [x for x in range(256) if x != t.sid]
        for sid in rng.choice(sids, size=b.m.shared_slots, replace=False):
            o = _ShTile("other", int(sid), DT_CODE["U8"], 1, 1, 1, 1, pemode=int(rng.integers(1, 8)))
            others.append(o)
        applied.append("sh_records_full")
    elif rng.random() < 0.3:
        others.append(_sh_draw_tile(b, "other", sid=_pick(rng, [x for x in range(256) if x != t.sid])))
    prior = None
    if "sh_records_full" in applied:
        pass                                   # every record taken by the others
    elif kind == "sh_store" or rng.random() < 0.3 or "sh_update_mismatch" in muts:
        # the register exists already (sh_load: a reload; sh_store: what is stored)
        prior = _ShTile(**{**t.__dict__})
        if kind == "sh_load":
            prior.pemode = _pick(rng, [p for p in range(1, 8)
                                       if PEMODE_MASK[p] & PEMODE_MASK[t.pemode] == PEMODE_MASK[t.pemode]])
        elif rng.random() < 0.5:
            prior.reload = _pick(rng, [p for p in range(1, 8)
                                       if PEMODE_MASK[p] & PEMODE_MASK[prior.pemode] == PEMODE_MASK[p]])
        if kind == "sh_store" and rng.random() < 0.1:
            prior = None                       # a TSTORE of a register without a record: legal
    for o in others + ([prior] if prior else []):
        addr = {pe: v for pe, v in _sh_addr(b, gm, o, range(4)).items()}
        setup.append(_sh_load_bundle(b, o, addr, o.pemode))
        if o.reload is not None:
            setup.append(_sh_load_bundle(b, o, _sh_addr(b, gm, o, range(4)), o.reload))
    bundles = []
    if kind == "sh_load":
        if "sh_update_mismatch" in muts and prior is not None:
            how = _pick(rng, ["mask", "size", "cols", "vr", "dtype"])
            if how == "mask" and PEMODE_MASK[prior.pemode] != 15:
                t.pemode = _pick(rng, [p for p in range(1, 8) if PEMODE_MASK[p] & ~PEMODE_MASK[prior.pemode]])
            elif how == "size" and _sh_fit(BITS[t.dt], t.vr, t.vc, t.cols, b.m.shared_words, t.size + 1):
                t.size += 1
            elif how == "dtype":
                t.dt = _pick(rng, [c for c in DTYPES if c != t.dt and BITS[c] == BITS[t.dt]] or [t.dt])
            else:
                t.vr = t.vr + 1 if _sh_fit(BITS[t.dt], t.vr + 1, t.vc, t.cols, b.m.shared_words) else t.vr
                if t.vr == prior.vr:
                    t.vc = t.vc - 1 if t.vc > 1 else t.vc
            if (t.pemode, t.size, t.dt, t.vr, t.vc) != (prior.pemode if how == "mask" else t.pemode,
                                                         prior.size, prior.dt, prior.vr, prior.vc) \
                    or (how == "mask" and t.pemode != prior.pemode):
                applied.append("sh_update_mismatch")
                b.notes.append(f"update_mismatch:{how}")
        if "sh_too_big" in muts:
            for dt in (DT_CODE["U8"], DT_CODE["S8"], DT_CODE["U4X2"]):
                s = next((s for s in range(1, 13) if (64 << s) * 8 // BITS[dt] > b.m.shared_words
                          and (64 << s) * 8 // (t.cols * BITS[dt]) <= 65535), None)
                if s is not None and prior is None:
                    t.dt, t.size = dt, s
                    applied.append("sh_too_big")
                    break
        mask = PEMODE_MASK[t.pemode]
        addr = _sh_addr(b, gm, t, [pe for pe in range(4) if mask & (1 << (3 - pe))])
        bd = _sh_load_bundle(b, t, addr, t.pemode)
        bundles.append(bd)
        store_t = t
    else:
        store_t = prior if prior is not None else t
    if kind == "sh_store" or rng.random() < 0.5:
        # a TSTORE (mask 1111) or TSTORE.SPART (any nonzero mask) of the register
        st = _ShTile(**{**store_t.__dict__})
        spart = rng.random() < 0.4
        pemode = int(rng.integers(1, 8)) if spart else 7
        if rng.random() < 0.4:
            st.vr = int(rng.integers(1, st.vr + 1))
            st.vc = int(rng.integers(1, st.vc + 1))
        addr = _sh_addr(b, gm, st, range(4), store=True)
        items = [("ios", ios(st.sid, pemode, 0)), _coop_ior(b, addr)]
        for n, v in ((0, st.vc), (1, st.vr), (2, st.cols)):
            if rng.random() < 0.6 or (n == 2 and prior is None and kind == "sh_store"):
                items.insert(0, (f"dim{n}", dim(n, v)))
        bundles.append(Bundle(bstart("TSTORE.SPART" if spart else "TSTORE", st.dt), items, True,
                              dict(op="TSTORE", spart=spart, tile=st, pemode=pemode)))
    # bundle mutations on the last bundle of the stream (or the load)
    for m in muts:
        if m in ("sh_records_full", "sh_update_mismatch", "sh_too_big"):
            continue
        bd = bundles[-1] if m not in ("sh_lb_missing", "sh_cols_not_pow2") else bundles[0]
        is_load = bd.info["op"] == "TLOAD"
        if m in ("sh_lb_missing", "sh_cols_not_pow2") and not is_load:
            continue
        if m == "sh_store_mask" and (is_load or bd.info["spart"]):
            continue
        ks = bd.find("ios")
        k = ks[0]
        w = bd.items[k][1]
        if m == "sh_ios_count":
            bd.items.insert(k + 1, ("ios", ios(int(rng.integers(0, 256)), (w >> 9) & 7,
                                               int(rng.integers(1, 13)) if is_load else 0)))
        elif m == "sh_ior_surplus":
            j = bd.find("ior")[0]
            bd.items[j] = ("ior", bd.items[j][1] | (int(rng.integers(1, 24)) << 7 if rng.random() < 0.5
                                                    else int(rng.integers(1, 24)) << 27))
        elif m == "sh_cube_code":
            code = _pick(rng, LOAD_CODES + STORE_CODES)
            bd.items.insert(0, ("datr", datr(code, 31, int(rng.integers(0, 4)))))
        elif m == "sh_ios_dir":
            bd.items[k] = ("ios", (w & ~(0xF << 15)) | ((0 if is_load else int(rng.integers(1, 13))) << 15))
        elif m == "sh_iot":
            bd.items.insert(int(rng.integers(0, len(bd.items) + 1)),
                            ("iot", iot_dst(int(rng.integers(0, 4)), 1, (w >> 9) & 7, 1)))
        elif m == "sh_store_mask":
            bd.items[k] = ("ios", (w & ~(7 << 9)) | int(rng.integers(1, 7)) << 9)
        elif m == "sh_lb_missing":
            j = _pick(rng, bd.find("dim0") + bd.find("dim1") + bd.find("dim2"))
            del bd.items[j]
        elif m == "sh_cols_not_pow2":
            j = bd.find("dim2")[0]
            t = bd.info.get("tile", t)
            bd.items[j] = ("dim2", dim(2, _not_pow2(rng, t.cols)))
        elif m in ("sh_mem_page", "sh_mem_align"):
            st = bd.info.get("tile", t)
            mask = PEMODE_MASK[(w >> 9) & 7]
            size = st.size if is_load else (prior.size if prior is not None else None)
            if size is None or (m == "sh_mem_align" and BITS[st.dt] < 16):
                continue
            q = _sh_fault_pe(b, st, mask, size)
            if q is None:
                continue
            j = bd.find("ior")[0]
            rb = (bd.items[j][1] >> 15) & 0x1F
            if rb == 0:
                continue
            base = b.gprs[q][rb]
            b.gprs[q] = dict(b.gprs[q])
            if m == "sh_mem_page":
                b.gprs[q][rb] = _pick(rng, [b.gm_bytes, b.gm_bytes + 64, 1 << 40])
            else:
                b.gprs[q][rb] = base + int(rng.integers(1, _ebytes(BITS[st.dt])))
            b.notes.append(f"{m}:PE{q} x{rb}")
        else:
            continue
        applied.append(m)
    words = _flatten(bundles)
    if len(words) > W:
        words = _flatten(bundles[:1])[:W]
    return _flatten(setup), words, bytes(gm.gm), None, applied


# ---- the Case


def random_coop_case(rng: np.random.Generator, cfg=None, kind: Optional[str] = None,
                     mutations: Optional[list] = None) -> Case:
    """One random cooperative / Shared Case (COOP_KINDS, COOP_MUTATIONS), core=True.

    The forms drawn are COOP_FORMS (GenConfig.matmul_forms restricts them when
    it names some). `kind` and `mutations` force the draw (labels that could
    not be applied are left out of Case.mutations). Without a GenConfig the
    machine is COOP_MACHINE (pj.preset("small")).
    """
    g = GenConfig(machine=COOP_MACHINE, core=True) if cfg is None else _gen_config(cfg)
    if not g.core:
        g = dataclasses.replace(g, core=True)
    forms = tuple(f for f in (g.matmul_forms or COOP_FORMS) if f in COOP_FORMS) or COOP_FORMS
    if kind is None:
        kind = _weighted(rng, COOP_KINDS)
    elif kind not in COOP_KINDS:
        raise ValueError(f"unknown cooperative kind {kind!r}")
    matrix = kind in COOP_MATRIX_KINDS
    pool = [m for m in COOP_MUTATIONS if (m in _SH_MUTATIONS) != matrix]
    if mutations is None:
        mutations = []
        if kind != "coop_zero_mask" and rng.random() < g.p_mutate:
            k = 1 if rng.random() < 0.7 else int(rng.integers(2, g.max_mutations + 1))
            table = {m: COOP_MUTATIONS[m] for m in pool}
            for _ in range(8 * k):
                if len(mutations) >= k:
                    break
                m = _weighted(rng, table)
                if m not in mutations and not any(frozenset((m, x)) in _COOP_CONFLICTS for x in mutations):
                    mutations.append(m)
    else:
        mutations = list(mutations)
        unknown = set(mutations) - set(COOP_MUTATIONS)
        if unknown:
            raise ValueError(f"unknown cooperative mutations {sorted(unknown)}")
    b = _Builder(rng, g)
    if not matrix:
        setup, words, gm, cap, applied = _sh_program(b, kind, [m for m in mutations if m in pool])
        b.notes.insert(0, f"sh:{kind}")
    else:
        for attempt in range(24):
            form = _pick(rng, forms)
            muts = [m for m in mutations if m in pool]
            plan = _coop_draw(b, kind, form, muts)
            if plan is None:
                b = _Builder(rng, g)
                continue
            applied = []
            for m in muts:
                if not _COOP_NEEDS.get(m, lambda p: True)(plan):
                    continue
                fn = COOP_PLAN_MUTATIONS.get(m)
                if fn is not None and fn(b, plan):
                    applied.append(m)
            spec_muts = [m for m in muts if m in COOP_SPEC_MUTATIONS
                         and _COOP_NEEDS.get(m, lambda p: True)(plan)]
            item_muts = [m for m in muts if m in COOP_ITEM_MUTATIONS]
            if kind == "coop_zero_mask":
                spec_muts, item_muts = [], []
            out = _coop_program(b, plan, spec_muts, item_muts)
            if out is not None:
                break
            b = _Builder(rng, g)
        else:
            raise RuntimeError(f"no cooperative case for kind {kind} mutations {mutations}")
        setup, words, gm, cap, bundle_applied = out
        applied = [m for m in mutations if m in applied or m in bundle_applied]
        b.notes.insert(0, f"coop:{plan.form} {tables.DTYPE_BY_CODE[plan.atype].name}x"
                          f"{tables.DTYPE_BY_CODE[plan.btype].name}->{tables.DTYPE_BY_CODE[plan.acc].name} "
                          f"G{plan.G} N{plan.N} K{plan.K} {'both' if plan.both else 'right'}"
                          f"{' transA' if plan.trans_a else ''}{' transB' if plan.trans_b else ''} "
                          f"vm{plan.vm} D:{'/'.join(l or '-' for l in plan.lays)} size{plan.d_size}")
    applied = [m for m in mutations if m in applied]
    pc = 4 * int(rng.integers(0, 1 << 28)) if rng.random() < 0.2 else 0
    b.noise_regs()
    return Case(words=[int(w) & 0xFFFFFFFF for w in words], gm=gm,
                gprs={pe: dict(r) for pe, r in b.gprs.items()}, kind=kind,
                mutations=tuple(applied), pc=pc, tile_capacity=cap, pe=0, core=True,
                notes=tuple(b.notes), setup=tuple(int(w) & 0xFFFFFFFF for w in setup))


def random_coop_cases(seed: int, n: int, cfg=None) -> list:
    """n cooperative Cases from one seed (case i is random_coop_case(case_rng(seed, i), cfg))."""
    ss = np.random.SeedSequence(seed)
    return [random_coop_case(np.random.default_rng(s), cfg) for s in ss.spawn(n)]


__all__ = ["GenConfig", "Case", "Bundle", "random_case", "random_cases", "random_words_case",
           "random_cas_case", "random_cas_cases", "random_matmul_case", "random_matmul_cases",
           "build_state", "case_arrays", "case_rng", "PROGRAM_KINDS", "MUTATIONS",
           "STREAM_MUTATIONS", "CAS_KINDS", "CAS_MUTATIONS", "CAS_AIMS", "MATMUL_FORMS",
           "MATMUL_KINDS", "MATMUL_MUTATIONS", "MATMUL_AIMS", "random_coop_case",
           "random_coop_cases", "COOP_FORMS", "COOP_MACHINE", "COOP_KINDS", "COOP_MUTATIONS",
           "COOP_AIMS"]
