"""Where a batched bundle's time goes: pj.batch.run's compiled program, kernel by kernel, by phase.

For each bundle (the definitions of benchmarks/bundles.py: the same words,
start States and configs) this runs a warm batch of B identical States under
`jax.profiler.trace`. XLA:CPU records every kernel (thunk) it executes; each
is named after an instruction of the compiled program (`compiled.as_text()`,
captured from the very call pj.batch.run makes), and that instruction's
op_name carries the named scopes the executor sets:

    phase1/decode      a word's decode (isa tables)
    phase1/...         the header scan's other work: the block header, recording commits
    phase2/block       a recorded block unpacked and its header fields derived
    phase2/<family>/checks    the family's ordered checks (descriptors, shapes, budgets)
    phase2/<family>/elements  per-lane work: the element map and memory checks, the
                              product (TMATMUL), the lanes' compare-and-swaps
    phase2/<family>/writes    the tile install, the pool and GM writes
    phase2/...         dispatch: lane-class and family selection, the conds' plumbing
    (no phase)         the State's Local files packed in and out, the result

A kernel is charged to the scope of the instruction it executes (a fusion's
root's), so work XLA fused across a boundary lands on one side. While and
conditional thunks are not counted (their bodies' kernels are), so the
phases add up to the kernel time; the wall time per batch is beside it (the
difference: the executor's own scheduling and the host side of
pj.batch.run). XLA:CPU splits a large kernel over both cores, so kernel time
is wall time of the executor thread, not CPU time.

    python benchmarks/profile.py                       # every profiled bundle, B = 4096 / 1024
    python benchmarks/profile.py --bundles "TLOAD ND2M16 FP16 16x16" --batch 4096
    python benchmarks/profile.py --out profile.json --top 12

The breakdown in docs/execution-model.md ("Where a batched bundle's time
goes") is this script's output on the 2-core machine.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bundles as BN  # noqa: E402  (the bundle definitions this profile shares)

# the bundles issue 33 names, each with its default batch size
PROFILED = {
    "TLOAD ND2M16 FP16 16x16": 4096,
    "TSTORE M162ND FP16 16x16": 4096,
    "MGATHER.CAS U32 4x4": 4096,
    "TMATMUL FP16 16x32x16 portable": 1024,
    "TMATMUL FP16 16x32x16 ieee": 1024,
    "COOP TMATMUL FP16 64x32x16 portable": 256,
}
SUBPHASES = ("checks", "elements", "writes")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+.+?\s([\w\-]+)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CONTROL = {"while", "conditional", "call"}       # thunks whose bodies' kernels are counted


def instructions(hlo_text: str) -> dict:
    """name -> (opcode, op_name) of every instruction of a compiled program's text."""
    out = {}
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if m:
            op = _OP_NAME.search(line)
            out[m.group(1)] = (m.group(2), op.group(1) if op else "")
    return out


def phase_of(op_name: str, family_names) -> str:
    """The profile phase of an instruction's op_name (the module docstring's table)."""
    parts = op_name.split("/")
    if "phase1" in parts:
        return "decode" if "decode" in parts else "header scan"
    if "phase2" not in parts:
        return "state in/out"
    if "block" in parts:
        return "block"
    family = next((p for p in parts if p in family_names), None)
    if family is None:
        return "dispatch"
    sub = next((p for p in parts if p in SUBPHASES), "other")
    return f"{family} {sub}"


def kernel_events(trace_dir: str) -> list:
    """(name, microseconds) of every complete event of the perfetto trace written there."""
    files = list(Path(trace_dir).rglob("perfetto_trace.json.gz"))
    if len(files) != 1:
        raise RuntimeError(f"expected one perfetto trace under {trace_dir}, found {len(files)}")
    data = json.loads(gzip.open(files[0]).read())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [(e["name"], float(e.get("dur", 0.0))) for e in events if e.get("ph") == "X"]


def capture_program(execute):
    """Wrap pj.batch.run's donated runner so that its next call records the
    abstract arguments: (the record, the runner itself, a function that
    restores it)."""
    import jax
    orig = execute._run_donated
    seen: dict = {}

    def spy(*args, **kw):
        if not seen:
            seen["args"] = jax.tree_util.tree_map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)), args)
            seen["kw"] = kw
        return orig(*args, **kw)

    execute._run_donated = spy

    def restore():
        execute._run_donated = orig
    return seen, orig, restore


def profile_bundle(pj, jax, name: str, preset: str, B: int, repeats: int, top: int,
                   hlo_dir: str | None = None) -> dict:
    from ptojax.batch import execute

    base = pj.preset(preset)
    cfg = BN.matrix_config(pj, name, base) if name in BN.MATRIX or name in BN.COOP else base
    core = name in BN.COOP
    s, _ = BN.start_state(pj, cfg, name, np.random.default_rng(0))
    words = BN.bundle_words(pj, name)
    w = np.broadcast_to(np.asarray(words, np.uint32), (B, len(words))).copy()

    # the warm rate (outside the profiler), then the program pj.batch.run compiled
    best, first, _ = BN.time_batch(pj, jax, s, words, B, repeats, cfg, core=core)
    seen, runner, restore = capture_program(execute)
    try:
        pj.batch.run(BN.make_batch(jax, s, B), w, donate=True, cfg=cfg, core=core)
    finally:
        restore()
    with jax.enable_x64(True):
        hlo = runner.lower(*seen["args"], **seen["kw"]).compile().as_text()
    instr = instructions(hlo)
    write_hlo(hlo_dir, name, hlo)

    # the profiled runs: every batch built before the trace starts, so the
    # trace holds this program's kernels only
    batches = [BN.make_batch(jax, s, B) for _ in range(repeats)]
    walls = []
    with tempfile.TemporaryDirectory(prefix="ptojax-profile-") as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for states in batches:
                t0 = time.perf_counter()
                res = pj.batch.run(states, w, donate=True, cfg=cfg, core=core)
                jax.block_until_ready(res.state)
                walls.append(time.perf_counter() - t0)
                if (res.fault_code != 0).any():
                    raise RuntimeError(f"{name}: a profiled bundle faulted: {set(res.faults)}")
        events = kernel_events(d)

    acct = account(events, instr, repeats, top)
    return {
        "bundle": name, "preset": preset, "batch": B, "repeats": repeats,
        "bundles_per_s": B / best, "first_call_s": first, "wall_ms": 1e3 * float(np.median(walls)),
        "hlo_instructions": len(instr), **acct,
    }


def write_hlo(hlo_dir: str | None, name: str, hlo: str) -> None:
    """The compiled program's text as DIR/<name>.hlo.txt (to look a kernel's
    instructions up by name); nothing without a DIR."""
    if hlo_dir:
        Path(hlo_dir).mkdir(parents=True, exist_ok=True)
        (Path(hlo_dir) / f"{name.replace(' ', '_')}.hlo.txt").write_text(hlo)


def account(events: list, instr: dict, repeats: int, top: int) -> dict:
    """Kernel time a run by phase and the `top` kernels (ms a run)."""
    from ptojax import families
    fam = {f.name for f in families.FAMILIES}
    by_phase: collections.Counter = collections.Counter()
    by_kernel: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for ev, us in events:
        if ev in instr and instr[ev][0] not in _CONTROL:
            by_phase[phase_of(instr[ev][1], fam)] += us
            by_kernel[ev] += us
            calls[ev] += 1
    total = sum(by_phase.values())
    per = 1e-3 / repeats                         # microseconds over all runs -> ms a run
    return {
        "kernel_ms": total * per,
        "phases_ms": {k: v * per for k, v in by_phase.most_common()},
        "top_kernels": [{"kernel": k, "ms": v * per, "calls": calls[k] // repeats,
                         "opcode": instr[k][0], "phase": phase_of(instr[k][1], fam),
                         "op_name": instr[k][1]} for k, v in by_kernel.most_common(top)],
    }


def profile_gemm(pj, jax, n: int, kind: str, repeats: int, top: int, hlo_dir: str | None = None) -> dict:
    """pj.golden.gemm of n x n x n (`kind`: "S8 portable" or "FP16 ieee"),
    warm, its batch program's kernels by phase (ms a GEMM)."""
    from ptojax.batch import execute
    dtype, profile = kind.split()
    rng = np.random.default_rng(0)
    if dtype == "S8":
        a, b = (rng.integers(-128, 128, (n, n)).astype(np.int8) for _ in range(2))
    else:
        a, b = (rng.standard_normal((n, n)).astype(np.float16) for _ in range(2))
    gemm = lambda: pj.golden.gemm(a, b, dtype=dtype, profile=profile)  # noqa: E731
    gemm()
    seen, runner, restore = capture_program(execute)
    try:
        t0 = time.perf_counter()
        gemm()
        warm = time.perf_counter() - t0
    finally:
        restore()
    with jax.enable_x64(True):
        hlo = runner.lower(*seen["args"], **seen["kw"]).compile().as_text()
    write_hlo(hlo_dir, f"gemm {n} {dtype} {profile}", hlo)
    walls = []
    with tempfile.TemporaryDirectory(prefix="ptojax-profile-") as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(repeats):
                t0 = time.perf_counter()
                gemm()
                walls.append(time.perf_counter() - t0)
        events = kernel_events(d)
    instr = instructions(hlo)
    return {"bundle": f"pj.golden.gemm {kind} {n}^3", "preset": "gemm", "batch": seen["args"][1].shape[0]
            if len(seen["args"]) > 1 else 0, "repeats": repeats, "bundles_per_s": 1 / warm,
            "first_call_s": None, "wall_ms": 1e3 * float(np.median(walls)),
            "hlo_instructions": len(instr), **account(events, instr, repeats, top)}


def print_report(rows: list) -> None:
    for r in rows:
        unit = "GEMMs/s, per batch of its program" if r["preset"] == "gemm" else "bundles/s"
        print(f"\n## {r['bundle']}  ({r['preset']}, B = {r['batch']}: {r['bundles_per_s']:,.2f} {unit}, "
              f"{r['wall_ms']:.2f} ms a batch profiled, kernels {r['kernel_ms']:.2f} ms)")
        print("| phase | ms a batch | share of kernel time |")
        print("|---|---:|---:|")
        for k, v in r["phases_ms"].items():
            print(f"| {k} | {v:.3f} | {v / r['kernel_ms']:.0%} |")
        print("\n| kernel | phase | calls | ms | op_name (tail) |")
        print("|---|---|---:|---:|---|")
        for k in r["top_kernels"]:
            tail = "/".join(k["op_name"].split("/")[-3:])
            print(f"| {k['kernel']} | {k['phase']} | {k['calls']} | {k['ms']:.3f} | {tail} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", help="comma-separated bundle names (default: the profiled set)")
    ap.add_argument("--batch", type=int, help="States a batch (default: per bundle, see PROFILED)")
    ap.add_argument("--config", default=BN.PRESET, help="the preset the bundles run on (default tiny)")
    ap.add_argument("--repeats", type=int, default=3, help="profiled batches per bundle")
    ap.add_argument("--top", type=int, default=8, help="kernels listed per bundle")
    ap.add_argument("--out", help="write the JSON result here")
    ap.add_argument("--hlo", metavar="DIR", help="write each bundle's compiled HLO text into DIR")
    ap.add_argument("--gemm", metavar="N", type=int,
                    help="profile a warm pj.golden.gemm of N x N x N instead (ms a GEMM)")
    ap.add_argument("--gemm-kind", default="S8 portable", choices=("S8 portable", "FP16 ieee"))
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.bundles.split(",")] if args.bundles else list(PROFILED)
    unknown = [n for n in names if n not in BN.BUNDLES]
    if unknown:
        ap.error(f"unknown bundle {unknown[0]!r}: expected one of {', '.join(BN.BUNDLES)}")
    if (args.batch is not None and args.batch < 1) or args.repeats < 1:
        ap.error("--batch and --repeats must be positive")

    # XLA:CPU's fresh result buffers on huge pages, as bundles.py runs (else
    # the first touch of a large result is charged to the kernel writing it)
    from ptojax._hugepages import reexec_with_hugepage_malloc
    reexec_with_hugepage_malloc()
    # compiled here, not loaded: the persistent cache's key leaves out the
    # instructions' metadata, so a cached program could carry older scopes
    os.environ["PTOJAX_JAX_CACHE"] = ""
    import jax
    jax.config.update("jax_enable_compilation_cache", False)
    import ptojax as pj
    rows = []
    if args.gemm:
        print(f"profiling pj.golden.gemm {args.gemm_kind} {args.gemm}^3 ...", file=sys.stderr, flush=True)
        rows.append(profile_gemm(pj, jax, args.gemm, args.gemm_kind, args.repeats, args.top, args.hlo))
        names = []
    for name in names:
        B = args.batch or PROFILED.get(name, 1024)
        print(f"profiling {name} (B = {B}) ...", file=sys.stderr, flush=True)
        rows.append(profile_bundle(pj, jax, name, args.config, B, args.repeats, args.top, args.hlo))
    print_report(rows)
    if args.out:
        Path(args.out).write_text(json.dumps({"command": sys.argv, "jax": jax.__version__,
                                              "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
