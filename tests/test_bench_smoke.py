"""Smoke tests of benchmarks/layouts.py (--quick runs and reports every row), of
benchmarks/compile.py (one child measurement) and of benchmarks/profile.py (its
phase map; one profiled TLOAD batch under -m slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "layouts.py"
COMPILE_BENCH = BENCH.with_name("compile.py")


def _load():
    spec = importlib.util.spec_from_file_location("ptojax_bench_layouts", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_layouts_benchmark_quick(tmp_path):
    bench = _load()
    out = tmp_path / "layouts.json"
    result = bench.main(["--quick", "--quiet", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["meta"]["quick"] is True
    methods = set(data["methods"])
    assert {"jax_to_layout", "jax_to_layout_defined", "jax_to_nd",
            "np_to_layout", "np_to_nd", "np_copy"} <= methods
    cube = ("CUBE_M16", "CUBE_M32", "CUBE_N8")
    full = {(r["layout"], r["width"]) for r in data["rows"] if r["valid"] == "full"}
    assert full == {(lay, w) for lay in cube + ("ND", "DN", "ZN", "NZ")
                    for w in ("b32", "b16", "b8", "b4")}
    assert {r["layout"] for r in data["rows"] if r["valid"] == "random"} == set(cube)
    for r in data["rows"]:
        assert set(r["bytes_per_s"]) == methods
        # an ordinary tile converted whole has no definedness variant
        skipped = {"jax_to_layout_defined"} if r["layout"] not in cube else set()
        assert {m for m, v in r["bytes_per_s"].items() if v is None} == skipped
        assert all(v > 0 for v in r["bytes_per_s"].values() if v is not None)
        assert r["payload_bytes"] > 0 and r["batch"] >= 1
    head = {(h["layout"], h["width"], h["valid"]) for h in data["headline"]}
    assert len(head) == len(data["headline"]) == 31
    for h in data["headline"]:
        assert h["to_layout_vs_copy"] > 0 and h["to_nd_speedup_vs_numpy"] > 0
    assert result["headline"] == data["headline"]


def test_layouts_plot_shows_only_what_was_measured(tmp_path):
    pytest.importorskip("matplotlib")
    bench = _load()
    out = tmp_path / "layouts.json"
    result = bench.main(["--quick", "--quiet", "--layouts", "CUBE_M16,NZ", "--widths", "b16",
                         "--out", str(out), "--plot", str(tmp_path / "p.png")])
    assert Path(result["plot"]).stat().st_size > 0
    assert {(r["layout"], r["width"]) for r in result["rows"]} == {("CUBE_M16", "b16"),
                                                                  ("NZ", "b16")}


def test_layouts_refuses_a_run_that_cannot_fit_before_any_work(capsys):
    bench = _load()
    assert bench.check_fits(64 << 20, 16 << 30) is None
    why = bench.check_fits(64 << 30, 21 << 30)
    assert "needs about 576.0 GiB" in why and "use --max-bytes 2G or less" in why
    assert bench.check_fits(1 << 40, None) is None           # unknown: no refusal
    with pytest.raises(SystemExit):
        bench.main(["--max-bytes", "1024G", "--quiet"])
    assert "needs about" in capsys.readouterr().err


def test_compile_benchmark_child_header_tiny():
    # one cold child: run_stream with no effect group on tiny, cache off, fresh process
    p = subprocess.run([sys.executable, str(COMPILE_BENCH), "--child", "--mode", "cold",
                        "--preset", "tiny", "--set", "header"],
                       env=dict(os.environ, PTOJAX_JAX_CACHE=""), text=True,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    assert (rec["mode"], rec["preset"], rec["set"], rec["core"]) == ("cold", "tiny", "header", False)
    assert rec["effects"] == [] and rec["profile"] == "portable"
    assert Path(rec["ptojax_file"]).resolve().is_relative_to(BENCH.parents[1])
    assert rec["hlo_instructions"] > 0 and rec["hlo_text_bytes"] > rec["hlo_instructions"]
    assert 0 < rec["trace_s"] < rec["lower_s"] and rec["compile_s"] > 0


def test_bundles_benchmark_baseline_merge():
    # --baseline's merge on fake results (no baseline run: too slow for a smoke test)
    spec = importlib.util.spec_from_file_location("ptojax_bench_bundles", BENCH.with_name("bundles.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    now = {"rows": [{"bundle": "A", "batch": 256, "bundles_per_s": 300.0},
                    {"bundle": "A", "batch": 16, "bundles_per_s": 40.0},
                    {"bundle": "B", "batch": 16, "bundles_per_s": 10.0}],
           "summary": [{"bundle": "A", "reference_bundles_per_s": 2.0},
                       {"bundle": "B", "reference_bundles_per_s": 1.0}]}
    base = [{"rows": [{"bundle": "A", "batch": 16, "bundles_per_s": 20.0},
                      {"bundle": "A", "batch": 256, "bundles_per_s": 400.0}],
             "summary": [{"bundle": "A", "reference_bundles_per_s": 3.0}]},
            {"bundle": "B", "error": "exit 2: unknown bundle"}]
    cmp = bench.compare(now, base)
    assert [(c["bundle"], c["batch"], c["ratio"]) for c in cmp] == [
        ("A", 16, 2.0), ("A", 256, 0.75), ("B", 16, None)]
    assert cmp[0]["reference_bundles_per_s"] == 2.0 and cmp[0]["baseline_reference_bundles_per_s"] == 3.0
    by = {g["batch"]: g for g in bench.compare_by_batch(cmp)}
    assert by[16]["bundles"] == 1 and by[16]["min_ratio"] == 2.0
    assert by[256]["geomean_ratio"] == 0.75


def _load_profile():
    spec = importlib.util.spec_from_file_location("ptojax_bench_profile", BENCH.with_name("profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_profile_charges_kernels_to_the_executors_scopes():
    prof = _load_profile()
    text = "\n".join([
        '  %fusion.3 = u64[8,256]{1,0} fusion(%p.1), kind=kLoop, calls=%fc, metadata={op_name='
        '"jit(_batched)/vmap()/while/body/phase2/transport/cond/branch_1_fun/jit(run)/writes/select_n"}',
        '  ROOT %while.2 = (s32[], u8[8]) while(%t), condition=%c, body=%b',
        '  %stack.9 = s32[8,1,8,16]{3,2,1,0} concatenate(%a, %b), dimensions={3}, metadata={op_name='
        '"jit(_batched)/vmap()/stack"}',
        '  %fusion.4 = s32[8]{0} fusion(%w), kind=kLoop, calls=%f2, metadata={op_name='
        '"jit(_batched)/vmap()/while/body/phase1/decode/reduce"}'])
    instr = prof.instructions(text)
    assert instr["while.2"][0] == "while" and instr["stack.9"][0] == "concatenate"
    fam = {"transport", "matrix"}
    assert prof.phase_of(instr["fusion.3"][1], fam) == "transport writes"
    assert prof.phase_of(instr["stack.9"][1], fam) == "state in/out"
    assert prof.phase_of(instr["fusion.4"][1], fam) == "decode"
    assert prof.phase_of("jit(_batched)/vmap()/while/body/phase1/select_n", fam) == "header scan"
    assert prof.phase_of("jit(_batched)/vmap()/while/body/phase2/block/add", fam) == "block"
    assert prof.phase_of("jit(_batched)/vmap()/while/body/phase2/cond/add", fam) == "dispatch"


@pytest.mark.slow    # compiles a batch program with the cache off (about 20 s)
def test_profile_benchmark_tload(tmp_path):
    out = tmp_path / "profile.json"
    p = subprocess.run([sys.executable, str(BENCH.with_name("profile.py")), "--bundles",
                        "TLOAD ND2M16 FP16 16x16", "--batch", "16", "--repeats", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert {"transport elements", "transport writes", "decode", "header scan"} <= set(row["phases_ms"])
    assert abs(sum(row["phases_ms"].values()) - row["kernel_ms"]) < 1e-6 * max(1.0, row["kernel_ms"])
