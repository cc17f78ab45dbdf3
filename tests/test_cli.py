"""The `ptojax` command line: run, asm, disasm, demo and bench through cli.main.

Every JAX run uses the "small" preset; the single-PE ones are 7-word
programs, so the file pays for one compile of pj.run, one of pj.run_core (the
cooperative example with --core), plus the demo's and the benchmark's batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ptojax as pj
from ptojax import cli, demo
from ptojax.cli import bench, inputs
from ptojax.warmup import warmup_programs

CFG = ["--config", "small"]
MATRIX = "0x100:003c00400042004400450046"          # FP16 [[1, 2, 3], [4, 5, 6]] at 0x100

TLOAD = """\
; a 2x3 FP16 matrix into a CUBE_M16 tile, padded with the FP16 maximum
BSTART.TLOAD FP16
B.DATR {ND2M16, DTYPE_NONE, Max}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a0, a1
B.IOT mask=1000, last, ->M<1>
BSTOP
"""

TSTORE = """\
BSTART.TSTORE FP16
B.DATR {M162ND, DTYPE_NONE}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a2, a1
B.IOT M#1, mask=1000, last
BSTOP
"""


@pytest.fixture
def src(tmp_path):
    def write(text, name="prog.s"):
        p = tmp_path / name
        p.write_text(text)
        return str(p)
    return write


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_run_tload_prints_tile_picture(src, capsys):
    rc, out, err = run(capsys, "run", src(TLOAD), *CFG, "--gm-hex", MATRIX,
                       "--gpr", "a0=0x100", "--gpr", "a1=6")
    assert rc == 0, err
    assert "result: Fault_None: 7 of 7 words executed, pc 0x1c" in out
    assert "0x0000  20011181  BSTART.TLOAD FP16" in out
    assert "0x0018  00000001  BSTOP" in out
    assert "tiles changed: 1" in out
    assert "M#1 (tile 32): CUBE_M16 FP16 16x4, valid 2x3" in out
    assert "3c00 4000 4200 ····" in out and "4400 4500 4600 ····" in out
    assert "memory changed: none" in out


def test_run_fault_is_reported_and_exits_0(src, capsys):
    rc, out, err = run(capsys, "run", src(TLOAD), *CFG, "--gm-hex", MATRIX,
                       "--gpr", "a0=0x101", "--gpr", "a1=6")
    assert rc == 0, err
    assert ("fault: Fault_DataAlignment at data address 0x101 (word 6 at pc 0x18: BSTOP); "
            "6 of 7 words executed before it") in out
    assert "<- Fault_DataAlignment" in out
    assert "tiles changed: none" in out and "memory changed: none" in out


def test_run_json(src, capsys):
    rc, out, _ = run(capsys, "run", src(TLOAD), *CFG, "--json", "--gm-hex", MATRIX,
                     "--gpr", "a0=0x100", "--gpr", "0:a1=6")
    assert rc == 0
    rep = json.loads(out)
    assert rep["fault"] == "Fault_None" and rep["fault_address"] is None
    assert rep["executed"] == 7 and rep["pc"] == 28 and rep["fault_word"] is None
    assert rep["model"] == "jax" and rep["config"] == "small"
    assert [p["word"] for p in rep["program"]][:2] == ["0x20011181", "0x09f01b23"]
    (t,) = rep["tiles"]
    assert (t["name"], t["layout"], t["dtype"], t["rows"], t["columns"]) == (
        "M#1", "CUBE_M16", "FP16", 16, 4)
    assert (t["valid_rows"], t["valid_columns"], t["pe_mask"]) == (2, 3, "1000")
    assert t["words"][:3] == ["0x0000000000003c00", "0x0000000000004000", "0x0000000000004200"]
    assert t["words"][3] == "0x0000000000007bff" and all(t["defined"])
    assert rep["memory"] == []
    # a fault in JSON: its data address and the word that raised it
    rc, out, _ = run(capsys, "run", src(TLOAD), *CFG, "--json", "--gpr", "a0=0x101")
    rep = json.loads(out)
    assert rep["fault"] == "Fault_DataAlignment"
    assert (rep["fault_address"], rep["fault_word"], rep["fault_pc"], rep["executed"]) == (
        0x101, 6, 0x18, 6)
    assert rep["tiles"] == [] and not rep["block_open"]


def test_run_reference_store_shows_memory_and_hex_input(src, capsys):
    words = pj.asm.assemble(TLOAD + TSTORE)
    hexprog = src("\n".join(f"{w:08x}" for w in words) + "\n", "prog.hex")   # auto-detected
    gprs = ["--gpr", "a0=0x100", "--gpr", "a1=6", "--gpr", "a2=0x200"]
    rc, out, err = run(capsys, "run", hexprog, *CFG, "--reference", "--gm-hex", MATRIX, *gprs)
    assert rc == 0, err
    assert "14 words, reference model" in out and "Fault_None: 14 of 14" in out
    assert "memory changed: 1 range" in out
    assert "0x0201..0x020b (11 bytes" in out
    assert "0x0200: 00 3c 00 40 00 42 00 44  00 45 00 46" in out
    rc, out, _ = run(capsys, "run", hexprog, *CFG, "--reference", "--json", "--gm-hex", MATRIX,
                     *gprs)
    rep = json.loads(out)
    assert rep["model"] == "reference"
    assert rep["memory"] == [{"address": 0x201, "length": 11, "before": "00" * 11,
                              "after": "3c00400042004400450046"}]


def test_run_hold_keeps_the_block_open(src, capsys):
    rc, out, _ = run(capsys, "run", src(TLOAD), *CFG, "--reference", "--on-fault", "hold",
                     "--gpr", "a0=0x101")
    assert rc == 0
    assert "Fault_DataAlignment" in out
    assert "block open: BSTART at 0x0, held pending (--on-fault hold)" in out


def test_malformed_assembly_exits_2_with_line_number(src, capsys):
    bad = TLOAD.replace("B.DIM zero, 2, ->LB1", "B.DIM zero, 2, ->LB7")
    rc, out, err = run(capsys, "run", src(bad), *CFG)
    assert rc == 2 and out == ""
    assert "line 5" in err and "->LB7" in err and "Traceback" not in err
    rc, _, err = run(capsys, "asm", src("BSTOP\nBFOO 1\n"))
    assert rc == 2 and "line 2" in err and "unknown mnemonic" in err


@pytest.mark.parametrize("argv,message", [
    (["--gpr", "a0:0x100"], "expected [PE:]REG=VALUE"),
    (["--gpr", "q9=1"], "unknown GPR"),
    (["--gpr", "7:a0=1"], "PE 7 out of range"),
    (["--gpr", "a0=zz"], "not an integer"),
    (["--gm-hex", "0x100:3c0"], "even number of hex digits"),
    (["--gm-hex", "0xfff:0000"], "do not fit"),
    (["--gm", "/nonexistent/gm.bin"], "cannot read GM image"),
    (["--pe", "4"], "--pe 4"),
])
def test_bad_options_exit_2(src, capsys, argv, message):
    rc, out, err = run(capsys, "run", src(TLOAD), *CFG, *argv)
    assert rc == 2 and message in err and "Traceback" not in err


def test_unreadable_file_and_unknown_config_exit_2(src, capsys):
    rc, _, err = run(capsys, "run", "/nonexistent/prog.s")
    assert rc == 2 and "cannot read program /nonexistent/prog.s" in err
    with pytest.raises(SystemExit) as e:
        cli.main(["run", src(TLOAD), "--config", "huge"])
    assert e.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err
    rc, _, err = run(capsys, "disasm", src("0x1 0x123456789\n"))
    assert rc == 2 and "does not fit a 32-bit" in err


def test_asm_disasm_round_trip(src, capsys):
    rc, out, _ = run(capsys, "asm", src(TLOAD + TSTORE))
    assert rc == 0
    words = [int(x, 16) for x in out.split()]
    assert words == pj.asm.assemble(TLOAD + TSTORE) and len(words) == 14
    assert out.splitlines()[0] == "0x20011181"
    rc, text, _ = run(capsys, "disasm", src(out, "w.hex"))
    assert rc == 0 and pj.asm.assemble(text) == words
    assert text.splitlines()[1] == "B.DATR {ND2M16, DTYPE_NONE, Max, EQ, Default, 0, 0}"
    rc, js, _ = run(capsys, "asm", "--json", src(TSTORE))
    lst = json.loads(js)
    assert lst == [f"0x{w:08x}" for w in pj.asm.assemble(TSTORE)]
    rc, text, _ = run(capsys, "disasm", src(js, "w.json"))          # a JSON list works too
    assert text.strip() == pj.asm.disassemble(pj.asm.assemble(TSTORE))
    rc, text, _ = run(capsys, "disasm", "--addresses", src("20011181 00000001"))
    assert text.splitlines() == ["  0x0000  20011181  BSTART.TLOAD FP16",
                                 "  0x0004  00000001  BSTOP"]


def test_stdin(monkeypatch, capsys):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("BSTOP\n"))
    rc, out, _ = run(capsys, "asm", "-")
    assert rc == 0 and out == "0x00000001\n"


def test_demo(capsys):
    rc, out, err = run(capsys, "demo", "--batch", "16")
    assert rc == 0, out + err
    assert "3c00 4000 4200 ····" in out                              # the tile picture
    assert "0x0200: 00 3c 00 40 00 42 00 44  00 45 00 46" in out     # the stored bytes
    assert "Fault_DataAlignment at data address 0x101" in out
    # TMATMUL: [[1, 2, 3], [4, 5, 6]] x [[0.5, -1], [0.25, 2], [1.5, 0.125]] in both profiles
    assert "5. TMATMUL: D = A x B" in out
    assert "0x3c00*0x3800 + 0x4000*0x3400 + 0x4200*0x3e00 = 0x2a1c0000" in out
    assert "  2a1c0000 48700000\n  2dd80000 50500000\n" in out          # portable D picture
    assert "  40b00000 40580000\n  41440000 40d80000\n" in out          # ieee D picture
    assert "D as FP32: [[5.5, 3.375], [12.25, 6.75]]" in out
    assert out.count(": the same words") == 2
    assert "TMATMUL ieee" in out and "DIFFERENT" not in out
    assert "16 bundles at once" in out and "bundles/s" in out
    assert "every check passed" in out


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tmatmul_fp16.s"


def test_demo_numpy_checks_of_tmatmul():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
    b = np.array(demo.MATRIX_B, np.float16)
    assert demo.portable_matmul_fp16(a, b).tolist() == [[0x2A1C0000, 0x48700000],
                                                        [0x2DD80000, 0x50500000]]
    assert demo.ieee_matmul_fp16(a, b).view(np.float32).tolist() == [[5.5, 3.375], [12.25, 6.75]]
    # one rounding per add: 1 + 2^-24 + 2^-24 stays 1 (docs/numerics.md)
    one, tiny = np.float16(1), np.float16(2.0 ** -24)
    assert demo.ieee_matmul_fp16(np.array([[one, one, one]]),
                                 np.array([[one], [tiny], [tiny]])).tolist() == [[0x3F800000]]


@pytest.mark.parametrize("profile, d_rows", [
    ("portable", ["2a1c0000 48700000", "2dd80000 50500000"]),
    ("ieee", ["40b00000 40580000", "41440000 40d80000"])])
def test_run_tmatmul_example(capsys, profile, d_rows):
    # the example's own setup lines provide GM and GPRs; the reference model keeps it cheap
    # (the demo test runs the same blocks on pj.run)
    text = EXAMPLE.read_text()
    assert pj.asm.assemble(text) == pj.asm.assemble(
        demo.TLOAD.format(base="a0") + demo.TLOAD_B + demo.TMATMUL)
    rc, out, err = run(capsys, "run", str(EXAMPLE), *CFG, "--reference", "--profile", profile)
    assert rc == 0, err
    assert f"21 words, reference model, config small, {profile} profile" in out
    assert "result: Fault_None: 21 of 21 words executed" in out
    assert "0x004c  c208c213  B.IOT M#1, N#1, mask=1000, last, ->T<1>" in out
    assert "T#1 (tile 0): CUBE_M16 FP32 16x2, valid 2x2" in out
    assert "\n  ".join(["", *d_rows, ""]) in out
    for row in d_rows:                                     # the file documents the result
        assert row in text
    rc, out, _ = run(capsys, "run", str(EXAMPLE), *CFG, "--reference", "--profile", profile,
                     "--json")
    rep = json.loads(out)
    assert rep["profile"] == profile and rep["tiles"][0]["name"] == "T#1"


@pytest.mark.parametrize("semantics, expect", [
    ("adr0100", "fault: Fault_TileLegality (word 22 at pc 0x58: BSTOP)"),
    ("0.58.3", "mask 1100")])
def test_run_semantics_switch(capsys, semantics, expect):
    # the one-PE view under either cooperative rule set: ADR 0100 rejects a
    # partial mask, the 0.58.3 model publishes D with the block's mask (reference
    # model: the JAX side of both is tests/test_cooperative.py)
    prog = Path(__file__).with_name("data") / "shared-tmatmul-partial-mask.s"
    rc, out, err = run(capsys, "run", str(prog), *CFG, "--reference", "--semantics", semantics)
    assert rc == 0, err
    assert f"portable profile, {semantics} semantics, PE 0" in out and expect in out
    rc, out, _ = run(capsys, "run", str(prog), *CFG, "--reference", "--semantics", semantics,
                     "--json")
    assert json.loads(out)["semantics"] == semantics


def test_program_setup_lines(src, capsys):
    assert inputs.program_setup(";@ --gm-hex 0x10:ab --gpr a0=1\n# @x\n  #@ --gpr 1:a1=2\n") == (
        ["0x10:ab"], ["a0=1", "1:a1=2"])
    # command-line options apply after the file's: B read from A's bytes, [[1, 2], [3, 4], [5, 6]]
    rc, out, _ = run(capsys, "run", str(EXAMPLE), *CFG, "--reference", "--profile", "ieee",
                     "--gpr", "a4=0x100")
    assert rc == 0 and "  41b00000 41e00000\n  42440000 42800000\n" in out   # 22 28 / 49 64
    for bad, message in ((";@ --gpr", "expected pairs"), (";@ --pe 1", "'--pe'"),
                         (";@ --gpr q9=1", "unknown GPR")):
        rc, out, err = run(capsys, "run", src(bad + "\n" + TLOAD), *CFG, "--reference")
        assert rc == 2 and message in err and "Traceback" not in err


def test_bench_dispatch_and_missing_benchmarks(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bundles.py"
    fake.write_text("SEEN = []\ndef main(argv=None):\n    print('argv', argv)\n")
    monkeypatch.setattr(bench, "_bench_path", lambda name: tmp_path / f"{name}.py")
    rc, out, _ = run(capsys, "bench", "bundles", "--quick", "--out", "x.json")
    assert rc == 0 and out == "argv ['--quick', '--out', 'x.json']\n"
    rc, _, err = run(capsys, "bench", "layouts")
    assert rc == 2 and "not found" in err and "benchmarks/" in err


def test_bench_bundles_smoke(tmp_path, capsys):
    # one bundle (one compile): a CUBE store, whose source tile is loaded first
    out = tmp_path / "bundles.json"
    rc = cli.main(["bench", "bundles", "--max-batch", "1", "--repeats", "1",
                   "--reference-runs", "2", "--quiet", "--out", str(out),
                   "--bundles", "TSTORE N82ND FP16 16x16"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["bundle"] for r in data["summary"]] == ["TSTORE N82ND FP16 16x16"]
    assert all(r["bundles_per_s"] > 0 and r["batch"] == 1 for r in data["rows"])
    assert all(s["ratio"] > 0 for s in data["summary"])
    assert data["presets"]["tiny"]["state_bytes"] == pj.preset("tiny").state_bytes


COOP_EXAMPLE = EXAMPLE.with_name("coop_tmatmul.s")


def test_run_core_cooperative_example(capsys):
    # the reference model; test_run_core_cooperative_example_on_jax runs it on pj.run_core
    text = COOP_EXAMPLE.read_text()
    rc, out, err = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--reference", "--core")
    assert rc == 0, err
    assert ("reference model, config small, portable profile, adr0100 semantics, "
            "the whole Core (PE0..PE3)") in out
    assert "tiles changed: 2" in out
    assert "PE0 T#1 (tile 0): CUBE_M16 U32 16x4, valid 16x4, 256 B, Matrix, mask 1000" in out
    assert "PE1 T#1 (tile 0): CUBE_M16 U32 16x4, valid 4x4, 256 B, Matrix, mask 0100" in out
    assert "S1: RowMajor U16 32x4, valid 20x4, 256 B per PE, allocated 1111, initialized 1111" in out
    # the file documents PE0's row 0 and PE1's row 0 (D row 16)
    assert "00000003 00000001 00000003 00000005" in out and "3 1 3 5" in text
    assert "00000083 00000081 00000083 00000085" in out and "131 129 131 133" in text
    rc, out, _ = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--reference", "--core", "--json")
    rep = json.loads(out)
    assert rep["pe"] == "core" and [(t["pe"], t["valid_rows"]) for t in rep["tiles"]] == [(0, 16), (1, 4)]
    assert [s["name"] for s in rep["shared"]] == ["S1", "S2"]
    assert rep["shared"][0]["allocation_mask"] == "1111" and rep["shared"][0]["published"]
    # PE1's single-PE view publishes only PE1's fragment
    rc, out, _ = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--reference", "--pe", "1")
    assert rc == 0 and "tiles changed: 1" in out and "PE1 T#1 (tile 0)" in out
    rc, out, err = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--reference", "--core", "--pe", "1")
    assert rc == 2 and "--core runs every PE" in err


def _coop_d_row(i):
    # the example's D row i: A[i][k] = 4i + k, so [8i + 3, 8i + 1, 8i + 3, 8i + 5] (U32)
    return "  " + " ".join(f"{v:08x}" for v in (8 * i + 3, 8 * i + 1, 8 * i + 3, 8 * i + 5))


def test_run_core_cooperative_example_on_jax(capsys):
    """`ptojax run --core` without --reference: pj.run_core runs the example, each
    fragment holds its D rows, and the JSON report equals the reference model's
    (every tile and Shared Word, bit for bit); a misaligned PE2 base faults the
    collective Shared TLOAD at that PE's first element and changes nothing."""
    n = len(pj.asm.assemble(COOP_EXAMPLE.read_text()))
    rc, out, err = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--core")
    assert rc == 0, err
    assert (f"{n} words, jax model, config small, portable profile, adr0100 semantics, "
            "the whole Core (PE0..PE3)") in out
    assert f"result: Fault_None: {n} of {n} words executed" in out
    assert "tiles changed: 2" in out
    lines = out.splitlines()
    pe0 = next(i for i, x in enumerate(lines) if x.startswith(
        "  PE0 T#1 (tile 0): CUBE_M16 U32 16x4, valid 16x4, 256 B, Matrix, mask 1000"))
    assert lines[pe0 + 1:pe0 + 17] == [_coop_d_row(i) for i in range(16)]
    pe1 = next(i for i, x in enumerate(lines) if x.startswith(
        "  PE1 T#1 (tile 0): CUBE_M16 U32 16x4, valid 4x4, 256 B, Matrix, mask 0100"))
    assert lines[pe1 + 1:pe1 + 5] == [_coop_d_row(16 + i) for i in range(4)]   # D rows 16..19
    assert lines[pe1 + 5] == "  " + " ".join(["?" * 8] * 4)                   # not defined
    assert "S1: RowMajor U16 32x4, valid 20x4, 256 B per PE, allocated 1111, initialized 1111" in out
    assert "memory changed: none" in out

    def report(*argv):
        rc, out, err = run(capsys, "run", str(COOP_EXAMPLE), *CFG, "--core", "--json", *argv)
        assert rc == 0, err
        return json.loads(out)

    reports = {}
    for name, argv in (("ok", []), ("misaligned", ["--gpr", "2:a0=0x101"])):
        jax_rep, ref_rep = report(*argv), report("--reference", *argv)
        assert (jax_rep.pop("model"), ref_rep.pop("model")) == ("jax", "reference")
        assert jax_rep == ref_rep, name
        reports[name] = jax_rep
    rep = reports["ok"]
    assert rep["pe"] == "core" and [(t["pe"], t["valid_rows"]) for t in rep["tiles"]] == [(0, 16), (1, 4)]
    assert [(s["name"], s["allocation_mask"], s["initialized_mask"], s["published"])
            for s in rep["shared"]] == [("S1", "1111", "1111", True), ("S2", "1111", "1111", True)]
    # S1 quarter q holds rows 8q..8q+7: PE2's first element, row 16, is at 0x101 + 16 * 8
    rep = reports["misaligned"]
    assert (rep["fault"], rep["fault_address"], rep["fault_word"], rep["executed"], rep["pc"]) == (
        "Fault_DataAlignment", 0x181, 6, 6, 0x18)
    assert rep["tiles"] == [] and rep["shared"] == [] and rep["memory"] == []
    assert not rep["block_open"]


def _warmup(cache, *argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["PTOJAX_JAX_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "ptojax.cli", "warmup", *argv], env=env,
                          capture_output=True, text=True, timeout=1200)


def test_warmup_fills_a_fresh_cache_then_loads_from_it(tmp_path):
    # a fresh process on an empty cache: two of the tiny config's programs
    # compile (each of the five takes 3-15 s on a small CPU; warmup.warmup_programs
    # runs them all alike), then a second process loads them
    cache = tmp_path / "jax-cache"
    chosen = ("--program", "tload", "--program", "tstore")
    p = _warmup(cache, "--config", "tiny", "--profile", "portable", *chosen)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"persistent cache {cache}" in p.stderr
    rows = [line.split() for line in p.stdout.splitlines()
            if line.split()[:1] in (["tload"], ["tstore"], ["mgather_cas"], ["tmatmul"],
                                    ["coop_tmatmul"])]
    assert [r[0] for r in rows] == ["tload", "tstore"]
    assert all(r[1:3] == ["tiny", "portable"] and float(r[3]) >= 0 for r in rows)
    assert "ops.matmul" not in p.stdout                  # --config ops was not asked for
    assert "2 programs in" in p.stdout and "compiled" in p.stdout
    entries = sorted(os.listdir(cache))
    assert entries
    p = _warmup(cache, "--config", "tiny", "--profile", "portable", *chosen, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads(p.stdout)
    assert rep["cache_dir"] == str(cache)
    assert sorted(os.listdir(cache)) == entries, rep          # loaded: nothing new written
    sources = [r["source"] for r in rep["programs"]]
    assert set(sources) <= {"cache", "memory"} and sources[0] == "cache", sources
    assert all(r["fault"] == "Fault_None" and r["executed"] > 0 for r in rep["programs"])
    assert rep["new_entries"] == 0


def test_warmup_help_and_bad_options(capsys):
    assert "warmup" in cli.build_parser().format_help()
    with pytest.raises(SystemExit):
        cli.main(["warmup", "--config", "huge"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["warmup", "--program", "tdiv"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown warm-up program 'tdiv'; expected one of tload"):
        warmup_programs(["tiny"], ["portable"], programs=["tdiv"])
    assert [s[0] for s in warmup_programs(["tiny"], ["ieee"], matmul=False, programs=["tmatmul"])] \
        == ["tmatmul"]


def test_report_names_the_sticky_numeric_flags():
    # the run report lists the State's flags and those this program raised
    from ptojax import tables
    from ptojax.report import build_report, format_report
    from ptojax.result import RunResult
    before = pj.reset(pj.PRESETS["tiny"]).replace(numeric_flags=np.int32(tables.flag_bits(["NX"])))
    after = before.replace(numeric_flags=np.int32(tables.flag_bits(["OF", "NX"])))
    r = RunResult(after, "Fault_None", None, 0)
    assert r.numeric_flags == ["OF", "NX"]
    rep = build_report(before, r, [], model="jax", config="tiny", pe=0, on_fault="abandon",
                       profile="portable", semantics="adr0100")
    assert rep["numeric_flags"] == ["OF", "NX"] and rep["numeric_flags_raised"] == ["OF"]
    assert "numeric flags (sticky): OF NX (raised by this program: OF)" in format_report(rep)
