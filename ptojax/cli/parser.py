"""The `ptojax` argument parser: one function per command adds its subparser.

Each subparser's `func` is the command's `cmd_*` function (ptojax/cli/<command>.py).
"""

from __future__ import annotations

import argparse

import ptojax as pj
from ptojax.compile_cache import CACHE_ENV
from ptojax.state import PROFILES, SEMANTICS
from ptojax.warmup import WARMUP_PROGRAMS

from .asm import cmd_asm, cmd_disasm
from .bench import cmd_bench
from .demo import DEMO_DEFAULT_CONFIG, cmd_demo
from .fuzz import EDGE_WEIGHT_ASL, FUZZ_DEFAULT_CONFIG, FUZZ_DEFAULT_OUT, cmd_fuzz
from .replay import cmd_replay
from .run import PROGRAM_DEFAULT_CONFIG, cmd_run
from .warmup import WARMUP_OPS, cmd_warmup


def build_parser() -> argparse.ArgumentParser:
    configs = ", ".join(f"{n} ({c.state_bytes:,} B/state)" for n, c in pj.PRESETS.items())
    ap = argparse.ArgumentParser(
        prog="ptojax",
        description="ptojax: an executable, batched, bit-exact model of the PTO tile ISA's "
                    "CUBE slice on JAX.",
        epilog="Exit status: 0 when the command ran (an architectural fault is a result, "
               "not an error), 2 for bad input. Compiled code stays in JAX's "
               f"persistent cache (${CACHE_ENV}, default ~/.cache/ptojax/jax-cache; set it "
               "empty to turn that off).")
    ap.add_argument("--version", action="version", version=f"ptojax {pj.__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub, configs)
    _add_asm(sub)
    _add_demo(sub)
    _add_fuzz(sub, configs)
    _add_replay(sub)
    _add_warmup(sub)
    _add_bench(sub)
    return ap


def _add_run(sub, configs: str):
    """`run PROGRAM`: the options of the State and the run."""
    r = sub.add_parser(
        "run", help="run a program on a fresh machine and report faults, tiles and memory",
        description="Run a word stream (assembly, or hex words) on a fresh State and report "
                    "the fault, the tiles it changed and the GM bytes it changed.")
    r.add_argument("program", help="program file, or - for stdin: assembly text, or hex words "
                                   "(one or more per line; detected when every token is hex)")
    r.add_argument("--hex", action="store_true", help="the program is hex words")
    r.add_argument("--gm", metavar="FILE", help="binary GM image written at address 0")
    r.add_argument("--gm-hex", metavar="ADDR:HEXBYTES", action="append",
                   help="bytes written into GM at ADDR, e.g. 0x100:003c0040 (repeatable)")
    r.add_argument("--gpr", metavar="[PE:]REG=VALUE", action="append",
                   help="set a GPR, e.g. a0=0x100 or 1:a1=8 (repeatable; PE defaults to --pe)")
    r.add_argument("--pe", type=int, default=0, help="the PE that runs the stream (0..3)")
    r.add_argument("--core", action="store_true",
                   help="run on all four PEs of the Core together (pj.run_core): each block "
                        "completes as a collective, e.g. a cooperative TMATMUL publishes one "
                        "fragment per PE")
    r.add_argument("--config", choices=list(pj.PRESETS), default=PROGRAM_DEFAULT_CONFIG,
                   help=f"machine sizes (default {PROGRAM_DEFAULT_CONFIG}, the ASL model's): {configs}")
    r.add_argument("--profile", choices=list(PROFILES), default="portable",
                   help="numeric profile of the matrix family (TMATMUL/TGEMV): portable "
                        "(default, the ASL model's raw-word multiply-accumulate) or ieee "
                        "(binary32 arithmetic on decoded values); docs/numerics.md")
    r.add_argument("--semantics", choices=list(SEMANTICS), default="adr0100",
                   help="the cooperative (Shared-operand) matrix rules: adr0100 (default, ADR "
                        "0100's per-PE fragments) or 0.58.3 (the ASL model of release 0.58.3: "
                        "any nonzero mask, D with the block's mask); docs/shared-decisions.md")
    r.add_argument("--on-fault", choices=["abandon", "hold"], default="abandon",
                   help="after a fault, discard the open block (default) or keep it pending")
    r.add_argument("--reference", action="store_true",
                   help="run the plain-Python reference model instead of the JAX model")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.set_defaults(func=cmd_run)


def _add_asm(sub):
    """`asm FILE` and `disasm FILE`."""
    a = sub.add_parser("asm", help="assemble text into hex words",
                       description="Assemble program text; print one hex word per line.")
    a.add_argument("file", help="assembly file, or - for stdin")
    a.add_argument("--json", action="store_true", help="print a JSON list of hex strings")
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="disassemble hex words into text",
                       description="Disassemble hex words (whitespace/comma separated; a JSON "
                                   "list from `asm --json` works too).")
    d.add_argument("file", help="file of hex words, or - for stdin")
    d.add_argument("-a", "--addresses", action="store_true",
                   help="prefix each line with its address and word")
    d.set_defaults(func=cmd_disasm)


def _add_demo(sub):
    """`demo`: the guided tour."""
    m = sub.add_parser("demo", help="a guided run: TLOAD, TSTORE, a fault, TMATMUL, the oracle, "
                                    "a batch",
                       description="Load a 2x3 FP16 matrix into a CUBE_M16 tile, store it back, "
                                   "hit a fault, multiply it by a 3x2 FP16 matrix with TMATMUL "
                                   "in both numeric profiles (checked against numpy), check all "
                                   "of it against the reference model, then run a batch of "
                                   "bundles at once.")
    m.add_argument("--config", choices=list(pj.PRESETS), default=DEMO_DEFAULT_CONFIG,
                   help=f"machine sizes (default {DEMO_DEFAULT_CONFIG})")
    m.add_argument("--batch", type=int, default=1000, help="bundles in the batch step (default 1000)")
    m.add_argument("--seed", type=int, default=0, help="seed of the random batch bundles")
    m.set_defaults(func=cmd_demo)


def _add_fuzz(sub, configs: str):
    """`fuzz`: what the campaign draws and how it runs (what it writes: _add_fuzz_outputs)."""
    f = sub.add_parser(
        "fuzz", help="differential campaign: pj.batch.run against the reference model",
        description="Draw random bundle streams (legal ones and ones mutated towards each fault), "
                    "run them in batches on pj.batch.run and on pj.reference.run, compare every "
                    "State leaf, the fault and the executed count, shrink each mismatch to a "
                    "minimal case and write it as a replayable JSON file; report coverage.",
        epilog="Exit status: 0 no mismatch, 1 mismatches found (files written), 2 bad input or "
               "a failing --against command, 130 interrupted (the report covers the cases run).")
    f.add_argument("--ops", default="all", metavar="LIST",
                   help="operations, e.g. tload,tstore,mgather_cas,tmatmul,tgemvmx_acc (default all): "
                        "keep cases with a BSTART of one of them, and cases with no BSTART at all; "
                        "matrix operations draw the generator's TMATMUL/TGEMV kinds for those forms")
    f.add_argument("--kinds", metavar="PATTERNS",
                   help="comma list of fnmatch patterns on the generator's case kind (e.g. 'cube_*')")
    f.add_argument("--cas-weight", type=float, metavar="P",
                   help="probability that a drawn case is an MGATHER.CAS kind (default: 1/5 with "
                        "--ops all, 0 without mgather_cas in --ops, 1 when it is the only op, "
                        "else 1/3)")
    f.add_argument("--matmul-weight", type=float, metavar="P",
                   help="probability that a drawn case is a TMATMUL/TGEMV kind, post-processing "
                        "included (default: 3/10 with --ops all, 0 unless --ops names a matrix "
                        "operation, 1 when it names only matrix operations, else 1/3)")
    f.add_argument("--core", action="store_true",
                   help="run every case on the Core's four PEs: pj.batch.run(core=True) against "
                        "pj.reference.run_core (docs/shared-decisions.md); draws cooperative "
                        "TMATMUL and Shared TLOAD/TSTORE kinds too (--coop-weight)")
    f.add_argument("--core-share", type=float, metavar="P",
                   help="without --core: the share of drawn cases that run on the Core, with the "
                        "cooperative and Shared kinds among them (default 1/32 with --ops all, "
                        "else 0)")
    f.add_argument("--coop-weight", type=float, metavar="P",
                   help="among the Core's cases: probability of a cooperative / Shared kind "
                        "(default 1/3 when --ops includes a TMATMUL form or is all, else 0)")
    f.add_argument("--variants", type=int, default=None, metavar="M",
                   help="cases per drawn case: it and M-1 variants of it (one to three word, "
                        "field, GPR or GM changes, fuzz/variants.py) on its initial State "
                        "(default 8; 1: drawn cases only)")
    f.add_argument("--edge-weight", type=float, default=None, metavar="P",
                   help="probability that a drawn case is an edge kind: a tile past 256 payload "
                        "Words up to and over the config's tile_words (not on tiny), or an "
                        f"allocation at the TILE_CAPACITY edge (default {EDGE_WEIGHT_ASL:g} at "
                        "asl, else 0)")
    f.add_argument("--tmov-weight", type=float, default=0.0, metavar="P",
                   help="probability that a drawn case is a TMOV kind (Local copy, Shared "
                        "INSERT/PUBLISH/BROADCAST/EXTRACT; default 0)")
    f.add_argument("--count", type=int, default=1000, help="cases to run (default 1000)")
    f.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    f.add_argument("--batch", type=int, default=None,
                   help="rows per pj.batch.run call, the last one a never-executed filler row "
                        "that pins the compiled shape (default 256; 32 at asl, 15 MB a State)")
    f.add_argument("--sample", type=float, default=1.0, metavar="FRACTION",
                   help="run this seeded fraction of the cases on the reference model too "
                        "(default 1: all)")
    f.add_argument("--config", choices=list(pj.PRESETS), default=FUZZ_DEFAULT_CONFIG,
                   help=f"machine sizes (default {FUZZ_DEFAULT_CONFIG}, the model's own bounds; tiny "
                        f"for raw speed): {configs}")
    f.add_argument("--on-fault", choices=["abandon", "hold"], default="abandon")
    f.add_argument("--profile", choices=list(PROFILES), default="portable",
                   help="numeric profile of the matrix family (MachineConfig.profile) of both models "
                        "(default portable)")
    f.add_argument("--semantics", choices=list(SEMANTICS), default="adr0100",
                   help="rule set of both models (MachineConfig.semantics): adr0100 (default) or "
                        "0.58.3, the pto-spec release's cooperative rules")
    f.add_argument("--pe", type=int, default=0, help="the current PE of every case (default 0)")
    f.add_argument("--jobs", type=int, default=None,
                   help="reference-model worker processes (default: one per CPU core; 1 at "
                        "asl); 1 runs the reference in this process, overlapping the JAX batches")
    _add_fuzz_outputs(f)
    f.set_defaults(func=cmd_fuzz)


def _add_fuzz_outputs(f):
    """`fuzz`: the report, the case files, the external command, the shares."""
    f.add_argument("--json", action="store_true", help="print the report as JSON")
    f.add_argument("--out", metavar="DIR",
                   help=f"where mismatch files and report.json go (default ./{FUZZ_DEFAULT_OUT}, "
                        "only created for mismatches)")
    f.add_argument("--no-shrink", action="store_true", help="write mismatches as found")
    f.add_argument("--shrink-limit", type=int, default=3,
                   help="shrink the first case of this many distinct mismatch kinds (default 3)")
    f.add_argument("--shrink-seconds", type=float, default=120.0,
                   help="time budget per shrink (default 120)")
    f.add_argument("--max-files", type=int, default=20,
                   help="mismatch files written at most, one per distinct kind (default 20)")
    f.add_argument("--export", metavar="DIR",
                   help="also write the cases: with --export-format json, initial state + words + "
                        "the reference model's final state (pto.asl-model.arch-state.v1 "
                        "envelopes, one file a case); with batch, one file of arrays a batch "
                        "(ptojax.fuzz-batch.v2: cases, initial and pj.batch.run's final states)")
    f.add_argument("--export-format", choices=["json", "batch"], default="json",
                   help="json (default): arch-state envelopes for the reference runner; batch: "
                        "safetensors files of arrays, at the campaign's speed")
    f.add_argument("--export-limit", type=int, metavar="K",
                   help="export only the cases numbered below K")
    f.add_argument("--against", metavar="CMD",
                   help="also run every case on an external command (a DUT) and compare its final "
                        "states with pj.batch.run's (--against-protocol)")
    f.add_argument("--against-protocol", choices=["lines", "batch"], default="lines",
                   help="lines (default): one JSON request line a case "
                        "(ptojax.fuzz-against.v1); batch: one request of arrays a batch "
                        "(ptojax.fuzz-dut-request.v2, examples/dut_harness.py)")
    f.add_argument("--against-timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait for each of the command's answers after its first "
                        "(default 120)")
    f.add_argument("--against-start-timeout", type=float, default=600.0, metavar="S",
                   help="seconds to wait for its first answer, which includes its start and "
                        "first compile (default 600; at least --against-timeout)")
    f.add_argument("--shard", metavar="I/N",
                   help="run case k only when k %% N == I (one share of the campaign)")
    f.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() and take the share "
                        "jax.process_index()/jax.process_count()")
    f.add_argument("--coordinator", metavar="HOST:PORT", help="with --distributed")
    f.add_argument("--num-processes", type=int, help="with --distributed")
    f.add_argument("--process-id", type=int, help="with --distributed")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.add_argument("--quiet", action="store_true", help="no progress bar or status lines")


def _add_replay(sub):
    """`replay FILE`."""
    rp = sub.add_parser("replay", help="rerun a saved fuzz case on both models and show the difference",
                        description="Rerun a mismatch file written by `ptojax fuzz` (or an exported "
                                    "case) on pj.batch.run and on the reference model (or the "
                                    "external command that found it) and show the difference "
                                    "field by field.",
                        epilog="Exit status: 0 the models agree, 1 they differ, 2 bad input.")
    rp.add_argument("file", help="a ptojax.fuzz-case.v1 or ptojax.fuzz-export.v1 JSON file")
    rp.add_argument("--against", metavar="CMD", help="compare with this external command")
    rp.add_argument("--against-protocol", choices=["lines", "batch"],
                    help="the command's protocol (default: the file's, else lines)")
    rp.add_argument("--reference", action="store_true",
                    help="compare with the reference model even if an external command found it")
    rp.add_argument("--batch", type=int, help="rows of the compiled shape (default: the file's)")
    rp.add_argument("--json", action="store_true", help="print the differences as JSON")
    rp.set_defaults(func=cmd_replay)


def _add_warmup(sub):
    """`warmup`: the configs and profiles to compile."""
    w = sub.add_parser(
        "warmup", help="compile the common programs into the persistent cache ahead of a pipeline",
        description="Run small TLOAD, TSTORE, MGATHER.CAS and TMATMUL programs through pj.run, "
                    "a cooperative TMATMUL through pj.run_core, and pj.ops.matmul, in each "
                    "config and profile, so JAX's persistent compilation cache holds what a "
                    "first call compiles; print each program's seconds and whether it was "
                    "compiled or loaded from the cache.",
        epilog=f"The cache is ${CACHE_ENV} (default ~/.cache/ptojax/jax-cache); with it "
               "empty nothing is kept. Compiles run one at a time, 1-20 s each on a CPU.")
    w.add_argument("--config", action="append", choices=list(pj.PRESETS) + [WARMUP_OPS],
                   help="machine sizes to warm (repeatable; default tiny, small and ops: "
                        "pj.ops.matmul's own configs)")
    w.add_argument("--profile", action="append", choices=list(PROFILES),
                   help="numeric profiles to warm (repeatable; default both)")
    w.add_argument("--program", action="append", choices=[prog.name for prog in WARMUP_PROGRAMS],
                   help="only these programs of each config and profile (repeatable; default "
                        "all: what a pipeline calls is enough)")
    w.add_argument("--json", action="store_true", help="print the results as JSON")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    w.set_defaults(func=cmd_warmup)


def _add_bench(sub):
    """`bench NAME ARGS`."""
    b = sub.add_parser("bench", help="run a benchmark: layouts or bundles (ARGS go to it)",
                       description="Run benchmarks/<NAME>.py from the repository; "
                                   "`ptojax bench NAME --help` lists its options.")
    b.add_argument("name", choices=["layouts", "bundles"])
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    b.set_defaults(func=cmd_bench)
