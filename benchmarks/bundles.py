"""Bundles/s of pj.batch.run against the reference model, per TLOAD/TSTORE/MGATHER.CAS/matrix bundle.

Each bundle is a real instruction stream (BSTART .. BSTOP, 6-7 words) that
moves a full 16x16 tile (32x8 for CUBE_M32, which needs 32 rows) between GM
and a Local tile, or runs a 4x4 MGATHER.CAS, on the "tiny" config preset (256
payload Words per tile, so that 65536 States fit in about 1.6 GB):

* ordinary TLOAD / TSTORE of U32 and FP16 (RowMajor tiles);
* CUBE TLOAD ND2M16 / ND2N8 / ND2M32 and TSTORE M162ND / N82ND / M322ND of
  FP16; a store's source tile is loaded beforehand (reference model);
* BSTART.MGATHER.CAS U32 over 4x4 lanes: 16 distinct addresses (half of the
  compares succeed), and a duplicate-heavy variant (16 lanes on 2 addresses,
  lane i expecting i//2 and writing i//2+1, so in the default row-major lane
  order every compare succeeds and each lane sees the previous one's write);
  the Index/Expected/Replacement tiles are loaded beforehand (reference
  model, ordinary TLOADs).
* TMATMUL FP16 16x32x16 (M x K x N) in the portable and ieee profiles, S8
  (portable), and TGEMV FP16 1x32x16 (ieee): A and B loaded beforehand by
  CUBE TLOADs (reference model); these run on a 512-Word-tile config. Two
  add a B.FPATR epilogue: FP32 -> FP16 with ReLU, and S32 -> S8 with a B.IOR
  scale and offset plus a RowMax output.
* Cooperative TMATMUL FP16 (ADR 0100) with group_M = 64 (16 rows per PE)
  and 100 (32, 32, 32, 4 rows), K = 32, N = 16, both operands Shared
  (loaded beforehand by Shared TLOADs), run on the whole Core:
  pj.batch.run(..., core=True) against pj.reference.run_core; each bundle
  publishes one D fragment per active PE.

For every bundle and batch size one run measures, side by side:

* pj.batch.run on a batch of identical States (one per bundle), donate=True,
  cfg given, a warm-up call first, then the best of a few calls; the batch of
  States is built before the clock starts and jax.block_until_ready ends it;
* pj.reference.run, the plain-Python oracle, on the same bundle a few hundred
  times (per-bundle rate).

Every timed batch must finish with Fault_None in every State (checked), and
the first State of the smallest batch must equal the reference result, so a
fault is never counted as throughput.

With --baseline REV the same run also measures a baseline commit, side by
side: REV is checked out with `git worktree add --detach
/tmp/ptojax-baseline-<sha7>` (reused when it is already there at that
commit), and for every bundle the baseline's OWN benchmarks/bundles.py runs
in a subprocess (same batch sizes, repeats and reference runs, one bundle per
child, its JSON via --out) with the worktree first on PYTHONPATH and
sys.path; the child checks that ptojax.__file__ lies in the worktree before
it starts. The current tree's points for a bundle and the baseline child for
that bundle run one right after the other, in alternating order (now, base;
base, now; ...), so machine noise hits both alike. The table then gives, per
(bundle, batch), both reference rates, both pj.batch.run rates and the ratio
now / base; the JSON keeps the current rows, every child's raw result and the
merged rows ("comparison").

    python benchmarks/bundles.py               # 1 .. 65536 States (several minutes)
    python benchmarks/bundles.py --quick       # 1, 16, 256
    python benchmarks/bundles.py --max-batch 4096 --out r.json
    python benchmarks/bundles.py --batches 4096,16384 --baseline 8d18aa7
    python benchmarks/bundles.py --config asl --batches 32,256   # the model's own bounds

--config NAME runs the bundles on another preset (small; asl, the model's own
bounds); the matrix bundles use it too where its tiles hold their operands.
--versus NAME also runs every bundle on a second preset in the same run, its
points right after (or, every other bundle, right before) the first preset's,
and gives per bundle and batch size the ratio config / versus:

    python benchmarks/bundles.py --config asl --versus tiny --batches 256

The last table gives every preset's bytes per State and how many States fit
in 16 GiB.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import _checkout  # noqa: E402  (benchmarks/_checkout.py)
BATCHES = (1, 16, 256, 4096, 16384, 65536)
QUICK_BATCHES = (1, 16, 256)
PRESET = "tiny"

SRC, DST = 0x400, 0x800          # GM: source matrix, store target
# name -> (op, layout code for B.DATR or None, dtype, rows, cols, size code, hand)
BUNDLES = {
    "TLOAD U32 16x16":          ("TLOAD", None, "U32", 16, 16, 4, "T"),
    "TLOAD FP16 16x16":         ("TLOAD", None, "FP16", 16, 16, 3, "T"),
    "TLOAD ND2M16 FP16 16x16":  ("TLOAD", "ND2M16", "FP16", 16, 16, 3, "M"),
    "TLOAD ND2N8 FP16 16x16":   ("TLOAD", "ND2N8", "FP16", 16, 16, 3, "N"),
    "TLOAD ND2M32 FP16 32x8":   ("TLOAD", "ND2M32", "FP16", 32, 8, 3, "M"),
    "TSTORE U32 16x16":         ("TSTORE", None, "U32", 16, 16, 4, "T"),
    "TSTORE FP16 16x16":        ("TSTORE", None, "FP16", 16, 16, 3, "T"),
    "TSTORE M162ND FP16 16x16": ("TSTORE", "M162ND", "FP16", 16, 16, 3, "M"),
    "TSTORE N82ND FP16 16x16":  ("TSTORE", "N82ND", "FP16", 16, 16, 3, "N"),
    "TSTORE M322ND FP16 32x8":  ("TSTORE", "M322ND", "FP16", 32, 8, 3, "M"),
    # relayout codes: an FP64 tile (B.DATR DataType 0) in the code's layout
    "TLOAD ND2NZ FP64 16x16":   ("TLOAD", "ND2NZ", "FP64", 16, 16, 5, "T"),
    "TLOAD ND2DN FP64 16x16":   ("TLOAD", "ND2DN", "FP64", 16, 16, 5, "T"),
    "TSTORE NZ FP64 16x16":     ("TSTORE", "ND2NZ", "FP64", 16, 16, 5, "T"),
    "MGATHER.CAS U32 4x4":      ("MGATHER.CAS", None, "U32", 4, 4, 1, "U"),
    "MGATHER.CAS U32 4x4 dup":  ("MGATHER.CAS", None, "U32", 4, 4, 1, "U"),
}
# matrix bundles: name -> (op, dtype, M, K, N, profile); A (CUBE_M16) in T#1 and B
# (CUBE_N8) in T#2 are loaded beforehand, D goes to hand M. They run on MATRIX_CFG
# (512-Word tiles: a 16x32 FP16 A) in the named numeric profile.
MATRIX = {
    "TMATMUL FP16 16x32x16 portable": ("TMATMUL", "FP16", 16, 32, 16, "portable"),
    "TMATMUL FP16 16x32x16 ieee":     ("TMATMUL", "FP16", 16, 32, 16, "ieee"),
    "TMATMUL S8 16x32x16 portable":   ("TMATMUL", "S8", 16, 32, 16, "portable"),
    "TGEMV FP16 1x32x16 ieee":        ("TGEMV", "FP16", 1, 32, 16, "ieee"),
    "TMATMUL S8 16x32x16 quant+RowMax": ("TMATMUL", "S8", 16, 32, 16, "portable"),
    "TMATMUL FP16 16x32x16 FP16+ReLU": ("TMATMUL", "FP16", 16, 32, 16, "portable"),
}
# B.FPATR epilogues of matrix bundles: name -> (B.FPATR line, extra lines, GPR a2):
# S32 -> S8 with an FP19 scale 1.0 and offset -3 from B.IOR, and RowMax into hand U;
# FP32 -> FP16 with ReLU
POST = {
    "TMATMUL S8 16x32x16 quant+RowMax": ("B.FPATR 3, 0, 0, 1, 0, 0, 0, 0, 0",
                                         ["B.IOR a2", "B.IOT mask=1000, last, ->U<1>"],
                                         (0x3F800000 >> 13) << 13 | (-3 & 0x1FF) << 37),
    "TMATMUL FP16 16x32x16 FP16+ReLU": ("B.FPATR 1, 1, 0, 0, 0, 0, 0, 0, 0", [], None),
}
# cooperative bundles (run_core): name -> (dtype, group_M, K, N, profile); Shared A
# (group_M x K) in S1 and B (K x N) in S2, one D fragment per active PE in hand M
COOP = {
    "COOP TMATMUL FP16 64x32x16 portable":  ("FP16", 64, 32, 16, "portable"),
    "COOP TMATMUL FP16 100x32x16 portable": ("FP16", 100, 32, 16, "portable"),
    "COOP TMATMUL FP16 64x32x16 ieee":      ("FP16", 64, 32, 16, "ieee"),
}
for _name, (_op, _dt, _m, _k, _n, _p) in MATRIX.items():
    BUNDLES[_name] = (_op, "matrix", _dt, _m, _n, 2, "M")
for _name, (_dt, _m, _k, _n, _p) in COOP.items():
    BUNDLES[_name] = ("TMATMUL", "coop", _dt, _m, _n, 4, "M")


def matrix_config(pj, name, base=None):
    """The config a matrix or cooperative bundle runs on: `base` (the --config
    preset) in the bundle's profile when its tiles and Shared records hold the
    operands, else a 512-Word-tile config (a 16x32 FP16 A; tiny's 256 do not)."""
    coop = name in COOP
    profile = COOP[name][4] if coop else MATRIX[name][5]
    if base is not None and base.tile_words >= 512 and (
            not coop or (base.shared_words >= 4096 and base.shared_slots >= 2)):
        return base.replace(profile=profile, gm_bytes=max(base.gm_bytes, 16384 if coop else 0))
    if coop:   # room for a 128x32 FP16 Shared A and a 32-row FP32 fragment
        return pj.MachineConfig(tile_words=512, hand_slots=2, shared_slots=2, shared_words=4096,
                                gm_bytes=16384, profile=profile)
    return pj.MachineConfig(tile_words=512, hand_slots=2, shared_slots=1, profile=profile)


# MGATHER.CAS lane addresses: "distinct" or "dup" (see the module docstring)
CAS_LANES = {"MGATHER.CAS U32 4x4": "distinct", "MGATHER.CAS U32 4x4 dup": "dup"}
LOAD_OF = {"M162ND": "ND2M16", "N82ND": "ND2N8", "M322ND": "ND2M32", None: None,
           "ND2NZ": "ND2NZ"}          # a relayout TSTORE stores the tile its code loads
CUBE_CODES = ("ND2M16", "ND2N8", "ND2M32", "M162ND", "N82ND", "M322ND")


def _elem_bytes(dtype):
    return {"U32": 4, "FP16": 2, "FP64": 8}[dtype]


def program(op, layout, dtype, rows, cols, size, hand):
    """Assembly text of one bundle (base in a0, row stride in a1; MGATHER.CAS:
    Index T#1, Expected T#2, Replacement M#1, base a0)."""
    if op == "MGATHER.CAS":
        return "\n".join([f"BSTART.MGATHER.CAS {dtype}", f"B.DIM zero, {cols}, ->LB0",
                          f"B.DIM zero, {rows}, ->LB1", "B.IOT T#1, T#2, mask=1000",
                          f"B.IOT M#1, mask=1000, last, ->{hand}<{size}>", "B.IOR a0", "BSTOP"])
    lines = [f"BSTART.{op} {dtype}"]
    if layout:       # a relayout code takes DataType 0 (FP64), a CUBE one DTYPE_NONE
        lines.append(f"B.DATR {{{layout}, {'DTYPE_NONE' if layout in CUBE_CODES else 'FP64'}, Zero}}")
    lines += [f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {rows}, ->LB1", "B.IOR a0, a1"]
    if op == "TLOAD":
        lines.append(f"B.IOT mask=1000, last, ->{hand}<{size}>")
    else:
        lines.append(f"B.IOT {hand}#1, mask=1000, last")
    lines.append("BSTOP")
    return "\n".join(lines)


def matrix_program(name):
    op, dtype, m, k, n, _ = MATRIX[name]
    fpatr, extra, _ = POST.get(name, ("B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0", [], None))
    d = "B.IOT T#1, T#2, mask=1000, ->M<4>" if extra else "B.IOT T#1, T#2, mask=1000, last, ->M<4>"
    return "\n".join([f"BSTART.{op} {dtype}", fpatr, f"B.DIM zero, {m}, ->LB0",
                      f"B.DIM zero, {n}, ->LB1", f"B.DIM zero, {k}, ->LB2", d, *extra, "BSTOP"])


def coop_program(name):
    dtype, g, k, n, _ = COOP[name]
    return "\n".join([f"BSTART.TMATMUL {dtype}", "B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0",
                      f"B.DIM zero, {g}, ->LB0", f"B.DIM zero, {n}, ->LB1", f"B.DIM zero, {k}, ->LB2",
                      "B.IOS S1, mask=1111", "B.IOS S2, mask=1111",
                      "B.IOT mask=1111, last, ->M<5>", "BSTOP"])


def coop_state(pj, cfg, name, rng):
    """A cooperative bundle's State: Shared A (S1) and B (S2) filled by Shared
    TLOADs on the Core (reference model) from small random FP16 values."""
    dtype, g, k, n, _ = COOP[name]
    s = pj.reset(cfg)
    rows_a = 128 if g > 64 else 64
    for sid, (rows, cols, vr), base in ((1, (rows_a, k, g), 0), (2, (k, n, k), 8192)):
        vals = rng.integers(-8, 9, (vr, cols)).astype(np.float16)
        s = pj.write_memory(s, base, vals.view(np.uint8).tobytes())
        size = (rows * cols * 2).bit_length() - 7          # TSize = rows x cols FP16
        text = "\n".join([f"BSTART.TLOAD {dtype}", f"B.DIM zero, {cols}, ->LB0",
                          f"B.DIM zero, {vr}, ->LB1", f"B.DIM zero, {cols}, ->LB2",
                          f"B.IOS mask=1111, ->S{sid}<{size}>", "BSTOP"])
        for pe in range(4):   # every PE's GPRs address its quarter of the rows
            s = pj.write_gpr(s, "a0", base, pe=pe)
            s = pj.write_gpr(s, "a1", cols * 2, pe=pe)
        text = text.replace("BSTOP", "B.IOR a0, a1\nBSTOP")
        r = pj.reference.run_core(s, pj.asm.assemble(text), cfg=cfg)
        if r.fault != "Fault_None":
            raise RuntimeError(f"{name}: loading Shared S{sid} faulted: {r.fault}")
        s = r.state
    return s, None


def matrix_state(pj, cfg, name, rng):
    """A matrix bundle's State: A (M x K, ND2M16) and B (K x N, ND2N8) loaded by
    CUBE TLOADs (reference model) from random small values in GM."""
    _, dtype, m, k, n, _ = MATRIX[name]
    s = pj.reset(cfg)
    for rows, cols, layout in ((m, k, "ND2M16"), (k, n, "ND2N8")):
        vals = rng.integers(-8, 9, (rows, cols))
        data = (vals.astype(np.float16).view(np.uint8) if dtype == "FP16"
                else vals.astype(np.int8).view(np.uint8))
        eb = 2 if dtype == "FP16" else 1
        s = pj.write_gpr(pj.write_gpr(pj.write_memory(s, SRC, data.tobytes()), "a0", SRC), "a1", cols * eb)
        text = "\n".join([f"BSTART.TLOAD {dtype}", f"B.DATR {{{layout}, DTYPE_NONE, Zero}}",
                          f"B.DIM zero, {cols}, ->LB0", f"B.DIM zero, {rows}, ->LB1", "B.IOR a0, a1",
                          "B.IOT mask=1000, last, ->T<4>", "BSTOP"])
        r = pj.reference.run(s, pj.asm.assemble(text), cfg=cfg)
        if r.fault != "Fault_None":
            raise RuntimeError(f"{name}: loading an operand faulted: {r.fault}")
        s = r.state
    param = POST.get(name, (None, None, None))[2]
    if param is not None:
        s = pj.write_gpr(s, "a2", param)
    return s, None


def bundle_words(pj, name):
    """A bundle's instruction words."""
    op, layout, dtype, rows, cols, size, hand = BUNDLES[name]
    return pj.asm.assemble(matrix_program(name) if name in MATRIX else coop_program(name)
                           if name in COOP else program(op, layout, dtype, rows, cols, size, hand))


def start_state(pj, cfg, name, rng):
    """The State a bundle runs on: GM holds a random matrix at SRC; a store's
    source tile is loaded from it first (reference model), then a0 = DST."""
    op, layout, dtype, rows, cols, size, hand = BUNDLES[name]
    if op == "MGATHER.CAS":
        return cas_state(pj, cfg, name, rng)
    if name in MATRIX:
        return matrix_state(pj, cfg, name, rng)
    if name in COOP:
        return coop_state(pj, cfg, name, rng)
    eb = _elem_bytes(dtype)
    data = rng.integers(0, 256, rows * cols * eb, dtype=np.uint8)
    if dtype == "FP16":   # finite values only, so the bytes are ordinary numbers
        data = rng.standard_normal(rows * cols).astype(np.float16).view(np.uint8)
    s = pj.write_memory(pj.reset(cfg), SRC, data)
    s = pj.write_gpr(pj.write_gpr(s, "a0", SRC), "a1", cols * eb)
    if op == "TSTORE":
        load = pj.asm.assemble(program("TLOAD", LOAD_OF[layout], dtype, rows, cols, size, hand))
        r = pj.reference.run(s, load)
        if r.fault != "Fault_None":
            raise RuntimeError(f"{name}: loading the source tile faulted: {r.fault}")
        s = pj.write_gpr(r.state, "a0", DST)
    return s, data


def cas_state(pj, cfg, name, rng):
    """An MGATHER.CAS bundle's State: Index (T#1), Expected (T#2) and
    Replacement (M#1) U32 tiles loaded by ordinary TLOADs (reference model)
    from GM at SRC, lane memory at DST, a0 = DST."""
    _, _, dtype, rows, cols, _, _ = BUNDLES[name]
    n = rows * cols
    u32 = np.uint32
    if CAS_LANES[name] == "dup":                 # 2 addresses, chains i//2 -> i//2+1
        disp = (np.arange(n) % 2 * 4).astype(u32)
        memory = np.zeros(2, u32)
        expected = (np.arange(n) // 2).astype(u32)
        replacement = expected + u32(1)
    else:                                        # 16 distinct words, every other compare hits
        disp = (rng.permutation(n) * 4).astype(u32)
        memory = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(u32)
        expected = np.where(np.arange(n) % 2 == 0, memory[disp // 4],
                            rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(u32))
        replacement = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(u32)
    s = pj.reset(cfg)
    for values, hand in ((disp, "T"), (expected, "T"), (replacement, "M")):
        s = pj.write_gpr(pj.write_gpr(pj.write_memory(s, SRC, values.astype("<u4").view(np.uint8)),
                                      "a0", SRC), "a1", cols * 4)
        r = pj.reference.run(s, pj.asm.assemble(program("TLOAD", None, dtype, rows, cols, 1, hand)))
        if r.fault != "Fault_None":
            raise RuntimeError(f"{name}: loading a source tile faulted: {r.fault}")
        s = r.state
    s = pj.write_memory(s, DST, memory.astype("<u4").view(np.uint8))
    return pj.write_gpr(s, "a0", DST), memory


def same_state(a, b):
    from ptojax.state import state_differences
    return not state_differences(a, b)


def time_reference(pj, s, words, n, cfg, core=False):
    run = pj.reference.run_core if core else pj.reference.run
    run(s, words, cfg=cfg)     # first call: imports, caches
    t0 = time.perf_counter()
    for _ in range(n):
        r = run(s, words, cfg=cfg)
    dt = time.perf_counter() - t0
    return n / dt, r


def make_batch(jax, s, B):
    """B copies of State s as fresh device buffers (donated to pj.batch.run)."""
    import jax.numpy as jnp
    with jax.enable_x64(True):
        out = jax.tree_util.tree_map(lambda a: jnp.array(jnp.broadcast_to(a, (B,) + a.shape)), s)
    return jax.block_until_ready(out)


def time_batch(pj, jax, s, words, B, repeats, cfg, core=False):
    """(best seconds, first-call seconds, last BatchResult) of pj.batch.run, donate=True.

    The time includes pj.batch.run's host-side work (padding the words,
    checking the config against State 0), which dominates tiny batches.
    """
    w = np.broadcast_to(np.asarray(words, np.uint32), (B, len(words))).copy()
    times = []
    res = None
    for _ in range(repeats + 1):            # call 0 is the warm-up
        states = make_batch(jax, s, B)
        del res
        t0 = time.perf_counter()
        res = pj.batch.run(states, w, donate=True, cfg=cfg, core=core)
        jax.block_until_ready(res.state)
        times.append(time.perf_counter() - t0)
        del states
        if (res.fault_code != 0).any():
            tally = collections.Counter(res.faults)
            raise RuntimeError(f"batch of {B}: not every bundle succeeded: {dict(tally)}")
        if (res.executed != len(words)).any():
            raise RuntimeError(f"batch of {B}: executed {set(res.executed.tolist())} words, "
                               f"expected {len(words)}")
    return min(times[1:]), times[0], res


# The baseline child: put the worktree first on sys.path, check that ptojax comes
# from there, then run the worktree's own benchmarks/bundles.py as __main__.
_CHILD = """\
import runpy, sys
from pathlib import Path
tree = Path(sys.argv[1]).resolve()
script = tree / "benchmarks" / "bundles.py"
sys.path[:0] = [str(script.parent), str(tree)]
import ptojax
f = Path(ptojax.__file__).resolve()
if tree not in f.parents:
    sys.exit(f"ptojax imported from {f}, not from {tree}")
print(f"ptojax_file: {f}", file=sys.stderr, flush=True)
sys.argv = [str(script)] + sys.argv[2:]
runpy.run_path(str(script), run_name="__main__")
"""


def run_baseline(tree: Path, sha: str, name: str, sizes, repeats: int, ref_runs: int,
                 quiet: bool, config: str = PRESET) -> dict:
    """The baseline's benchmarks/bundles.py for one bundle in a subprocess: its JSON
    result, plus "ptojax_file" and "process_s" (or {"bundle", "error"})."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tree)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    fd, out = tempfile.mkstemp(prefix="ptojax-bundles-base-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-c", _CHILD, str(tree), "--bundles", name,
           "--batches", ",".join(str(b) for b in sizes), "--repeats", str(repeats),
           "--reference-runs", str(ref_runs), "--out", out] + (["--quiet"] if quiet else []) \
        + (["--config", config] if config != PRESET else [])
    tail = collections.deque(maxlen=5)
    pj_file = None
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            line = line.rstrip("\n")
            if line.startswith("ptojax_file: "):
                pj_file = line.split(": ", 1)[1]
                continue
            tail.append(line)
            if not quiet:
                print(f"  [base {sha[:7]}]{line}", file=sys.stderr, flush=True)
        rc = p.wait()
        if rc:
            return {"bundle": name, "error": f"exit {rc}: " + " | ".join(tail)}
        if pj_file is None or tree not in Path(pj_file).parents:
            return {"bundle": name, "error": f"child's ptojax_file {pj_file!r} not in {tree}"}
        rec = json.loads(Path(out).read_text())
    finally:
        Path(out).unlink(missing_ok=True)
    rec["ptojax_file"] = pj_file
    rec["process_s"] = time.perf_counter() - t0
    return rec


def compare(now: dict, base_runs) -> list:
    """One merged row per (bundle, batch) of `now` (a result with "rows" and
    "summary"): both reference rates, both pj.batch.run rates and now / base
    (None where the baseline has no such point)."""
    base_rate, base_ref = {}, {}
    for b in base_runs:
        for r in b.get("rows", ()):
            base_rate[r["bundle"], r["batch"]] = r["bundles_per_s"]
        for sm in b.get("summary", ()):
            base_ref[sm["bundle"]] = sm["reference_bundles_per_s"]
    ref = {sm["bundle"]: sm["reference_bundles_per_s"] for sm in now["summary"]}
    order = {sm["bundle"]: i for i, sm in enumerate(now["summary"])}
    out = []
    for r in sorted(now["rows"], key=lambda r: (order.get(r["bundle"], len(order)), r["batch"])):
        b = base_rate.get((r["bundle"], r["batch"]))
        out.append({"bundle": r["bundle"], "batch": r["batch"],
                    "reference_bundles_per_s": ref.get(r["bundle"]),
                    "baseline_reference_bundles_per_s": base_ref.get(r["bundle"]),
                    "bundles_per_s": r["bundles_per_s"], "baseline_bundles_per_s": b,
                    "ratio": r["bundles_per_s"] / b if b else None})
    return out


def compare_by_batch(comparison) -> list:
    """Per batch size: how many bundles, the lowest now / base and its geometric mean."""
    out = []
    for B in sorted({c["batch"] for c in comparison}):
        rs = [c["ratio"] for c in comparison if c["batch"] == B and c["ratio"]]
        out.append({"batch": B, "bundles": len(rs), "min_ratio": min(rs) if rs else None,
                    "geomean_ratio": float(np.exp(np.mean(np.log(rs)))) if rs else None})
    return out


def _fmt_rate(x):
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def versus_ratios(rows, versus_rows) -> list:
    """Per (bundle, batch) of both presets: both rates and rows / versus_rows."""
    other = {(r["bundle"], r["batch"]): r["bundles_per_s"] for r in versus_rows}
    return [{"bundle": r["bundle"], "batch": r["batch"], "bundles_per_s": r["bundles_per_s"],
             "versus_bundles_per_s": other[r["bundle"], r["batch"]],
             "ratio": r["bundles_per_s"] / other[r["bundle"], r["batch"]]}
            for r in rows if (r["bundle"], r["batch"]) in other]


def print_tables(result):
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    meta = result["meta"]
    sizes = meta["batch_sizes"]
    t = Table(title=f"Bundles/s: pj.batch.run ({meta['preset']} preset, donate=True, best of "
                    f"{meta['repeats']}) vs pj.reference.run on {meta['backend']}")
    t.add_column("bundle")
    t.add_column("words", justify="right")
    t.add_column("reference", justify="right")
    for b in sizes:
        t.add_column(f"B={b}", justify="right")
    t.add_column("best / ref", justify="right")
    for sm in result["summary"]:
        rates = {r["batch"]: r["bundles_per_s"] for r in result["rows"] if r["bundle"] == sm["bundle"]}
        t.add_row(sm["bundle"], str(sm["words"]), _fmt_rate(sm["reference_bundles_per_s"]),
                  *(_fmt_rate(rates[b]) if b in rates else "-" for b in sizes),
                  f"{sm['ratio']:,.0f}x")
    console.print(t)
    if result.get("comparison") is not None:
        base = meta["baseline"]
        c = Table(title=f"Bundles/s now ({meta['commit']}) vs baseline {base['rev']} "
                        f"({base['sha'][:7]}), measured in the same run")
        for col in ("bundle", "B", "ref now", "ref base", "now", "base", "now / base"):
            c.add_column(col, justify="left" if col == "bundle" else "right")
        for r in result["comparison"]:
            c.add_row(r["bundle"], str(r["batch"]),
                      *(_fmt_rate(r[k]) if r[k] is not None else "-"
                        for k in ("reference_bundles_per_s", "baseline_reference_bundles_per_s",
                                  "bundles_per_s", "baseline_bundles_per_s")),
                      f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-")
        console.print(c)
        for g in result["comparison_by_batch"]:
            if g["bundles"]:
                console.print(f"  B={g['batch']}: now / base lowest {g['min_ratio']:.2f}x, "
                              f"geometric mean {g['geomean_ratio']:.2f}x over {g['bundles']} bundles")
        for b in result["baseline_runs"]:
            if "error" in b:
                console.print(f"  baseline {b['bundle']}: {b['error']}")
    if result.get("versus") is not None:
        vs = result["versus"]
        v = Table(title=f"Bundles/s on {meta['preset']} vs {vs['preset']}, measured in the same run")
        for col in ("bundle", "B", meta["preset"], vs["preset"], f"{meta['preset']} / {vs['preset']}"):
            v.add_column(col, justify="left" if col == "bundle" else "right")
        for r in vs["ratios"]:
            v.add_row(r["bundle"], str(r["batch"]), _fmt_rate(r["bundles_per_s"]),
                      _fmt_rate(r["versus_bundles_per_s"]), f"{r['ratio']:.2f}")
        console.print(v)
    p = Table(title="Per-State memory of the config presets")
    for c in ("preset", "gm_bytes", "tile slots x Words", "bytes per State", "States in 16 GiB"):
        p.add_column(c, justify="left" if c == "preset" else "right")
    for name, d in result["presets"].items():
        p.add_row(name, str(d["gm_bytes"]), f"{d['local_slots']} x {d['tile_words']}",
                  f"{d['state_bytes']:,}", f"{(16 << 30) // d['state_bytes']:,}")
    console.print(p)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ptojax-bench-bundles", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"batch sizes {QUICK_BATCHES} only, "
                    "fewer repeats and reference runs")
    ap.add_argument("--batches", default=None, metavar="LIST",
                    help="comma-separated batch sizes (default the quick or full ladder)")
    ap.add_argument("--max-batch", type=int, default=None,
                    help=f"largest batch (default {BATCHES[-1]}; --quick {QUICK_BATCHES[-1]})")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per point (default 3; --quick 2)")
    ap.add_argument("--reference-runs", type=int, default=None,
                    help="timed pj.reference.run calls per bundle (default 300; --quick 30)")
    ap.add_argument("--bundles", default=None,
                    help="comma-separated subset of bundle names (default all)")
    ap.add_argument("--config", default=PRESET, metavar="NAME",
                    help=f"config preset the bundles run on (default {PRESET}; e.g. small, asl: "
                         "the model's own bounds); matrix bundles whose operands do not fit its "
                         "tiles run on a 512-Word-tile config")
    ap.add_argument("--versus", default=None, metavar="NAME",
                    help="also run every bundle on this preset in the same run, alternating with "
                         "--config bundle by bundle, and report the ratio config / versus")
    ap.add_argument("--out", default="bench-results/bundles.json", help="JSON output path")
    ap.add_argument("--quiet", action="store_true", help="no tables on stdout")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also measure this commit with its own benchmarks/bundles.py (a detached "
                         "git worktree in /tmp), alternating with this tree bundle by bundle")
    args = ap.parse_args(argv)

    sizes = QUICK_BATCHES if args.quick else BATCHES
    if args.batches:
        try:
            sizes = tuple(sorted({int(x) for x in args.batches.split(",") if x.strip()}))
        except ValueError:
            ap.error(f"--batches {args.batches!r}: expected comma-separated ints")
        if not sizes or sizes[0] < 1:
            ap.error("--batches: sizes must be at least 1")
    max_batch = args.max_batch or sizes[-1]
    if max_batch < 1:
        ap.error("--max-batch must be at least 1")
    sizes = [b for b in sizes if b <= max_batch] or [max_batch]
    if args.max_batch and args.max_batch not in sizes and args.max_batch > sizes[-1]:
        sizes.append(args.max_batch)
    repeats = args.repeats or (2 if args.quick else 3)
    ref_runs = args.reference_runs or (30 if args.quick else 300)
    names = list(BUNDLES)
    if args.bundles:
        names = [n.strip() for n in args.bundles.split(",") if n.strip()]
        for n in names:
            if n not in BUNDLES:
                ap.error(f"unknown bundle {n!r}; expected one of: {', '.join(BUNDLES)}")

    if args.versus and args.baseline:
        ap.error("--versus and --baseline: give one of them")
    baseline = None
    if args.baseline:
        base_path, base_sha = _checkout.baseline_tree(args.baseline, needs=("benchmarks/bundles.py",))
        baseline = {"rev": args.baseline, "sha": base_sha, "worktree": str(base_path)}

    import jax
    import ptojax as pj

    for flag, preset in (("--config", args.config), ("--versus", args.versus)):
        if preset is not None and preset not in pj.PRESETS:
            ap.error(f"{flag} {preset!r}: expected one of {', '.join(pj.PRESETS)}")
    cfg = pj.preset(args.config)
    t_start = time.perf_counter()

    def configs(base):
        return {name: matrix_config(pj, name, base) if name in MATRIX or name in COOP else base
                for name in names}

    def start_states(cfgs):
        """Each bundle's (start State, words) on its config: the same data on any preset."""
        rng = np.random.default_rng(0)
        return {name: (start_state(pj, cfgs[name], name, rng)[0], bundle_words(pj, name))
                for name in names}

    cfgs = configs(cfg)
    starts = start_states(cfgs)
    bundles = []
    for name in names:
        op, layout, dtype, rows, cols, size, hand = BUNDLES[name]
        words = starts[name][1]
        bundles.append({"bundle": name, "op": op, "layout": layout or "NORM", "dtype": dtype,
                        **({"mkn_profile": MATRIX[name][2:]} if name in MATRIX else {}),
                        **({"group_m_k_n_profile": COOP[name][1:], "core": True}
                           if name in COOP else {}),
                        **({"lanes": CAS_LANES[name]} if op == "MGATHER.CAS" else {}),
                        "shape": [rows, cols], "size_code": size,
                        "state_bytes": cfgs[name].state_bytes,
                        "words": [f"0x{w:08x}" for w in words],
                        "text": pj.asm.disassemble(words).splitlines()})

    # the reference model, and the JAX model's agreement with it
    reference = {}
    for name in names:
        s, words = starts[name]
        rate, ref = time_reference(pj, s, words, ref_runs, cfgs[name], core=name in COOP)
        if ref.fault != "Fault_None":
            raise RuntimeError(f"{name}: the reference model faults: {ref.fault}")
        reference[name] = (rate, ref)
        if not args.quiet:
            print(f"  reference  {name:26s} {rate:10,.0f} bundles/s", file=sys.stderr, flush=True)

    # the second preset: its start States and reference results (untimed, for the check)
    vs_cfgs = configs(pj.preset(args.versus)) if args.versus else {}
    vs_starts = start_states(vs_cfgs) if args.versus else {}
    vs_reference = {name: (None, (pj.reference.run_core if name in COOP else pj.reference.run)(
        *vs_starts[name], cfg=vs_cfgs[name])) for name in vs_starts}

    def point(B, name, tag="", versus=False):
        (s, words), c = (vs_starts[name], vs_cfgs[name]) if versus else (starts[name], cfgs[name])
        best, first, res = time_batch(pj, jax, s, words, B, repeats, c, core=name in COOP)
        ref_state = (vs_reference if versus else reference)[name][1].state
        if B == sizes[0] and not same_state(res[0].state, ref_state):
            raise RuntimeError(f"{name}: pj.batch.run and pj.reference.run disagree")
        del res
        if not args.quiet:
            print(f"  {tag}batch B={B:<6d} {name:26s} {B / best:12,.0f} bundles/s  "
                  f"(best {best * 1e3:.2f} ms, first call {first:.2f} s)",
                  file=sys.stderr, flush=True)
        return {"bundle": name, "batch": B, "seconds": best, "first_call_s": first,
                "bundles_per_s": B / best, "state_bytes": B * c.state_bytes}

    rows, base_runs, vs_rows = [], [], []
    if args.versus:        # per bundle and batch: both presets back to back, order alternating
        for B in sizes:
            for i, name in enumerate(names):
                for versus in ((False, True) if i % 2 == 0 else (True, False)):
                    tag = f"[{args.versus if versus else args.config}] "
                    (vs_rows if versus else rows).append(point(B, name, tag, versus))
    elif baseline is None:
        for B in sizes:
            for name in names:
                rows.append(point(B, name))
    else:   # per bundle: this tree's points and the baseline child back to back, order alternating
        for i, name in enumerate(names):
            for who in (("now", "base") if i % 2 == 0 else ("base", "now")):
                if who == "now":
                    rows += [point(B, name, "[now]     ") for B in sizes]
                    continue
                rec = run_baseline(base_path, base_sha, name, sizes, repeats, ref_runs, args.quiet,
                                   args.config)
                base_runs.append(rec)
                if "error" in rec:
                    print(f"  [base {base_sha[:7]}] {name}: {rec['error']}", file=sys.stderr,
                          flush=True)

    summary = []
    for name in names:
        mine = [r for r in rows if r["bundle"] == name]
        top = max(mine, key=lambda r: r["bundles_per_s"])
        ref_rate = reference[name][0]
        summary.append({"bundle": name, "words": len(starts[name][1]),
                        "reference_bundles_per_s": ref_rate, "best_batch": top["batch"],
                        "best_bundles_per_s": top["bundles_per_s"],
                        "ratio": top["bundles_per_s"] / ref_rate})
    presets = {n: {"gm_bytes": c.gm_bytes, "local_slots": c.local_slots, "tile_words": c.tile_words,
                   "state_bytes": c.state_bytes} for n, c in pj.PRESETS.items()}
    dev = jax.devices()[0]
    result = {
        "benchmark": "ptojax.batch.run bundles/s vs ptojax.reference.run",
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "glibc_hugepage_malloc": __import__("ptojax._hugepages", fromlist=["active"]).active(),
            "device": str(getattr(dev, "device_kind", dev)),
            "local_devices": jax.local_device_count(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "commit": _checkout.commit(), "preset": args.config,
            "state_bytes": cfg.state_bytes,
            **({"baseline": baseline} if baseline else {}),
            "batch_sizes": sizes, "repeats": repeats, "reference_runs": ref_runs,
            "quick": args.quick,
            "timing": ("pj.batch.run(states, words, donate=True, cfg=cfg): best of repeats after a "
                       "warm-up call, fresh batched States built before the clock, "
                       "jax.block_until_ready; reference: mean over reference_runs calls"),
            "elapsed_s": time.perf_counter() - t_start,
        },
        "presets": presets,
        "bundles": bundles,
        "rows": rows,
        "summary": summary,
    }
    if args.versus:
        result["versus"] = {"preset": args.versus, "state_bytes": pj.preset(args.versus).state_bytes,
                            "rows": vs_rows, "ratios": versus_ratios(rows, vs_rows)}
    if baseline:
        baseline["ptojax_files"] = sorted({b["ptojax_file"] for b in base_runs if "ptojax_file" in b})
        result["baseline_runs"] = base_runs
        result["comparison"] = compare(result, base_runs)
        result["comparison_by_batch"] = compare_by_batch(result["comparison"])
        result["meta"]["baseline_timing"] = (
            "per bundle, this tree's points and one subprocess running the baseline's own "
            "benchmarks/bundles.py (same batch sizes, repeats, reference runs) back to back, "
            "order alternating bundle by bundle; ratio = now bundles/s / baseline bundles/s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if not args.quiet:
        print_tables(result)
        print(f"JSON: {out}")
    return result


if __name__ == "__main__":
    from ptojax._hugepages import reexec_with_hugepage_malloc
    reexec_with_hugepage_malloc()      # both trees' runs get it (children inherit the environment)
    main()
