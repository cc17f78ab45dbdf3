"""Word-stream executor of the reference model (docs/execution-model.md).

`run(state, words, pe=0, *, on_fault="abandon", cfg=None)` executes 32-bit
command words one by one on PE `pe`'s view: decode (encoding.md 1), the
header commands (encoding.md 3-4), block completion at BSTOP or at the next
BSTART, and the TLOAD/TSTORE completions of transport.py, the Shared
TLOAD/TSTORE/TSTORE.SPART completions of shared_transport.py, the MGATHER.CAS
completion of mgather_cas.py and the TMATMUL/TGEMV completion of matrix.py
(Local and cooperative Shared-operand forms). The first fault stops the stream
at that word.

`run_core(state, words, *, on_fault="abandon", cfg=None)` runs the stream on
the Core's four PEs together (docs/shared-decisions.md section 2): a common
header phase (B.DIM reads PE0's GPRs), and each completion as one collective
over the participating PEs, all or none. Plain Python throughout; one
function per spec rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from .. import families, tables
from ..result import RunResult
from ..block_domain import check_block
from ..state import MachineConfig, State, check_pool
from . import matrix, mgather_cas, shared_transport, tmov, transport
from .commands import b_catr, b_datr, b_dim, b_fpatr, b_ior, b_ios, b_iot
from .decode import Decoded, decode
from .state import MASK64, Block, Machine
from .transport import BUNDLE_CONTROL, ILLEGAL, Fault

# the default family, then the routed ones in ptojax/families.py's order
DEFAULT = transport.FAMILY
ROUTED = (shared_transport.FAMILY, mgather_cas.FAMILY, matrix.FAMILY, tmov.FAMILY)
assert (DEFAULT.spec, *(f.spec for f in ROUTED)) == families.FAMILIES
INSTRUCTION_PC = Fault("Fault_InstructionPC")
POST_COMMIT = Fault("Fault_BundlePostCommit")
ON_FAULT = ("abandon", "hold")


def run(state: State, words: int | np.integer[Any] | Iterable[int | np.integer[Any]], pe: int = 0, *,
        on_fault: str = "abandon", cfg: Optional[MachineConfig] = None) -> RunResult:
    """Execute `words` from state.pc on PE `pe`; return the new State and the fault."""
    check_args(state, pe, on_fault)
    stream = word_list(words)
    m = Machine(state, cfg)
    executed = run_machine(m, stream, int(pe), on_fault)
    return RunResult.from_state(m.to_state(), executed)


def run_core(state: State, words: int | np.integer[Any] | Iterable[int | np.integer[Any]], *, on_fault: str = "abandon",
             cfg: Optional[MachineConfig] = None) -> RunResult:
    """Execute `words` from state.pc on the Core's four PEs together: each block
    completes as one collective (shared-decisions.md section 2)."""
    check_args(state, 0, on_fault)
    stream = word_list(words)
    m = Machine(state, cfg)
    executed = run_machine(m, stream, 0, on_fault, core=True)
    return RunResult.from_state(m.to_state(), executed)


def run_leaves(state: State, words: int | np.integer[Any] | Iterable[int | np.integer[Any]], pe: int = 0, *,
               on_fault: str = "abandon", cfg: Optional[MachineConfig] = None,
               core: bool = False) -> tuple[dict[str, NDArray[Any]], int]:
    """`run` (core=True: `run_core`) returning the final State as numpy leaves
    (state.state_leaves' keys and order) and the executed count, never touching
    JAX: a campaign's oracle, whose input State may hold numpy leaves."""
    check_args(state, pe, on_fault)
    m = Machine(state, cfg)
    executed = run_machine(m, word_list(words), 0 if core else int(pe), on_fault, core=core)
    return m.to_leaves(), executed


def run_machine(m: Machine, stream: Sequence[int], pe: int, on_fault: str, core: bool = False) -> int:
    """Execute the word list on `m` in place; return the count of completed words.
    core=False: PE `pe`'s view; core=True: the four PEs (header phase on PE0)."""
    # Each run clears the fault register (it resumes like a trap handler would).
    m.fault, m.fault_address = 0, 0
    m.cur = pe
    m.core = core
    start = m.pc
    for i, word in enumerate(stream):
        address = (start + 4 * i) & MASK64
        before = m.block.copy()
        f = execute(m, word, address, pe)
        if f is not None:
            raise_fault(m, f, address, before, on_fault)
            return i
    m.pc = (start + 4 * len(stream)) & MASK64
    return len(stream)


def check_args(state: object, pe: object, on_fault: object) -> None:
    """API misuse is a clear TypeError/ValueError, never a fault."""
    if not isinstance(state, State):
        raise TypeError(f"expected a ptojax State, got {type(state).__name__}")
    if isinstance(pe, bool) or not isinstance(pe, (int, np.integer)) or not 0 <= pe < tables.NUM_PES:
        raise ValueError(f"pe must be 0..{tables.NUM_PES - 1}, got {pe!r}")
    if on_fault not in ON_FAULT:
        raise ValueError(f"on_fault must be one of {ON_FAULT}, got {on_fault!r}")
    check_block(state.block)
    check_pool(state)


def word_list(words: int | np.integer[Any] | Iterable[int | np.integer[Any]]) -> list[int]:
    if isinstance(words, (int, np.integer)):
        words = [words]
    elif hasattr(words, "shape"):
        words = np.asarray(words).reshape(-1).tolist()
    out = []
    for i, w in enumerate(words):
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"word {i} is {type(w).__name__}; expected an int")
        if not 0 <= int(w) < 1 << 32:
            raise ValueError(f"word {i} = {int(w)} is not a 32-bit value (0..0xffffffff)")
        out.append(int(w))
    return out


def raise_fault(m: Machine, f: Fault, address: int, before: Block, on_fault: str) -> None:
    """Stop at the faulting word: PC stays on it; fault_address = data address
    of a memory fault, else the word's address. A post-commit trap keeps the
    committed (cleared) block; otherwise "abandon" discards the open block and
    "hold" keeps it as it was before the word."""
    m.fault = tables.FAULT_CODE[f.name]
    m.fault_address = (f.address if f.address is not None else address) & MASK64
    m.pc = address
    if f.name == POST_COMMIT.name:
        m.block = Block()
    elif on_fault == "abandon":
        m.block = Block()
    else:
        m.block = before


# ----------------------------------------------------------------- dispatch


def execute(m: Machine, word: int, address: int, pe: int) -> Optional[Fault]:
    """Decode one word (failure -> Fault_IllegalInstruction) and run its handler."""
    cmd = decode(word)
    if cmd is None:
        return ILLEGAL
    handler = HANDLERS[cmd.form.handler]
    return handler(m, cmd, word, address, pe)


# ----------------------------------------------------------------- lifecycle (encoding.md 3)


def op_of(cmd: Decoded) -> int:
    """Operation id of a BSTART form (the TSTORE.SPART variant has its own id)."""
    name = cmd.variant or cmd.mnemonic[len("BSTART."):]
    return tables.OP_ID[name]


def bstart(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """BSTART.<op> DataType: complete an open block first (continuation = this
    BSTART), then open a fresh header with BPC = this address."""
    if (address + 4) & 1:                       # odd fall-through continuation
        return INSTRUCTION_PC
    if m.block.active:
        f = complete(m, address, pe)
        if f is not None:
            return f
    m.block = Block(active=True, pc=address, op=op_of(cmd), dtype=cmd["DataType"])
    return None


def bstop(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """BSTOP: complete the open block (none open -> Fault_BundleControl)."""
    if not m.block.active:
        return BUNDLE_CONTROL
    return complete(m, (address + 4) & MASK64, pe)


def complete(m: Machine, continuation: int, pe: int) -> Optional[Fault]:
    """Bundle completion: continuation check, B.CATR DR check, the tile
    operation (all preflight before effects), then clear the block; B.CATR
    trap=1 raises Fault_BundlePostCommit after a successful commit."""
    b = m.block
    if continuation & 1:
        return INSTRUCTION_PC
    op = tables.OPS[b.op] if 0 <= b.op < len(tables.OPS) else None
    if b.catr_present and (b.catr >> 26) & 1 and (op is None or op[1] != "TLSU"):
        return BUNDLE_CONTROL                   # DR=1 only for TLSU (TEPL) blocks
    if op is not None:
        f = collective(m, b, op) if m.core else tile_operation(m, b, op, pe)
        if f is not None:
            return f
    trap = b.catr_present and (b.catr >> 19) & 1
    m.block = Block()
    return POST_COMMIT if trap else None


def block_mask(b: Block) -> int:
    """The block's common binding mask: the first B.IOT's, else the first B.IOS's,
    0 when nothing was recorded (header issue keeps the masks equal; a B.IOT
    issued after a B.IOS is compared with earlier B.IOTs only, E 4.6)."""
    if b.iots:
        return b.iots[0].mask & 0xF
    if b.ios:
        return b.ios[0][2] & 0xF
    return 0


def shared_tlsu_block(b: Block, op: tuple[str, str, int]) -> bool:
    """A TLSU block with a B.IOS: one collective action of the Core."""
    return op[1] == "TLSU" and bool(b.ios)


def participants(b: Block, op: tuple[str, str, int]) -> list[int]:
    """PEs that complete the block under run_core: the mask bits in order 0..3,
    PE0 alone for a zero mask; a Shared TLSU block runs once (its lowest PE)."""
    mask = block_mask(b)
    pes = [p for p in range(tables.NUM_PES) if mask & tables.pe_bit(p)] or [0]
    return pes[:1] if shared_tlsu_block(b, op) else pes


def collective(m: Machine, b: Block, op: tuple[str, str, int]) -> Optional[Fault]:
    """shared-decisions.md 2: every participating PE completes the block on its
    own view, in PE order, on the state its predecessors left; the first
    (lowest-numbered) fault is the collective's, and then no PE's effects stay."""
    snap = m.snapshot()
    try:
        for p in participants(b, op):
            m.cur = p
            f = tile_operation(m, b, op, p)
            if f is not None:
                m.restore(snap)
                return f
        return None
    finally:
        m.cur = 0


def zero_mask(b: Block) -> bool:
    """Only zero-mask bindings were seen: the block is a strict no-op."""
    return b.zero_seen and not b.iots and not b.ios


def tile_operation(m: Machine, b: Block, op: tuple[str, str, int], pe: int) -> Optional[Fault]:
    """Dispatch of the completed block (execution-model.md "Completion"): the
    zero-mask no-op, then the family that takes it (ptojax/families.py)."""
    if zero_mask(b):
        return None                             # C5.1 zero_mask (every family's step 0/1)
    if not transport.cube_selected(b):
        for family in ROUTED:
            assert family.selects is not None      # every routed family has one
            if family.selects(b, op):
                return family.complete(m, b, op, pe)
    return DEFAULT.complete(m, b, op, pe)


HANDLERS = {
    "ExecuteBundleStart": bstart,
    "ExecuteBundleStop": bstop,
    "SetBundleDataAttributes": b_datr,
    "SetBundleDimension": b_dim,
    "BindBundleScalarIO": b_ior,
    "BindBundleTileIO": b_iot,
    "BindBundleSharedIO": b_ios,
    "SetBundleFixedPointAttributes": b_fpatr,
    "SetBundleControlAttributes": b_catr,
}
