"""First-call cost of the executor (the jitted programs pj.run and pj.batch.run use): HLO size, trace, lower, XLA compile, cache load.

One run measures a current checkout and, optionally, a baseline commit side
by side. For every (commit, config preset, effect set) it compiles the
jitted word-stream executor that pj.run calls for that config
(ptojax.machine.stream_runner(cfg); run_stream in trees without it) for a
64-word stream, max_commits=8, under jax.enable_x64(True); the set "batch"
compiles pj.batch.run's program instead (ptojax.batch.execute._run_kept),
every family, 64 rows of 64 words: the program a campaign or a
differential test compiles. It reports:

* cold: a fresh subprocess with JAX's persistent compilation cache disabled
  times .trace(...) (Python tracing, vmap's batching included), .lower()
  (to StableHLO) and
  lowered.compile() (XLA), and counts the instructions of the optimised HLO
  (compiled.as_text(): the lines "[ROOT ]name = shape op(...)" of every
  computation, fusions included);
* warm: a fresh subprocess compiles with the persistent cache on in a new
  temporary directory (jax_persistent_cache_min_compile_time_secs=0 and
  jax_persistent_cache_min_entry_size_bytes=0, so every entry is written),
  then a second fresh subprocess times .compile() again, which should be a
  cache load. It is a hit when JAX records '/jax/compilation_cache/cache_hits'
  during that .compile() and the cache directory gains no file meanwhile;
* later 1st call: the jitted entry point itself called in a fresh
  subprocess on a new cache directory, then again in a second one: the
  second's call is what a later process pays for its first call (trees with
  ptojax/executables.py load the executable without tracing; older trees
  trace, lower and load from JAX's cache).

Effect sets (the static `effects` argument; which op families get traced):

    header        frozenset()                                portable
    TLOAD         {TLOAD}                                    portable
    TSTORE        {TSTORE}                                   portable
    TLOAD+TSTORE  {TLOAD, TSTORE}                            portable
    MGATHER.CAS   {MGATHER.CAS}                              portable
    MATMUL        {MATMUL}                                   portable
    MATMUL ieee   {MATMUL}                                   profile="ieee"
    Core          {MATMUL, SHARED, TLOAD, TSTORE}, core=True portable
                  (cooperative TMATMUL + Shared TLOAD/TSTORE)
    batch         every family, pj.batch.run, 64 rows         portable

The baseline (--baseline REV) is checked out with `git worktree add --detach
/tmp/ptojax-baseline-<sha>` (reused when present) and its subprocesses import
ptojax from there (PYTHONPATH and sys.path[0]; each child asserts that
ptojax.__file__ lies in the intended tree). Every child runs with
PTOJAX_JAX_CACHE="" so ptojax never turns a cache on itself. A child is this
script with the hidden --child option; it prints one JSON line.

Timings are single wall-clock measurements (--repeats N keeps the best of N
cold children); on a shared CPU expect noise of 10-20 %.

    python benchmarks/compile.py                                  # tiny + small, all sets (slow)
    python benchmarks/compile.py --quick --baseline 8d18aa7       # tiny only, vs 8d18aa7
    python benchmarks/compile.py --presets small --sets header,Core --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import _checkout  # noqa: E402  (benchmarks/_checkout.py)
PRESETS = ("tiny", "small")
QUICK_PRESETS = ("tiny",)
WORDS = 64
MAX_COMMITS = 8
# name -> (effects, core, profile)
SETS = {
    "header":       ((), False, "portable"),
    "TLOAD":        (("TLOAD",), False, "portable"),
    "TSTORE":       (("TSTORE",), False, "portable"),
    "TLOAD+TSTORE": (("TLOAD", "TSTORE"), False, "portable"),
    "MGATHER.CAS":  (("MGATHER.CAS",), False, "portable"),
    "MATMUL":       (("MATMUL",), False, "portable"),
    "MATMUL ieee":  (("MATMUL",), False, "ieee"),
    "Core":         (("MATMUL", "SHARED", "TLOAD", "TSTORE"), True, "portable"),
    "batch":        (("MATMUL", "MGATHER.CAS", "SHARED", "TLOAD", "TSTORE"), False, "portable"),
}
BATCH_SETS = ("batch",)      # compiled as pj.batch.run's program, BATCH_ROWS rows
BATCH_ROWS = 64
# an optimised-HLO instruction line: "  [ROOT ]%name = type op(...)" (the % is optional)
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?[\w.\-]+\s+=\s+\S")
HLO_COUNT_RULE = ("lines of compiled.as_text() matching r'^\\s*(ROOT\\s+)?%?[\\w.\\-]+\\s+=\\s+\\S' "
                  "(instructions of all computations, fusion bodies included)")


def count_hlo_instructions(text: str) -> int:
    return sum(1 for line in text.splitlines() if _INSTR.match(line))


def _cache_files(d):
    if not d or not os.path.isdir(d):
        return set()
    return {os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs}


# ------------------------------------------------------------------ child


def child(args) -> dict:
    """One measurement in this (fresh) process; returns the JSON-able record."""
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    os.environ["PTOJAX_JAX_CACHE"] = ""
    import jax

    if args.mode == "cold":
        jax.config.update("jax_enable_compilation_cache", False)
    else:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", args.cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "jax_persistent_cache_min_entry_size_bytes" in jax.config.values:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    events = {"hits": 0, "misses": 0}

    def _listener(event, **_kw):
        if event == "/jax/compilation_cache/cache_hits":
            events["hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            events["misses"] += 1

    try:
        jax.monitoring.register_event_listener(_listener)
        have_events = True
    except AttributeError:
        have_events = False

    import jax.numpy as jnp
    import ptojax
    from ptojax import machine

    pj_file = Path(ptojax.__file__).resolve()
    assert tree in pj_file.parents, f"ptojax imported from {pj_file}, not from {tree}"

    effects, core, profile = SETS[args.set]
    with jax.enable_x64(True):
        cfg = ptojax.preset(args.preset)
        if profile != "portable":
            cfg = cfg.replace(profile=profile)
        st = jax.block_until_ready(ptojax.reset(cfg))
        kw = dict(cfg=cfg, max_commits=MAX_COMMITS, effects=frozenset(effects), core=core)
        if args.set in BATCH_SETS:
            from ptojax.batch import execute
            rows = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (BATCH_ROWS,) + a.shape), st)
            call = (rows, jnp.zeros((BATCH_ROWS, WORDS), jnp.uint32),
                    jnp.zeros(BATCH_ROWS, jnp.int32), jnp.int32(0), jnp.bool_(False), jnp.int64(0))
            runner = execute._run_kept
        else:
            call = (st, jnp.zeros(WORDS, jnp.uint32), jnp.int32(0), jnp.int32(0), jnp.bool_(False))
            kw["cas_seed"] = jnp.int64(0)
            # the jitted program pj.run uses for this config (older trees: run_stream)
            runner = machine.stream_runner(cfg) if hasattr(machine, "stream_runner") \
                else machine.run_stream
        if args.mode == "call":
            # what a user's process pays: the entry point's own call, whatever it
            # does on a miss (trace, lower, compile) or a hit (load)
            before = _cache_files(args.cache_dir)
            t0 = time.perf_counter()
            jax.block_until_ready(runner(*call, **kw))
            return {"mode": args.mode, "preset": args.preset, "set": args.set, "ptojax_file": str(pj_file),
                    "call_s": time.perf_counter() - t0,
                    "cache_files_added": len(_cache_files(args.cache_dir) - before)}
        t0 = time.perf_counter()
        traced = runner.trace(*call, **kw)
        tt = time.perf_counter()
        lowered = traced.lower()
        t1 = time.perf_counter()
        before = _cache_files(args.cache_dir)
        events.update(hits=0, misses=0)
        compiled = lowered.compile()
        t2 = time.perf_counter()
        seen = dict(events)
        added = len(_cache_files(args.cache_dir) - before)
        text = compiled.as_text()
    rec = {"mode": args.mode, "preset": args.preset, "set": args.set, "effects": sorted(effects),
           "core": core, "profile": profile, "ptojax_file": str(pj_file),
           "hlo_instructions": count_hlo_instructions(text), "hlo_text_bytes": len(text),
           "trace_s": tt - t0, "lower_s": t1 - t0, "compile_s": t2 - t1, "jax": jax.__version__,
           "backend": jax.default_backend()}
    if args.mode != "cold":
        rec.update(cache_files_added=added,
                   cache_hit_events=seen["hits"] if have_events else None,
                   cache_miss_events=seen["misses"] if have_events else None)
        rec["cache_hit"] = added == 0 and (seen["hits"] > 0 if have_events else True)
    return rec


# ----------------------------------------------------------------- parent


def run_child(tree: Path, mode: str, preset: str, name: str, cache_dir: str | None,
              timeout: float) -> dict:
    env = dict(os.environ, PTOJAX_JAX_CACHE="",
               PYTHONPATH=os.pathsep.join([str(tree)] + ([os.environ["PYTHONPATH"]]
                                                         if os.environ.get("PYTHONPATH") else [])))
    cmd = [sys.executable, str(HERE), "--child", "--mode", mode, "--preset", preset,
           "--set", name, "--tree", str(tree)] + (["--cache-dir", cache_dir] if cache_dir else [])
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
    rec = json.loads(lines[-1])
    rec["process_s"] = time.perf_counter() - t0
    return rec


def measure(tree: Path, preset: str, name: str, repeats: int, timeout: float, label: str,
            quiet: bool) -> dict:
    def say(msg):
        if not quiet:
            print(f"  {label:>9s} {preset:5s} {name:13s} {msg}", file=sys.stderr, flush=True)

    out = {"cold": None, "warm": None, "populate": None, "call": None}
    colds = []
    for _ in range(repeats):
        c = run_child(tree, "cold", preset, name, None, timeout)
        colds.append(c)
        say(f"cold:     {c['error']}" if "error" in c else
            f"cold:     {c['hlo_instructions']:7,d} HLO instrs, trace {c['trace_s']:6.2f} s, "
            f"trace+lower {c['lower_s']:6.2f} s, "
            f"compile {c['compile_s']:7.2f} s")
        if "error" in c:
            break
    ok = [c for c in colds if "error" not in c]
    out["cold"] = min(ok, key=lambda c: c["compile_s"]) if ok else colds[-1]
    if ok:
        out["cold"]["compile_s_all"] = [c["compile_s"] for c in ok]
    cache = tempfile.mkdtemp(prefix="ptojax-compile-cache-")
    try:
        pop = run_child(tree, "populate", preset, name, cache, timeout)
        out["populate"] = pop
        say(f"populate: {pop['error']}" if "error" in pop else
            f"populate: compile {pop['compile_s']:7.2f} s, {pop['cache_files_added']} cache files written")
        if "error" not in pop:
            w = run_child(tree, "warm", preset, name, cache, timeout)
            out["warm"] = w
            say(f"warm:     {w['error']}" if "error" in w else
                f"warm:     load {w['compile_s']:7.2f} s, hit {'yes' if w['cache_hit'] else 'NO'}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    # the first call of a later process, through the entry point itself
    cache = tempfile.mkdtemp(prefix="ptojax-compile-cache-")
    try:
        first = run_child(tree, "call", preset, name, cache, timeout)
        if "error" in first:
            out["call"] = first
        else:
            out["call"] = run_child(tree, "call", preset, name, cache, timeout)
            c = out["call"]
            say(f"call:     {c['error']}" if "error" in c else
                f"call:     first {first['call_s']:7.2f} s, in a later process {c['call_s']:7.2f} s")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def _get(m, phase, key):
    r = (m or {}).get(phase) or {}
    return None if "error" in r else r.get(key)


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def _ratio(a, b):
    return "-" if a is None or b is None or not a else f"{b / a:.2f}x"


def print_table(result):
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    meta = result["meta"]
    base = meta["baseline"] is not None
    title = (f"First call of the executor pj.run uses ({WORDS} words, max_commits={MAX_COMMITS}; "
             f"batch: pj.batch.run's, {BATCH_ROWS} rows) on "
             f"{meta['backend']}: now {meta['commit']}"
             + (f" vs baseline {meta['baseline']['sha'][:7]}" if base else ""))
    t = Table(title=title)
    t.add_column("preset")
    t.add_column("set")
    groups = [("HLO instrs", "cold", "hlo_instructions", ",d"),
              ("trace s", "cold", "trace_s", ".2f"),
              ("trace+lower s", "cold", "lower_s", ".2f"),
              ("cold compile s", "cold", "compile_s", ".2f"),
              ("warm load s", "warm", "compile_s", ".3f"),
              ("later 1st call s", "call", "call_s", ".2f")]
    for g, _, _, _ in groups:
        if base:
            t.add_column(f"{g}\nbase", justify="right")
        t.add_column(f"{g}\nnow", justify="right")
        if base and g != "warm load s":
            t.add_column(f"{g}\nratio", justify="right")
    t.add_column("hit" + ("\nbase/now" if base else ""), justify="center")
    for row in result["rows"]:
        b, n = row.get("baseline"), row["now"]
        cells = [row["preset"], row["set"]]
        for g, phase, key, fmt in groups:
            nv = _get(n, phase, key)
            if base:
                bv = _get(b, phase, key)
                cells.append(_f(bv, fmt))
            cells.append(_f(nv, fmt))
            if base and g != "warm load s":
                cells.append(_ratio(bv, nv))
        hits = [_get(b, "warm", "cache_hit")] if base else []
        hits.append(_get(n, "warm", "cache_hit"))
        cells.append("/".join("-" if h is None else "yes" if h else "NO" for h in hits))
        t.add_row(*cells)
    console.print(t)
    errors = [(row["preset"], row["set"], who, ph, ((row.get(who) or {}).get(ph) or {}).get("error"))
              for row in result["rows"] for who in ("baseline", "now")
              for ph in ("cold", "populate", "warm", "call")]
    for preset, name, who, ph, err in errors:
        if err:
            console.print(f"[red]{who} {preset} {name} {ph}: {err}[/red]")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ptojax-bench-compile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny preset only")
    ap.add_argument("--presets", default=None, metavar="LIST",
                    help=f"comma-separated config presets (default {','.join(PRESETS)})")
    ap.add_argument("--sets", default=None, metavar="LIST",
                    help=f"comma-separated effect sets (default all: {', '.join(SETS)})")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also measure this commit (a detached git worktree in /tmp)")
    ap.add_argument("--repeats", type=int, default=1, help="cold children per point; best kept")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child process")
    ap.add_argument("--out", default=None,
                    help="JSON output path (default bench-results/compile-<timestamp>.json)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines and no table")
    # hidden: one measurement in this process, one JSON line on stdout
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("cold", "populate", "warm", "call"), default="cold", help=argparse.SUPPRESS)
    ap.add_argument("--preset", default="tiny", help=argparse.SUPPRESS)
    ap.add_argument("--set", default="header", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=str(REPO), help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        if args.set not in SETS:
            ap.error(f"unknown set {args.set!r}")
        if args.mode != "cold" and not args.cache_dir:
            ap.error(f"--mode {args.mode} needs --cache-dir")
        rec = child(args)
        print(json.dumps(rec), flush=True)
        return rec

    presets = QUICK_PRESETS if args.quick else PRESETS
    if args.presets:
        presets = tuple(p.strip() for p in args.presets.split(",") if p.strip())
    names = list(SETS)
    if args.sets:
        names = [n.strip() for n in args.sets.split(",") if n.strip()]
        for n in names:
            if n not in SETS:
                ap.error(f"unknown set {n!r}; expected one of: {', '.join(SETS)}")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    t_start = time.perf_counter()
    baseline = None
    trees = [("now", REPO)]
    if args.baseline:
        path, sha = _checkout.baseline_tree(args.baseline)
        baseline = {"rev": args.baseline, "sha": sha, "worktree": str(path)}
        trees.insert(0, ("baseline", path))

    rows = []
    for preset in presets:
        for name in names:
            row = {"preset": preset, "set": name, "effects": sorted(SETS[name][0]),
                   "core": SETS[name][1], "profile": SETS[name][2]}
            for label, tree in trees:
                row[label] = measure(tree, preset, name, args.repeats, args.timeout, label, args.quiet)
            if baseline:
                h = (_get(row["baseline"], "cold", "hlo_instructions"),
                     _get(row["now"], "cold", "hlo_instructions"))
                c = (_get(row["baseline"], "cold", "compile_s"), _get(row["now"], "cold", "compile_s"))
                row["hlo_ratio"] = h[1] / h[0] if None not in h and h[0] else None
                row["compile_ratio"] = c[1] / c[0] if None not in c and c[0] else None
            rows.append(row)

    import jax
    import numpy as np

    dev = jax.devices()[0]
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "benchmark": "first call of the executor pj.run uses (machine.stream_runner) and, set batch, "
                     "pj.batch.run's: HLO size, trace, trace+lower, compile, cache load",
        "meta": {
            "date": now.isoformat(timespec="seconds"),
            "argv": sys.argv[1:] if argv is None else list(argv),
            "python": platform.python_version(), "numpy": np.__version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "device": str(getattr(dev, "device_kind", dev)),
            "local_devices": jax.local_device_count(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "commit": _checkout.commit(), "baseline": baseline,
            "presets": list(presets), "sets": names, "repeats": args.repeats,
            "quick": args.quick, "words": WORDS, "max_commits": MAX_COMMITS,
            "batch_rows": BATCH_ROWS,
            "hlo_count": HLO_COUNT_RULE,
            "timing": ("each phase in a fresh subprocess under jax.enable_x64(True), "
                       "PTOJAX_JAX_CACHE=''; trace_s = runner.trace(...), lower_s = trace_s + "
                       ".lower(), compile_s = "
                       ".compile(); cold: jax_enable_compilation_cache=False (best of repeats); "
                       "warm: .compile() in a second process after a first one populated a fresh "
                       "persistent cache (min compile time 0, min entry size 0); cache_hit = a "
                       "cache_hits event during .compile() and no new cache file; call: the "
                       "runner called in a second fresh process on a cache a first one filled"),
            "elapsed_s": time.perf_counter() - t_start,
        },
        "sets": {n: {"effects": sorted(e), "core": c, "profile": p} for n, (e, c, p) in SETS.items()
                 if n in names},
        "rows": rows,
    }
    out = Path(args.out) if args.out else REPO / "bench-results" / (
        f"compile-{now.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if not args.quiet:
        print_table(result)
        print(f"JSON: {out}")
    return result


if __name__ == "__main__":
    main()
