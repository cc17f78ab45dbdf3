"""`ptojax fuzz` / `ptojax replay`: differential campaigns through cli.main.

Compile budget: every JAX run here is pj.batch.run on the "tiny" preset with
64 rows of 16 words whose last row is the campaign's filler (BSTARTs of every
effectful op, never executed), so the file compiles pj.batch.run once (JAX's
persistent cache, tests/conftest.py, keeps it between sessions); the oracle
runs in this process (--jobs 1) so that monkeypatching it plants a bug. The
--core campaign and its replays compile pj.batch.run(core=True) once (the same
[64, 16] shape), and the multi-device test compiles once more, in its own
process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import cli, tables
from ptojax.fuzz import campaign as C
from ptojax.fuzz import casefile, shrink
from ptojax.fuzz import coverage as V
from ptojax.fuzz import gen as G
from ptojax.interop import from_arch_state, validate
from ptojax.state import state_differences

ROWS = 64                                   # one compiled shape: [64, 16]
# no Core share (one compiled program; the Core's campaigns ask for theirs)
BASE = ["--config", "tiny", "--batch", str(ROWS), "--jobs", "1", "--core-share", "0"]
HERE = Path(__file__).resolve().parent
EXTERNAL = f"{sys.executable} {HERE / 'fuzz_external_reference.py'}"
CFG = pj.preset("tiny")
GEN = G.GenConfig(machine=CFG, max_words=C.WORDS)

CI_COUNT = 20 * (ROWS - 1)                  # 1260 cases
CI_SEED = 7
MATRIX_TOKENS = ",".join(V.op_token(o) for o in V.MATRIX_OPS)     # tmatmul,...,tgemvmx_acc


def fuzz(capsys, *argv):
    rc = cli.main(["fuzz", *BASE, *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def fuzz_json(capsys, *argv):
    rc, out, err = fuzz(capsys, "--json", *argv)
    return rc, json.loads(out), err


def replay(capsys, *argv):
    rc = cli.main(["replay", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def planted_alignment_bug(monkeypatch):
    """The reference model ignores misaligned TLOAD/TSTORE addresses."""
    from ptojax.reference import transport
    probe = transport.probe

    def no_alignment(gm_size, address, size):
        f = probe(gm_size, address, size)
        return None if f is not None and f.name == "Fault_DataAlignment" else f
    monkeypatch.setattr(transport, "probe", no_alignment)
    return monkeypatch


# ----------------------------------------------------------------- case drawing (no JAX)


def test_case_numbering_and_shards():
    want = G.random_cases(11, 30, GEN)
    for j in (0, 7, 29):
        c = C.case_at(11, j, GEN)
        assert (c.words, c.gm, c.gprs, c.kind, c.mutations) == \
            (want[j].words, want[j].gm, want[j].gprs, want[j].kind, want[j].mutations)
    full = [(k, j) for k, j, _ in C.draw_cases(11, 30, GEN)]
    assert full == [(k, k) for k in range(30)]
    parts = [[(k, j) for k, j, _ in C.draw_cases(11, 30, GEN, shard=(i, 3))] for i in range(3)]
    assert sorted(sum(parts, [])) == full and all(len(p) == 10 for p in parts)


def test_initial_state_is_build_state():
    """The campaign's numpy initial States equal gen.build_state's, also for
    MGATHER.CAS cases whose sources come from setup words and undefined Words."""
    cc = C.CampaignConfig(config="tiny", ops=V.parse_ops("tload,mgather_cas"))
    assert 0 < cc.cas < 1 and C.CampaignConfig(config="tiny", ops=V.parse_ops("tload")).cas == 0
    prepared = 0
    for _, _, c in C.draw_cases(1, 24, cc.gen, C.Selection(cc.ops)):
        a, b = C.state_leaves(C.initial_state(c, CFG)), C.state_leaves(G.build_state(c, CFG))
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        prepared += bool(c.setup or c.undefine)
    assert prepared > 0


def test_ops_selection():
    sel = C.Selection(ops=V.parse_ops("mgather_cas"))
    drawn = list(C.draw_cases(3, 40, GEN, sel))
    assert len(drawn) == 40
    for _k, _j, c in drawn:
        named = V.case_ops(c)
        assert not named or "MGATHER.CAS" in named
    # the draw index is kept, so case k replays from (seed, index)
    k, j, c = drawn[-1]
    assert j >= k and C.case_at(3, j, GEN).words == c.words
    # sharded selection: the shards split the same selected sequence
    parts = [list(C.draw_cases(3, 40, GEN, sel, shard=(i, 2))) for i in range(2)]
    assert sorted((k, j) for p in parts for k, j, _ in p) == [(k, j) for k, j, _ in drawn]
    kinds = C.Selection(kinds=("cube_*",))
    assert all(c.kind.startswith("cube_") for _, _, c in C.draw_cases(3, 20, GEN, kinds))
    assert V.parse_ops("all") is None and V.parse_ops("TLOAD,tstore") == {"TLOAD", "TSTORE"}
    with pytest.raises(ValueError, match="unknown operation"):
        V.parse_ops("tload,tfoo")


def test_matrix_ops_selection_and_weights():
    """Matrix tokens select the TMATMUL/TGEMV kinds of those forms; the weights'
    defaults keep "all" and the non-matrix selections at their old mix."""
    assert V.parse_ops("tmatmul,tgemvmx_acc") == {"TMATMUL", "TGEMVMX.ACC"}
    assert len(V.MATRIX_OPS) == 12 and set(V.MATRIX_OPS) <= set(V.IMPLEMENTED_OPS)
    cfg = lambda ops, **kw: C.CampaignConfig(config="tiny", ops=V.parse_ops(ops), **kw)
    assert (cfg("all").cas, cfg("all").matmul) == (0.2, 0.3)
    assert (cfg("tload,mgather_cas").cas, cfg("tload,mgather_cas").matmul) == (1 / 3, 0.0)
    assert (cfg("tmatmul,tgemv").cas, cfg("tmatmul,tgemv").matmul) == (0.0, 1.0)
    assert (cfg("tload,tmatmul").cas, cfg("tload,tmatmul").matmul) == (0.0, 1 / 3)
    assert (cfg("mgather_cas,tmatmul").cas, cfg("mgather_cas,tmatmul").matmul) == (1 / 3, 1 / 3)
    assert cfg("mgather_cas,tmatmul", matmul_weight=0.9).cas == pytest.approx(0.1)
    assert cfg("all").gen == G.GenConfig(machine=CFG, max_words=C.WORDS, cas_weight=0.2,
                                         matmul_weight=0.3)
    assert cfg("tload,mgather_cas").gen == G.GenConfig(machine=CFG, max_words=C.WORDS,
                                                       cas_weight=1 / 3)
    assert cfg("tmatmul,tgemv").gen.matmul_forms == ("TMATMUL", "TGEMV")
    sel = C.Selection(ops=V.parse_ops("tmatmul,tgemv"))
    drawn = list(C.draw_cases(3, 30, cfg("tmatmul,tgemv").gen, sel))
    assert all(c.kind in G.MATMUL_KINDS for _, _, c in drawn)
    assert all(V.case_ops(c) & {"TMATMUL", "TGEMV"} for _, _, c in drawn)
    assert all(j == k for k, j, _ in drawn)          # the generator draws only those forms
    # the profile reaches the machine config of both models
    assert cfg("all", profile="ieee").machine == CFG.replace(profile="ieee")
    assert cfg("all").machine == CFG
    # and so do the rules (--semantics)
    assert cfg("all", semantics="0.58.3").machine == CFG.replace(semantics="0.58.3")
    # coverage: the matrix kinds and mutations join the universe with their weight
    cov = V.Coverage(None, 1 / 3, 0.25).universe()
    assert set(G.MATMUL_KINDS) <= set(cov["kinds"]) and set(V.MATRIX_OPS) <= set(cov["operations"])
    old = V.Coverage(None, 1 / 3).universe()
    assert not set(G.MATMUL_KINDS) & set(old["kinds"]) and not set(V.MATRIX_OPS) & set(old["operations"])
    # every filler row starts a block of each effect group
    from ptojax.machine import possible_effects
    assert possible_effects(C.filler_words()) == {"TLOAD", "TSTORE", "SHARED", "MGATHER.CAS",
                                                  "MATMUL", "TMOV"}


def test_core_weights_coverage_and_case_files(capsys, monkeypatch, tmp_path):
    """--core options: every drawn case is a Core case, cooperative / Shared kinds
    drawn with coop_weight (1/3 by default with a TMATMUL form or all ops), their
    labels in the coverage universe, the options reach the campaign (faked here:
    test_core_campaign_on_jax runs a real one), the flag in case files."""
    cfg = lambda ops, **kw: C.CampaignConfig(config="tiny", ops=V.parse_ops(ops), **kw)
    assert cfg("all", core_share=0).coop == 0.0 and cfg("tload").coop == 0.0
    assert (cfg("all").share_core, cfg("all").coop) == (C.CORE_SHARE, 1 / 3)
    assert (cfg("all", core=True).cas, cfg("all", core=True).matmul,
            cfg("all", core=True).coop) == (0.2, 0.3, 1 / 3)
    assert (cfg("tmatmul", core=True).matmul, cfg("tmatmul", core=True).coop) == \
        (pytest.approx(2 / 3), 1 / 3)
    assert cfg("tload,tstore", core=True).coop == 0.0
    assert cfg("tload", core=True, coop_weight=0.5).coop == 0.5
    gen = cfg("all", core=True).gen
    assert gen.core and gen.coop_weight == 1 / 3
    drawn = [c for _, _, c in C.draw_cases(4, 40, gen)]
    assert all(c.core for c in drawn) and any(c.kind in G.COOP_KINDS for c in drawn)
    cov = V.Coverage(None, 1 / 3, 0.0, 1 / 3).universe()
    assert set(G.COOP_KINDS) <= set(cov["kinds"]) and set(G.COOP_MUTATIONS) <= set(cov["mutations"])
    assert "TSTORE.SPART" in cov["operations"] and "TMATMUL" in cov["operations"]
    assert not set(G.COOP_KINDS) & set(V.Coverage(None, 1 / 3).universe()["kinds"])
    with pytest.raises(ValueError, match="every PE"):
        C.JaxRunner(CFG, ROWS, pe=1, core=True)
    # the options reach the campaign; bad combinations exit 2
    seen = {}

    def fake(cc, **kw):
        seen["cc"] = cc
        raise KeyboardInterrupt
    monkeypatch.setattr(C, "run_campaign", fake)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["fuzz", *BASE, "--core", "--coop-weight", "0.5", "--count", "5"])
    assert seen["cc"].core and seen["cc"].coop == 0.5 and seen["cc"].gen.coop_weight == 0.5
    monkeypatch.undo()
    assert fuzz(capsys, "--coop-weight", "0.5")[0] == 2                 # needs --core
    assert fuzz(capsys, "--core", "--pe", "1")[0] == 2
    assert fuzz(capsys, "--core", "--coop-weight", "1.5")[0] == 2
    assert fuzz(capsys, "--core", "--matmul-weight", "0.9", "--ops", "tmatmul")[0] == 2
    # a case file records core and replays it (the Core State round-trips its envelope)
    c = G.random_coop_case(G.case_rng(3, 1), G.GenConfig(machine=CFG, core=True), kind="coop_right")
    st = C.initial_state(c, CFG)
    want = C.reference_outcome(st, c.words, c.pe, "abandon", CFG, core=True)
    assert want.fault == C.reference_outcome(st, c.words, 0, "abandon", CFG, c.core).fault
    d = casefile.repro_json(c, cfg=CFG, config_name="tiny", on_fault="abandon", rows=ROWS,
                            campaign={"seed": 3, "k": 1, "index": 1}, a=want, b=want,
                            names=("jax", "reference"), diffs=[])
    assert d["core"] is True and d["case"]["core"] is True
    rp = casefile.load_repro(casefile.write_json(tmp_path / "core.json", d))
    assert rp.core and rp.pe == 0
    assert not state_differences(rp.state, st)
    again = C.reference_outcome(rp.state, rp.words, rp.pe, rp.on_fault, rp.cfg, rp.core)
    assert again.same(want)


def test_edge_weight_campaign(capsys):
    """--edge-weight draws the edge kinds (gen/edges.py); on tiny only the budget
    edge: large tiles are reported as not applicable, never as never hit."""
    rc, rep, err = fuzz_json(capsys, "--ops", "tload,tstore", "--edge-weight", "0.5",
                             "--count", str(2 * (ROWS - 1)), "--seed", "3")
    assert rc == 0, err
    assert rep["mismatches"] == 0 and rep["compared"] == rep["cases"] and rep["edge_weight"] == 0.5
    budget = G.edge_labels(CFG)                     # the budget edge alone on tiny
    large = [x for x in G.EDGE_LABELS if x.startswith("large:")]
    assert rep["coverage"]["kinds"]["budget_edge"] > 0 and "large_tile" not in rep["coverage"]["kinds"]
    assert list(rep["coverage"]["edges"]) == budget and rep["never_hit"]["edges"] == []
    assert "large_tile" not in rep["never_hit"]["kinds"]
    assert rep["not_applicable"] == {"kinds": ["large_tile"], "edges": large}
    assert {"Fault_None", "Fault_TileAllocation"} <= set(rep["fault_by_label"]["budget_edge"])
    # where tiles are larger every edge kind and label is in the universe (the CAS
    # and matrix budget edges with those families)
    small = V.Coverage(None, 1 / 3, 0.25, 0.0, 0.1, pj.preset("small"))
    assert set(G.EDGE_KINDS) <= set(small.universe()["kinds"])
    assert small.universe()["edges"] == list(G.EDGE_LABELS)
    assert small.not_applicable() == {"kinds": [], "edges": []}
    assert not any("cas" in x or "matmul" in x
                   for x in V.Coverage(None, 0.0, 0.0, 0.0, 0.1, CFG).universe()["edges"])
    assert V.Coverage(None, 1 / 3).universe()["edges"] == [] and not V.Coverage().not_applicable()
    assert fuzz(capsys, "--edge-weight", "1.5")[0] == 2
    assert fuzz(capsys, "--edge-weight", "0.8", "--cas-weight", "0.5")[0] == 2


def test_fuzz_options_reach_the_campaign(capsys, monkeypatch):
    seen = {}

    def fake(cc, **kw):
        seen["cc"] = cc
        raise KeyboardInterrupt
    monkeypatch.setattr(C, "run_campaign", fake)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["fuzz", *BASE, "--ops", "tmatmul_acc", "--profile", "ieee", "--matmul-weight", "0.5",
                  "--semantics", "0.58.3", "--count", "5"])
    cc = seen["cc"]
    assert (cc.profile, cc.matmul, cc.machine.profile) == ("ieee", 0.5, "ieee")
    assert cc.machine.semantics == "0.58.3"
    assert cc.gen.matmul_forms == ("TMATMUL.ACC",) and cc.gen.matmul_weight == 0.5


def test_sampling_is_seeded_fraction():
    picks = [C.sampled(5, k, 0.25) for k in range(4000)]
    assert picks == [C.sampled(5, k, 0.25) for k in range(4000)]
    assert 0.22 < np.mean(picks) < 0.28
    assert all(C.sampled(5, k, 1.0) for k in range(10)) and not any(C.sampled(5, k, 0) for k in range(10))


def test_shrinker_keeps_a_change_iff_the_predicate_holds():
    """A pure-Python 'mismatch': a BSTART.TLOAD word somewhere and GM byte 0x10 nonzero."""
    case = next(c for c in G.random_cases(4, 50, GEN)
                if G.bstart("TLOAD", 0) & 0x07FFFFFF in {w & 0x07FFFFFF for w in c.words}
                and len(c.words) > 8 and c.gm[0x10])
    tload = lambda w: (w & 0x07FFFFFF) == G.START["TLOAD"]

    def fails(cands):
        for c in cands:
            yield any(map(tload, c.words)) and c.gm[0x10] != 0

    small, stats = shrink.shrink(case, fails, seconds=60)
    assert len(small.words) == 1 and tload(small.words[0])
    assert np.count_nonzero(np.frombuffer(small.gm, np.uint8)) == 1 and small.gm[0x10] == case.gm[0x10]
    assert all(not v for regs in small.gprs.values() for v in regs.values())
    assert stats["complete"] and stats["kept"] == len(stats["steps"]) > 0
    assert stats["words_before"] == len(case.words) and stats["words_after"] == 1


def test_shrinker_lowers_lb_values_and_sizes():
    words = [G.bstart("TLOAD", 27), G.dim(0, 40, 0), G.dim(1, 9, 0), G.iot_dst(0, 7, 1, 1), G.BSTOP]
    case = G.Case(words=words, gm=bytes(CFG.gm_bytes), gprs={}, kind="ord_load")

    def fails(cands):                    # "mismatch" while LB0 >= 5 and the stream has its B.IOT
        for c in cands:
            lb0 = [w for w in c.words if (w & 0x7F) == 0x43 and ((w >> 12) & 7) == 0]
            yield bool(lb0) and (lb0[0] >> 20) >= 5 and any((w & 0x7F) == 0x13 for w in c.words)

    small, stats = shrink.shrink(case, fails)
    assert small.words == [G.dim(0, 5, 0), G.iot_dst(0, 1, 1, 1)], pj.asm.disassemble(small.words)


def test_differences_field_by_field():
    """differences() on hand-made outcomes: every kind of field, and leaves whose
    shapes differ (a model that grew GM) are reported instead of crashing."""
    base = C.state_leaves(C.reset_leaves(CFG))
    a = C.Outcome(dict(base), 3)
    leaves = {k: v.copy() for k, v in base.items()}
    leaves[".gm"][0x20:0x24] = [1, 2, 3, 4]
    leaves[".gpr"][1, 2] = 0x10
    leaves[".fault"] = np.int32(tables.FAULTS.index("Fault_DataPage"))
    leaves[".tiles.allocated"][0, 5] = True
    leaves[".tiles.capacity"][0, 5] = 128      # owns 256 pool slots from its base, 0
    leaves[".tiles.dtype"][0, 5] = tables.DTYPE_BY_NAME["U16"].code    # one slot a Word
    leaves[".tiles.words"][0, 0, 7] = 9
    leaves[".block.lb"][1] = 4
    b = C.Outcome(leaves, 2)
    d = {x["field"]: x for x in C.differences(a, b)}
    assert d["fault"] == {"field": "fault", "jax": "Fault_None", "reference": "Fault_DataPage"}
    assert d["executed"]["jax"] == 3 and d["gm"]["address"] == "0x20" and d["gm"]["reference"] == "01020304"
    assert "gpr PE1 a0" in d and d["tile PE0 M#2 allocated"]["reference"] is True
    assert d["tile PE0 M#2 words"]["slots"] == [7] and d["block lb"]["reference"] == [0, 4, 0]
    assert C.signature(list(d.values())) == ("Fault_None vs Fault_DataPage",)
    grown = dict(base, **{".gm": np.zeros(CFG.gm_bytes + 2, np.uint8)})
    c = C.Outcome(grown, 3)
    d2 = C.differences(a, c)
    assert d2 == [{"field": "shape gm", "jax": f"uint8[{CFG.gm_bytes}]",
                   "reference": f"uint8[{CFG.gm_bytes + 2}]"}]
    assert not a.same(c) and a.same(C.Outcome(dict(base), 3))
    batch = C.Results({k: v[None] for k, v in base.items()}, np.array([3]))
    stack = lambda *outs: C.Results.stack(list(outs), CFG)
    assert C.mismatches(batch, [0], stack(c)).tolist() == [True]          # kept aside as odd
    assert C.mismatches(batch, [0], stack(a)).tolist() == [False]
    assert C.mismatches(batch, [0], stack(C.Outcome.failed(RuntimeError("x")))).tolist() == [True]
    assert C.mismatches(batch, [0, 0], stack(a, b)).tolist() == [False, True]
    assert stack(c).odd[0] is grown and stack(a, c)[1].leaves is grown


def test_bad_options_exit_2(capsys, tmp_path):
    assert fuzz(capsys, "--ops", "tload,tfoo")[0] == 2
    assert fuzz(capsys, "--sample", "1.5")[0] == 2
    assert fuzz(capsys, "--batch", "1")[0] == 2
    assert fuzz(capsys, "--matmul-weight", "1.5")[0] == 2
    assert fuzz(capsys, "--matmul-weight", "0.6", "--cas-weight", "0.6")[0] == 2
    for bad in (("--profile", "fast"), ("--semantics", "0.59")):
        with pytest.raises(SystemExit) as e:
            fuzz(capsys, *bad)
        assert e.value.code == 2
    assert fuzz(capsys, "--shard", "3/2")[0] == 2
    rc, out, err = replay(capsys, str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read" in err
    p = tmp_path / "x.json"
    p.write_text('{"format": "something else"}')
    rc, out, err = replay(capsys, str(p))
    assert rc == 2 and "not a ptojax fuzz case" in err


# ----------------------------------------------------------------- campaigns


def test_ci_campaign_every_op_every_fault(capsys, tmp_path):
    """A CI-sized campaign over every implemented operation (the 12 matrix forms
    included, a quarter of the draws): zero mismatches, and every fault of the
    execution model (every transport and matrix fault path) fires, but the
    non-architectural Fault_Unimplemented (no drawn stream is outside the slice)."""
    rc, rep, err = fuzz_json(capsys, "--ops", "tload,tstore,mgather_cas," + MATRIX_TOKENS,
                             "--cas-weight", "0.25", "--matmul-weight", "0.25", "--variants", "1",
                             "--count", str(CI_COUNT), "--seed", str(CI_SEED), "--out", str(tmp_path))
    print(json.dumps({k: rep[k] for k in ("cases", "compared", "mismatches", "seconds",
                                          "cases_per_s", "first_call_seconds")}),
          json.dumps(rep["coverage"]["faults"]), json.dumps(rep["never_hit"]), sep="\n")
    assert rc == 0, err
    assert rep["format"] == C.REPORT_FORMAT
    assert rep["cases"] == rep["compared"] == CI_COUNT and rep["mismatches"] == 0
    assert rep["ops"] == sorted(["mgather_cas", "tload", "tstore"] + MATRIX_TOKENS.split(","))
    assert (rep["cas_weight"], rep["matmul_weight"], rep["profile"]) == (0.25, 0.25, "portable")
    cov = rep["coverage"]
    for op in V.IMPLEMENTED_OPS:
        assert cov["operations"].get(op, 0) > 0, op
    assert rep["never_hit"]["faults"] == ["Fault_Unimplemented"], rep["never_hit"]["faults"]
    assert set(cov["faults"]) == set(tables.FAULTS) - {"Fault_Unimplemented"}
    assert sum(cov["faults"].values()) == CI_COUNT
    assert sum(cov["kinds"].values()) == CI_COUNT
    assert rep["never_hit"]["operations"] == []
    for axis in ("dtypes", "layouts", "mutations"):
        assert len(cov[axis]) > 10, axis
    # the never-hit lists are exactly the zero counts of each axis's universe
    mutations = set(G.MUTATIONS) | set(G.CAS_MUTATIONS) | set(G.MATMUL_MUTATIONS)
    kinds = set(G.PROGRAM_KINDS) | set(G.CAS_KINDS) | set(G.MATMUL_KINDS)
    assert set(rep["never_hit"]["mutations"]) == mutations - set(cov["mutations"])
    assert set(rep["never_hit"]["kinds"]) == kinds - set(cov["kinds"])
    # the matrix kinds reach each fault of their check list, and no Fault_Unimplemented
    mm = {f for label, faults in rep["fault_by_label"].items() if label in G.MATMUL_KINDS
          for f in faults}
    assert {"Fault_None", "Fault_TileLegality", "Fault_TileAllocation",
            "Fault_BundleControl"} <= mm, mm
    assert "Fault_Unimplemented" not in mm, mm
    assert rep["cases_per_s"] > 0 and rep["first_call_seconds"] > 0
    assert json.loads((tmp_path / "report.json").read_text())["cases"] == CI_COUNT
    assert not list(tmp_path.glob("mismatch-*.json"))


def test_planted_bug_is_caught_shrunk_written_and_replayed(capsys, tmp_path, planted_alignment_bug):
    out_dir = tmp_path / "out"
    rc, out, err = fuzz(capsys, "--count", str(2 * (ROWS - 1)), "--seed", "0", "--shrink-limit", "1",
                        "--max-files", "1", "--out", str(out_dir))
    assert rc == 1, err
    assert "fuzz" in err                                  # the progress bar (stderr)
    assert "shrinking mismatch 1" in err
    rep = json.loads((out_dir / "report.json").read_text())
    assert rep["mismatches"] > 0 and len(rep["mismatch_files"]) == 1
    path = Path(rep["mismatch_files"][0])
    assert f"ptojax replay {path}" in out
    d = json.loads(path.read_text())
    assert d["format"] == casefile.CASE_FORMAT
    # shrunk to a minimal case: a TLOAD or TSTORE bundle with a misaligned address
    assert len(d["words"]) <= 5, d["disassembly"]
    assert d["shrink"]["words_after"] == len(d["words"]) < d["shrink"]["words_before"]
    assert d["shrink"]["kept"] > 0 and d["shrink"]["steps"]
    assert d["disassembly"][0].startswith(("BSTART.TLOAD", "BSTART.TSTORE"))
    assert d["case"]["gm_nonzero_bytes"] < CFG.gm_bytes
    fields = {x["field"]: x for x in d["differences"]}
    assert fields["fault"]["jax"] == "Fault_DataAlignment"
    assert fields["fault"]["reference"] != "Fault_DataAlignment"
    assert d["results"]["jax"]["fault"] == "Fault_DataAlignment"
    for env in (d["initial"], d["results"]["jax"]["final"], d["results"]["reference"]["final"]):
        validate(env)
    # replay (the bug still planted) shows the difference field by field
    rc, out, err = replay(capsys, str(path))
    assert rc == 1, err
    assert "fault: jax Fault_DataAlignment | reference " in out
    assert "<- jax: Fault_DataAlignment" in out and "executed: jax" in out
    rc, out, _ = replay(capsys, str(path), "--json")
    j = json.loads(out)
    assert rc == 1 and j["differ"] and [x["field"] for x in j["differences"]] == list(fields)
    # without the planted bug the two models agree on the written case
    planted_alignment_bug.undo()
    rc, out, err = replay(capsys, str(path))
    assert rc == 0, out
    assert "the two models agree" in out


def test_an_oracle_exception_is_a_finding(capsys, tmp_path, monkeypatch):
    """A model that raises on a case is reported, shrunk and written like a mismatch."""
    from ptojax.reference import transport
    probe = transport.probe

    def raising(gm_size, address, size):
        if address % size:
            raise AssertionError(f"planted: misaligned {address:#x}")
        return probe(gm_size, address, size)
    monkeypatch.setattr(transport, "probe", raising)
    rc, rep, err = fuzz_json(capsys, "--count", str(ROWS - 1), "--seed", "0", "--shrink-limit", "1",
                             "--max-files", "1", "--quiet", "--out", str(tmp_path))
    assert rc == 1 and rep["mismatches"] > 0, err
    assert rep["coverage"]["faults"].get("(exception)", 0) == rep["mismatches"]
    d = json.loads(Path(rep["mismatch_files"][0]).read_text())
    assert d["results"]["reference"] == {"error": d["differences"][0]["reference"]}
    assert d["differences"][0]["field"] == "exception" and "planted" in d["differences"][0]["reference"]
    assert len(d["words"]) <= 5
    rc, out, _ = replay(capsys, rep["mismatch_files"][0])
    assert rc == 1 and "reference: raised AssertionError: planted" in out


def test_export_files_validate_and_hold_the_oracle_result(capsys, tmp_path):
    edir = tmp_path / "export"
    rc, rep, err = fuzz_json(capsys, "--count", str(ROWS - 1), "--seed", "3", "--export", str(edir),
                             "--export-limit", "12", "--variants", "1", "--out", str(tmp_path / "out"))
    assert rc == 0, err
    assert rep["export"]["cases"] == 12
    index = json.loads((edir / "index.json").read_text())
    assert index["protocol"] == casefile.PROTOCOL and len(index["cases"]) == 12
    kinds = set()
    for name in index["cases"]:
        d = json.loads((edir / name).read_text())
        assert d["format"] == casefile.EXPORT_FORMAT
        validate(d["initial"])
        validate(d["expected"]["final"])
        assert d["initial"]["kind"] == "initial_state"
        case = C.case_at(3, d["campaign"]["index"], C.CampaignConfig(config="tiny").gen)
        assert d["words"] == case.words and d["kind"] == case.kind
        cfg = casefile.machine_from(d["config"])
        start = from_arch_state(d["initial"], cfg)
        assert C.Outcome(C.state_leaves(start), 0).same(
            C.Outcome(C.state_leaves(C.initial_state(case, cfg)), 0))
        kinds.add(case.kind)
        want = C.reference_outcome(start, d["words"], d["pe"], d["on_fault"], cfg)
        got = from_arch_state(d["expected"]["final"], cfg)
        assert C.Outcome(C.state_leaves(got), want.executed).same(want)
        assert d["expected"]["fault"] == want.fault and d["expected"]["executed"] == want.executed
    assert any(k.startswith("cas_") for k in kinds), kinds     # tiles made by setup words too
    # an export file replays like a mismatch file (the models agree on it)
    rc, out, _ = replay(capsys, str(edir / index["cases"][0]))
    assert rc == 0 and "the two models agree" in out


def test_against_external_reference_command(capsys, tmp_path):
    rc, rep, err = fuzz_json(capsys, "--count", str(ROWS - 1), "--seed", "5", "--sample", "0",
                             "--against", EXTERNAL, "--out", str(tmp_path))
    assert rc == 0, err
    assert rep["compared"] == 0 and rep["cases"] == ROWS - 1
    assert rep["against"] == {"command": EXTERNAL, "protocol": "lines", "compared": ROWS - 1,
                              "mismatches": 0, "error": None}


def test_against_finds_a_broken_external_command(capsys, tmp_path):
    broken = EXTERNAL + " --break-alignment"
    rc, rep, err = fuzz_json(capsys, "--count", str(ROWS - 1), "--seed", "0", "--sample", "0",
                             "--against", broken, "--no-shrink", "--max-files", "1",
                             "--out", str(tmp_path))
    assert rc == 1, err
    assert rep["against"]["mismatches"] > 0 and rep["mismatches"] == 0
    d = json.loads(Path(rep["mismatch_files"][0]).read_text())
    assert d["against"] == broken and "external" in d["results"]
    assert any(x["field"] == "fault" and x["jax"] == "Fault_DataAlignment" for x in d["differences"])
    # replay reruns the recorded external command ...
    rc, out, _ = replay(capsys, Path(rep["mismatch_files"][0]).as_posix())
    assert rc == 1 and "fault: jax Fault_DataAlignment | external" in out
    # ... or the reference model, which agrees with pj.batch.run
    rc, out, _ = replay(capsys, Path(rep["mismatch_files"][0]).as_posix(), "--reference")
    assert rc == 0


def test_against_protocol_errors_exit_2(capsys, tmp_path):
    rc, out, err = fuzz(capsys, "--count", "4", "--sample", "0", "--quiet",
                        "--against", f"{sys.executable} -c \"import sys; sys.stdin.readline(); "
                                     f"print('not json', flush=True); sys.stdin.read()\"")
    assert rc == 2 and "not JSON" in err


def test_shard_option(capsys, tmp_path):
    """A shard runs the drawn cases k // variants of its share, with their variants."""
    rc, rep, err = fuzz_json(capsys, "--count", "20", "--seed", "2", "--shard", "1/2", "--quiet",
                             "--variants", "4")
    assert rc == 0, err
    assert rep["shard"] == [1, 2] and rep["cases"] == rep["compared"] == 8 and rep["drawn"] == 2
    merged = C.merge_reports([rep, rep])
    assert merged["cases"] == 16 and sum(merged["coverage"]["kinds"].values()) == 16


def test_hold_mode_campaign(capsys, tmp_path):
    rc, rep, err = fuzz_json(capsys, "--count", str(ROWS - 1), "--seed", "9", "--on-fault", "hold",
                             "--pe", "2", "--quiet")
    assert rc == 0, err
    assert rep["on_fault"] == "hold" and rep["pe"] == 2 and rep["mismatches"] == 0


CORE_SEED = 13


def test_core_campaign_on_jax(capsys, tmp_path):
    """A real --core campaign (one [64, 16] call): pj.batch.run(core=True) against
    pj.reference.run_core, every State leaf, the fault and the executed count of
    every case compared: zero mismatches, with cooperative / Shared kinds among
    the cases and results that PE0's single-PE view does not give. Exported Core
    cases replay through `ptojax replay` (the JAX Core batch against the
    reference again)."""
    edir = tmp_path / "export"
    rc, rep, err = fuzz_json(capsys, "--core", "--count", str(ROWS - 1), "--seed", str(CORE_SEED),
                             "--export", str(edir), "--quiet", "--out", str(tmp_path / "out"))
    assert rc == 0, err
    assert (rep["core"], rep["coop_weight"], rep["config"]) == (True, round(1 / 3, 4), "tiny")
    assert rep["cases"] == rep["compared"] == ROWS - 1 and rep["mismatches"] == 0
    assert rep["first_call_seconds"] > 0
    cov = rep["coverage"]
    coop = {k: n for k, n in cov["kinds"].items() if k in G.COOP_KINDS}
    assert sum(coop.values()) >= 10, cov["kinds"]
    coop_faults = {f for label, faults in rep["fault_by_label"].items() if label in G.COOP_KINDS
                   for f in faults}
    assert "Fault_None" in coop_faults and len(coop_faults) >= 2, coop_faults
    # the exported expectations are pj.reference.run_core's; the Core matters in
    # some of them (PE0's single-PE view ends elsewhere), with and without a fault
    index = json.loads((edir / "index.json").read_text())
    assert len(index["cases"]) == ROWS - 1
    core_only = {}
    for name in index["cases"]:
        d = json.loads((edir / name).read_text())
        assert d["core"] is True and d["pe"] == 0
        cfg = casefile.machine_from(d["config"])
        assert cfg == CFG
        start = from_arch_state(d["initial"], cfg)
        on_core = C.reference_outcome(start, d["words"], 0, d["on_fault"], cfg, core=True)
        assert (on_core.fault, on_core.executed) == (d["expected"]["fault"], d["expected"]["executed"])
        assert on_core.same(C.Outcome(C.state_leaves(from_arch_state(d["expected"]["final"], cfg)),
                                      on_core.executed))
        if not on_core.same(C.reference_outcome(start, d["words"], 0, d["on_fault"], cfg)):
            core_only.setdefault(on_core.fault == "Fault_None", (edir / name, d))
        if len(core_only) == 2:
            break
    assert set(core_only) == {True, False}, "no Core-only outcome with and without a fault"
    # each replay is one more [64, 16] call (about 2 s): text for one case, JSON for the other
    path, d = core_only[True]
    rc, out, _ = replay(capsys, str(path))
    assert rc == 0, out
    assert f"{len(d['words'])} words, the Core, on_fault abandon" in out
    assert "jax: Fault_None" in out and "the two models agree" in out
    path, d = core_only[False]
    rc, out, _ = replay(capsys, str(path), "--json")
    j = json.loads(out)
    assert rc == 0 and not j["differ"] and j["models"] == ["jax", "reference"]
    assert (j["results"]["jax"]["fault"], j["results"]["jax"]["executed"]) == (
        d["expected"]["fault"], d["expected"]["executed"])
    assert j["results"]["jax"]["fault"] != "Fault_None"


# ----------------------------------------------------------------- several devices

_SHARDED = textwrap.dedent("""
    import os, sys
    import jax
    cache = os.environ.get("PTOJAX_TEST_JAX_CACHE")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    import numpy as np
    import ptojax as pj
    from ptojax.fuzz import campaign as C
    assert jax.local_device_count() == 4, jax.local_devices()
    cfg = pj.preset("tiny")
    gen = C.CampaignConfig(config="tiny").gen
    rows = [None] + [C.case_at(21, k, gen) for k in range({rows} - 1)]
    out = {{}}
    for tag, n in (("all", {rows}), ("part", {rows} - 2)):      # 62 rows: padded to 64
        st, w, lens = C.batch_arrays(rows[:n], cfg)
        res = pj.batch.run(st, w, 0, lengths=lens, cfg=cfg)
        assert len(res.state.gm.sharding.device_set) == 4, res.state.gm.sharding
        for k, v in C.state_leaves(res.state).items():
            out[tag + k] = v
        out[tag + "executed"] = res.executed
    np.savez(sys.argv[1], **out)
""")


def test_four_devices_give_the_one_device_results(tmp_path):
    """pj.batch.run sharded over 4 (forced host) devices equals the 1-device run, every leaf."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    env.setdefault("PTOJAX_TEST_JAX_CACHE", jax.config.jax_compilation_cache_dir or "")
    dest = tmp_path / "sharded.npz"
    p = subprocess.run([sys.executable, "-c", _SHARDED.format(rows=ROWS), str(dest)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    got = np.load(dest)
    assert jax.local_device_count() == 1
    gen = C.CampaignConfig(config="tiny").gen
    rows = [None] + [C.case_at(21, k, gen) for k in range(ROWS - 1)]
    st, w, lens = C.batch_arrays(rows, CFG)
    res = pj.batch.run(st, w, 0, lengths=lens, cfg=CFG)
    one = C.state_leaves(res.state)
    assert len(one) == len([k for k in got.files if k.startswith("all.")])
    for tag, n in (("all", ROWS), ("part", ROWS - 2)):
        for k, v in one.items():
            a = got[tag + k]
            assert a.dtype == v.dtype and a.shape == (n,) + v.shape[1:], k
            assert np.array_equal(a, v[:n]), f"{tag}{k} differs between 4 devices and 1"
        assert np.array_equal(got[tag + "executed"], res.executed[:n])
    # and the batch did real work: faults of several kinds, words executed
    assert len(set(res.fault_code[1:].tolist())) > 2 and res.executed.sum() > 100


# ----------------------------------------------------------------- slow


@pytest.mark.slow
def test_distributed_processes_split_one_campaign(tmp_path):
    """Two processes with --distributed (jax.distributed.initialize on localhost) run
    disjoint shares whose merged report is the one-process campaign's."""
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("PTOJAX_JAX_CACHE", jax.config.jax_compilation_cache_dir or "")
    common = [sys.executable, "-m", "ptojax.cli", "fuzz", *BASE, "--count", "80", "--seed", "4",
              "--json", "--quiet", "--distributed", "--coordinator", f"localhost:{port}",
              "--num-processes", "2"]
    procs = [subprocess.Popen(common + ["--process-id", str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    reps = [json.loads(out) for out, _ in outs]
    assert [r["shard"] for r in reps] == [[0, 2], [1, 2]] and [r["cases"] for r in reps] == [40, 40]
    merged = C.merge_reports(reps)
    one = cli.main(["fuzz", *BASE, "--count", "80", "--seed", "4", "--json", "--quiet",
                    "--out", str(tmp_path)])
    assert one == 0
    single = json.loads((tmp_path / "report.json").read_text())
    assert merged["cases"] == single["cases"] == 80 and merged["mismatches"] == 0
    for axis in ("operations", "faults", "kinds", "mutations", "dtypes", "layouts"):
        assert merged["coverage"][axis] == single["coverage"][axis], axis



@pytest.mark.slow
@pytest.mark.parametrize("on_fault,count", [("abandon", 20000), ("hold", 5000)])
def test_long_campaign(capsys, tmp_path, on_fault, count):
    rc, rep, err = fuzz_json(capsys, "--count", str(count), "--seed", "12345", "--on-fault", on_fault,
                             "--out", str(tmp_path))
    print(json.dumps({k: rep[k] for k in ("cases", "mismatches", "seconds", "cases_per_s")}))
    assert rc == 0 and rep["mismatches"] == 0, rep.get("mismatch_files")
    assert rep["never_hit"]["faults"] == ["Fault_Unimplemented"]


def test_defaults_are_the_models_own_bounds():
    """`ptojax fuzz` compares at asl unless told otherwise: 32-row batches (256
    States of 15 MB would be 3.9 GB), edge kinds mixed in and the oracle in
    this process; tiny keeps its 256 rows, draws no edge kinds unless asked
    and runs the oracle in one worker per core."""
    from ptojax.cli import fuzz as F
    parse = cli.build_parser().parse_args
    got = {}
    for argv in (["fuzz"], ["fuzz", "--config", "tiny"],
                 ["fuzz", "--edge-weight", "0", "--batch", "8", "--jobs", "2"]):
        args = parse(argv)
        F._check(args)
        got[" ".join(argv)] = (args.config, args.batch, args.edge_weight, args.jobs)
    cores = max(1, min(os.cpu_count() or 1, 32))
    assert got == {"fuzz": ("asl", 32, 0.2, 1), "fuzz --config tiny": ("tiny", 256, 0.0, cores),
                   "fuzz --edge-weight 0 --batch 8 --jobs 2": ("asl", 8, 0.0, 2)}
