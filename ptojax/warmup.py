"""A warm-up of the common programs into JAX's persistent compilation cache.

`warmup(configs, profiles)` runs small real programs through the public API
(`WARMUP_PROGRAMS`), so the cache that `compile_cache.ensure_compile_cache()`
turns on holds exactly the executables a user's first calls compile;
`ptojax warmup` renders it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Optional, Sequence

import numpy as np

from .compile_cache import MIN_COMPILE_SECS, ensure_compile_cache
from .executables import LOADED_EVENT, WRITTEN_EVENT
from . import golden
from .isa.asm import assemble
from .machine import run, run_core
from .state import PROFILES, preset, reset, write_gpr, write_memory

__all__ = ["WarmupProgram", "WarmupResult", "WARMUP_PROGRAMS", "DEFAULT_WARMUP_CONFIGS",
           "warmup_programs", "warmup"]

# ----------------------------------------------------------------- warm-up programs

DEFAULT_WARMUP_CONFIGS = ("tiny", "small")

_TLOAD_M = """\
BSTART.TLOAD FP16
B.DATR {ND2M16, DTYPE_NONE, Max}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a0, a1
B.IOT mask=1000, last, ->M<1>
BSTOP
"""

_TSTORE_M = """\
BSTART.TSTORE FP16
B.DATR {M162ND, DTYPE_NONE}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a2, a1
B.IOT M#1, mask=1000, last
BSTOP
"""


def _ordinary_tload(dt, base, stride, dst):
    return (f"BSTART.TLOAD {dt}\nB.DIM zero, 2, ->LB0\nB.DIM zero, 2, ->LB1\n"
            f"B.DIM zero, 2, ->LB2\nB.IOR {base}, {stride}\nB.IOT mask=1000, last, ->{dst}<1>\n"
            f"BSTOP\n")


# E7 of the MGATHER.CAS record: 2x2 lanes, S16 index, U8 expected/replacement
_CAS = (_ordinary_tload("S16", "a2", "a3", "T") + _ordinary_tload("U8", "a4", "a5", "T")
        + _ordinary_tload("U8", "a6", "a5", "U") + """\
BSTART.MGATHER.CAS U8
B.DATR {NORM, FP64, Max, EQ, Default, 0, 0}
B.DIM zero, 2, ->LB0
B.DIM zero, 2, ->LB1
B.IOT T#1, T#2, mask=1000
B.IOT U#1, mask=1000, last, ->M<1>
B.IOR a0
BSTOP
""")

# examples/tmatmul_fp16.s: A (2x3) and B (3x2) FP16 by CUBE TLOADs, D = A x B
_TMATMUL = _TLOAD_M + """\
BSTART.TLOAD FP16
B.DATR {ND2N8, DTYPE_NONE}
B.DIM zero, 2, ->LB0
B.DIM zero, 3, ->LB1
B.IOR a4, a5
B.IOT mask=1000, last, ->N<1>
BSTOP
BSTART.TMATMUL FP16
B.FPATR 0
B.DIM zero, 2, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 3, ->LB2
B.IOT M#1, N#1, mask=1000, last, ->T<1>
BSTOP
"""

# examples/coop_tmatmul.s: Shared A (20x4) and B (4x4) U16, a cooperative TMATMUL
_COOP = """\
BSTART.TLOAD U16
B.DIM zero, 4, ->LB0
B.DIM zero, 20, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a0, a1
B.IOS mask=1111, ->S1<2>
BSTOP
BSTART.TLOAD U16
B.DIM zero, 4, ->LB0
B.DIM zero, 4, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a2, a3
B.IOS mask=1111, ->S2<1>
BSTOP
BSTART.TMATMUL U16
B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0
B.DIM zero, 20, ->LB0
B.DIM zero, 4, ->LB1
B.DIM zero, 4, ->LB2
B.IOS S1, mask=1111
B.IOS S2, mask=1111
B.IOT mask=1111, last, ->T<2>
BSTOP
"""

_MATRIX_A = (0x100, "003c00400042004400450046")          # FP16 [[1, 2, 3], [4, 5, 6]]
_MATRIX_B = (0x140, "003800bc00340040003e0030")          # FP16 [[.5, -1], [.25, 2], [1.5, .125]]
# A[i][k] = 4i + k (U16, 20x4 at 0x100, row stride 8); B at 0x200 (4x4, row stride 8)
_COOP_GM = tuple((0x100 + 32 * r, b"".join(v.to_bytes(2, "little")
                                           for v in range(16 * r, 16 * r + 16)).hex())
                 for r in range(5)) + (
    (0x200, "0100010000000000000001000100000000000000010001000100000000000100"),)


@dataclasses.dataclass(frozen=True)
class WarmupProgram:
    """One warm-up program: assembly `text` run on a fresh State with `gm`
    ((address, hex bytes) pairs) and `gprs` ((pe, register, value) triples)
    through pj.run (`core=False`) or pj.run_core."""
    name: str
    description: str
    text: str
    gm: tuple = ()
    gprs: tuple = ()
    core: bool = False


WARMUP_PROGRAMS: tuple[WarmupProgram, ...] = (
    WarmupProgram("tload", "pj.run: a TLOAD bundle (one bundle, up to 16 words)", _TLOAD_M,
                  gm=(_MATRIX_A,), gprs=((0, "a0", 0x100), (0, "a1", 6))),
    WarmupProgram("tstore", "pj.run: TLOAD then a TSTORE bundle", _TLOAD_M + _TSTORE_M,
                  gm=(_MATRIX_A,), gprs=((0, "a0", 0x100), (0, "a1", 6), (0, "a2", 0x200))),
    WarmupProgram("mgather_cas", "pj.run: three TLOADs and an MGATHER.CAS bundle (17-32 words)",
                  _CAS,
                  gm=((0x100, "0a"), (0x103, "14"), (0x105, "1e"), (0x107, "28"),
                      (0x300, "f8fffbfffdffffff"), (0x310, "0a631e62"), (0x320, "64656667")),
                  gprs=((0, "a0", 0x108), (0, "a2", 0x300), (0, "a3", 4), (0, "a4", 0x310),
                        (0, "a5", 2), (0, "a6", 0x320))),
    WarmupProgram("tmatmul", "pj.run: two CUBE TLOADs and a TMATMUL bundle", _TMATMUL,
                  gm=(_MATRIX_A, _MATRIX_B),
                  gprs=((0, "a0", 0x100), (0, "a1", 6), (0, "a4", 0x140), (0, "a5", 4))),
    WarmupProgram("coop_tmatmul", "pj.run_core: two Shared TLOADs and a cooperative TMATMUL",
                  _COOP, gm=_COOP_GM,
                  gprs=tuple((pe, r, v) for pe in range(4)
                             for r, v in (("a0", 0x100), ("a1", 8), ("a2", 0x200), ("a3", 8))),
                  core=True),
)


@dataclasses.dataclass(frozen=True)
class WarmupResult:
    """What one warm-up step did: `seconds` wall time, `compiled` XLA compiles
    of at least MIN_COMPILE_SECS (`compile_seconds` in all), `loaded` executables
    read from the persistent cache, `written` new cache entries; `fault` and
    `executed` of the run (pj.ops.matmul steps: "Fault_None", 0)."""
    name: str
    config: str
    profile: str
    seconds: float
    compiled: int
    compile_seconds: float
    loaded: int
    written: int
    fault: str = "Fault_None"
    executed: int = 0

    @property
    def source(self) -> str:
        """"compiled", "cache" (loaded from the persistent cache) or "memory"
        (already compiled in this process: nothing to compile or load)."""
        if self.compiled:
            return "compiled"
        return "cache" if self.loaded else "memory"


def _state(prog: WarmupProgram, cfg):
    s = reset(cfg)
    for addr, data in prog.gm:
        s = write_memory(s, addr, bytes.fromhex(data))
    for pe, reg, value in prog.gprs:
        s = write_gpr(s, reg, value, pe=pe)
    return s


def _program_step(prog: WarmupProgram, config: str, profile: str):
    cfg = preset(config).replace(profile=profile)
    words = assemble(prog.text)

    def prepare():
        return _state(prog, cfg)

    def go(state):
        runner = run_core if prog.core else run
        r = runner(state, words, cfg=cfg)
        return r.fault, r.executed
    return prepare, go


def _matmul_step(profile: str):
    def go(_):
        a = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
        b = np.array([[0.5, -1], [0.25, 2], [1.5, 0.125]], np.float16)
        golden.matmul(a, b, dtype="FP16", profile=profile)
        return "Fault_None", 0
    return (lambda: None), go


def warmup_programs(configs=DEFAULT_WARMUP_CONFIGS, profiles=("portable", "ieee"),
                    matmul: bool = True, programs: Optional[Sequence[str]] = None,
                    ) -> list[tuple[str, str, str, Callable, Callable]]:
    """The warm-up steps: (name, config, profile, prepare, run) for every program of
    WARMUP_PROGRAMS (those named in `programs`, None: all) in every config and
    profile, then pj.ops.matmul once per profile (it picks its own private
    config: config "ops"). run(prepare()) does the work."""
    for c in configs:
        preset(c)                                      # ValueError on an unknown name
    for p in profiles:
        if p not in PROFILES:
            raise ValueError(f"unknown profile {p!r}; expected one of {', '.join(PROFILES)}")
    names = [prog.name for prog in WARMUP_PROGRAMS]
    for n in programs or ():
        if n not in names:
            raise ValueError(f"unknown warm-up program {n!r}; expected one of {', '.join(names)}")
    chosen = [prog for prog in WARMUP_PROGRAMS if programs is None or prog.name in programs]
    steps = [(prog.name, c, p, *_program_step(prog, c, p))
             for c in configs for p in profiles for prog in chosen]
    if matmul:
        steps += [("ops.matmul", "ops", p, *_matmul_step(p)) for p in profiles]
    return steps


class _Recorder:
    """Counts XLA compiles and persistent-cache events through jax.monitoring."""

    def __init__(self):
        self.active = False
        self.pending_hit = False
        self.compiled = self.loaded = self.written = 0
        self.compile_seconds = 0.0

    # parameters named as jax.monitoring's listener protocols name them
    def event(self, event: str, **_: str | int) -> None:
        if not self.active:
            return
        if event == "/jax/compilation_cache/cache_hits":
            self.pending_hit = True
        elif event in ("/jax/compilation_cache/cache_misses", WRITTEN_EVENT):  # recorded on a write
            self.written += 1
        elif event == LOADED_EVENT:              # an executor program, loaded without a compile
            self.loaded += 1

    def duration(self, event: str, duration_secs: float, **_: str | int) -> None:
        if not self.active or event != "/jax/core/compile/backend_compile_duration":
            return
        if self.pending_hit:
            self.pending_hit = False
            self.loaded += 1
        elif duration_secs >= MIN_COMPILE_SECS:
            self.compiled += 1
            self.compile_seconds += duration_secs

    def start(self):
        self.compiled = self.loaded = self.written = 0
        self.compile_seconds = 0.0
        self.pending_hit = False
        self.active = True

    def stop(self):
        self.active = False


_recorder: Optional[_Recorder] = None
_lock = threading.Lock()


def _get_recorder() -> _Recorder:
    global _recorder
    with _lock:
        if _recorder is None:
            import jax.monitoring
            rec = _Recorder()
            jax.monitoring.register_event_listener(rec.event)
            jax.monitoring.register_event_duration_secs_listener(rec.duration)
            _recorder = rec
    return _recorder


def warmup(configs=DEFAULT_WARMUP_CONFIGS, profiles=("portable", "ieee"), *, matmul: bool = True,
           programs: Optional[Sequence[str]] = None, progress: Optional[Callable] = None,
           ) -> list[WarmupResult]:
    """Compile (or load) the common programs into the persistent cache.

    Runs every WARMUP_PROGRAMS entry (those named in `programs`, None: all)
    in every config and profile, then
    pj.ops.matmul once per profile (matmul=False skips it). `progress(done,
    total, name, result)` is called before each step (result None) and after
    it (its WarmupResult). Returns the WarmupResults in order. The cache is the
    one ensure_compile_cache() turns on; with it off this only compiles.
    """
    ensure_compile_cache()
    steps = warmup_programs(configs, profiles, matmul=matmul, programs=programs)
    rec = _get_recorder()
    out = []
    for i, (name, config, profile, prepare, go) in enumerate(steps):
        label = f"{name} {config} {profile}"
        if progress:
            progress(i, len(steps), label, None)
        state = prepare()
        rec.start()
        t = time.perf_counter()
        try:
            fault, executed = go(state)
        finally:
            rec.stop()
        res = WarmupResult(name, config, profile, time.perf_counter() - t, rec.compiled,
                           rec.compile_seconds, rec.loaded, rec.written, fault, executed)
        out.append(res)
        if progress:
            progress(i + 1, len(steps), label, res)
    return out
