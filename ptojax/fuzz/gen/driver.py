"""What every generator family shares: `GenConfig`, `Case`, the program
builder (`Builder`: GM, GPR files, registers, B.DIM words, addressing,
predicted TileIndices), `Bundle`, the initial State a Case runs on
(`build_state`, `case_arrays`), and the draw loop: `draw_kind` and
`draw_mutations` pick a case's kind and mutation labels from a `Family`'s
weights (or check forced ones), `finish_case` ends every case the same way.

A family module (transport, mgather_cas, matrix, cooperative) supplies only
its kinds, mutations, aims and program builders.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ... import tables
from ...isa.encode import BSTOP, dim, ior
from ...state import MachineConfig, State, tile_words, write_tile_words
from .values import MASK64, elem_bytes, pick_one, rowbytes, weighted_key


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
    edge_weight: float = 0.0       # random_case: probability of a large-tile / budget-edge kind
    tmov_weight: float = 0.0       # random_case: probability of a TMOV kind (gen/tmov.py)

    def __post_init__(self):
        weights = (self.cas_weight, self.matmul_weight, self.coop_weight, self.edge_weight,
                   self.tmov_weight)
        if not (all(0.0 <= w <= 1.0 for w in weights) and sum(weights) <= 1.0 + 1e-12):
            raise ValueError(f"GenConfig: cas_weight {self.cas_weight}, matmul_weight "
                             f"{self.matmul_weight}, coop_weight {self.coop_weight}, "
                             f"edge_weight {self.edge_weight} and tmov_weight "
                             f"{self.tmov_weight} must be probabilities summing "
                             f"to at most 1")
        if self.coop_weight > 0 and not self.core:
            raise ValueError("GenConfig: coop_weight > 0 needs core=True (cooperative kinds run "
                             "on the Core)")


def gen_config(cfg) -> GenConfig:
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

    pokes: writes build_state applies last, after the setup and `undefine`:
    ("gpr", pe, reg, value) and ("gm", address, byte). A campaign's variants
    (fuzz/variants.py) change a drawn case's State this way, so that its
    setup reads the drawn case's GM and GPRs.
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
    pokes: tuple = ()

    @property
    def labels(self) -> tuple:
        return (self.kind,) + tuple(self.mutations)

    def text(self) -> str:
        """The stream in assembly (undecodable words as .word)."""
        from ...isa.asm import disassemble
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
            from ...isa.asm import disassemble
            lines.append(f"setup ({len(self.setup)} words, run on the oracle by build_state):")
            for i, (w, t) in enumerate(zip(self.setup, disassemble(list(self.setup)).splitlines())):
                lines.append(f"  (s{i:2d}) {w:08x}  {t}")
        if self.undefine:
            lines.append(f"undefine (TileIndex, Word): {list(self.undefine)}")
        if self.pokes:
            lines.append(f"pokes after the setup: {list(self.pokes)}")
        for i, (w, t) in enumerate(zip(self.words, self.text().splitlines())):
            lines.append(f"  [{i:2d}] {w:08x}  {t}")
        return "\n".join(lines)


# ----------------------------------------------------------------- state building


@functools.lru_cache(maxsize=8)
def _reset_leaves(mcfg: MachineConfig):
    from ...state import reset
    return reset(mcfg)


def _machine(cfg) -> MachineConfig:
    if cfg is None:
        return GenConfig().machine
    if isinstance(cfg, MachineConfig):
        return cfg
    return gen_config(cfg).machine


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
    if case.setup or case.undefine or case.pokes:
        state = prepare_state(state, case, mcfg)
    return state


def apply_pokes(gm: np.ndarray, gpr: np.ndarray, pokes) -> None:
    """Case.pokes written into a State's GM bytes and GPR files (numpy, in place)."""
    for p in pokes:
        if p[0] == "gm":
            gm[p[1] % gm.shape[-1]] = p[2] & 0xFF
        elif p[0] == "gpr":
            if p[2] != 0:                      # x0 reads zero
                gpr[p[1], p[2]] = p[3] & MASK64
        else:
            raise ValueError(f"unknown poke {p!r}")


def undefine_words(tiles: dict, case: Case, mcfg: MachineConfig) -> None:
    """Case.undefine applied to a State's Tiles leaves (a dict of numpy arrays,
    edited in place): each Word's definedness cleared on the PEs that hold it
    defined (the Core's, or the case's PE), their defined_valid counts down."""
    for index, word in case.undefine:
        slot = mcfg.slot_of(index)
        pes = [p for p in (range(tables.NUM_PES) if case.core else [case.pe])
               if slot is not None and tile_words(tiles, p, slot)[1][word]]
        if not pes:
            raise RuntimeError(f"undefine ({index}, {word}): no defined Word there")
        assert slot is not None         # pes is empty when it is None
        for p in pes:
            words, defined = tile_words(tiles, p, slot)
            defined[word] = False
            write_tile_words(tiles, p, slot, words, defined)
            tiles["defined_valid"][p, slot] -= 1


def prepare_state(state: State, case: Case, mcfg: MachineConfig) -> State:
    """Run a Case's setup words on the oracle, reset the PC, apply `undefine`,
    then its pokes."""
    import jax
    import jax.numpy as jnp
    from ...reference import run as reference_run, run_core as reference_run_core
    if case.setup:
        r = reference_run_core(state, list(case.setup), cfg=mcfg) if case.core else \
            reference_run(state, list(case.setup), case.pe, cfg=mcfg)
        if r.fault != "Fault_None" or r.executed != len(case.setup) \
                or bool(np.asarray(r.state.block.active)):
            raise RuntimeError(f"setup of a {case.kind} case did not complete cleanly: {r.fault} "
                               f"after {r.executed}/{len(case.setup)} words\n{case.describe()}")
        state = r.state
    leaves = {k: np.array(v) for k, v in state.tiles.items()}
    undefine_words(leaves, case, mcfg)
    leaves = {k: leaves[k] for k in ("defined", "defined_valid")}
    gm, gpr = np.array(state.gm), np.array(state.gpr)
    apply_pokes(gm, gpr, case.pokes)
    with jax.enable_x64(True):
        tiles = state.tiles.replace(**{k: jnp.asarray(v) for k, v in leaves.items()})
        return state.replace(tiles=tiles, pc=jnp.asarray(np.uint64(case.pc & MASK64), jnp.uint64),
                             gm=jnp.asarray(gm), gpr=jnp.asarray(gpr))


def core_setup(words, core: bool) -> tuple:
    """Setup words as ints; core=True: every B.IOT gets PEMode 111 (mask 1111), so
    that under run_core each PE holds every source an All-Local bundle of any
    mask names (a single-PE setup loads into the current PE's file whatever
    the mask)."""
    out: list[int] = []
    for w in words:
        w = int(w) & 0xFFFFFFFF
        if core and (w & 0x7F) == 0x13 and (w >> 12) & 7 in (4, 5, 6) and (w >> 9) & 7:
            w |= 7 << 9
        out.append(w)
    return tuple(out)


def case_rng(seed: int, i: int) -> np.random.Generator:
    """The Generator random_cases(seed, ...) used for case i."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(i + 1)[i])


def draw_many(draw: Callable, seed: int, n: int, cfg) -> list:
    """n Cases from one seed: case i is draw(case_rng(seed, i), cfg)."""
    ss = np.random.SeedSequence(seed)
    return [draw(np.random.default_rng(s), cfg) for s in ss.spawn(n)]


# ----------------------------------------------------------------- the program builder


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


def flatten(bundles) -> list:
    out: list[int] = []
    for bd in bundles:
        out.extend([w for _, w in bd.items] if bd.info.get("raw") else bd.words())
    return out


class Builder:
    """Per-case state: GM, GPR files, register allocation, predicted tile slots."""

    def __init__(self, rng: np.random.Generator, g: GenConfig):
        self.rng = rng
        self.g = g
        self.m = g.machine
        self.gm_bytes = g.machine.gm_bytes
        self.pe = g.pe
        self.gprs: dict[int, dict[int, int]] = {pe: {} for pe in range(tables.NUM_PES)}
        self.free_regs = list(range(1, tables.NUM_GPRS))
        rng.shuffle(self.free_regs)
        self.hand_used = [0, 0, 0, 0]
        self.notes: list[str] = []
        self.tile_capacity: Optional[int] = None
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
        eb = elem_bytes(bits)
        al = aligned_to or eb
        span = rowbytes(vc, bits) if bits == 4 else vc * eb
        n = self.gm_bytes
        if mode is None:
            mode = weighted_key(rng, {"dense": 6, "gap": 4, "zero": 2, "short": 2, "negative": 2,
                                   "misaligned_base": 1.5, "misaligned_stride": 1.5,
                                   "end_exact": 1.5, "past_end": 2, "huge_base": 1,
                                   "huge_stride": 1, "wrap": 1})
        dense = rowbytes(vc, bits)

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
            stride = pick_one(rng, [dense, dense + al, 0])
            base = n - ((vr - 1) * stride + span)
            return max(base, 0), stride, mode
        if mode == "past_end":
            stride = pick_one(rng, [dense, dense + al])
            base = n - ((vr - 1) * stride + span) + al * int(rng.integers(1, 3))
            return max(base, 0), stride, mode
        if mode == "huge_base":
            base = pick_one(rng, [1 << 63, MASK64 - al + 1, (1 << 32), int(rng.integers(0, 1 << 63)) * 2])
            return base - base % al, dense, mode
        if mode == "huge_stride":
            stride = pick_one(rng, [0x8000000000000002, (1 << 63) | al, int(rng.integers(0, 1 << 63)) * 2,
                                 1 << 32])
            return fit_base(0), stride, mode
        if mode == "wrap":
            # row r lands at base + r*stride mod 2^64: rows above 0 wrap around to low GM
            stride = (MASK64 + 1 - int(rng.integers(0, n // 2)) * al) & MASK64
            base = aligned_base(0, n - span)
            return base, stride, mode
        raise ValueError(mode)

    def fitting_mode(self, vr: int, vc: int, bits: int) -> str:
        """An addressing mode whose accesses stay inside GM: "dense" (60%) when
        the dense rows fit, else "zero" (every row at one base)."""
        fits = vr * rowbytes(vc, bits) <= self.gm_bytes
        return "dense" if fits and self.rng.random() < 0.6 else "zero"

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

    # ---- the words and the Case
    def cut(self, words: list) -> list:
        """The first max_words words (noting a cut)."""
        if len(words) > self.g.max_words:
            self.notes.append(f"cut:{len(words)}->{self.g.max_words}")
            words = words[: self.g.max_words]
        return words

    def case(self, kind: str, applied, words: list, gm: bytes, **fields) -> Case:
        """A Case of these words with this builder's GPRs and notes, its
        config's PE and core flag (`fields` set the other Case fields)."""
        cap, limit = fields.get("tile_capacity"), self.g.machine.register_limit
        notes = self.notes
        if cap is not None and limit is not None and cap > limit:
            # a pool of 32-bit slots holds what a register up to `limit` admits,
            # the model's own bound (256 KiB at asl): past it no model State
            fields["tile_capacity"] = limit
            notes = notes + [f"tile_capacity:{cap} -> {limit} (the model's bound)"]
        return Case(words=[int(w) & 0xFFFFFFFF for w in words], gm=gm,
                    gprs={pe: dict(r) for pe, r in self.gprs.items()}, kind=kind,
                    mutations=tuple(applied), notes=tuple(notes),
                    **{"pe": self.g.pe, "core": self.g.core, **fields})


def tload_items(b: Builder, cube_datr, vr: int, vc: int, col: int, iot_word: int, base: int,
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


# ----------------------------------------------------------------- the draw loop


@dataclass(frozen=True)
class Family:
    """What the draw loop needs of a family: its name in messages, its kind
    and mutation weights, the kind never mutated (its zero-mask block), and
    `ok(m, kind, drawn)`: may mutation m join the labels drawn so far."""
    name: str
    kinds: dict
    mutations: dict
    quiet: str
    ok: Callable


def compatible(m: str, drawn: list, conflicts: set) -> bool:
    """m is new and conflicts (pairs of labels) with none of `drawn`."""
    return m not in drawn and not any(frozenset((m, x)) in conflicts for x in drawn)


def draw_kind(rng, fam: Family, kind: Optional[str], kinds: Optional[dict] = None) -> str:
    """`kind` as given (one of the family's), else one drawn from `kinds`
    (default: all the family's) by weight."""
    if kind is None:
        return weighted_key(rng, fam.kinds if kinds is None else kinds)
    if kind not in fam.kinds:
        raise ValueError(f"unknown {fam.name} kind {kind!r}")
    return kind


def draw_mutations(rng, g: GenConfig, fam: Family, kind: str, mutations: Optional[list],
                   ok: Optional[Callable] = None, table: Optional[dict] = None) -> list:
    """`mutations` as given (the family's labels), else none for the quiet kind
    and with probability 1 - p_mutate, else 1 (70%) to max_mutations labels
    drawn by weight from `table` (default: all the family's), each kept when
    `ok` (default: the family's) accepts it, in at most 8 draws per label."""
    if mutations is not None:
        mutations = list(mutations)
        unknown = set(mutations) - set(fam.mutations)
        if unknown:
            raise ValueError(f"unknown {fam.name} mutations {sorted(unknown)}")
        return mutations
    drawn: list[str] = []
    if kind == fam.quiet or rng.random() >= g.p_mutate:
        return drawn
    ok = fam.ok if ok is None else ok
    k = 1 if rng.random() < 0.7 else int(rng.integers(2, g.max_mutations + 1))
    for _ in range(8 * k):
        if len(drawn) >= k:
            break
        m = weighted_key(rng, fam.mutations if table is None else table)
        if ok(m, kind, drawn):
            drawn.append(m)
    return drawn


def finish_case(b: "Builder", kind: str, applied: list, words: list, gm: bytes, **fields) -> Case:
    """The end of every setup-carrying case: a nonzero PC now and then, noise
    in the GPRs the program does not use, the Case."""
    rng = b.rng
    pc = 4 * int(rng.integers(0, 1 << 28)) if rng.random() < 0.2 else 0
    b.noise_regs()
    return b.case(kind, applied, words, gm, pc=pc, **fields)
