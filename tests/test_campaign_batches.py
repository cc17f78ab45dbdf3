"""The campaign as a batch pipeline: pools of cases as arrays, variants, setup
words run on pj.batch.run, the vectorized comparison and coverage, the batched
export files and the batched DUT protocol with the example harness
(examples/dut_harness.py), including DUTs that fail on purpose.

Compile budget: the engine runs at the "tiny" preset in the 64-row shape of
tests/test_fuzz.py (the same programs: JAX's persistent cache serves both
files), plus the Core's 64-row program for the setup of Core cases; the
example DUT compiles the same 64-row program in its own process (the test
session's cache hands it over).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import cli, tables
from ptojax.fuzz import batchfile, campaign as C, cases as K, report
from ptojax.fuzz import coverage as V
from ptojax.fuzz import gen as G
from ptojax.fuzz import variants
from ptojax.fuzz.engine import Engine
from ptojax.state import state_leaves

ROWS = 64
CFG = pj.preset("tiny")
REPO = Path(__file__).resolve().parents[1]
HARNESS = f"{sys.executable} {REPO / 'examples' / 'dut_harness.py'}"
BASE = ["fuzz", "--config", "tiny", "--batch", str(ROWS), "--jobs", "1", "--core-share", "0",
        "--quiet", "--json"]


def same_leaves(a: dict, b: dict, where: str):
    assert a.keys() == b.keys(), where
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{where}: {k}"


@pytest.fixture(scope="module")
def env():
    """The environment of a DUT process: this session's compilation cache."""
    e = dict(os.environ, JAX_PLATFORMS="cpu")
    e["PTOJAX_JAX_CACHE"] = jax.config.jax_compilation_cache_dir or ""
    return e


def fuzz(capsys, monkeypatch, env, *argv):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = cli.main([*BASE, *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


# ----------------------------------------------------------------- cases as arrays (no JAX)


def test_pools_number_every_case_once_in_any_shard():
    """Case k is variant k % M of drawn case k // M: the shards' pools together
    hold each case of the campaign once, with the draw index and rows the
    single-process pools give."""
    cc = C.CampaignConfig(config="tiny", rows=16, count=83, seed=4, variants=5)
    draw = lambda fn, *a: type("F", (), {"result": lambda self, v=fn(*a): v})()

    def cases(shard):
        pools = C.Pools(C.CampaignConfig(**{**cc.__dict__, "shard": shard}), draw, rows=30)
        return {int(k): (int(p.index[p.base[r]]), int(p.variant[r]), tuple(p.words[r]))
                for p in pools for r, k in enumerate(p.k)}
    one = cases((0, 1))
    assert sorted(one) == list(range(83))
    assert all(idx == k // 5 and v == k % 5 for k, (idx, v, _) in one.items())
    parts = [cases((i, 3)) for i in range(3)]
    assert sum(len(p) for p in parts) == 83 and {**parts[0], **parts[1], **parts[2]} == one
    # a selection numbers the kept draws in order: the same cases in any shard
    sel = C.CampaignConfig(**{**cc.__dict__, "ops": frozenset({"MGATHER.CAS"})})
    picked = [{int(k): int(p.index[p.base[r]]) for p in C.Pools(
        C.CampaignConfig(**{**sel.__dict__, "shard": s}), draw, rows=30) for r, k in enumerate(p.k)}
        for s in ((0, 1), (0, 2), (1, 2))]
    assert sorted(picked[0]) == list(range(83)) and {**picked[1], **picked[2]} == picked[0]
    drawn = sorted(set(picked[0].values()))
    assert all(sel.drawing.select(sel.drawing.case(j)) for j in drawn)
    assert drawn == [j for _, j, _ in C.draw_cases(4, len(drawn), sel.gen, sel.drawing.select)]


def test_variants_depend_on_seed_index_and_number_alone():
    gen = C.CampaignConfig(config="tiny").gen
    drawn = [K.case_at(1, j, gen) for j in range(60)]
    n = len(drawn) * 7
    index = np.repeat(np.arange(60), 7)
    number = np.tile(np.arange(1, 8), 60)
    words = np.zeros((n, C.WORDS), np.uint32)
    lengths = np.repeat([len(c.words) for c in drawn], 7).astype(np.int32)
    for i, c in enumerate(drawn):
        words[i * 7:(i + 1) * 7, : len(c.words)] = c.words
    pe, core = np.zeros(n, int), np.zeros(n, bool)
    w, ln, labels, pokes = variants.make(1, index, number, words, lengths, pe, core, CFG.gm_bytes)
    # any order and any subset of the rows: the same variants
    perm = np.random.default_rng(0).permutation(n)
    w2, ln2, labels2, pokes2 = variants.make(1, index[perm], number[perm], words[perm], lengths[perm],
                                             pe, core, CFG.gm_bytes)
    assert (w2 == w[perm]).all() and (ln2 == ln[perm]).all()
    assert labels2 == [labels[i] for i in perm] and pokes2 == [pokes[i] for i in perm]
    assert not (w[:, :] == words).all(axis=1).all() and all(1 <= len(x) <= 3 for x in labels)
    # another seed, other variants; words past a row's length stay zero
    assert not (variants.make(2, index, number, words, lengths, pe, core, CFG.gm_bytes)[0] == w).all()
    assert all((w[r, ln[r]:] == 0).all() for r in range(n))
    ops = {x.split(" ")[0].split(":")[1] for lab in labels for x in lab}
    assert ops == set(variants.OPS)
    fields = {x for lab in labels for x in lab if x.startswith("variant:field ")}
    assert len(fields) > 15 and all(x in variants.LABELS for lab in labels for x in lab)
    for lab, pk in zip(labels, pokes):
        assert sum(x in ("variant:gpr", "variant:gm") for x in lab) == len(pk)


def test_coverage_of_a_batch_is_the_cases_coverage():
    """Coverage.add_batch (vectorized) counts what Coverage.add counts case by case."""
    cc = C.CampaignConfig(config="tiny", seed=9, variants=4, count=400, matmul_weight=0.3,
                          cas_weight=0.2)
    pool = K.draw_pool(cc.drawing, range(100), CFG.gm_bytes)
    faults = np.random.default_rng(1).integers(-1, len(tables.FAULTS), len(pool))
    a, b = cc.coverage(), cc.coverage()
    a.add_batch(pool, np.arange(len(pool)), faults)
    for r in range(len(pool)):
        b.add(pool.case(r), V.FAULT_NAMES[int(faults[r])])
    for axis in ("families", "operations", "dtypes", "layouts", "faults", "kinds", "edges"):
        assert a.counts[axis] == b.counts[axis], axis
    # the variants' labels go to their own axis, the drawn case's to mutations
    assert sum(a.counts["variants"].values()) == sum(len(x) for x in pool.labels) > 0
    assert a.counts["mutations"] == b.counts["mutations"] - collections_counter(pool.labels)


def test_coverage_counts_the_numeric_flags_cases_end_with():
    """The flags axis: each flag counts the rows whose final numeric_flags have
    its bit (tables.NUMERIC_FLAGS order); DZ, which nothing raises, is not in
    the universe, the others are when the matrix family is drawn."""
    cc = C.CampaignConfig(config="tiny", seed=9, count=40, matmul_weight=0.3)
    pool = K.draw_pool(cc.drawing, range(6), CFG.gm_bytes)
    cov = cc.coverage()
    flags = np.array([0b10001, 0b10100, 0, 0b11000, 0b00001, 0] + [0] * (len(pool) - 6))
    cov.add_batch(pool, np.arange(len(pool)), np.zeros(len(pool), np.int64), flags)
    assert dict(cov.counts["flags"]) == {"NV": 2, "OF": 1, "UF": 1, "NX": 3}
    assert cov.universe()["flags"] == ["NV", "OF", "UF", "NX"]
    assert cov.never_hit()["flags"] == []
    assert C.CampaignConfig(config="tiny", matmul_weight=0).coverage().universe()["flags"] == []


def collections_counter(labels):
    import collections
    return collections.Counter(x for lab in labels for x in lab)


# ----------------------------------------------------------------- the container


def test_batch_container_round_trip_and_corruption(tmp_path):
    rng = np.random.default_rng(2)
    t = {"a": rng.integers(0, 2**63, (3, 5), dtype=np.uint64), "b": np.array([True, False]),
         "empty": np.zeros((0, 4), np.int32), "f": np.arange(6, dtype=np.float32).reshape(2, 3)}
    buf = batchfile.encode(t, {"format": "x.v1", "n": 3})
    got, meta = batchfile.decode(buf)
    assert meta == {"format": "x.v1", "n": "3"} and list(got) == list(t)
    for k in t:
        assert got[k].dtype == t[k].dtype and np.array_equal(got[k], t[k]), k
    n = int.from_bytes(buf[:8], "little")
    assert n % 8 == 0 and json.loads(buf[8:8 + n])["a"]["dtype"] == "U64"
    bad = {
        "truncated": buf[:-7],
        "header length": (1 << 40).to_bytes(8, "little") + buf[8:],
        "not JSON": buf[:8] + b"{" * n + buf[8 + n:],
        "past the end": buf + b"\0",
        "contiguous": buf[:8] + buf[8:8 + n].replace(b'"data_offsets":[0,', b'"data_offsets":[8,')
        + buf[8 + n:],
    }
    for what, b in bad.items():
        with pytest.raises(batchfile.BatchFileError, match=what.split()[0]):
            batchfile.decode(b, what)
    p = tmp_path / "x.safetensors"
    p.write_bytes(buf)
    with pytest.raises(batchfile.BatchFileError, match="format 'x.v1'"):
        batchfile.read(p, "ptojax.fuzz-batch.v2")


def test_states_as_sparse_tensors_round_trip():
    """A batch of States through the container: the pools' non-zero pages only,
    every leaf back bit for bit; bad coordinates or shapes are refused."""
    rng = np.random.default_rng(3)
    base = state_leaves(C.reset_leaves(CFG))
    n = 5
    leaves = {k: np.repeat(v[None], n, axis=0).copy() for k, v in base.items()}
    leaves[".tiles.words"][1, 2, 3] = rng.integers(0, 2**63, CFG.tile_words, dtype=np.uint64)
    leaves[".tiles.defined"][4, 0, 0, 7] = True
    leaves[".shared.words"][2, 1, 5] = 99
    leaves[".gm"][3] = rng.integers(0, 256, CFG.gm_bytes, dtype=np.uint8)
    t = batchfile.states_to_tensors("s", leaves)
    assert t["s.tiles.pages"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert t["s.shared.records"].tolist() == [[2, 1]]
    back = batchfile.tensors_to_states("s", batchfile.decode(batchfile.encode(t, {}))[0], CFG, n)
    same_leaves(back, leaves, "round trip")
    t2 = dict(t, **{"s.tiles.pages": np.array([[1, 2, 3], [9, 0, 0]], np.int32)})
    with pytest.raises(batchfile.BatchFileError, match="outside"):
        batchfile.tensors_to_states("s", t2, CFG, n)
    t3 = dict(t, **{"s.gm": t["s.gm"][:, :10]})
    with pytest.raises(batchfile.BatchFileError, match="s.gm is uint8"):
        batchfile.tensors_to_states("s", t3, CFG, n)


# ----------------------------------------------------------------- setup on the engine


def test_setup_on_the_engine_is_the_oracles():
    """Drawn cases with setup words (MGATHER.CAS sources, matrix operands, Core
    cases' Shared and Local tiles) and undefined Words, prepared on pj.batch.run
    by the campaign's Planner, start every row (variants' pokes included) from
    the State gen.build_state builds on the reference model."""
    cc = C.CampaignConfig(config="tiny", rows=ROWS, seed=12, variants=3, cas_weight=0.3,
                          matmul_weight=0.4, core_share=0.3, count=10 ** 6)
    drawing = cc.drawing
    js = [j for j in range(400) if (lambda c: c.setup and (c.undefine or j % 9 == 0))(drawing.case(j))]
    pool = K.draw_pool(drawing, js[:40], CFG.gm_bytes)
    pool.k = np.arange(len(pool))
    assert any(c.undefine for c in pool.drawn) and any(c.core for c in pool.drawn)
    assert any(p for p in pool.pokes)
    engines = {}
    res = C.CampaignResult(cc, coverage=cc.coverage())
    planner = C.Planner(cc, lambda core: engines.setdefault(core, Engine(CFG, ROWS, 0, "abandon", core)),
                        res)
    seen = 0
    for b in planner.plan(pool):
        for i, r in enumerate(b.rows.tolist()):
            want = state_leaves(C.initial_state(pool.case(r), CFG))
            same_leaves(state_leaves(b.starts.state(i, CFG)), want, f"row {r} ({pool.case(r).kind})")
            seen += 1
        # the engine's own starting States are the same (assembled on the device)
        got = state_leaves(engines[b.core].states(b.state_rows))
        for i, r in enumerate(b.rows.tolist()[:8]):
            same_leaves({k: v[i] for k, v in got.items()}, state_leaves(b.starts.state(i, CFG)),
                        f"device row {r}")
    assert seen == len(pool) and res.setup_batches >= 2


def test_a_setup_that_fails_names_its_case():
    """A drawn case whose setup words do not complete (a generator defect) is an
    error naming it; in a campaign its rows are not run and the report lists it."""
    case = G.Case(words=[G.BSTOP], gm=bytes(CFG.gm_bytes), gprs={}, kind="cas_legal",
                  setup=(G.bstart("TLOAD", 4), G.dim(0, 1, 0)))        # no B.IOT: never closes
    with pytest.raises(RuntimeError, match="setup of a cas_legal case did not complete"):
        Engine(CFG, ROWS).prepare([case])
    cc = C.CampaignConfig(config="tiny", rows=ROWS, variants=2, core_share=0)
    pool = C._merge([K.draw_pool(cc.drawing, [0], CFG.gm_bytes) for _ in range(2)])
    pool.drawn[0] = case                    # drawn case 0 (rows 0, 1) cannot be set up
    pool.k = np.arange(len(pool))
    res = C.CampaignResult(cc, coverage=cc.coverage())
    batches = C.Planner(cc, lambda core: Engine(CFG, ROWS), res).plan(pool)
    assert sorted(int(k) for b in batches for k in b.k) == [2, 3]
    assert [f["k"] for f in res.setup_failures] == [[0, 1]]
    assert "setup of a cas_legal case did not complete" in res.setup_failures[0]["error"]


# ----------------------------------------------------------------- export and the DUT


def test_batched_export_holds_the_engines_results(capsys, monkeypatch, env, tmp_path):
    """--export-format batch: one safetensors file a batch; read back (by ptojax and
    by the numpy-only example reader) every case's initial State is its case's,
    and its final State pj.batch.run's, which the oracle agreed with."""
    edir = tmp_path / "export"
    rc, rep, err = fuzz(capsys, monkeypatch, env, "--count", "150", "--seed", "6", "--sample", "0.5",
                        "--export", str(edir), "--export-format", "batch",
                        "--out", str(tmp_path / "out"))
    assert rc == 0, err
    assert rep["export"] == {"dir": str(edir), "cases": 150, "files": len(list(edir.glob("*.safetensors"))),
                             "format": report.BATCH_FORMAT}
    index = json.loads((edir / "index.json").read_text())
    cc = C.CampaignConfig(config="tiny", rows=ROWS, seed=6, count=150, variants=8, core_share=0)
    pools = {int(k): (p, r) for p in C.Pools(cc, lambda fn, *a: _done(fn(*a)), rows=10 ** 4)
             for r, k in enumerate(p.k)}
    ks, agreed = [], 0
    for name in index["files"]:
        b = report.read_batch(edir / name)
        assert b["machine"] == CFG and b["metadata"]["format"] == report.BATCH_FORMAT
        for i, k in enumerate(b["cases"]["k"].tolist()):
            p, r = pools[k]
            case = p.case(r)
            assert b["words"][i, : b["lengths"][i]].tolist() == case.words
            start = {key: v[i] for key, v in b["initial"].items()}
            same_leaves(start, state_leaves(C.initial_state(case, CFG)), f"case {k}")
            if i < 3:                 # the engine's results are the oracle's
                want = C.reference_outcome(C.initial_state(case, CFG), case.words, 0, "abandon", CFG)
                same_leaves({key: v[i] for key, v in b["final"].items()}, want.leaves, f"final {k}")
                assert b["executed"][i] == want.executed
            agreed += bool(b["oracle"]["agreed"][i])
            assert b["oracle"]["agreed"][i] == b["oracle"]["compared"][i]
            ks.append(k)
    assert sorted(ks) == list(range(150)) and agreed == rep["compared"] > 0
    # the example reader needs numpy alone
    p = subprocess.run([sys.executable, str(REPO / "examples" / "read_batch.py"),
                        str(edir / index["files"][0])], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=""), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "ptojax.fuzz-batch.v2" in p.stdout and "final.gm" in p.stdout
    # ... and so does the C++ one, where a compiler is at hand
    gxx = shutil.which("g++")
    if gxx:
        exe = tmp_path / "read_batch"
        subprocess.run([gxx, "-std=c++17", "-O1", "-o", str(exe),
                        str(REPO / "examples" / "read_batch.cpp")], check=True, timeout=300)
        p = subprocess.run([str(exe), str(edir / index["files"][0])], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        first = report.read_batch(edir / index["files"][0])
        assert f"format {report.BATCH_FORMAT}" in p.stdout
        assert f"{len(first['cases']['k'])} cases" in p.stdout
        k0 = int(first["cases"]["k"][0])
        assert (f"case {k0}: {int(first['lengths'][0])} words, fault "
                f"{int(first['final']['.fault'][0])}, executed {int(first['executed'][0])}") in p.stdout
    # a damaged file is refused with the reason
    f = edir / index["files"][0]
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(batchfile.BatchFileError, match="truncated"):
        report.read_batch(f)


def _done(value):
    return type("Done", (), {"result": lambda self: value})()


def test_campaign_against_the_example_dut(capsys, monkeypatch, env, tmp_path):
    """The CI campaign against examples/dut_harness.py over the batched protocol:
    every case compared with the DUT's answer, zero mismatches."""
    rc, rep, err = fuzz(capsys, monkeypatch, env, "--count", "400", "--seed", "8", "--sample", "0",
                        "--against", HARNESS, "--against-protocol", "batch", "--out", str(tmp_path))
    assert rc == 0, err
    assert rep["against"] == {"command": HARNESS, "protocol": "batch", "compared": 400,
                              "mismatches": 0, "error": None}
    assert rep["cases"] == 400 and rep["stopped"] is None


# every misbehaviour of examples/dut_harness.py, with the message that names it
MISBEHAVIOURS = [
    ("--die-after 1", "ended without answering batch 2"),
    ("--hang-after 1", "gave no answer to batch 2 .* within {timeout} s"),
    ("--bad-ids-after 1", "answer to batch 2 .* gives case"),
    ("--short-after 1", "answer to batch 2 .* holds {short} ids, expected {rows}"),
    ("--truncate-after 1", "answer to batch 2 .* is malformed .*truncated"),
    ("--error-after 1", "reported an error for batch 2 .* the device reports a failure"),
]


def reset_batch(n: int, cfg):
    """A campaign Batch's parts a DUT request reads (k, starts): n reset States."""
    from types import SimpleNamespace
    from ptojax.fuzz.engine import reset_leaves
    from ptojax.fuzz.starts import Starts
    leaves = state_leaves(reset_leaves(cfg))
    rows = {k: np.repeat(v[None], n, 0) for k, v in leaves.items()}
    rows[".gm"][:, :8] = np.arange(n, dtype=np.uint8)[:, None]        # each row its own
    words = np.full((n, 2), G.BSTOP, np.uint32)
    starts = Starts(rows[".gm"], rows[".gpr"], rows[".pc"], rows[".tile_capacity"],
                    np.full(n, -1, np.int32), words, np.ones(n, np.int32), np.zeros(n, bool))
    return SimpleNamespace(k=np.arange(100, 100 + n), starts=starts), rows


@pytest.mark.parametrize("misbehaviour, message", MISBEHAVIOURS)
def test_the_batched_protocol_catches_a_failing_dut(misbehaviour, message):
    """The protocol alone (the example harness's echo device, no engine: each DUT
    costs its start only): two requests in flight, the first answered whole and in
    order, the second's failure an ExternalError naming it, and a hung DUT stopped
    at once when its time has run out."""
    from ptojax.fuzz.casefile import ExternalError
    from ptojax.fuzz.dut import BatchedDut
    import re
    batch, rows = reset_batch(6, CFG)
    message = message.format(timeout=2, short=5, rows=6)
    command = f"{HARNESS} --device echo {misbehaviour}"
    with BatchedDut(command, CFG, 0, "abandon", timeout=2, start_timeout=120) as d:
        first, second = d.send(batch, CFG), d.send(batch, CFG)
        got = d.receive(first)
        same_leaves(got.leaves, rows, "echoed States")
        assert got.executed.tolist() == [0] * 6
        with pytest.raises(ExternalError) as e:
            d.receive(second)
        assert re.search(message, str(e.value)), str(e.value)
    assert not running(f"dut_harness.py --device echo {misbehaviour}"), "the DUT outlived close()"


# the whole campaign, per misbehaviour: each spawns a DUT that compiles the
# campaign's program (12-15 s here, the hang 15 s more), so CI runs one; the
# protocol test above checks every misbehaviour's message in CI
@pytest.mark.parametrize("misbehaviour, message", [
    pytest.param(m, msg, marks=() if m.startswith("--die") else pytest.mark.slow) for m, msg in MISBEHAVIOURS])
def test_a_failing_dut_stops_the_campaign_with_what_it_has(capsys, monkeypatch, env, tmp_path,
                                                           misbehaviour, message):
    import re
    # batch 1's answer includes the DUT's start and first compile (over 20 s on a
    # loaded 2-core machine: --against-start-timeout); batch 2's is one more run
    # of the same program, so the hanging DUT is caught after 15 s
    message = message.format(timeout=15, short=62, rows=63)
    rc, rep, err = fuzz(capsys, monkeypatch, env, "--count", "300", "--seed", "8", "--sample", "0",
                        "--against", f"{HARNESS} {misbehaviour}", "--against-protocol", "batch",
                        "--against-timeout", "15", "--against-start-timeout", "300")
    assert rc == 2, err
    assert re.search(message, rep["stopped"]), rep["stopped"]
    assert rep["against"]["compared"] == 63 and rep["cases"] >= 63
    assert "the campaign stopped there" in err
    assert not running(f"dut_harness.py {misbehaviour}"), "the stopped DUT outlived the campaign"


def running(fragment: str) -> list:
    """Pids of live processes whose command line holds `fragment`."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if d.name.isdigit() and fragment in cmd and (d / "stat").read_text().split()[2] != "Z":
            pids.append(int(d.name))
    return pids


def test_a_wrong_dut_is_caught(capsys, monkeypatch, env, tmp_path):
    rc, rep, err = fuzz(capsys, monkeypatch, env, "--count", "200", "--seed", "8", "--sample", "0",
                        "--against", f"{HARNESS} --wrong-every 50", "--against-protocol", "batch",
                        "--no-shrink", "--max-files", "1", "--out", str(tmp_path))
    assert rc == 1, err
    assert 0 < rep["against"]["mismatches"] < 40 and rep["mismatches"] == 0
    d = json.loads(Path(rep["mismatch_files"][0]).read_text())
    assert d["against_protocol"] == "batch" and d["against"].endswith("--wrong-every 50")
    assert [x["field"] for x in d["differences"]] == ["gm"]


def test_the_first_answer_may_take_the_start_timeout():
    # the first answer includes the command's start and first compile; every
    # later one has --against-timeout, so a hang is caught without that grace
    from ptojax.fuzz.casefile import Command
    c = Command()
    c.timeout, c.start_timeout = 15.0, 300.0
    assert c._wait() == 300.0
    c.answered = True
    assert c._wait() == 15.0
    c.answered, c.start_timeout = False, 5.0        # never shorter than the timeout
    assert c._wait() == 15.0
