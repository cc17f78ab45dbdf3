"""The `ptojax` command line.

    ptojax run PROGRAM [--gm FILE] [--gm-hex ADDR:HEX] [--gpr [PE:]REG=VALUE]
                       [--pe N] [--config asl|small|tiny] [--profile portable|ieee]
                       [--semantics adr0100|0.58.3] [--on-fault abandon|hold]
                       [--reference] [--hex] [--json]
    ptojax asm FILE|-  [--json]          assembly text -> hex words
    ptojax disasm FILE|- [--addresses]   hex words -> assembly text
    ptojax demo [--config NAME] [--batch N]
    ptojax bench layouts|bundles [ARGS]  the benchmarks of the repository's benchmarks/
    ptojax fuzz [--ops LIST] [--count N] [--seed S] [--batch B] [--sample F]
                [--config tiny|small|asl] [--profile portable|ieee] [--on-fault abandon|hold]
                [--cas-weight P] [--matmul-weight P] [--core] [--coop-weight P]
                [--edge-weight P] [--json] [--out DIR]
                [--export DIR] [--against CMD] [--shard I/N | --distributed] ...
    ptojax replay FILE [--against CMD | --reference] [--json]
    ptojax warmup [--config NAME]... [--profile portable|ieee]... [--json]

A program file may carry its own GM bytes and GPR values in setup lines,
comments of the form `;@ --gm-hex ADDR:HEX` or `;@ --gpr [PE:]REG=VALUE`
(several options per line allowed); they apply before the command line's
--gm-hex/--gpr, which can override them (examples/tmatmul_fp16.s).

Exit status: 0 when the command did its work (a program that stops at an
architectural fault still ran: the fault is data and is reported), 2 for bad
input (malformed assembly, unreadable file, bad option value). `fuzz` and
`replay` exit 1 when the two models differ (docs/fuzzing.md).

`parser` builds the argument parser; each command is a module here
(`run`, `asm` with disasm, `bench`, `demo`, `fuzz`, `replay`, `warmup`) that
calls library functions and prints. Commands that run JAX turn on JAX's
persistent compilation cache up front (ptojax/compile_cache.py). Started as
the console script, the batch commands (demo, bench, fuzz) restart once with
glibc's huge-page malloc (ptojax/_hugepages.py): XLA allocates every batch
result afresh, and with 4 KiB pages first touching them costs up to a third
of a batch.
"""

from __future__ import annotations

import sys

from .. import _hugepages
from .common import CliError
from .parser import build_parser

__all__ = ["main", "build_parser"]

# commands whose cost is batches of States (see the module docstring)
BATCH_COMMANDS = ("demo", "bench", "fuzz")


def main(argv=None) -> int:
    """Entry point of the `ptojax` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if argv is None and args.command in BATCH_COMMANDS:
        _hugepages.reexec_with_hugepage_malloc()
    try:
        return args.func(args)
    except CliError as e:
        print(f"ptojax {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `ptojax ... | head`
        return 0
