"""The guided tour behind `ptojax demo`, as data the command prints.

The tour: a 2x3 FP16 matrix in GM, TLOAD into a CUBE_M16 tile, TSTORE back,
a faulting TLOAD, TMATMUL in both numeric profiles, every program again on
the reference model, then a batch of random TLOAD bundles on pj.batch.run.
The functions below build the States and programs and run them;
`ptojax/cli/demo.py` prints the steps.

The TMATMUL results are checked against numpy computations written here,
not against pj.ops.matmul: that runs the model's own bundles, so it could
not catch the model being wrong.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .batch import run as run_batch
from . import reference, tables
from .isa import asm
from .machine import run
from .report import build_report
from .result import RunResult
from .state import MachineConfig, State, reset, state_differences, write_gpr, write_memory
from .tileview import TileView, read_tile

TLOAD = """\
BSTART.TLOAD FP16
B.DATR {{ND2M16, DTYPE_NONE, Max}}   ; ND -> CUBE_M16, pad with the FP16 maximum
B.DIM zero, 3, ->LB0                ; valid columns
B.DIM zero, 2, ->LB1                ; valid rows
B.IOR {base}, a1                    ; base address, row stride in bytes
B.IOT mask=1000, last, ->M<1>       ; destination: a Matrix-hand tile of 128 B on PE0
BSTOP
"""

TSTORE = """\
BSTART.TSTORE FP16
B.DATR {M162ND, DTYPE_NONE}         ; CUBE_M16 -> ND
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a2, a1                        ; to GM 0x200, same row stride
B.IOT M#1, mask=1000, last          ; source: the tile just loaded
BSTOP
"""

TLOAD_B = """\
BSTART.TLOAD FP16
B.DATR {ND2N8, DTYPE_NONE}          ; ND -> CUBE_N8 (B's layout), pad with zeros
B.DIM zero, 2, ->LB0                ; valid columns: N
B.DIM zero, 3, ->LB1                ; valid rows: K
B.IOR a4, a5                        ; base 0x140, row stride 4 bytes
B.IOT mask=1000, last, ->N<1>       ; destination: N#1 (tile 48), 128 B
BSTOP
"""

TMATMUL = """\
BSTART.TMATMUL FP16                 ; D = A x B, AType FP16 (no B.DATR: BType = AType)
B.FPATR 0                           ; required; all zero: no conversion, activation, maxima
B.DIM zero, 2, ->LB0                ; M
B.DIM zero, 2, ->LB1                ; N
B.DIM zero, 3, ->LB2                ; K
B.IOT M#1, N#1, mask=1000, last, ->T<1>   ; sources A, B; D: T#1 (tile 0), 128 B
BSTOP
"""

MATRIX_A = [[1, 2, 3], [4, 5, 6]]                          # the demo's FP16 A (2x3), GM 0x100
MATRIX_B = [[0.5, -1.0], [0.25, 2.0], [1.5, 0.125]]        # the demo's FP16 B (3x2), GM 0x140

MAX_BATCH_BYTES = 2 << 30       # the batch step's States fit in this


def matrix_a() -> np.ndarray:
    return np.array(MATRIX_A, np.float16)


def matrix_b() -> np.ndarray:
    return np.array(MATRIX_B, np.float16)


def ieee_matmul_fp16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """binary32 bits of the ieee profile's D = A x B for FP16 A, B, in numpy:
    each exact product (exact in float64) rounded once to float32, float32
    sums over ascending k from +0.0 (numpy keeps subnormals)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.zeros((a.shape[0], b.shape[1]), np.uint32)
    with np.errstate(all="ignore"):
        for i in range(a.shape[0]):
            for j in range(b.shape[1]):
                acc = np.float32(0.0)
                for k in range(a.shape[1]):
                    acc = np.float32(acc + np.float32(a64[i, k] * b64[k, j]))
                out[i, j] = np.array(acc, np.float32).view(np.uint32)
    return out


def portable_matmul_fp16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The portable profile's D words for FP16 A, B: the raw 16-bit patterns
    multiplied and summed as integers mod 2^64 (numpy uint64 arithmetic wraps)."""
    return a.view(np.uint16).astype(np.uint64) @ b.view(np.uint16).astype(np.uint64)


# ----------------------------------------------------------------- one program at a time


@dataclass
class Step:
    """One program run on pj.run: the State before it, its words, the result, the
    report of what changed (ptojax.report.build_report) and the seconds pj.run took."""
    before: State
    words: list
    result: RunResult
    cfg: MachineConfig
    report: dict
    seconds: float


def run_step(before: State, text: str, cfg: MachineConfig, config: str) -> Step:
    """Assemble `text` and run it on PE0 of `before`."""
    words = asm.assemble(text)
    t0 = time.perf_counter()
    r = run(before, words, cfg=cfg)
    seconds = time.perf_counter() - t0
    rep = build_report(before, r, words, model="jax", config=config, pe=0, on_fault="abandon",
                       profile=cfg.profile)
    return Step(before, words, r, cfg, rep, seconds)


def gm_state(cfg: MachineConfig) -> State:
    """A at GM 0x100 (row stride 6 bytes); a0 = 0x100 (source), a1 = 6 (row stride),
    a2 = 0x200 (store target), a3 = 0x101 (misaligned)."""
    s = write_memory(reset(cfg), 0x100, matrix_a().view(np.uint8).reshape(-1))
    for reg, v in (("a0", 0x100), ("a1", 6), ("a2", 0x200), ("a3", 0x101)):
        s = write_gpr(s, reg, v)
    return s


def unchanged_but_fault(before: State, after: State) -> bool:
    """Nothing moved but the fault register and the pc: a faulting bundle's effect."""
    return not state_differences(before, after, skip=("fault", "fault_address", "pc"))


def matmul_state(s0: State) -> State:
    """gm_state plus B at GM 0x140 (row stride 4 bytes): a4 = 0x140, a5 = 4."""
    sm = write_memory(s0, 0x140, matrix_b().view(np.uint8).reshape(-1))
    return write_gpr(write_gpr(sm, "a4", 0x140), "a5", 4)


def run_profiles(before: State, text: str, cfg: MachineConfig, config: str) -> dict:
    """{"portable": Step, "ieee": Step}: `text` in both numeric profiles, the two
    compiles in parallel."""
    cfgs = {"portable": cfg, "ieee": cfg.replace(profile="ieee")}
    steps = {}

    def run_profile(name):
        steps[name] = run_step(before, text, cfgs[name], config)

    other = threading.Thread(target=run_profile, args=("ieee",), name="ptojax-demo-ieee",
                             daemon=True)
    other.start()
    run_profile("portable")
    other.join()
    if "ieee" not in steps:
        raise RuntimeError("the ieee-profile run failed")
    return steps


def expected_d() -> dict:
    """numpy's D words of A x B per profile (64-bit words, as the tile holds them)."""
    a, b = matrix_a(), matrix_b()
    return {"portable": portable_matmul_fp16(a, b),
            "ieee": ieee_matmul_fp16(a, b).astype(np.uint64)}


def d_check(step: Step, want: np.ndarray) -> tuple[TileView, np.ndarray, bool]:
    """TMATMUL's destination T#1 after the step, its valid region's words, and
    whether the run completed with exactly the words `want`."""
    t = read_tile(step.result.state, tables.HAND_SLOTS * tables.HANDS.index("T"))
    got = np.array([[int(t.words[t.slot(i, j)]) for j in range(t.valid_columns)]
                    for i in range(t.valid_rows)], np.uint64)
    same = step.result.ok and got.shape == want.shape and np.array_equal(got, want)
    return t, got, same


def reference_run(step: Step) -> tuple[RunResult, bool]:
    """The step's program on pj.reference.run, and whether it agrees with pj.run
    (fault, executed count, every State leaf)."""
    ref = reference.run(step.before, step.words, cfg=step.cfg)
    r = step.result
    same = (ref.fault == r.fault and ref.executed == r.executed
            and not state_differences(ref.state, r.state))
    return ref, same


# ----------------------------------------------------------------- the batch


def batch_size(batch: int, cfg: MachineConfig) -> int:
    """`batch`, capped so that its States fit MAX_BATCH_BYTES."""
    return min(batch, max(1, MAX_BATCH_BYTES // cfg.state_bytes))


def _bundle(layout: str, pad: str, rows: int, cols: int, base: str) -> str:
    return (f"BSTART.TLOAD FP16\nB.DATR {{{layout}, DTYPE_NONE, {pad}}}\n"
            f"B.DIM zero, {cols}, ->LB0\nB.DIM zero, {rows}, ->LB1\nB.IOR {base}, a1\n"
            f"B.IOT mask=1000, last, ->M<4>\nBSTOP")


@dataclass
class Batch:
    """The batch step's input: one State (a 16x16 FP16 matrix at 0x400, a1 = 32,
    a0 = 0x400, a2 = 0x401) and a word stream per bundle. `rng` drew them; the
    oracle sample draws from it next."""
    state: State
    streams: list
    words: np.ndarray
    rng: np.random.Generator


def random_batch(cfg: MachineConfig, n: int, seed: int) -> Batch:
    """`n` TLOAD bundles of FP16 with random layout (ND2M16/ND2N8/ND2M32), PadValue
    and valid shape 1..16 x 1..16; about 5% from the misaligned base a2."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((16, 16)).astype(np.float16)
    sb = write_memory(reset(cfg), 0x400, m.view(np.uint8).reshape(-1))
    for reg, v in (("a0", 0x400), ("a1", 32), ("a2", 0x401)):
        sb = write_gpr(sb, reg, v)
    cache = {}
    streams = []
    for _ in range(n):
        key = (str(rng.choice(["ND2M16", "ND2N8", "ND2M32"])), str(rng.choice(tables.PADVALUES)),
               int(rng.integers(1, 17)), int(rng.integers(1, 17)),
               "a2" if rng.random() < 0.05 else "a0")
        if key not in cache:
            cache[key] = asm.assemble(_bundle(*key))
        streams.append(cache[key])
    return Batch(sb, streams, np.array(streams, np.uint32), rng)


class BackgroundRun:
    """pj.batch.run of a Batch on a thread, so its compile overlaps other work."""

    def __init__(self, b: Batch, cfg: MachineConfig):
        self._out: dict[str, Any] = {}      # the BatchResult, its seconds, or the exception
        self._thread = threading.Thread(target=self._run, args=(b, cfg),
                                        name="ptojax-demo-compile", daemon=True)
        self._thread.start()

    def _run(self, b, cfg):
        try:
            t0 = time.perf_counter()
            self._out["res"] = jax.block_until_ready(run_batch(b.state, b.words, cfg=cfg))
            self._out["s"] = time.perf_counter() - t0
        except BaseException as e:   # re-raised by join, in the caller's thread
            self._out["error"] = e

    def join(self):
        """(the BatchResult, the seconds of the first call: compile or cache load + run)."""
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["res"], self._out["s"]


def best_time(b: Batch, cfg: MachineConfig, repeats: int = 3):
    """(the last BatchResult, the best seconds of `repeats` calls of pj.batch.run)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        again = run_batch(b.state, b.words, cfg=cfg)
        jax.block_until_ready(again.state)
        best = min(best, time.perf_counter() - t0)
    return again, best


@dataclass
class OracleSample:
    """Bundles of the batch rerun on pj.reference.run."""
    picked: int             # how many
    faulting: int           # how many of them faulted on pj.batch.run
    agree: int              # how many final States (and faults) were identical
    seconds: float          # the reference model's mean seconds per bundle


def oracle_sample(b: Batch, res, faulting: int = 3, clean: int = 5) -> OracleSample:
    """Up to `faulting` faulting and `clean` clean bundles of `res`, drawn from b.rng."""
    n = len(b.streams)
    faulted = [i for i in range(n) if res.fault_code[i] != 0]
    ok = [i for i in range(n) if res.fault_code[i] == 0]
    pick = list(b.rng.permutation(faulted)[:faulting]) + list(b.rng.permutation(ok)[:clean])
    agree, t_ref = 0, 0.0
    for i in pick:
        t0 = time.perf_counter()
        ref = reference.run(b.state, b.streams[i])
        t_ref += (time.perf_counter() - t0) / len(pick)
        one = res[int(i)]
        agree += ref.fault == one.fault and not state_differences(ref.state, one.state)
    return OracleSample(len(pick), min(faulting, len(faulted)), agree, t_ref)
