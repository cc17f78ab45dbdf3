"""`ptojax run`: one program on a fresh State, on pj.run / pj.run_core or the reference model."""

from __future__ import annotations

import json

import ptojax as pj
from ptojax import tables
from ptojax.compile_cache import ensure_compile_cache
from ptojax.report import build_report, format_report

from .common import CliError
from .inputs import build_state, load_program, program_setup, read_text

PROGRAM_DEFAULT_CONFIG = "asl"


def cmd_run(args) -> int:
    text = read_text(args.program)
    words, _ = load_program(text, args.hex)
    if not 0 <= args.pe < tables.NUM_PES:
        raise CliError(f"--pe {args.pe}: expected 0..{tables.NUM_PES - 1}")
    cfg = pj.preset(args.config).replace(profile=args.profile, semantics=args.semantics)
    setup_gm, setup_gpr = program_setup(text)
    before = build_state(cfg, args.gm, setup_gm + (args.gm_hex or []),
                         setup_gpr + (args.gpr or []), args.pe)
    if not args.reference:
        ensure_compile_cache()
    if args.core:
        if args.pe != 0:
            raise CliError("--core runs every PE; drop --pe")
        runner = pj.reference.run_core if args.reference else pj.run_core
        result = runner(before, words, on_fault=args.on_fault, cfg=cfg)
    else:
        runner = pj.reference.run if args.reference else pj.run
        result = runner(before, words, pe=args.pe, on_fault=args.on_fault, cfg=cfg)
    rep = build_report(before, result, words, model="reference" if args.reference else "jax",
                       config=args.config, pe="core" if args.core else args.pe,
                       on_fault=args.on_fault, profile=args.profile, semantics=args.semantics)
    if args.json:
        for k in ("_tile_views", "_shared_views", "_gm_after"):
            rep.pop(k)
        print(json.dumps(rep, indent=2))
    else:
        print(format_report(rep))
    return 0
