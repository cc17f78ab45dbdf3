"""`ptojax demo`: prints the guided tour that ptojax.demo runs, step by step."""

from __future__ import annotations

import collections
import sys
import time

import numpy as np

import ptojax as pj
from ptojax import demo as D
from ptojax import tables
from ptojax.compile_cache import ensure_compile_cache
from ptojax.report import changed_tiles, fault_line, hexdump, listing, source_listing

from .common import CliError

DEMO_DEFAULT_CONFIG = "small"


def cmd_demo(args) -> int:
    if args.batch < 1:
        raise CliError(f"--batch {args.batch}: expected at least 1")
    ensure_compile_cache()
    return demo(args.config, args.batch, seed=args.seed)


def _say(con, text=""):
    con.print(text, markup=False, highlight=False, soft_wrap=True)


def _pc(state) -> int:
    return int(np.asarray(state.pc))


def _yes(ok) -> str:
    return "yes" if ok else "NO"


def demo(config: str = DEMO_DEFAULT_CONFIG, batch: int = 1000, seed: int = 0) -> int:
    """The guided tour; returns 0, or 1 if a model check failed."""
    import jax
    from rich.console import Console

    t_begin = time.perf_counter()
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 100)
    cfg = pj.preset(config)
    dev = jax.devices()[0]
    con.rule("ptojax demo", characters="=")
    _say(con, f"config {config}: {cfg.gm_bytes} B of GM, {cfg.local_slots} Local tile slots of "
              f"{cfg.tile_words} Words; {cfg.state_bytes:,} bytes per State")
    _say(con, f"JAX {jax.__version__} on {jax.local_device_count()} {dev.platform} device(s)")

    # the batch of step 7, compiled in the background while steps 1-5 run
    n = D.batch_size(batch, cfg)
    note = (f"(batch of {batch:,} capped at {n:,}: {cfg.state_bytes:,} bytes per State)"
            if n < batch else None)
    b = D.random_batch(cfg, n, seed)
    background = D.BackgroundRun(b, cfg)

    s0 = _gm(con, cfg)
    load = _tload(con, s0, cfg, config)
    store, ok = _tstore(con, load, cfg, config)
    bad, unchanged = _fault(con, store, cfg, config)
    loads, runs, same = _tmatmul(con, s0, cfg, config)
    ok &= unchanged and same
    ok &= _oracle(con, [("TLOAD", load), ("TSTORE", store), ("faulting TLOAD", bad),
                        ("TLOAD A, B", loads), ("TMATMUL portable", runs["portable"]),
                        ("TMATMUL ieee", runs["ieee"])])
    ok &= _batch(con, b, background, cfg, note)
    con.rule(f"done in {time.perf_counter() - t_begin:.1f} s: "
             f"{'every check passed' if ok else 'A CHECK FAILED'}", characters="=")
    return 0 if ok else 1


def _gm(con, cfg):
    con.rule("1. a 2x3 FP16 matrix in GM at 0x100 (row stride 6 bytes)")
    x = D.matrix_a()
    _say(con, f"values {x.tolist()}  (FP16 bits {[f'{int(b):04x}' for b in x.view(np.uint16).ravel()]})")
    _say(con, hexdump(x.view(np.uint8).tobytes(), 0x100))
    _say(con, "GPRs of PE0: a0 = 0x100 (source), a1 = 6 (row stride), a2 = 0x200 (store target), "
              "a3 = 0x101 (misaligned)")
    return D.gm_state(cfg)


def _tload(con, s0, cfg, config):
    con.rule("2. TLOAD ND2M16 with PadValue Max into a CUBE_M16 tile")
    text = D.TLOAD.format(base="a0")
    _say(con, "\n".join(source_listing(text, _pc(s0))))
    step = D.run_step(s0, text, cfg, config)
    _say(con, f"pj.run -> {fault_line(step.report)}   ({step.seconds:.1f} s: the first call "
              f"compiles, or loads the compiled code from JAX's cache)")
    t = pj.read_tile(step.result.state, tables.HAND_SLOTS * tables.HANDS.index("M"))
    _say(con, t.render())
    pad_word = int(t.words[t.slot(0, 3)])
    _say(con, f"valid region as FP16: {t.to_nd().astype(np.uint16).view(np.float16).tolist()}; "
              f"the pad slots (·) hold {pad_word:#06x} = "
              f"{float(np.array(pad_word, np.uint16).view(np.float16))} (PadValue Max)")
    return step


def _tstore(con, load, cfg, config):
    con.rule("3. TSTORE M162ND of that tile to GM 0x200")
    _say(con, "\n".join(source_listing(D.TSTORE, _pc(load.result.state))))
    step = D.run_step(load.result.state, D.TSTORE, cfg, config)
    _say(con, f"pj.run -> {fault_line(step.report)}")
    raw = D.matrix_a().view(np.uint8).tobytes()
    out = pj.read_memory(step.result.state, 0x200, len(raw))
    _say(con, hexdump(out, 0x200))
    same = out == raw
    _say(con, f"GM 0x200.. equals the source matrix: {_yes(same)}; tiles unchanged: "
              f"{_yes(not changed_tiles(load.result.state, step.result.state))}")
    return step, same


def _fault(con, store, cfg, config):
    con.rule("4. a faulting bundle: the same TLOAD from base a3 = 0x101")
    step = D.run_step(store.result.state, D.TLOAD.format(base="a3"), cfg, config)
    r = step.result
    _say(con, "\n".join(listing(step.words, _pc(step.before), step.report["fault_word"], r.fault)))
    _say(con, f"pj.run -> {fault_line(step.report)}")
    unchanged = D.unchanged_but_fault(step.before, r.state)
    _say(con, f"GM, GPRs, tiles and block state unchanged: {_yes(unchanged)}; only the "
              f"fault register ({r.fault}, {int(np.asarray(r.state.fault_address)):#x}) and the pc "
              f"({_pc(r.state):#x}, the faulting word) moved. A fault is data, "
              f"not an exception.")
    return step, unchanged


def _tmatmul(con, s0, cfg, config):
    con.rule("5. TMATMUL: D = A x B from CUBE tiles, in both numeric profiles")
    bm = D.matrix_b()
    sm = D.matmul_state(s0)
    _say(con, f"A = the 2x3 matrix of step 1 (GM 0x100); B = {bm.tolist()}, 3x2 FP16 at GM 0x140 "
              f"(bits {[f'{int(v):04x}' for v in bm.view(np.uint16).ravel()]}); a4 = 0x140, a5 = 4")
    text = D.TLOAD.format(base="a0") + D.TLOAD_B
    _say(con, "\n".join(source_listing(text, _pc(sm))))
    loads = D.run_step(sm, text, cfg, config)
    _say(con, f"pj.run -> {fault_line(loads.report)}: A is M#1 (CUBE_M16, its pad slots hold the "
              f"FP16 maximum and are never read), B is N#1 (CUBE_N8)")
    _say(con, "\n".join(source_listing(D.TMATMUL, _pc(loads.result.state))))
    runs = D.run_profiles(loads.result.state, D.TMATMUL, cfg, config)
    return loads, runs, _profiles(con, runs)


def _profiles(con, runs) -> bool:
    want = D.expected_d()
    x, bm = D.matrix_a(), D.matrix_b()
    bb = [f"0x{int(v):04x}" for v in bm.view(np.uint16)[:, 0]]
    d00 = int(want["portable"][0, 0])
    explain = {
        "portable": ("the ASL model's arithmetic (spec/matrix.md C.1), the default: the raw "
                     "carrier words are multiplied and summed as integers mod 2^64, e.g. "
                     f"D[0][0] = 0x3c00*{bb[0]} + 0x4000*{bb[1]} + 0x4200*{bb[2]} = {d00:#x}, "
                     "no floating-point value"),
        "ieee": ("MachineConfig(profile=\"ieee\"): decoded FP16 values, each exact product "
                 "rounded once to binary32, binary32 adds over k = 0, 1, 2 from +0.0"),
    }
    check = {"portable": "A.view(uint16) @ B.view(uint16) in uint64",
             "ieee": "the same k loop in float32 (exact products rounded to float32)"}
    ok = True
    for name in ("portable", "ieee"):
        step = runs[name]
        _say(con, f"profile {name}: pj.run -> {fault_line(step.report)}   ({step.seconds:.1f} s)")
        _say(con, f"  {explain[name]}")
        t, got, same = D.d_check(step, want[name])
        _say(con, "\n".join("  " + line for line in t.render(max_rows=4).splitlines()))
        ok &= same
        _say(con, f"  D words (64 bits): {[[f'{int(v):#018x}' for v in row] for row in got.tolist()]}")
        if name == "ieee":
            _say(con, f"  D as FP32: {got.astype(np.uint32).view(np.float32).tolist()}  (float64 "
                      f"A @ B: {(x.astype(np.float64) @ bm.astype(np.float64)).tolist()})")
        _say(con, f"  numpy, {check[name]}: {'the same words' if same else 'DIFFERENT words'}")
    return ok


def _oracle(con, steps) -> bool:
    from rich import box
    from rich.table import Table
    con.rule("6. the same programs on the reference model (pj.reference.run)")
    table = Table("program", "pj.run", "pj.reference.run", "executed", "identical",
                  box=box.SIMPLE_HEAD)
    ok = True
    for name, step in steps:
        ref, same = D.reference_run(step)
        ok &= same
        table.add_row(name, step.result.fault, ref.fault,
                      f"{step.result.executed} / {ref.executed}", _yes(same))
    con.print(table)
    return ok


def _batch(con, b, background, cfg, note) -> bool:
    from rich import box
    from rich.table import Table
    n = len(b.streams)
    con.rule(f"7. {n:,} bundles at once: pj.batch.run")
    if note:
        _say(con, note)
    _say(con, f"{n:,} TLOAD bundles of FP16 with random layout (ND2M16/ND2N8/ND2M32), PadValue and "
              f"valid shape 1..16 x 1..16, from a 16x16 matrix at 0x400; about 5% from the misaligned "
              f"base a2 = 0x401. One State per bundle, {n * cfg.state_bytes / 2**20:,.0f} MiB in all.")
    res, t_compile = background.join()
    again, best = D.best_time(b, cfg)
    ok = np.array_equal(again.fault_code, res.fault_code)
    _say(con, f"first call (compile or cache load + run, started in the background before step 1): "
              f"{t_compile:.1f} s; then best of 3: {best * 1e3:.1f} ms "
              f"= {n / best:,.0f} bundles/s")
    table = Table("fault", "bundles", box=box.SIMPLE_HEAD)
    for name, count in sorted(collections.Counter(res.faults).items(), key=lambda kv: -kv[1]):
        table.add_row(name, f"{count:,}")
    con.print(table)
    s = D.oracle_sample(b, res)
    ok &= s.agree == s.picked
    _say(con, f"{s.picked} of them ({s.faulting} faulting) re-run on pj.reference.run: "
              f"{s.agree} of {s.picked} final States identical; the oracle takes "
              f"{s.seconds * 1e3:.0f} ms per bundle here ({1 / s.seconds:,.0f} bundles/s)")
    return ok
