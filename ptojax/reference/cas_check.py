"""Any-serialization checker for MGATHER.CAS (state-and-transport.md D.5, G.5).

Duplicate-address MGATHER.CAS lanes serialize in an implementation-defined
order, so a correct executor may produce any of several final states.
`explains(initial_state, words, observed_state)` decides whether SOME legal
lane order produces exactly `observed_state`:

1. Run `words` on the oracle with the row-major order, recording the CAS's
   lanes (address, expected, replacement, destination Word) and GM before
   them. If the CAS never ran its lanes (a fault, a zero mask), the result is
   order-independent: the observed state must equal the oracle's.
2. Lanes at distinct addresses commute, so each address group is solved on
   its own: a depth-first search builds the group's order one lane at a time,
   extending only with a lane whose observed old value (low element bits of
   its destination Word) equals the current memory value; the lane then moves
   memory to its replacement if the value equals its expected value. Lanes
   with identical (observed, expected, replacement) are interchangeable and
   are searched as one class; dead states (remaining lanes per class, current
   value) are memoized; a class that leaves memory unchanged is run whole
   without branching (see serialize_group), so the search branches only on
   lanes that write. A complete order must leave the observed final value
   at the address.
3. The group orders, concatenated, form one execution order; the stream is
   re-run with that order forced and every leaf of the resulting State must
   equal the observed one (so everything else must match too).

Limits: one MGATHER.CAS bundle per stream (ValueError for none or several);
the search visits at most `max_nodes` states in all (past it: ok False,
undecided True); words after the CAS must not rewrite GM at its lane
addresses (the observed memory value is taken as the CAS's final value;
such a stream is reported undecided).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .. import tables
from ..result import RunResult
from ..state import MachineConfig, State, state_differences, tile_words
from .decode import decode
from .state import Machine
from .run import check_args, run_machine, word_list

if TYPE_CHECKING:
    from .mgather_cas import CasRecord, Lane

DEFAULT_MAX_NODES = 200_000


@dataclass
class CheckResult:
    ok: bool
    order: Optional[list[int]]     # a lane order (row-major lane indices) reproducing the state
    reason: str
    undecided: bool = False        # the search gave up (bound) or the stream is unsupported

    def __bool__(self) -> bool:
        return self.ok


class _Exhausted(Exception):
    pass


@dataclass
class _Budget:
    left: int

    def tick(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Exhausted


# ----------------------------------------------------------------- running


def _execute(state: State, stream: Sequence[int], pe: int, on_fault: str, cfg: Optional[MachineConfig],
             order: Optional[list[int]], trace: bool) -> tuple[RunResult, Optional[list[CasRecord]]]:
    m = Machine(state, cfg)
    m.cas_lane_order = "row-major"
    m.cas_forced_order = order
    m.cas_trace = [] if trace else None
    executed = run_machine(m, stream, int(pe), on_fault)
    return RunResult.from_state(m.to_state(), executed), m.cas_trace


def run_in_order(state: State, words: int | np.integer[Any] | Iterable[int | np.integer[Any]],
                 order: Iterable[int], pe: int = 0, *, on_fault: str = "abandon",
                 cfg: Optional[MachineConfig] = None) -> RunResult:
    """reference.run with the MGATHER.CAS lanes executed in the explicit `order`
    (a permutation of the row-major lane indices 0..n-1)."""
    check_args(state, pe, on_fault)
    return _execute(state, word_list(words), pe, on_fault, cfg, list(order), False)[0]


def _cas_bundles(state: State, stream: Sequence[int]) -> int:
    """MGATHER.CAS bundles the stream can complete: its BSTART.MGATHER.CAS words,
    plus an MGATHER.CAS block already open in `state`."""
    n = sum(1 for w in stream if (c := decode(w)) is not None and c.mnemonic == "BSTART.MGATHER.CAS")
    b = state.block
    if bool(np.asarray(b.active)) and int(np.asarray(b.op)) == tables.OP_ID["MGATHER.CAS"]:
        n += 1
    return n


# ----------------------------------------------------------------- comparing states


# ----------------------------------------------------------------- one address group


def serialize_group(initial: int, final: int, lanes: Iterable[tuple[int, int, int, int]],
                    budget: _Budget) -> Optional[list[int]]:
    """Order the lanes of one address so each reads its observed value and the
    memory ends at `final`; None if no order does. `lanes` holds
    (lane, observed, expected, replacement) with raw low element bits.

    Lanes with equal (observed, expected, replacement) are interchangeable and
    form one class. A pending class that observes the current value and
    leaves it unchanged (a failed compare, or a swap to the same value) is run
    whole at once, without branching: moving a memory-preserving lane to the
    earliest point where memory equals its observed value keeps every other
    lane's view, so if any completion exists, one with that move first does.
    The search therefore branches only on lanes that change memory.
    """
    classes: dict[tuple[int, int, int], list[int]] = {}
    for lane, obs, exp, rep in lanes:
        classes.setdefault((obs, exp, rep), []).append(lane)
    kinds = list(classes)                     # (observed, expected, replacement)
    members = [sorted(classes[k]) for k in kinds]

    def successors(counts: tuple[int, ...], cur: int) -> Iterator[tuple[int, int, tuple[int, ...], int]]:
        """(class, lanes taken, new counts, new value) moves from a state."""
        writes = []
        for ci, (obs, exp, rep) in enumerate(kinds):
            if counts[ci] and obs == cur:
                nxt = rep if cur == exp else cur
                if nxt == cur:                # memory-preserving: forced, whole class
                    yield ci, counts[ci], counts[:ci] + (0,) + counts[ci + 1:], cur
                    return
                writes.append((ci, nxt))
        for ci, nxt in writes:
            yield ci, 1, counts[:ci] + (counts[ci] - 1,) + counts[ci + 1:], nxt

    start = tuple(len(m) for m in members)
    dead = set()                              # (counts, value) with no completion
    stack = [(start, initial, successors(start, initial))]
    path: list[tuple[int, int]] = []          # (class, lanes taken) per depth
    while stack:
        counts, cur, it = stack[-1]
        if not any(counts):
            if cur == final:
                taken = [0] * len(kinds)
                order = []
                for ci, k in path:
                    order += members[ci][taken[ci]:taken[ci] + k]
                    taken[ci] += k
                return order
        else:
            descended = False
            for ci, k, nc, nxt in it:
                if (nc, nxt) in dead:
                    continue
                budget.tick()
                path.append((ci, k))
                stack.append((nc, nxt, successors(nc, nxt)))
                descended = True
                break
            if descended:
                continue
        dead.add((counts, cur))
        stack.pop()
        if path:
            path.pop()
    return None


# ----------------------------------------------------------------- the checker


def explains(initial_state: State, words: int | np.integer[Any] | Iterable[int | np.integer[Any]],
             observed_state: State, pe: int = 0, *, cfg: Optional[MachineConfig] = None, on_fault: str = "abandon",
             max_nodes: int = DEFAULT_MAX_NODES) -> CheckResult:
    """Does some legal serialization of the stream's MGATHER.CAS lanes produce
    exactly `observed_state`? See the module docstring for the algorithm."""
    check_args(initial_state, pe, on_fault)
    if not isinstance(observed_state, State):
        raise TypeError(f"observed_state must be a ptojax State, got {type(observed_state).__name__}")
    stream = word_list(words)
    bundles = _cas_bundles(initial_state, stream)
    if bundles == 0:
        raise ValueError("the stream holds no MGATHER.CAS bundle")
    if bundles > 1:
        raise ValueError(f"the stream holds {bundles} MGATHER.CAS bundles; the checker handles one")
    reference, trace = _execute(initial_state, stream, pe, on_fault, cfg, None, True)
    if not trace:
        diff = state_differences(reference.state, observed_state, limit=5)
        if diff:
            return CheckResult(False, None, "the MGATHER.CAS executed no lanes (fault "
                               f"{reference.fault}), so the result is order-independent, "
                               f"but the observed state differs in {', '.join(diff)}")
        return CheckResult(True, [], f"no lanes executed (fault {reference.fault}); states equal")
    rec = trace[0]
    n = rec.dtype.element_bytes
    mask = (1 << rec.dtype.bits) - 1
    final_gm = bytes(np.asarray(reference.state.gm).astype(np.uint8))
    if any(final_gm[l.address:l.address + n] != rec.gm_after[l.address:l.address + n]
           for l in rec.lanes):
        return CheckResult(False, None, "words after the MGATHER.CAS rewrite GM at its lane "
                           "addresses; the checker cannot see the CAS's final memory",
                           undecided=True)
    obs_gm = bytes(np.asarray(observed_state.gm).astype(np.uint8))
    obs = observed_state.tiles
    if (np.ndim(obs.words) != 3 or rec.pe >= np.shape(obs.base)[0]
            or rec.slot >= np.shape(obs.base)[1] or len(obs_gm) != len(rec.gm_before)):
        return CheckResult(False, None, "the observed State has other sizes than the initial one")
    dest, _ = tile_words(obs, rec.pe, rec.slot)
    groups: dict[int, list[Lane]] = {}
    for lane in rec.lanes:
        groups.setdefault(lane.address, []).append(lane)
    budget = _Budget(max_nodes)
    orders = []
    for address, lanes in groups.items():
        initial = int.from_bytes(rec.gm_before[address:address + n], "little")
        final = int.from_bytes(obs_gm[address:address + n], "little")
        spec = [(l.lane, int(dest[l.slot_word]) & mask, l.expected, l.replacement) for l in lanes]
        try:
            order = serialize_group(initial, final, spec, budget)
        except _Exhausted:
            return CheckResult(False, None, f"gave up after {max_nodes} search states at address "
                               f"{address:#x} ({len(lanes)} lanes)", undecided=True)
        if order is None:
            seen = [s[1] for s in spec]
            return CheckResult(False, None, f"no order of the {len(lanes)} lane(s) at address "
                               f"{address:#x} (lanes {[s[0] for s in spec]}) reads the observed "
                               f"old values {seen} starting from {initial:#x} and leaves the "
                               f"observed memory value {final:#x}")
        orders.append(order)
    order = [i for group in orders for i in group]
    replay, _ = _execute(initial_state, stream, pe, on_fault, cfg, order, False)
    diff = state_differences(replay.state, observed_state, limit=5)
    if diff:
        return CheckResult(False, None, f"order {order} reproduces the lane addresses' memory "
                           "and the observed old values, but the state still differs in "
                           f"{', '.join(diff)}")
    return CheckResult(True, order, f"lane order {order} reproduces the observed state "
                       f"({len(groups)} address group(s), {len(rec.lanes)} lanes)")
