"""`ptojax replay`: a saved fuzz case on both models again, the difference field by field."""

from __future__ import annotations

import json

import numpy as np

from ptojax import tables
from ptojax.compile_cache import ensure_compile_cache
from ptojax.report import listing

from .common import CliError


def _outcome_line(o) -> str:
    if o.error is not None:
        return f"raised {o.error}"
    fa = f" at {o.fault_address:#x}" if o.fault in tables.MEMORY_FAULTS else ""
    return f"{o.fault}{fa}, executed {o.executed}, pc {o.pc:#x}"


def cmd_replay(args) -> int:
    from ptojax.fuzz import casefile
    from ptojax.fuzz.report import replay
    try:
        rp = casefile.load_repro(args.file)
    except ValueError as e:
        raise CliError(str(e)) from None
    if len(rp.words) > 16:
        raise CliError(f"{args.file}: {len(rp.words)} words; replay runs streams of at most 16")
    ensure_compile_cache()
    command = args.against or (rp.data.get("against") if not args.reference else None)
    try:
        protocol = args.against_protocol or (rp.data.get("against_protocol") or "lines")
        r = replay(rp, args.batch or rp.rows, command, protocol)
    except casefile.ExternalError as e:
        raise CliError(f"--against: {e}") from None
    saved = rp.data.get("differences")
    if args.json:
        print(json.dumps({"file": args.file, "models": list(r.names), "differ": bool(r.diffs),
                          "differences": r.diffs,
                          "results": {r.names[0]: {"fault": r.got.fault, "executed": r.got.executed,
                                                   "pc": hex(r.got.pc)},
                                      r.names[1]: {"fault": r.want.fault, "executed": r.want.executed,
                                                   "pc": hex(r.want.pc)}},
                          "saved_differences": saved}, indent=1))
    else:
        print("\n".join(_text(args.file, rp, r, saved)))
    return 1 if r.diffs else 0


def _text(path, rp, r, saved) -> list:
    from ptojax.fuzz.campaign import format_difference
    got, want, names, diffs = r.got, r.want, r.names, r.diffs
    out = [f"replay {path}: {len(rp.words)} words, {'the Core' if rp.core else f'PE {rp.pe}'}, "
           f"on_fault {rp.on_fault}, "
           f"config {rp.data.get('config', {}).get('preset', '?')}"]
    case = rp.data.get("case")
    if case:
        out.append(f"case: kind {case.get('kind')}, mutations {case.get('mutations')}")
    start = int(np.asarray(rp.state.pc))
    mark = got.executed if got.fault != "Fault_None" else None
    out += listing(rp.words, start, mark, f"{names[0]}: {got.fault}")
    out.append("")
    out.append(f"{names[0]:>9}: {_outcome_line(got)}")
    out.append(f"{names[1]:>9}: {_outcome_line(want)}")
    if diffs:
        out.append(f"{len(diffs)} field(s) differ:")
        out += ["  " + format_difference(d, names) for d in diffs]
    else:
        out.append("the two models agree on every State leaf, the fault and the executed count")
    if saved is not None:
        same = [d["field"] for d in saved] == [d["field"] for d in diffs]
        out.append(f"saved in the file: {len(saved)} field(s) differed"
                   + (" (the same fields now)" if same and diffs else ""))
    return out
