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

import numpy as np

from . import batchfile, casefile, shrink
from .campaign import CampaignConfig, CampaignResult, JaxRunner, Mismatch
from .cases import initial_state
from .compare import Outcome, differences, mismatches
from .oracle import reference_outcome


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
                     say: Callable, against_protocol: str = "lines") -> list:
    """Shrink the first case of each mismatch signature (the first `shrink_limit`
    signatures) and write at most `max_files` case files under `out`; their paths."""
    mcfg = cc.machine
    by_sig: dict[tuple[str, ...], Mismatch] = {}
    for m in res.kept:
        by_sig.setdefault(m.signature, m)
    runner = JaxRunner(mcfg, cc.rows, cc.pe, cc.on_fault, core=cc.core)
    ext = None
    files: list[str] = []
    try:
        for n, (sig, m) in enumerate(by_sig.items()):
            if n >= max_files:
                break
            other = None
            if m.against:
                assert against is not None      # the campaign ran against this command
                ext = ext or external(against, against_protocol, mcfg, cc.pe, cc.on_fault)
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
                                    against=against if other else None,
                                    against_protocol=against_protocol)
            files.append(str(casefile.write_json(out / f"mismatch-{cc.seed}-{m.k}.json", d)))
    finally:
        if ext is not None:
            ext.close()
    return files


class Exporter:
    """`--export DIR` with the JSON format: each case of a finished batch as
    `case-SEED-K.json` (its initial and the reference model's final State as
    arch-state envelopes, for the reference runner), those numbered below
    `limit` (None: all). The reference model runs the cases the campaign did
    not sample."""

    def __init__(self, directory, cc: CampaignConfig, limit: Optional[int] = None):
        self.dir, self.cc, self.limit = Path(directory), cc, limit
        self.mcfg = cc.machine
        self.files: list[str] = []

    def batch(self, b, got, want, cfg):
        sampled = {int(r): i for i, r in enumerate(np.flatnonzero(b.sample))}
        for i, row in enumerate(b.rows.tolist()):
            if self.limit is not None and b.k[i] >= self.limit:
                continue
            case = b.pool.case(row)
            state = b.starts.state(i, cfg)
            expected = want[sampled[i]] if i in sampled else reference_outcome(
                state, case.words, case.pe, self.cc.on_fault, cfg, case.core)
            k = int(b.k[i])
            d = casefile.export_json(k, int(b.pool.index[b.pool.base[row]]), self.cc.seed, case,
                                     cfg, self.cc.on_fault, state, expected)
            self.files.append(str(casefile.write_json(self.dir / f"case-{self.cc.seed}-{k:07d}.json",
                                                      d)))

    def write_index(self) -> dict:
        """Write index.json (the campaign and the files written); the report's summary."""
        cc = self.cc
        casefile.write_json(self.dir / "index.json", {
            "format": "ptojax.fuzz-export-index.v1", "seed": cc.seed, "config": cc.config,
            "machine": casefile.machine_json(self.mcfg), "on_fault": cc.on_fault, "pe": cc.pe,
            "protocol": casefile.PROTOCOL, "cases": [Path(f).name for f in self.files]})
        return {"dir": str(self.dir), "cases": len(self.files), "format": casefile.EXPORT_FORMAT}


class BatchExporter:
    """`--export DIR --export-format batch`: each finished batch as one file of
    arrays, `batch-SEED-NNNNNN.safetensors` (`ptojax.fuzz-batch.v2`,
    docs/fuzzing.md): its cases, their initial States and pj.batch.run's final
    States (no oracle needed; where the oracle ran, whether it agreed), of
    the cases numbered below `limit` (None: all)."""

    def __init__(self, directory, cc: CampaignConfig, limit: Optional[int] = None):
        self.dir, self.cc, self.limit = Path(directory), cc, limit
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mcfg = cc.machine
        self.files: list[str] = []
        self.cases = 0

    def batch(self, b, got, want, cfg):
        keep = np.arange(len(b.rows)) if self.limit is None else np.flatnonzero(b.k < self.limit)
        n = len(keep)
        if not n:
            return
        tensors = batch_tensors(b, got, want, cfg, keep)
        meta = batch_metadata(self.cc, cfg, BATCH_FORMAT, b.core)
        name = f"batch-{self.cc.seed}-{len(self.files):06d}.safetensors"
        batchfile.write(self.dir / name, tensors, meta)
        self.files.append(name)
        self.cases += n

    def write_index(self) -> dict:
        cc = self.cc
        casefile.write_json(self.dir / "index.json", {
            "format": "ptojax.fuzz-batch-index.v1", "batch_format": BATCH_FORMAT, "seed": cc.seed,
            "config": cc.config, "machine": casefile.machine_json(self.mcfg),
            "on_fault": cc.on_fault, "pe": cc.pe, "cases": self.cases, "files": self.files})
        return {"dir": str(self.dir), "cases": self.cases, "files": len(self.files),
                "format": BATCH_FORMAT}


BATCH_FORMAT = "ptojax.fuzz-batch.v2"


def batch_metadata(cc: CampaignConfig, cfg, fmt: str, core: bool) -> dict:
    import json
    from ..version import __version__
    return {"format": fmt, "ptojax_version": __version__, "seed": cc.seed, "pe": cc.pe,
            "on_fault": cc.on_fault, "core": "true" if core else "false",
            "machine": json.dumps(casefile.machine_json(cfg), sort_keys=True)}


def batch_tensors(b, got, want, cfg, keep) -> dict:
    """A batch's tensors (rows `keep` of it): the cases, initial and final States."""
    pool, rows = b.pool, b.rows[keep]
    starts = b.starts.take(keep)
    t = {"case.k": b.k[keep].astype(np.int64),
         "case.index": pool.index[pool.base[rows]].astype(np.int64),
         "case.variant": pool.variant[rows].astype(np.int32),
         "case.core": starts.core.astype(np.bool_),
         "words": starts.words.astype(np.uint32), "lengths": starts.lengths.astype(np.int32)}
    t.update(starts.tensors("initial", cfg))
    t.update(batchfile.states_to_tensors("final", {k: v[keep] for k, v in got.leaves.items()}))
    t["final.executed"] = got.executed[keep].astype(np.int64)
    compared = b.sample[keep]
    agreed = np.zeros(len(keep), bool)
    if want is not None:
        srows = np.flatnonzero(b.sample)
        pos = {int(r): i for i, r in enumerate(srows)}
        idx = [pos[int(r)] for r in keep if int(r) in pos]
        bad = mismatches(got, keep[compared], _rows(want, idx)) if idx else np.zeros(0, bool)
        agreed[compared] = ~bad
    t["oracle.compared"], t["oracle.agreed"] = compared.astype(np.bool_), agreed
    return t


def _rows(r, idx):
    from .compare import Results
    return Results({k: v[idx] for k, v in r.leaves.items()}, r.executed[idx],
                   None if r.errors is None else [r.errors[i] for i in idx],
                   {j: r.odd[i] for j, i in enumerate(idx) if i in r.odd},
                   None if r.outcomes is None else [r.outcomes[i] for i in idx])


def read_batch(path, cfg=None) -> dict:
    """An exported batch file as {"cases": {...}, "words", "lengths", "initial":
    leaves, "final": leaves, "executed", "oracle": {...}, "metadata"} with dense
    state leaves (state_leaves' keys); BatchFileError when it is not one."""
    import json
    tensors, meta = batchfile.read(path, BATCH_FORMAT)
    if cfg is None:
        try:
            cfg = casefile.machine_from(json.loads(meta["machine"]))
        except (KeyError, ValueError, TypeError) as e:
            raise batchfile.BatchFileError(f"{path}: no usable machine config ({e})") from None
    if "case.k" not in tensors:
        raise batchfile.BatchFileError(f"{path}: no tensor 'case.k'")
    n = len(tensors["case.k"])
    return {"metadata": meta, "machine": cfg,
            "cases": {k[len("case."):]: v for k, v in tensors.items() if k.startswith("case.")},
            "words": tensors["words"], "lengths": tensors["lengths"],
            "initial": batchfile.tensors_to_states("initial", tensors, cfg, n, str(path)),
            "final": batchfile.tensors_to_states("final", tensors, cfg, n, str(path)),
            "executed": tensors["final.executed"],
            "oracle": {"compared": tensors["oracle.compared"], "agreed": tensors["oracle.agreed"]}}


@dataclass
class Replay:
    """A saved case run again: both outcomes, the sides' names, their differences."""
    got: Outcome
    want: Outcome
    names: tuple
    diffs: list


def external(command: str, protocol: str, cfg, pe: int, on_fault: str):
    """The external DUT `command` speaking `protocol` ("lines" or "batch")."""
    if protocol == "batch":
        from .dut import BatchedDut
        return BatchedDut(command, cfg, pe, on_fault)
    return casefile.External(command, cfg, on_fault)


def replay(rp: casefile.Repro, rows: int, command: Optional[str] = None,
           protocol: str = "lines") -> Replay:
    """Run a loaded case on pj.batch.run (`rows` rows) and on the reference model, or
    on the external `command` (casefile.ExternalError when it fails)."""
    got = JaxRunner(rp.cfg, rows, rp.pe, rp.on_fault, core=rp.core).run([(rp.state, rp.words)])[0]
    if command:
        with external(command, protocol, rp.cfg, rp.pe, rp.on_fault) as ext:
            want = ext.run_state(rp.state, rp.words, rp.pe, *((rp.core,) if protocol == "batch"
                                                                else ()))
        names = ("jax", "external")
    else:
        want = reference_outcome(rp.state, rp.words, rp.pe, rp.on_fault, rp.cfg, rp.core)
        names = ("jax", "reference")
    return Replay(got, want, names, differences(got, want, names))
