"""Cases/s of a differential campaign, stage by stage, against pj.batch.run alone.

For each config preset (tiny, asl) one run measures on the same cases:

* engine: pj.batch.run alone on the campaign's batches (the cases drawn, set
  up and routed as `ptojax fuzz` does; only the runs of the cases timed);
* sample 0: `ptojax fuzz --sample 0` (no oracle);
* sample 1: every case compared with the reference model;
* export: `--sample 0 --export DIR --export-format batch`;
* against: `--sample 0 --against "python examples/dut_harness.py"
  --against-protocol batch` (a DUT on pj.batch.run, so two engines share the
  machine).

Every campaign is a fresh `ptojax fuzz --json` process (with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 and the persistent compilation cache
warm after the first), and its rate is the report's steady cases/s (after
the first call). Two mixes are measured: `all` (the defaults: every family,
8 variants per drawn case) and `old` (the mix `ptojax fuzz` drew by default
before all meant all: TLOAD/TSTORE with MGATHER.CAS at 1/3, no variants).

With --baseline REV the baseline commit's own `ptojax fuzz` runs the `old`
mix in the same run (its worktree first on PYTHONPATH), for the modes it has:
sample 0, sample 1, its per-case JSON export and its one-line-per-case
external protocol (tests/fuzz_external_reference.py); the table gives now /
baseline per row.

    python benchmarks/campaign.py --quick
    python benchmarks/campaign.py --baseline eb7d1ec
    python benchmarks/campaign.py --configs tiny --modes engine,sample0
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import _checkout  # noqa: E402  (benchmarks/_checkout.py)

MODES = ("engine", "sample0", "sample1", "export", "against")
MIXES = {
    "all": [],
    "old": ["--cas-weight", "0.3333333333", "--matmul-weight", "0", "--core-share", "0",
            "--variants", "1"],
}
# cases per run: (config, mode) -> (full, quick); the baseline runs fewer where it is slow
COUNTS = {
    ("tiny", "engine"): (120_000, 32_000), ("tiny", "sample0"): (240_000, 64_000),
    ("tiny", "sample1"): (24_000, 6_000), ("tiny", "export"): (120_000, 32_000),
    ("tiny", "against"): (120_000, 32_000),
    ("asl", "engine"): (4_000, 1_000), ("asl", "sample0"): (6_000, 1_500),
    ("asl", "sample1"): (1_200, 400), ("asl", "export"): (3_000, 800),
    ("asl", "against"): (3_000, 800),
}
BASE_COUNTS = {("tiny", "sample0"): (20_000, 8_000), ("tiny", "sample1"): (6_000, 2_000),
               ("tiny", "export"): (2_000, 800), ("tiny", "against"): (2_000, 800),
               ("asl", "sample0"): (600, 300), ("asl", "sample1"): (400, 200),
               ("asl", "export"): (200, 120), ("asl", "against"): (200, 120)}
SEED = 2026


def fuzz_argv(config: str, mode: str, count: int, mix: str, out: Path, baseline: bool) -> list:
    argv = ["fuzz", "--config", config, "--count", str(count), "--seed", str(SEED), "--json",
            "--quiet", "--out", str(out / "fuzz-out"), "--sample", "1" if mode == "sample1" else "0"]
    if config == "tiny":
        # the baseline's per-case export and external protocol run tens of cases/s: a
        # 4,096-row first call would hold every case it runs
        argv += ["--batch", "256" if baseline and mode in ("export", "against") else "4096"]
    argv += [] if baseline else MIXES[mix]
    if mode == "export":
        argv += ["--export", str(out / "export")] + ([] if baseline else ["--export-format", "batch"])
    if mode == "against":
        if baseline:
            argv += ["--against", f"{sys.executable} tests/fuzz_external_reference.py"]
        else:
            argv += ["--against", f"{sys.executable} examples/dut_harness.py",
                     "--against-protocol", "batch"]
    return argv


def run_fuzz(tree: Path, argv: list, timeout: float) -> dict:
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=1",
               PYTHONPATH=os.pathsep.join([str(tree)] + ([os.environ["PYTHONPATH"]]
                                                         if os.environ.get("PYTHONPATH") else [])))
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "ptojax.cli", *argv], cwd=tree, env=env,
                           text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": f"exit {p.returncode}: " + " | ".join(p.stderr.strip().splitlines()[-3:])}
    if p.returncode not in (0,):
        return {"error": f"exit {p.returncode}: mismatches {rep.get('mismatches')}, "
                         f"stopped {rep.get('stopped')}"}
    keep = ("cases", "drawn", "compared", "mismatches", "seconds", "cases_per_s",
            "first_call_seconds", "steady_cases_per_s", "stage_seconds", "batches",
            "setup_batches", "jobs", "batch")
    out = {k: rep.get(k) for k in keep}
    out["process_s"] = time.perf_counter() - t0
    if "against" in rep:
        out["against"] = rep["against"]
    return out


# ----------------------------------------------------------------- pj.batch.run alone


def engine_child(config: str, count: int, mix: str) -> dict:
    """The campaign's batches built as `ptojax fuzz` builds them (defaults of the
    CLI for this config and mix), then only their pj.batch.run calls timed."""
    import jax
    from ptojax.cli import build_parser
    from ptojax.cli import fuzz as F
    from ptojax.fuzz import campaign as C
    argv = ["fuzz", "--config", config, "--count", str(count), "--seed", str(SEED)] \
        + (["--batch", "4096"] if config == "tiny" else []) + MIXES[mix]
    args = build_parser().parse_args(argv)
    F._check(args)
    cc = F._campaign_config(args, C)
    oracle = C.Oracle(cc.machine, cc.pe, cc.on_fault, cc.jobs)
    res = C.CampaignResult(cc, coverage=cc.coverage())
    engines = {}

    def engine_of(core):
        if core not in engines:
            engines[core] = C.Engine(cc.machine, C.core_rows(cc) if core else cc.rows,
                                     0 if core else cc.pe, cc.on_fault, core)
        return engines[core]
    planner = C.Planner(cc, engine_of, res)
    warm, dt, cases, batches = set(), 0.0, 0, 0
    # pool by pool (a pool's setup results stay on the device until its batches ran):
    # a warm-up call of each program, then every batch once, timed
    for pool in C.Pools(cc, oracle.submit_call, C.POOL_BATCHES * (cc.rows - 1), parts=oracle.jobs):
        for b in planner.plan(pool):
            run = lambda: jax.block_until_ready(engine_of(b.core).run(
                b.state_rows, b.pool.words[b.rows], b.pool.lengths[b.rows]).state)
            if b.core not in warm:
                run()
                warm.add(b.core)
            t = time.perf_counter()
            run()
            dt += time.perf_counter() - t
            cases += len(b.rows)
            batches += 1
    oracle.close()
    return {"cases": cases, "seconds": dt, "steady_cases_per_s": cases / dt,
            "batches": batches, "setup_batches": res.setup_batches,
            "setup_seconds": res.stage_seconds["setup"]}


def run_engine(config: str, count: int, mix: str, timeout: float) -> dict:
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
    try:
        p = subprocess.run([sys.executable, str(HERE), "--engine-child", config, str(count), mix],
                           env=env, text=True, capture_output=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": f"exit {p.returncode}: " + " | ".join(p.stderr.strip().splitlines()[-3:])}
    return json.loads(lines[-1])


# ----------------------------------------------------------------- the run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,asl")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--mixes", default="all,old")
    ap.add_argument("--quick", action="store_true", help="fewer cases a run")
    ap.add_argument("--baseline", metavar="REV", help="also run this commit's ptojax fuzz (old mix)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--out", default=str(REPO / "bench-results"))
    ap.add_argument("--engine-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine_child:
        config, count, mix = args.engine_child
        print(json.dumps(engine_child(config, int(count), mix)))
        return 0
    configs = [c for c in args.configs.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    mixes = [m for m in args.mixes.split(",") if m]
    bad = set(modes) - set(MODES) or set(mixes) - set(MIXES)
    if bad:
        ap.error(f"unknown {sorted(bad)}")
    base = _checkout.baseline_tree(args.baseline, ("ptojax/fuzz/campaign.py",)) if args.baseline \
        else None
    q = 1 if args.quick else 0
    rows = []
    for config in configs:
        for mix in mixes:
            for mode in modes:
                n = COUNTS[(config, mode)][q]
                with tempfile.TemporaryDirectory(prefix="ptojax-bench-") as tmp:
                    now = run_engine(config, n, mix, args.timeout) if mode == "engine" else \
                        run_fuzz(REPO, fuzz_argv(config, mode, n, mix, Path(tmp), False), args.timeout)
                rec = {"config": config, "mix": mix, "mode": mode, "count": n, "now": now}
                if base and mix == "old" and mode != "engine":
                    bn = BASE_COUNTS[(config, mode)][q]
                    with tempfile.TemporaryDirectory(prefix="ptojax-bench-") as tmp:
                        rec["base"] = run_fuzz(base[0], fuzz_argv(config, mode, bn, mix, Path(tmp), True),
                                               args.timeout)
                rows.append(rec)
                print(_line(rec), file=sys.stderr, flush=True)
    print_table(rows, args.baseline)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out / f"campaign-{stamp}.json"
    path.write_text(json.dumps({"commit": _checkout.commit(), "baseline": base and base[1],
                                "machine": platform.platform(), "cpus": os.cpu_count(),
                                "rows": rows}, indent=1))
    print(f"wrote {path}")
    return 0


def _rate(r):
    return None if not r or "error" in r else r.get("steady_cases_per_s")


def _line(rec) -> str:
    now, base = rec["now"], rec.get("base")
    s = f"{rec['config']:5s} {rec['mix']:4s} {rec['mode']:8s} "
    s += f"now {_rate(now):10,.0f}/s" if _rate(now) else f"now {now.get('error')}"
    if base is not None:
        s += f"  base {_rate(base):10,.0f}/s" if _rate(base) else f"  base {base.get('error')}"
    return s


def print_table(rows, baseline):
    head = f"{'config':6s} {'mix':4s} {'mode':8s} {'cases':>8s} {'now cases/s':>12s}"
    if baseline:
        head += f" {'base cases/s':>13s} {'now/base':>9s}"
    head += f" {'of engine':>10s}"
    print(head)
    engine = {(r["config"], r["mix"]): _rate(r["now"]) for r in rows if r["mode"] == "engine"}
    for r in rows:
        now = _rate(r["now"])
        line = f"{r['config']:6s} {r['mix']:4s} {r['mode']:8s} {r['count']:8,d} " + \
            (f"{now:12,.0f}" if now else f"{'error':>12s}")
        if baseline:
            b = _rate(r.get("base"))
            line += (f" {b:13,.1f}" if b else f" {'-':>13s}") + \
                (f" {now / b:8.1f}x" if b and now else f" {'-':>9s}")
        e = engine.get((r["config"], r["mix"]))
        line += f" {now / e:10.2f}" if e and now and r["mode"] != "engine" else f" {'-':>10s}"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
