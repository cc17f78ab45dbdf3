"""`ptojax fuzz`: a differential campaign (ptojax.fuzz), its progress and its report."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from ptojax import tables
from ptojax.compile_cache import ensure_compile_cache

from .common import CliError, console

FUZZ_DEFAULT_CONFIG = "asl"          # the model's own bounds (--config tiny for raw speed)
FUZZ_DEFAULT_OUT = "ptojax-fuzz"
BATCH_BYTES = 1 << 30                 # the default batch: 256 rows, or 32 past this many bytes
EDGE_WEIGHT_ASL = 0.2                 # the default --edge-weight at asl (elsewhere 0)
DEFAULT_VARIANTS = 8                  # cases per drawn case: it and 7 variants


def default_rows(config: str) -> int:
    """--batch's default for a config preset: 256 rows, or 32 where 256 States
    would pass BATCH_BYTES (asl: 3.9 GB)."""
    import ptojax as pj
    return 256 if 256 * pj.preset(config).state_bytes <= BATCH_BYTES else 32


def default_edge_weight(config: str) -> float:
    """--edge-weight's default: at asl, where large tiles and the real budget are the
    point of the preset, EDGE_WEIGHT_ASL; else 0 (the draws of earlier campaigns)."""
    return EDGE_WEIGHT_ASL if config == "asl" else 0.0


def default_jobs(config: str) -> int:
    """--jobs' default: one reference worker per CPU core, except at asl, where
    the oracle runs in this process: sending its 15 MB States back from
    workers cost more than the second core gave (1,200 cases on 2 cores: 9.4
    cases/s with 2 workers, 13.9 in-process)."""
    return 1 if config == "asl" else max(1, min(os.cpu_count() or 1, 32))


def cmd_fuzz(args) -> int:
    from ptojax.fuzz import campaign as C
    from ptojax.fuzz import casefile, report
    _check(args)
    cc = _campaign_config(args, C)
    err = console(stderr=True)

    def say(text):
        if not args.quiet:
            err.print(text, markup=False, highlight=False)

    exporter = None
    if args.export:
        make = report.BatchExporter if args.export_format == "batch" else report.Exporter
        exporter = make(args.export, cc, args.export_limit)
    res = _run(args, cc, exporter)
    files = report.write_mismatches(
        res, cc, Path(args.out or FUZZ_DEFAULT_OUT), max_files=args.max_files,
        shrink_limit=0 if args.no_shrink else args.shrink_limit,
        shrink_seconds=args.shrink_seconds, against=args.against, say=say,
        against_protocol=args.against_protocol) if res.kept else []
    extra = {"mismatch_files": files,
             "mismatch_signatures": len({m.signature for m in res.kept})}
    if args.against:
        extra["against"] = {"command": args.against, "protocol": args.against_protocol,
                            "compared": res.against_compared, "mismatches": res.against_mismatches,
                            "error": res.stopped}
    if exporter is not None:
        extra["export"] = exporter.write_index()
    rep = C.report_json(res, extra)
    if args.out:
        casefile.write_json(Path(args.out) / "report.json", rep)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print_fuzz_report(rep)
    if res.stopped:             # an error: said even with --quiet
        err.print(f"ptojax fuzz: error: {res.stopped}; the campaign stopped there, and the report "
                  f"covers the {res.cases:,} cases it finished", markup=False, highlight=False)
        return 2
    if res.setup_failures:
        err.print(f"ptojax fuzz: {len(res.setup_failures)} drawn case(s) whose setup words did not "
                  "complete were not run (a generator defect; the report's setup_failures has them)",
                  markup=False, highlight=False)
    if res.mismatches or res.against_mismatches or res.setup_failures:
        return 1
    if res.interrupted:
        say("interrupted: the report covers the cases finished before Ctrl-C")
        return 130
    return 0


def _check(args):
    """The option values the parser cannot check; the config-dependent defaults."""
    if args.batch is None:
        args.batch = default_rows(args.config)
    if args.edge_weight is None:
        args.edge_weight = default_edge_weight(args.config)
    if args.jobs is None:
        args.jobs = default_jobs(args.config)
    if args.count < 1:
        raise CliError(f"--count {args.count}: expected at least 1")
    if args.batch < 2:
        raise CliError(f"--batch {args.batch}: expected at least 2 (cases + the filler row)")
    if not 0.0 <= args.sample <= 1.0:
        raise CliError(f"--sample {args.sample}: expected a fraction in 0..1")
    if not 0 <= args.pe < tables.NUM_PES:
        raise CliError(f"--pe {args.pe}: expected 0..{tables.NUM_PES - 1}")
    if args.cas_weight is not None and not 0.0 <= args.cas_weight <= 1.0:
        raise CliError(f"--cas-weight {args.cas_weight}: expected a probability in 0..1")
    if args.matmul_weight is not None and not 0.0 <= args.matmul_weight <= 1.0:
        raise CliError(f"--matmul-weight {args.matmul_weight}: expected a probability in 0..1")
    if args.cas_weight is not None and args.matmul_weight is not None \
            and args.cas_weight + args.matmul_weight > 1.0:
        raise CliError(f"--cas-weight {args.cas_weight} + --matmul-weight {args.matmul_weight}: "
                       "the two probabilities sum past 1")
    if args.coop_weight is not None and not 0.0 <= args.coop_weight <= 1.0:
        raise CliError(f"--coop-weight {args.coop_weight}: expected a probability in 0..1")
    if args.coop_weight and not args.core and args.core_share == 0:
        raise CliError("--coop-weight: cooperative kinds run on the Core; add --core or a "
                       "--core-share above 0")
    if not 0.0 <= args.tmov_weight <= 1.0:
        raise CliError(f"--tmov-weight {args.tmov_weight}: expected a probability in 0..1")
    if not 0.0 <= args.edge_weight <= 1.0:
        raise CliError(f"--edge-weight {args.edge_weight}: expected a probability in 0..1")
    if args.core and args.pe != 0:
        raise CliError("--core runs every PE; leave --pe at 0")
    if (args.core or (args.core_share is None and args.ops in (None, "all")) or args.core_share) \
            and args.against and args.against_protocol == "lines":
        raise CliError("--core / --core-share: the lines protocol carries one PE's view only; "
                       "use --against-protocol batch")
    if args.core_share is not None and not 0.0 <= args.core_share <= 1.0:
        raise CliError(f"--core-share {args.core_share}: expected a probability in 0..1")
    if args.variants is None:
        args.variants = DEFAULT_VARIANTS
    if args.variants < 1:
        raise CliError(f"--variants {args.variants}: expected at least 1")
    if args.against_timeout <= 0:
        raise CliError(f"--against-timeout {args.against_timeout}: expected seconds > 0")
    if args.against_start_timeout <= 0:
        raise CliError(f"--against-start-timeout {args.against_start_timeout}: expected seconds > 0")
    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs {args.jobs}: expected at least 1")


def _campaign_config(args, C):
    """The CampaignConfig of the options (C: ptojax.fuzz.campaign); this process's share
    of it with --shard or --distributed."""
    from ptojax.fuzz.coverage import parse_ops
    try:
        ops = parse_ops(args.ops)
    except ValueError as e:
        raise CliError(f"--ops: {e}") from None
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip()) if args.kinds else None
    shard = _shard(args.shard) if args.shard else (0, 1)
    if args.distributed:
        if args.shard:
            raise CliError("--shard and --distributed exclude each other")
        shard = _distributed(args)
    ensure_compile_cache()
    jobs = args.jobs if args.jobs is not None else default_jobs(args.config)
    cc = C.CampaignConfig(seed=args.seed, count=args.count, config=args.config, rows=args.batch,
                          sample=args.sample, on_fault=args.on_fault, pe=args.pe, ops=ops,
                          kinds=kinds, jobs=jobs, shard=shard, cas_weight=args.cas_weight,
                          matmul_weight=args.matmul_weight, profile=args.profile,
                          semantics=args.semantics, core=args.core,
                          core_share=args.core_share, coop_weight=args.coop_weight,
                          edge_weight=args.edge_weight, tmov_weight=args.tmov_weight,
                          variants=args.variants)
    if cc.share_core > 0 and cc.cas + cc.coop + cc.edge_weight > 1.0 + 1e-12:
        raise CliError(f"the MGATHER.CAS ({cc.cas:g}), cooperative ({cc.coop:g}) and edge "
                       f"({cc.edge_weight:g}) shares of the Core's draws sum past 1")
    if cc.core and args.matmul_weight is not None \
            and cc.cas + cc.matmul + cc.coop + cc.edge_weight > 1.0 + 1e-12:
        raise CliError(f"the MGATHER.CAS ({cc.cas:g}), matrix ({cc.matmul:g}), cooperative "
                       f"({cc.coop:g}) and edge ({cc.edge_weight:g}) shares sum past 1")
    if cc.cas + cc.matmul + cc.edge_weight + cc.tmov_weight > 1.0 + 1e-12:
        raise CliError(f"the MGATHER.CAS ({cc.cas:g}), matrix ({cc.matmul:g}), edge "
                       f"({cc.edge_weight:g}) and TMOV ({cc.tmov_weight:g}) shares sum past 1")
    return cc


def _run(args, cc, export):
    """run_campaign with the progress bar and the --against command."""
    from ptojax.fuzz import campaign as C
    from ptojax.fuzz import casefile
    ext = None
    if args.against:
        try:
            if args.against_protocol == "batch":
                from ptojax.fuzz.dut import BatchedDut
                ext = BatchedDut(args.against, cc.machine, cc.pe, cc.on_fault, args.against_timeout,
                                 args.against_start_timeout)
            else:
                ext = casefile.External(args.against, cc.machine, cc.on_fault, args.against_timeout,
                                        args.against_start_timeout)
        except casefile.ExternalError as e:
            raise CliError(str(e)) from None
    update, stop = _fuzz_progress(not args.no_progress and not args.quiet)
    try:
        return C.run_campaign(cc, progress=update, export=export, against=ext)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        stop()
        if ext is not None:
            ext.close()


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or int(m[2]) < 1 or int(m[1]) >= int(m[2]):
        raise CliError(f"--shard {text!r}: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")
    return int(m[1]), int(m[2])



def _distributed(args) -> tuple[int, int]:
    """jax.distributed.initialize(...) and this process's (index, count)."""
    import jax
    kw = {}
    if args.coordinator:
        kw["coordinator_address"] = args.coordinator
    if args.num_processes is not None:
        kw["num_processes"] = args.num_processes
    if args.process_id is not None:
        kw["process_id"] = args.process_id
    try:
        jax.distributed.initialize(**kw)
    except (RuntimeError, ValueError) as e:
        raise CliError(f"--distributed: jax.distributed.initialize failed: {e}") from None
    return jax.process_index(), jax.process_count()


def _fuzz_progress(enabled: bool):
    """(callback, stop) drawing a rich progress bar on stderr."""
    if not enabled:
        return None, lambda: None
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    con = console(stderr=True)
    if not con.is_terminal:                 # a log file: one plain line every 30 s
        last = {"t": 0.0}

        def plain(done, total, res):
            now = time.perf_counter()
            if now - last["t"] < 30 and done < total:
                return
            last["t"] = now
            rate = res.cases_per_s
            eta = (total - done) / rate if rate > 0 else float("nan")
            con.print(f"fuzz: {done:,}/{total:,} cases, {rate:,.0f} cases/s, "
                      f"{res.mismatches + res.against_mismatches:,} mismatches, "
                      f"{res.seconds:,.0f} s, eta {eta:,.0f} s", markup=False, highlight=False,
                      soft_wrap=True)
        return plain, lambda: None
    prog = Progress(TextColumn("fuzz"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]} cases/s"),
                    TextColumn("{task.fields[bad]} mismatches"),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                    console=con, transient=False)
    state = {}

    def update(done, total, res):
        if "task" not in state:
            prog.start()
            state["task"] = prog.add_task("fuzz", total=total, rate="-", bad=0)
        first = min(res.cases, res.cfg.rows - 1)
        steady = res.seconds - res.first_call_seconds
        rate = (res.cases - first) / steady if steady > 0 and res.cases > first else res.cases_per_s
        prog.update(state["task"], completed=done, rate=f"{rate:,.0f}",
                    bad=res.mismatches + res.against_mismatches)

    def stop():
        if "task" in state:
            prog.stop()
    return update, stop




def _counts_text(counts: dict) -> str:
    items = list(counts.items())
    return "  ".join(f"{k} {v:,}" for k, v in items) or "-"


def print_fuzz_report(rep: dict, con=None):
    from rich import box
    from rich.table import Table
    from ptojax.fuzz.coverage import Coverage
    con = con or console()
    t = Table(title="ptojax fuzz", box=box.SIMPLE_HEAD, show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    sample = rep["sample"]
    t.add_row("cases run", f"{rep['cases']:,} (pj.batch.run, config {rep['config']}, "
                           f"{rep['cases_per_call']} cases per call, on_fault {rep['on_fault']}, "
                           + ("the Core (core=True, coop_weight "
                              f"{rep.get('coop_weight', 0):g}), " if rep.get("core")
                              else f"PE {rep['pe']}, " + (
                                  f"{rep['core_share']:g} of the draws on the Core, "
                                  if rep.get("core_share") else ""))
                           + f"{rep['devices']} device(s))")
    if rep.get("variants", 1) > 1:
        t.add_row("drawn", f"{rep['drawn']:,} drawn cases, each with up to {rep['variants'] - 1} "
                           f"variants ({rep['cases'] - rep['drawn']:,} variants)")
    ref = "pj.reference.run_core" if rep.get("core") else "pj.reference.run"
    t.add_row("compared", f"{rep['compared']:,} with {ref} "
                          f"({'all' if sample >= 1 else f'seeded sample, fraction {sample:g}'})")
    t.add_row("mismatches", f"{rep['mismatches']:,}")
    if "against" in rep:
        t.add_row("external", f"{rep['against']['compared']:,} compared with {rep['against']['command']!r}, "
                              f"{rep['against']['mismatches']:,} mismatches")
    t.add_row("time", f"{rep['seconds']:.1f} s ({rep['first_call_seconds']:.1f} s first call incl. "
                      f"compile or cache load)")
    steady = rep.get("steady_cases_per_s")
    t.add_row("cases/s", f"{rep['cases_per_s']:,.0f} overall"
              + (f", {steady:,.0f} after the first call" if steady else ""))
    if rep.get("stage_seconds"):
        t.add_row("stages", "  ".join(f"{k} {v:.1f} s" for k, v in rep["stage_seconds"].items())
                  + f"  ({rep.get('batches', 0):,} batches, {rep.get('setup_batches', 0):,} setup)")
    if rep.get("stopped"):
        t.add_row("stopped", rep["stopped"])
    t.add_row("seed / ops / kinds", f"{rep['seed']} / {rep['ops'] if isinstance(rep['ops'], str) else ','.join(rep['ops'])}"
                                    f" / {rep['kinds'] if isinstance(rep['kinds'], str) else ','.join(rep['kinds'])}")
    if rep["shard"] != [0, 1]:
        t.add_row("shard", f"{rep['shard'][0]} of {rep['shard'][1]}")
    con.print(t)
    c = Table(title="coverage (cases)", box=box.SIMPLE_HEAD, show_lines=False)
    c.add_column("axis", style="bold", no_wrap=True)
    c.add_column("counts")
    c.add_column("never hit", style="yellow")
    for axis in Coverage.AXES:
        counts = rep["coverage"].get(axis, {})
        if axis == "variants":         # one entry per field changed: summed by kind of change
            summed: dict[str, int] = {}
            for k, v in counts.items():
                summed[k.split(" ")[0]] = summed.get(k.split(" ")[0], 0) + v
            counts = summed
        c.add_row(axis, _counts_text(counts), ", ".join(rep["never_hit"].get(axis, [])) or "-")
    for axis, vals in rep.get("not_applicable", {}).items():
        if vals:
            c.add_row(f"{axis} (n/a)", f"not drawn on config {rep['config']}: {', '.join(vals)}", "-")
    con.print(c)
    for f in rep.get("mismatch_files", []):
        con.print(f"mismatch written: {f}  (ptojax replay {f})", markup=False, soft_wrap=True)
    if rep.get("export"):
        e = rep["export"]
        con.print(f"exported {e['cases']:,} cases to {e['dir']} ({e['format']})", markup=False,
                  soft_wrap=True)
