"""What a campaign leaves on disk, and a saved case run again.

`write_mismatches` takes the first case of each mismatch signature, shrinks
it (`shrink`), reruns it on both sides and writes a replayable case file
(`ptojax.fuzz-case.v1`); `Exporter` writes cases with the reference model's
final state for other models (`ptojax.fuzz-export.v1`) and their index;
`replay` reruns a loaded case file. `ptojax fuzz` and `ptojax replay` call
them and print.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import casefile, shrink
from .campaign import (CampaignConfig, CampaignResult, JaxRunner, Outcome, differences,
                       initial_state, reference_outcome)


class CoreReference:
    """The shrinker's other side for Core cases: pj.reference.run_core."""

    def __init__(self, on_fault, cfg):
        self.on_fault, self.cfg = on_fault, cfg

    def run(self, case, state):
        return reference_outcome(state, case.words, case.pe, self.on_fault, self.cfg, case.core)


def _outcomes(runner: JaxRunner, case, other, cc: CampaignConfig, names: tuple):
    """(jax outcome, the other side's, their differences) of one case."""
    mcfg = cc.machine
    got = runner.run([case])[0]
    st = initial_state(case, mcfg)
    want = other.run(case, st) if other else reference_outcome(st, case.words, case.pe,
                                                              cc.on_fault, mcfg, case.core)
    return got, want, differences(got, want, names)


def write_mismatches(res: CampaignResult, cc: CampaignConfig, out: Path, *, max_files: int,
                     shrink_limit: int, shrink_seconds: float, against: Optional[str],
                     say: Callable) -> list:
    """Shrink the first case of each mismatch signature (the first `shrink_limit`
    signatures) and write at most `max_files` case files under `out`; their paths."""
    mcfg = cc.machine
    by_sig = {}
    for m in res.kept:
        by_sig.setdefault(m.signature, m)
    runner = JaxRunner(mcfg, cc.rows, cc.pe, cc.on_fault, core=cc.core)
    ext = None
    files = []
    try:
        for n, (sig, m) in enumerate(by_sig.items()):
            if n >= max_files:
                break
            other = None
            if m.against:
                ext = ext or casefile.External(against, mcfg, cc.on_fault)
                other = ext
            case, stats = m.case, None
            if n < shrink_limit:
                say(f"shrinking mismatch {n + 1} (case {m.k}, {len(m.case.words)} words, "
                    f"{', '.join(sig[:4])}) ...")
                fails = shrink.reference_predicate(runner, cc.on_fault, mcfg,
                                                   other or (CoreReference(cc.on_fault, mcfg)
                                                             if cc.core else None))
                case, stats = shrink.shrink(m.case, fails, seconds=shrink_seconds)
                say(f"  -> {len(case.words)} words after {stats['kept']} kept of {stats['tried']} "
                    f"tried changes ({stats['seconds']:.1f} s)")
            names = ("jax", "external" if other else "reference")
            got, want, diffs = _outcomes(runner, case, other, cc, names)
            if not diffs:        # flaky? keep the original then
                case, stats = m.case, stats and dict(stats, note="shrunk case no longer differs; "
                                                      "the original is written")
                got, want, diffs = _outcomes(runner, case, other, cc, names)
            d = casefile.repro_json(case, cfg=mcfg, config_name=cc.config, on_fault=cc.on_fault,
                                    rows=cc.rows, campaign={"seed": cc.seed, "k": m.k, "index": m.index},
                                    a=got, b=want, names=names, diffs=diffs, shrink=stats,
                                    original=m.case if stats else None,
                                    against=against if other else None)
            files.append(str(casefile.write_json(out / f"mismatch-{cc.seed}-{m.k}.json", d)))
    finally:
        if ext is not None:
            ext.close()
    return files


class Exporter:
    """The campaign's `export` callback: writes each case it is offered as
    `case-SEED-K.json` under `directory`, the first `limit` (None: all)."""

    def __init__(self, directory, cc: CampaignConfig, limit: Optional[int] = None):
        self.dir, self.cc, self.limit = Path(directory), cc, limit
        self.mcfg = cc.machine
        self.files = []

    def __call__(self, k, index, case, state, expected):
        if self.limit is not None and len(self.files) >= self.limit:
            return False
        d = casefile.export_json(k, index, self.cc.seed, case, self.mcfg, self.cc.on_fault, state,
                                 expected)
        name = f"case-{self.cc.seed}-{k:07d}.json"
        self.files.append(str(casefile.write_json(self.dir / name, d)))
        return None

    def write_index(self) -> dict:
        """Write index.json (the campaign and the files written); the report's summary."""
        cc = self.cc
        casefile.write_json(self.dir / "index.json", {
            "format": "ptojax.fuzz-export-index.v1", "seed": cc.seed, "config": cc.config,
            "machine": casefile.machine_json(self.mcfg), "on_fault": cc.on_fault, "pe": cc.pe,
            "protocol": casefile.PROTOCOL, "cases": [Path(f).name for f in self.files]})
        return {"dir": str(self.dir), "cases": len(self.files), "format": casefile.EXPORT_FORMAT}


@dataclass
class Replay:
    """A saved case run again: both outcomes, the sides' names, their differences."""
    got: Outcome
    want: Outcome
    names: tuple
    diffs: list


def replay(rp: casefile.Repro, rows: int, command: Optional[str] = None) -> Replay:
    """Run a loaded case on pj.batch.run (`rows` rows) and on the reference model, or
    on the external `command` (casefile.ExternalError when it fails)."""
    got = JaxRunner(rp.cfg, rows, rp.pe, rp.on_fault, core=rp.core).run([(rp.state, rp.words)])[0]
    if command:
        with casefile.External(command, rp.cfg, rp.on_fault) as ext:
            want = ext.run_state(rp.state, rp.words, rp.pe)
        names = ("jax", "external")
    else:
        want = reference_outcome(rp.state, rp.words, rp.pe, rp.on_fault, rp.cfg, rp.core)
        names = ("jax", "reference")
    return Replay(got, want, names, differences(got, want, names))
