"""The `ptojax` command line.

    ptojax run PROGRAM [--gm FILE] [--gm-hex ADDR:HEX] [--gpr [PE:]REG=VALUE]
                       [--pe N] [--config asl|small|tiny] [--profile portable|ieee]
                       [--on-fault abandon|hold] [--reference] [--hex] [--json]
    ptojax asm FILE|-  [--json]          assembly text -> hex words
    ptojax disasm FILE|- [--addresses]   hex words -> assembly text
    ptojax demo [--config NAME] [--batch N]
    ptojax bench layouts|bundles [ARGS]  the benchmarks of the repository's benchmarks/
    ptojax fuzz [--ops LIST] [--count N] [--seed S] [--batch B] [--sample F]
                [--config tiny|small|asl] [--profile portable|ieee] [--on-fault abandon|hold]
                [--cas-weight P] [--matmul-weight P] [--core] [--coop-weight P]
                [--json] [--out DIR]
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
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

import ptojax as pj
from ptojax import tables
from ptojax.compile_cache import CACHE_ENV, ensure_compile_cache
from ptojax.state import PROFILES, state_differences

__all__ = ["main"]

PROGRAM_DEFAULT_CONFIG = "asl"
DEMO_DEFAULT_CONFIG = "small"


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


# JAX's persistent compilation cache ($PTOJAX_JAX_CACHE, empty: off; default
# ~/.cache/ptojax/jax-cache): ptojax's entry points turn it on at their first call
# (ptojax/compile_cache.py); the commands also call it up front.
use_compile_cache = ensure_compile_cache


# ----------------------------------------------------------------- input


def _read_text(path: str, what: str = "program") -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise CliError(f"cannot read {what} {path}: not a text file (assembly or hex words)") from None
    except OSError as e:
        raise CliError(f"cannot read {what} {path}: {e.strerror or e}") from None


_HEX_TOKEN = re.compile(r"(?:0[xX])?[0-9a-fA-F]+")
_SEPARATORS = re.compile(r"[\s,\[\]\"']+")


def _hex_lines(text: str):
    """(line number, tokens) of hex-word text; `#`/`;` comments; JSON list punctuation ignored."""
    for n, line in enumerate(text.splitlines(), 1):
        code = re.split(r"[#;]", line, maxsplit=1)[0]
        toks = [t for t in _SEPARATORS.split(code) if t]
        if toks:
            yield n, toks


def looks_hex(text: str) -> bool:
    """True when the text has words and every token parses as a hex number."""
    toks = [t for _, ts in _hex_lines(text) for t in ts]
    return bool(toks) and all(_HEX_TOKEN.fullmatch(t) for t in toks)


def parse_hex_words(text: str) -> list[int]:
    """Hex words (with or without 0x), whitespace/comma separated, any number per line."""
    words = []
    for n, toks in _hex_lines(text):
        for t in toks:
            if not _HEX_TOKEN.fullmatch(t):
                raise CliError(f"line {n}: {t!r} is not a hex word")
            v = int(t, 16)
            if v > 0xFFFFFFFF:
                raise CliError(f"line {n}: {t} does not fit a 32-bit instruction word")
            words.append(v)
    return words


def assemble(text: str) -> list[int]:
    try:
        return pj.asm.assemble(text)
    except pj.asm.AsmError as e:
        raise CliError(f"assembly error: {e}") from None


def load_program(text: str, force_hex: bool = False) -> tuple[list[int], str]:
    """(words, "hex" | "assembly"): hex when asked or when every token is hex."""
    if force_hex or looks_hex(text):
        return parse_hex_words(text), "hex"
    return assemble(text), "assembly"


_SETUP_RE = re.compile(r"^\s*[;#]@(.*)$")
_SETUP_OPTIONS = ("--gm-hex", "--gpr")


def program_setup(text: str) -> tuple[list[str], list[str]]:
    """(gm_hex specs, gpr specs) of the setup lines `;@ --gm-hex A:HEX --gpr R=V ...`."""
    gm_hex, gprs = [], []
    for n, line in enumerate(text.splitlines(), 1):
        m = _SETUP_RE.match(line)
        if not m:
            continue
        toks = m[1].split()
        if not toks or len(toks) % 2:
            raise CliError(f"line {n}: setup line {line.strip()!r}: expected pairs of "
                           f"{' or '.join(_SETUP_OPTIONS)} and a value")
        for opt, value in zip(toks[::2], toks[1::2]):
            if opt not in _SETUP_OPTIONS:
                raise CliError(f"line {n}: setup line option {opt!r}: expected "
                               f"{' or '.join(_SETUP_OPTIONS)}")
            (gm_hex if opt == "--gm-hex" else gprs).append(value)
    return gm_hex, gprs


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip().replace("_", ""), 0)
    except ValueError:
        raise CliError(f"{what} {text!r} is not an integer (decimal or 0x hex)") from None


_GPR_RE = re.compile(r"(?:(\d+):)?([A-Za-z][A-Za-z0-9]*)=(.+)")


def parse_gpr(spec: str, default_pe: int) -> tuple[int, int, int]:
    """`[PE:]REG=VALUE` -> (pe, register index, value)."""
    m = _GPR_RE.fullmatch(spec.strip())
    if not m:
        raise CliError(f"--gpr {spec!r}: expected [PE:]REG=VALUE, e.g. a0=0x100 or 1:a1=8")
    pe = default_pe if m[1] is None else int(m[1])
    if not 0 <= pe < tables.NUM_PES:
        raise CliError(f"--gpr {spec!r}: PE {pe} out of range 0..{tables.NUM_PES - 1}")
    try:
        reg = tables.gpr_index(m[2])
    except ValueError as e:
        raise CliError(f"--gpr {spec!r}: {e}") from None
    value = _int(m[3], f"--gpr {spec!r}: value")
    if not -(1 << 63) <= value < 1 << 64:
        raise CliError(f"--gpr {spec!r}: value does not fit a 64-bit GPR")
    return pe, reg, value


def parse_gm_hex(spec: str) -> tuple[int, bytes]:
    """`ADDR:HEXBYTES` -> (address, bytes)."""
    addr, sep, data = spec.partition(":")
    if not sep:
        raise CliError(f"--gm-hex {spec!r}: expected ADDR:HEXBYTES, e.g. 0x100:003c0040")
    a = _int(addr, f"--gm-hex {spec!r}: address")
    h = re.sub(r"[\s_]", "", data)
    if h[:2].lower() == "0x":
        h = h[2:]
    try:
        return a, bytes.fromhex(h)
    except ValueError:
        raise CliError(f"--gm-hex {spec!r}: {data!r} is not an even number of hex digits") from None


def build_state(cfg: pj.MachineConfig, gm_file=None, gm_hex=(), gprs=(), pe: int = 0):
    s = pj.reset(cfg)
    writes = []
    if gm_file is not None:
        try:
            data = sys.stdin.buffer.read() if gm_file == "-" else Path(gm_file).read_bytes()
        except OSError as e:
            raise CliError(f"cannot read GM image {gm_file}: {e.strerror or e}") from None
        writes.append((f"--gm {gm_file}", 0, data))
    for spec in gm_hex:
        writes.append((f"--gm-hex {spec}", *parse_gm_hex(spec)))
    for what, addr, data in writes:
        if addr + len(data) > cfg.gm_bytes:
            raise CliError(f"{what}: {len(data)} bytes at {addr:#x} do not fit the "
                           f"{cfg.gm_bytes}-byte GM of this config")
        s = pj.write_memory(s, addr, data)
    for spec in gprs:
        p, reg, value = parse_gpr(spec, pe)
        s = pj.write_gpr(s, reg, value, pe=p)
    return s


# ----------------------------------------------------------------- report




def changed_tiles(before, after) -> list[tuple[int, int]]:
    """(PE, TileIndex 0..63) of the Local tiles whose descriptor or payload differ."""
    P, S = after.tiles.allocated.shape
    hand_slots = S // 4
    diff = np.zeros((P, S), bool)
    for name in after.tiles.keys():
        a, b = np.asarray(getattr(before.tiles, name)), np.asarray(getattr(after.tiles, name))
        ne = a != b
        diff |= ne.reshape(P, S, -1).any(axis=2)
    return [(int(pe), int((slot // hand_slots) * tables.HAND_SLOTS + slot % hand_slots))
            for pe, slot in np.argwhere(diff)]


def changed_shared(before, after) -> list[int]:
    """SharedTileIDs whose record differs between two States."""
    a_sid, b_sid = np.asarray(before.shared.sid), np.asarray(after.shared.sid)
    diff = a_sid != b_sid
    for name in after.shared.keys():
        ne = np.asarray(getattr(before.shared, name)) != np.asarray(getattr(after.shared, name))
        diff |= ne.reshape(ne.shape[0], -1).any(axis=1)
    return sorted({int(x) for x in np.concatenate([a_sid[diff], b_sid[diff]]) if x >= 0})


def changed_ranges(before: np.ndarray, after: np.ndarray, gap: int = 16) -> list[tuple[int, int]]:
    """[start, end) ranges covering every changed byte; changes <= `gap` bytes apart merge."""
    idx = np.flatnonzero(before != after)
    ranges = []
    for i in idx.tolist():
        if ranges and i - ranges[-1][1] <= gap:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return [(a, b) for a, b in ranges]


def hexdump(data: bytes, base: int, indent: str = "  ") -> str:
    """16 bytes per row, rows aligned to 16-byte addresses; bytes outside `data` blank."""
    lines = []
    end = base + len(data)
    for row in range(base - base % 16, end, 16):
        cells = []
        for a in range(row, row + 16):
            cells.append(f"{data[a - base]:02x}" if base <= a < end else "  ")
            if a % 16 == 7:
                cells.append("")
        lines.append(f"{indent}{row:#06x}: " + " ".join(cells).rstrip())
    return "\n".join(lines)


def tile_json(t: pj.TileView) -> dict:
    d = {"index": t.index, "name": t.name, "allocated": t.allocated, "layout": t.layout,
         "dtype": t.dtype, "rows": t.rows, "columns": t.columns, "valid_rows": t.valid_rows,
         "valid_columns": t.valid_columns, "capacity_bytes": t.capacity_bytes,
         "location": t.location, "pe_mask": tables.mask_str(t.pe_mask), "k_repeat": t.k_repeat,
         "n_repeat": t.n_repeat, "cell_count": t.cell_count, "storage_bytes": t.storage_bytes,
         "defined_valid_elements": t.defined_valid_elements,
         "words": [f"0x{int(w):016x}" for w in t.words],
         "defined": [bool(x) for x in t.defined]}
    return d


def listing(words, start: int, mark: int | None = None, note: str = "") -> list[str]:
    """Disassembly with addresses; word `mark` gets `<- note`."""
    width = max((len(pj.asm.disassemble([w])) for w in words), default=0)
    out = []
    for i, w in enumerate(words):
        text = pj.asm.disassemble([w])
        line = f"  {start + 4 * i:#06x}  {w:08x}  {text}"
        if i == mark:
            line = f"{line.ljust(width + 20)}  <- {note}"
        out.append(line)
    return out


def source_listing(text: str, start: int) -> list[str]:
    """Source lines (comments kept) with the address and word of each command."""
    out, i = [], 0
    for n, line in enumerate(text.splitlines(), 1):
        w = pj.asm.assemble_line(line, n)
        if w is None:
            if line.strip():
                out.append(f"{'':20}{line.strip()}")
            continue
        out.append(f"  {start + 4 * i:#06x}  {w:08x}  {line.strip()}")
        i += 1
    return out


def build_report(before, result, words, *, model: str, config: str, pe,
                 on_fault: str, profile: str = "portable") -> dict:
    """`pe` is the executing PE, or "core" for a pj.run_core stream."""
    after = result.state
    start = int(np.asarray(before.pc))
    faulted = result.fault != "Fault_None"
    fault_word = result.executed if faulted else None
    tiles = [(p, pj.read_tile(after, i, pe=p)) for p, i in changed_tiles(before, after)]
    shared = [pj.read_shared(after, sid) for sid in changed_shared(before, after)]
    gm0, gm1 = np.asarray(before.gm), np.asarray(after.gm)
    memory = [{"address": a, "length": b - a, "before": gm0[a:b].tobytes().hex(),
               "after": gm1[a:b].tobytes().hex()} for a, b in changed_ranges(gm0, gm1)]
    block = after.block
    return {
        "model": model, "config": config, "profile": profile, "pe": pe, "on_fault": on_fault,
        "program": [{"address": start + 4 * i, "word": f"0x{w:08x}",
                     "text": pj.asm.disassemble([w])} for i, w in enumerate(words)],
        "fault": result.fault,
        "fault_address": result.fault_address,
        "fault_word": fault_word,
        "fault_pc": start + 4 * fault_word if faulted else None,
        "executed": result.executed,
        "pc": int(np.asarray(after.pc)),
        "block_open": bool(np.asarray(block.active)),
        "block_pc": int(np.asarray(block.pc)) if bool(np.asarray(block.active)) else None,
        "tiles": [dict(tile_json(t), pe=p) for p, t in tiles],
        "shared": [dict(tile_json(t), allocation_mask=tables.mask_str(t.allocation_mask),
                        initialized_mask=tables.mask_str(t.initialized_mask),
                        published=t.published) for t in shared],
        "memory": memory,
        "_tile_views": tiles,
        "_shared_views": shared,
        "_gm_after": gm1,
    }


def fault_line(rep: dict) -> str:
    n = len(rep["program"])
    if rep["fault"] == "Fault_None":
        return f"Fault_None: {rep['executed']} of {n} words executed, pc {rep['pc']:#x}"
    i = rep["fault_word"]
    where = f"word {i} at pc {rep['fault_pc']:#x}: {rep['program'][i]['text']}"
    if rep["fault_address"] is not None:
        what = f"{rep['fault']} at data address {rep['fault_address']:#x} ({where})"
    else:
        what = f"{rep['fault']} ({where})"
    return f"{what}; {rep['executed']} of {n} words executed before it"


def format_report(rep: dict) -> str:
    who = "the whole Core (PE0..PE3)" if rep["pe"] == "core" else f"PE {rep['pe']}"
    out = [f"program: {len(rep['program'])} words, {rep['model']} model, config {rep['config']}, "
           f"{rep['profile']} profile, {who}"]
    words = [int(p["word"], 16) for p in rep["program"]]
    start = rep["program"][0]["address"] if words else rep["pc"]
    out += listing(words, start, rep["fault_word"], rep["fault"])
    out.append("")
    out.append(("fault: " if rep["fault"] != "Fault_None" else "result: ") + fault_line(rep))
    if rep["block_open"]:
        why = ("held pending (--on-fault hold)" if rep["fault"] != "Fault_None"
               else "the stream ended inside it")
        out.append(f"block open: BSTART at {rep['block_pc']:#x}, {why}")
    out.append("")
    views = rep["_tile_views"]
    out.append(f"tiles changed: {len(views)}" if views else "tiles changed: none")
    for p, t in views:
        out += ["  " + (f"PE{p} " if i == 0 else "") + line
                for i, line in enumerate(t.render().splitlines())]
    if rep["_shared_views"]:
        out.append(f"shared registers changed: {len(rep['_shared_views'])}")
        for t in rep["_shared_views"]:
            out.append("  " + t.summary())
    out.append("")
    mem = rep["memory"]
    out.append(f"memory changed: {len(mem)} range{'s' if len(mem) != 1 else ''}"
               if mem else "memory changed: none")
    gm = rep["_gm_after"]
    for m in mem:
        a, n = m["address"], m["length"]
        out.append(f"  {a:#06x}..{a + n - 1:#06x} ({n} bytes; the whole 16-byte rows after the run)")
        lo, hi = a - a % 16, min(len(gm), -(-(a + n) // 16) * 16)
        out.append(hexdump(gm[lo:hi].tobytes(), lo, indent="    "))
    return "\n".join(out)


# ----------------------------------------------------------------- commands


def cmd_run(args) -> int:
    text = _read_text(args.program)
    words, _ = load_program(text, args.hex)
    if not 0 <= args.pe < tables.NUM_PES:
        raise CliError(f"--pe {args.pe}: expected 0..{tables.NUM_PES - 1}")
    cfg = pj.preset(args.config).replace(profile=args.profile)
    setup_gm, setup_gpr = program_setup(text)
    before = build_state(cfg, args.gm, setup_gm + (args.gm_hex or []),
                         setup_gpr + (args.gpr or []), args.pe)
    if not args.reference:
        use_compile_cache()
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
                       on_fault=args.on_fault, profile=args.profile)
    if args.json:
        for k in ("_tile_views", "_shared_views", "_gm_after"):
            rep.pop(k)
        print(json.dumps(rep, indent=2))
    else:
        print(format_report(rep))
    return 0


def cmd_asm(args) -> int:
    words = assemble(_read_text(args.file))
    if args.json:
        print(json.dumps([f"0x{w:08x}" for w in words]))
    else:
        for w in words:
            print(f"0x{w:08x}")
    return 0


def cmd_disasm(args) -> int:
    words = parse_hex_words(_read_text(args.file, "hex words"))
    if args.addresses:
        print("\n".join(listing(words, 0)))
    elif words:
        print(pj.asm.disassemble(words))
    return 0


def _bench_path(name: str) -> Path:
    return Path(pj.__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"


def cmd_bench(args) -> int:
    path = _bench_path(args.name)
    if not path.is_file():
        raise CliError(f"benchmark {args.name}: {path} not found; the benchmarks live in the "
                       f"repository's benchmarks/ folder, next to the ptojax package, and are not "
                       f"installed with it: run from a checkout (pip install -e .)")
    spec = importlib.util.spec_from_file_location(f"ptojax_bench_{args.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(list(args.args))
    return 0


def cmd_demo(args) -> int:
    if args.batch < 1:
        raise CliError(f"--batch {args.batch}: expected at least 1")
    use_compile_cache()
    return demo(args.config, args.batch, seed=args.seed)


# ----------------------------------------------------------------- demo

DEMO_TLOAD = """\
BSTART.TLOAD FP16
B.DATR {{ND2M16, DTYPE_NONE, Max}}   ; ND -> CUBE_M16, pad with the FP16 maximum
B.DIM zero, 3, ->LB0                ; valid columns
B.DIM zero, 2, ->LB1                ; valid rows
B.IOR {base}, a1                    ; base address, row stride in bytes
B.IOT mask=1000, last, ->M<1>       ; destination: a Matrix-hand tile of 128 B on PE0
BSTOP
"""

DEMO_TSTORE = """\
BSTART.TSTORE FP16
B.DATR {M162ND, DTYPE_NONE}         ; CUBE_M16 -> ND
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a2, a1                        ; to GM 0x200, same row stride
B.IOT M#1, mask=1000, last          ; source: the tile just loaded
BSTOP
"""

DEMO_TLOAD_B = """\
BSTART.TLOAD FP16
B.DATR {ND2N8, DTYPE_NONE}          ; ND -> CUBE_N8 (B's layout), pad with zeros
B.DIM zero, 2, ->LB0                ; valid columns: N
B.DIM zero, 3, ->LB1                ; valid rows: K
B.IOR a4, a5                        ; base 0x140, row stride 4 bytes
B.IOT mask=1000, last, ->N<1>       ; destination: N#1 (tile 48), 128 B
BSTOP
"""

DEMO_TMATMUL = """\
BSTART.TMATMUL FP16                 ; D = A x B, AType FP16 (no B.DATR: BType = AType)
B.FPATR 0                           ; required; all zero: no conversion, activation, maxima
B.DIM zero, 2, ->LB0                ; M
B.DIM zero, 2, ->LB1                ; N
B.DIM zero, 3, ->LB2                ; K
B.IOT M#1, N#1, mask=1000, last, ->T<1>   ; sources A, B; D: T#1 (tile 0), 128 B
BSTOP
"""

DEMO_B = [[0.5, -1.0], [0.25, 2.0], [1.5, 0.125]]      # the demo's FP16 B (3x2)

_DEMO_MAX_BATCH_BYTES = 2 << 30


def ieee_matmul_fp16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """binary32 bits of the ieee profile's D = A x B for FP16 A, B, in numpy:
    each exact product (exact in float64) rounded once to float32, float32
    sums over ascending k from +0.0 (numpy keeps subnormals)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.zeros((a.shape[0], b.shape[1]), np.uint32)
    with np.errstate(all="ignore"):
        for i in range(a.shape[0]):
            for j in range(b.shape[1]):
                acc = np.float32(0.0)
                for k in range(a.shape[1]):
                    acc = np.float32(acc + np.float32(a64[i, k] * b64[k, j]))
                out[i, j] = np.array(acc, np.float32).view(np.uint32)
    return out


def portable_matmul_fp16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The portable profile's D words for FP16 A, B: the raw 16-bit patterns
    multiplied and summed as integers mod 2^64 (numpy uint64 arithmetic wraps)."""
    return a.view(np.uint16).astype(np.uint64) @ b.view(np.uint16).astype(np.uint64)


def _demo_bundle(layout: str, pad: str, rows: int, cols: int, base: str) -> str:
    return (f"BSTART.TLOAD FP16\nB.DATR {{{layout}, DTYPE_NONE, {pad}}}\n"
            f"B.DIM zero, {cols}, ->LB0\nB.DIM zero, {rows}, ->LB1\nB.IOR {base}, a1\n"
            f"B.IOT mask=1000, last, ->M<4>\nBSTOP")


def demo(config: str = DEMO_DEFAULT_CONFIG, batch: int = 1000, seed: int = 0) -> int:
    """The guided tour behind `ptojax demo`; returns 0, or 1 if a model check failed."""
    import collections
    import threading

    import jax
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t_begin = time.perf_counter()
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 100)

    def say(text=""):
        con.print(text, markup=False, highlight=False, soft_wrap=True)

    ok_all = True
    cfg = pj.preset(config)
    dev = jax.devices()[0]
    con.rule("ptojax demo", characters="=")
    say(f"config {config}: {cfg.gm_bytes} B of GM, {cfg.local_slots} Local tile slots of "
        f"{cfg.tile_words} Words; {cfg.state_bytes:,} bytes per State")
    say(f"JAX {jax.__version__} on {jax.local_device_count()} {dev.platform} device(s)")

    # the batch of step 7, compiled in the background while steps 1-5 run
    n, note = batch, None
    limit = max(1, _DEMO_MAX_BATCH_BYTES // cfg.state_bytes)
    if n > limit:
        note = f"(batch of {batch:,} capped at {limit:,}: {cfg.state_bytes:,} bytes per State)"
        n = limit
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((16, 16)).astype(np.float16)
    sb = pj.write_memory(pj.reset(cfg), 0x400, m.view(np.uint8).reshape(-1))
    for reg, v in (("a0", 0x400), ("a1", 32), ("a2", 0x401)):
        sb = pj.write_gpr(sb, reg, v)
    cache = {}
    streams = []
    for _ in range(n):
        key = (str(rng.choice(["ND2M16", "ND2N8", "ND2M32"])), str(rng.choice(tables.PADVALUES)),
               int(rng.integers(1, 17)), int(rng.integers(1, 17)),
               "a2" if rng.random() < 0.05 else "a0")
        if key not in cache:
            cache[key] = pj.asm.assemble(_demo_bundle(*key))
        streams.append(cache[key])
    batch_words = np.array(streams, np.uint32)
    warm = {}

    def warm_up():
        try:
            t0 = time.perf_counter()
            warm["res"] = jax.block_until_ready(pj.batch.run(sb, batch_words, cfg=cfg))
            warm["s"] = time.perf_counter() - t0
        except BaseException as e:   # re-raised in the main thread
            warm["error"] = e

    worker = threading.Thread(target=warm_up, name="ptojax-demo-compile", daemon=True)
    worker.start()

    # 1. GM
    con.rule("1. a 2x3 FP16 matrix in GM at 0x100 (row stride 6 bytes)")
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
    raw = x.view(np.uint8).reshape(-1)
    s0 = pj.write_memory(pj.reset(cfg), 0x100, raw)
    for reg, v in (("a0", 0x100), ("a1", 6), ("a2", 0x200), ("a3", 0x101)):
        s0 = pj.write_gpr(s0, reg, v)
    say(f"values {x.tolist()}  (FP16 bits {[f'{int(b):04x}' for b in x.view(np.uint16).ravel()]})")
    say(hexdump(raw.tobytes(), 0x100))
    say("GPRs of PE0: a0 = 0x100 (source), a1 = 6 (row stride), a2 = 0x200 (store target), "
        "a3 = 0x101 (misaligned)")

    # 2. TLOAD
    con.rule("2. TLOAD ND2M16 with PadValue Max into a CUBE_M16 tile")
    load_text = DEMO_TLOAD.format(base="a0")
    load = pj.asm.assemble(load_text)
    say("\n".join(source_listing(load_text, int(np.asarray(s0.pc)))))
    t0 = time.perf_counter()
    r1 = pj.run(s0, load)
    t_first = time.perf_counter() - t0
    rep = build_report(s0, r1, load, model="jax", config=config, pe=0, on_fault="abandon")
    say(f"pj.run -> {fault_line(rep)}   ({t_first:.1f} s: the first call compiles, or loads "
        f"the compiled code from JAX's cache)")
    t = pj.read_tile(r1.state, tables.HAND_SLOTS * tables.HANDS.index("M"))
    say(t.render())
    pad_word = int(t.words[t.slot(0, 3)])
    say(f"valid region as FP16: {t.to_nd().astype(np.uint16).view(np.float16).tolist()}; "
        f"the pad slots (·) hold {pad_word:#06x} = "
        f"{float(np.array(pad_word, np.uint16).view(np.float16))} (PadValue Max)")

    # 3. TSTORE
    con.rule("3. TSTORE M162ND of that tile to GM 0x200")
    store = pj.asm.assemble(DEMO_TSTORE)
    say("\n".join(source_listing(DEMO_TSTORE, int(np.asarray(r1.state.pc)))))
    r2 = pj.run(r1.state, store)
    rep = build_report(r1.state, r2, store, model="jax", config=config, pe=0, on_fault="abandon")
    say(f"pj.run -> {fault_line(rep)}")
    out = pj.read_memory(r2.state, 0x200, raw.size)
    say(hexdump(out, 0x200))
    same = out == raw.tobytes()
    ok_all &= same
    say(f"GM 0x200.. equals the source matrix: {'yes' if same else 'NO'}; tiles unchanged: "
        f"{'yes' if not changed_tiles(r1.state, r2.state) else 'NO'}")

    # 4. a fault
    con.rule("4. a faulting bundle: the same TLOAD from base a3 = 0x101")
    bad = pj.asm.assemble(DEMO_TLOAD.format(base="a3"))
    r3 = pj.run(r2.state, bad)
    rep = build_report(r2.state, r3, bad, model="jax", config=config, pe=0, on_fault="abandon")
    say("\n".join(listing(bad, int(np.asarray(r2.state.pc)), rep["fault_word"], r3.fault)))
    say(f"pj.run -> {fault_line(rep)}")
    unchanged = not state_differences(r2.state, r3.state, skip=("fault", "fault_address", "pc"))
    ok_all &= unchanged
    say(f"GM, GPRs, tiles and block state unchanged: {'yes' if unchanged else 'NO'}; only the "
        f"fault register ({r3.fault}, {int(np.asarray(r3.state.fault_address)):#x}) and the pc "
        f"({int(np.asarray(r3.state.pc)):#x}, the faulting word) moved. A fault is data, "
        f"not an exception.")

    # 5. TMATMUL
    con.rule("5. TMATMUL: D = A x B from CUBE tiles, in both numeric profiles")
    bm = np.array(DEMO_B, np.float16)
    sm = pj.write_memory(s0, 0x140, bm.view(np.uint8).reshape(-1))
    sm = pj.write_gpr(pj.write_gpr(sm, "a4", 0x140), "a5", 4)
    say(f"A = the 2x3 matrix of step 1 (GM 0x100); B = {bm.tolist()}, 3x2 FP16 at GM 0x140 "
        f"(bits {[f'{int(v):04x}' for v in bm.view(np.uint16).ravel()]}); a4 = 0x140, a5 = 4")
    loads_text = DEMO_TLOAD.format(base="a0") + DEMO_TLOAD_B
    loads = pj.asm.assemble(loads_text)
    say("\n".join(source_listing(loads_text, int(np.asarray(sm.pc)))))
    rl = pj.run(sm, loads)
    rep = build_report(sm, rl, loads, model="jax", config=config, pe=0, on_fault="abandon")
    say(f"pj.run -> {fault_line(rep)}: A is M#1 (CUBE_M16, its pad slots hold the FP16 "
        f"maximum and are never read), B is N#1 (CUBE_N8)")
    mm = pj.asm.assemble(DEMO_TMATMUL)
    say("\n".join(source_listing(DEMO_TMATMUL, int(np.asarray(rl.state.pc)))))
    profiles = {"portable": cfg, "ieee": cfg.replace(profile="ieee")}
    runs, took = {}, {}

    def run_profile(name):
        t0 = time.perf_counter()
        runs[name] = pj.run(rl.state, mm, cfg=profiles[name])
        took[name] = time.perf_counter() - t0

    other = threading.Thread(target=run_profile, args=("ieee",), name="ptojax-demo-ieee",
                             daemon=True)
    other.start()                    # the two profiles compile in parallel
    run_profile("portable")
    other.join()
    if "ieee" not in runs:
        raise RuntimeError("the ieee-profile run failed")
    d_index = tables.HAND_SLOTS * tables.HANDS.index("T")
    want = {"portable": portable_matmul_fp16(x, bm),
            "ieee": ieee_matmul_fp16(x, bm).astype(np.uint64)}
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
    for name in ("portable", "ieee"):
        r = runs[name]
        rep = build_report(rl.state, r, mm, model="jax", config=config, pe=0,
                           on_fault="abandon", profile=name)
        say(f"profile {name}: pj.run -> {fault_line(rep)}   ({took[name]:.1f} s)")
        say(f"  {explain[name]}")
        t = pj.read_tile(r.state, d_index)
        say("\n".join("  " + line for line in t.render(max_rows=4).splitlines()))
        got = np.array([[int(t.words[t.slot(i, j)]) for j in range(t.valid_columns)]
                        for i in range(t.valid_rows)], np.uint64)
        same = r.ok and got.shape == want[name].shape and np.array_equal(got, want[name])
        ok_all &= same
        say(f"  D words (64 bits): {[[f'{int(v):#018x}' for v in row] for row in got.tolist()]}")
        if name == "ieee":
            say(f"  D as FP32: {got.astype(np.uint32).view(np.float32).tolist()}  (float64 "
                f"A @ B: {(x.astype(np.float64) @ bm.astype(np.float64)).tolist()})")
        say(f"  numpy, {check[name]}: {'the same words' if same else 'DIFFERENT words'}")

    # 6. the oracle
    con.rule("6. the same programs on the reference model (pj.reference.run)")
    table = Table("program", "pj.run", "pj.reference.run", "executed", "identical",
                  box=box.SIMPLE_HEAD)
    for name, st, words, r, c in (
            ("TLOAD", s0, load, r1, cfg), ("TSTORE", r1.state, store, r2, cfg),
            ("faulting TLOAD", r2.state, bad, r3, cfg), ("TLOAD A, B", sm, loads, rl, cfg),
            ("TMATMUL portable", rl.state, mm, runs["portable"], cfg),
            ("TMATMUL ieee", rl.state, mm, runs["ieee"], profiles["ieee"])):
        ref = pj.reference.run(st, words, cfg=c)
        same = (ref.fault == r.fault and ref.executed == r.executed
                and not state_differences(ref.state, r.state))
        ok_all &= same
        table.add_row(name, r.fault, ref.fault, f"{r.executed} / {ref.executed}",
                      "yes" if same else "NO")
    con.print(table)

    con.rule(f"7. {n:,} bundles at once: pj.batch.run")
    if note:
        say(note)
    say(f"{n:,} TLOAD bundles of FP16 with random layout (ND2M16/ND2N8/ND2M32), PadValue and "
        f"valid shape 1..16 x 1..16, from a 16x16 matrix at 0x400; about 5% from the misaligned "
        f"base a2 = 0x401. One State per bundle, {n * cfg.state_bytes / 2**20:,.0f} MiB in all.")
    worker.join()
    if "error" in warm:
        raise warm["error"]
    res, t_compile = warm["res"], warm["s"]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        again = pj.batch.run(sb, batch_words, cfg=cfg)
        jax.block_until_ready(again.state)
        best = min(best, time.perf_counter() - t0)
    same = np.array_equal(again.fault_code, res.fault_code)
    ok_all &= same
    say(f"first call (compile or cache load + run, started in the background before step 1): "
        f"{t_compile:.1f} s; then best of 3: {best * 1e3:.1f} ms "
        f"= {n / best:,.0f} bundles/s")
    tally = collections.Counter(res.faults)
    table = Table("fault", "bundles", box=box.SIMPLE_HEAD)
    for name, count in sorted(tally.items(), key=lambda kv: -kv[1]):
        table.add_row(name, f"{count:,}")
    con.print(table)
    faulted = [i for i in range(n) if res.fault_code[i] != 0]
    clean = [i for i in range(n) if res.fault_code[i] == 0]
    pick = list(rng.permutation(faulted)[:3]) + list(rng.permutation(clean)[:5])
    agree, t_ref = 0, 0.0
    for i in pick:
        t0 = time.perf_counter()
        ref = pj.reference.run(sb, streams[i])
        t_ref += (time.perf_counter() - t0) / len(pick)
        one = res[int(i)]
        agree += ref.fault == one.fault and not state_differences(ref.state, one.state)
    ok_all &= agree == len(pick)
    say(f"{len(pick)} of them ({min(3, len(faulted))} faulting) re-run on pj.reference.run: "
        f"{agree} of {len(pick)} final States identical; the oracle takes "
        f"{t_ref * 1e3:.0f} ms per bundle here ({1 / t_ref:,.0f} bundles/s)")

    con.rule(f"done in {time.perf_counter() - t_begin:.1f} s: "
             f"{'every check passed' if ok_all else 'A CHECK FAILED'}", characters="=")
    return 0 if ok_all else 1


# ----------------------------------------------------------------- fuzz and replay

FUZZ_DEFAULT_CONFIG = "tiny"
FUZZ_DEFAULT_OUT = "ptojax-fuzz"


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or int(m[2]) < 1 or int(m[1]) >= int(m[2]):
        raise CliError(f"--shard {text!r}: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")
    return int(m[1]), int(m[2])


def _console(stderr: bool = False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False, width=None if sys.stdout.isatty() else 110)


def _distributed(args) -> tuple[int, int]:
    """jax.distributed.initialize(...) and this process's (index, count)."""
    import jax
    kw = {}
    if args.coordinator:
        kw["coordinator_address"] = args.coordinator
    if args.num_processes is not None:
        kw["num_processes"] = args.num_processes
    if args.process_id is not None:
        kw["process_id"] = args.process_id
    try:
        jax.distributed.initialize(**kw)
    except (RuntimeError, ValueError) as e:
        raise CliError(f"--distributed: jax.distributed.initialize failed: {e}") from None
    return jax.process_index(), jax.process_count()


def _fuzz_progress(enabled: bool):
    """(callback, stop) drawing a rich progress bar on stderr."""
    if not enabled:
        return None, lambda: None
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    con = _console(stderr=True)
    if not con.is_terminal:                 # a log file: one plain line every 30 s
        last = {"t": 0.0}

        def plain(done, total, res):
            now = time.perf_counter()
            if now - last["t"] < 30 and done < total:
                return
            last["t"] = now
            rate = res.cases_per_s
            eta = (total - done) / rate if rate > 0 else float("nan")
            con.print(f"fuzz: {done:,}/{total:,} cases, {rate:,.0f} cases/s, "
                      f"{res.mismatches + res.against_mismatches:,} mismatches, "
                      f"{res.seconds:,.0f} s, eta {eta:,.0f} s", markup=False, highlight=False,
                      soft_wrap=True)
        return plain, lambda: None
    prog = Progress(TextColumn("fuzz"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]} cases/s"),
                    TextColumn("{task.fields[bad]} mismatches"),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                    console=con, transient=False)
    state = {}

    def update(done, total, res):
        if "task" not in state:
            prog.start()
            state["task"] = prog.add_task("fuzz", total=total, rate="-", bad=0)
        first = min(res.cases, res.cfg.rows - 1)
        steady = res.seconds - res.first_call_seconds
        rate = (res.cases - first) / steady if steady > 0 and res.cases > first else res.cases_per_s
        prog.update(state["task"], completed=done, rate=f"{rate:,.0f}",
                    bad=res.mismatches + res.against_mismatches)

    def stop():
        if "task" in state:
            prog.stop()
    return update, stop


class _CoreReference:
    """The shrinker's other side for Core cases: pj.reference.run_core."""

    def __init__(self, on_fault, cfg):
        self.on_fault, self.cfg = on_fault, cfg

    def run(self, case, state):
        from ptojax.fuzz.campaign import reference_outcome
        return reference_outcome(state, case.words, case.pe, self.on_fault, self.cfg, case.core)


def _write_mismatches(res, cc, args, say) -> list:
    """Shrink the first case of each mismatch signature and write the files."""
    from ptojax.fuzz import casefile, shrink
    from ptojax.fuzz.campaign import JaxRunner, differences, initial_state, reference_outcome
    mcfg = cc.machine
    out = Path(args.out or FUZZ_DEFAULT_OUT)
    by_sig = {}
    for m in res.kept:
        by_sig.setdefault(m.signature, m)
    runner = JaxRunner(mcfg, cc.rows, cc.pe, cc.on_fault, core=cc.core)
    ext = None
    files = []
    try:
        for n, (sig, m) in enumerate(by_sig.items()):
            if n >= args.max_files:
                break
            other = None
            if m.against:
                from ptojax.fuzz.casefile import External
                ext = ext or External(args.against, mcfg, cc.on_fault)
                other = ext
            case, stats = m.case, None
            if not args.no_shrink and n < args.shrink_limit:
                say(f"shrinking mismatch {n + 1} (case {m.k}, {len(m.case.words)} words, "
                    f"{', '.join(sig[:4])}) ...")
                fails = shrink.reference_predicate(runner, cc.on_fault, mcfg,
                                                   other or (_CoreReference(cc.on_fault, mcfg)
                                                             if cc.core else None))
                case, stats = shrink.shrink(m.case, fails, seconds=args.shrink_seconds)
                say(f"  -> {len(case.words)} words after {stats['kept']} kept of {stats['tried']} "
                    f"tried changes ({stats['seconds']:.1f} s)")
            got = runner.run([case])[0]
            st = initial_state(case, mcfg)
            want = other.run(case, st) if other else reference_outcome(st, case.words, case.pe,
                                                                      cc.on_fault, mcfg, case.core)
            names = ("jax", "external" if other else "reference")
            diffs = differences(got, want, names)
            if not diffs:        # flaky? keep the original then
                case, stats = m.case, stats and dict(stats, note="shrunk case no longer differs; "
                                                      "the original is written")
                got = runner.run([case])[0]
                st = initial_state(case, mcfg)
                want = other.run(case, st) if other else reference_outcome(
                    st, case.words, case.pe, cc.on_fault, mcfg, case.core)
                diffs = differences(got, want, names)
            d = casefile.repro_json(case, cfg=mcfg, config_name=cc.config, on_fault=cc.on_fault,
                                    rows=cc.rows, campaign={"seed": cc.seed, "k": m.k, "index": m.index},
                                    a=got, b=want, names=names, diffs=diffs, shrink=stats,
                                    original=m.case if stats else None,
                                    against=args.against if other else None)
            files.append(str(casefile.write_json(out / f"mismatch-{cc.seed}-{m.k}.json", d)))
    finally:
        if ext is not None:
            ext.close()
    return files


def _counts_text(counts: dict, limit: int = 0) -> str:
    items = list(counts.items())
    return "  ".join(f"{k} {v:,}" for k, v in items) or "-"


def print_fuzz_report(rep: dict, con=None):
    from rich import box
    from rich.table import Table
    con = con or _console()
    t = Table(title="ptojax fuzz", box=box.SIMPLE_HEAD, show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    sample = rep["sample"]
    t.add_row("cases run", f"{rep['cases']:,} (pj.batch.run, config {rep['config']}, "
                           f"{rep['cases_per_call']} cases per call, on_fault {rep['on_fault']}, "
                           + ("the Core (core=True, coop_weight "
                              f"{rep.get('coop_weight', 0):g}), " if rep.get("core")
                              else f"PE {rep['pe']}, ") + f"{rep['devices']} device(s))")
    ref = "pj.reference.run_core" if rep.get("core") else "pj.reference.run"
    t.add_row("compared", f"{rep['compared']:,} with {ref} "
                          f"({'all' if sample >= 1 else f'seeded sample, fraction {sample:g}'})")
    t.add_row("mismatches", f"{rep['mismatches']:,}")
    if "against" in rep:
        t.add_row("external", f"{rep['against']['compared']:,} compared with {rep['against']['command']!r}, "
                              f"{rep['against']['mismatches']:,} mismatches")
    t.add_row("time", f"{rep['seconds']:.1f} s ({rep['first_call_seconds']:.1f} s first call incl. "
                      f"compile or cache load)")
    steady = rep.get("steady_cases_per_s")
    t.add_row("cases/s", f"{rep['cases_per_s']:,.0f} overall"
              + (f", {steady:,.0f} after the first call" if steady else ""))
    t.add_row("seed / ops / kinds", f"{rep['seed']} / {rep['ops'] if isinstance(rep['ops'], str) else ','.join(rep['ops'])}"
                                    f" / {rep['kinds'] if isinstance(rep['kinds'], str) else ','.join(rep['kinds'])}")
    if rep["shard"] != [0, 1]:
        t.add_row("shard", f"{rep['shard'][0]} of {rep['shard'][1]}")
    con.print(t)
    c = Table(title="coverage (cases)", box=box.SIMPLE_HEAD, show_lines=False)
    c.add_column("axis", style="bold", no_wrap=True)
    c.add_column("counts")
    c.add_column("never hit", style="yellow")
    for axis in ("operations", "dtypes", "layouts", "faults", "kinds", "mutations"):
        c.add_row(axis, _counts_text(rep["coverage"][axis]),
                  ", ".join(rep["never_hit"][axis]) or "-")
    con.print(c)
    for f in rep.get("mismatch_files", []):
        con.print(f"mismatch written: {f}  (ptojax replay {f})", markup=False, soft_wrap=True)
    if rep.get("export"):
        e = rep["export"]
        con.print(f"exported {e['cases']:,} cases to {e['dir']}", markup=False, soft_wrap=True)


def cmd_fuzz(args) -> int:
    from ptojax.fuzz import campaign as C
    from ptojax.fuzz import casefile
    if args.count < 1:
        raise CliError(f"--count {args.count}: expected at least 1")
    if args.batch < 2:
        raise CliError(f"--batch {args.batch}: expected at least 2 (cases + the filler row)")
    if not 0.0 <= args.sample <= 1.0:
        raise CliError(f"--sample {args.sample}: expected a fraction in 0..1")
    if not 0 <= args.pe < tables.NUM_PES:
        raise CliError(f"--pe {args.pe}: expected 0..{tables.NUM_PES - 1}")
    if args.cas_weight is not None and not 0.0 <= args.cas_weight <= 1.0:
        raise CliError(f"--cas-weight {args.cas_weight}: expected a probability in 0..1")
    if args.matmul_weight is not None and not 0.0 <= args.matmul_weight <= 1.0:
        raise CliError(f"--matmul-weight {args.matmul_weight}: expected a probability in 0..1")
    if args.cas_weight is not None and args.matmul_weight is not None \
            and args.cas_weight + args.matmul_weight > 1.0:
        raise CliError(f"--cas-weight {args.cas_weight} + --matmul-weight {args.matmul_weight}: "
                       "the two probabilities sum past 1")
    if args.coop_weight is not None and not 0.0 <= args.coop_weight <= 1.0:
        raise CliError(f"--coop-weight {args.coop_weight}: expected a probability in 0..1")
    if args.coop_weight and not args.core:
        raise CliError("--coop-weight: cooperative kinds run on the Core; add --core")
    if args.core and args.pe != 0:
        raise CliError("--core runs every PE; leave --pe at 0")
    if args.core and args.against:
        raise CliError("--core: the --against protocol carries one PE's view only")
    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs {args.jobs}: expected at least 1")
    try:
        ops = C.parse_ops(args.ops)
    except ValueError as e:
        raise CliError(f"--ops: {e}") from None
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip()) if args.kinds else None
    shard = _shard(args.shard) if args.shard else (0, 1)
    if args.distributed:
        if args.shard:
            raise CliError("--shard and --distributed exclude each other")
        shard = _distributed(args)
    use_compile_cache()
    jobs = args.jobs if args.jobs is not None else max(1, min(os.cpu_count() or 1, 32))
    cc = C.CampaignConfig(seed=args.seed, count=args.count, config=args.config, rows=args.batch,
                          sample=args.sample, on_fault=args.on_fault, pe=args.pe, ops=ops,
                          kinds=kinds, jobs=jobs, shard=shard, cas_weight=args.cas_weight,
                          matmul_weight=args.matmul_weight, profile=args.profile, core=args.core,
                          coop_weight=args.coop_weight)
    if cc.cas + cc.matmul + cc.coop > 1.0 + 1e-12:
        raise CliError(f"the MGATHER.CAS ({cc.cas:g}), matrix ({cc.matmul:g}) and cooperative "
                       f"({cc.coop:g}) shares sum past 1")
    mcfg = cc.machine
    err = _console(stderr=True)

    def say(text):
        if not args.quiet:
            err.print(text, markup=False, highlight=False)

    exported = []

    def export_case(k, index, case, state, expected):
        if args.export_limit is not None and len(exported) >= args.export_limit:
            return False
        d = casefile.export_json(k, index, cc.seed, case, mcfg, cc.on_fault, state, expected)
        name = f"case-{cc.seed}-{k:07d}.json"
        exported.append(str(casefile.write_json(Path(args.export) / name, d)))
        return None
    export = export_case if args.export else None
    ext = None
    if args.against:
        try:
            ext = casefile.External(args.against, mcfg, cc.on_fault)
        except casefile.ExternalError as e:
            raise CliError(str(e)) from None
    update, stop = _fuzz_progress(not args.no_progress and not args.quiet)
    try:
        res = C.run_campaign(cc, progress=update, export=export, against=ext)
    except casefile.ExternalError as e:
        raise CliError(f"--against: {e}") from None
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        stop()
        if ext is not None:
            ext.close()
    files = _write_mismatches(res, cc, args, say) if res.kept else []
    extra = {"mismatch_files": files,
             "mismatch_signatures": len({m.signature for m in res.kept})}
    if args.against:
        extra["against"] = {"command": args.against, "compared": res.against_compared,
                            "mismatches": res.against_mismatches}
    if args.export:
        extra["export"] = {"dir": str(Path(args.export)), "cases": len(exported),
                           "format": casefile.EXPORT_FORMAT}
        casefile.write_json(Path(args.export) / "index.json", {
            "format": "ptojax.fuzz-export-index.v1", "seed": cc.seed, "config": cc.config,
            "machine": casefile.machine_json(mcfg), "on_fault": cc.on_fault, "pe": cc.pe,
            "protocol": casefile.PROTOCOL, "cases": [Path(f).name for f in exported]})
    rep = C.report_json(res, extra)
    if args.out:
        casefile.write_json(Path(args.out) / "report.json", rep)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print_fuzz_report(rep)
    if res.mismatches or res.against_mismatches:
        return 1
    if res.interrupted:
        say("interrupted: the report covers the cases finished before Ctrl-C")
        return 130
    return 0


def _outcome_line(o) -> str:
    if o.error is not None:
        return f"raised {o.error}"
    fa = f" at {o.fault_address:#x}" if o.fault in tables.MEMORY_FAULTS else ""
    return f"{o.fault}{fa}, executed {o.executed}, pc {o.pc:#x}"


def cmd_replay(args) -> int:
    from ptojax.fuzz import casefile
    from ptojax.fuzz.campaign import JaxRunner, differences, format_difference, reference_outcome
    try:
        rp = casefile.load_repro(args.file)
    except ValueError as e:
        raise CliError(str(e)) from None
    if len(rp.words) > 16:
        raise CliError(f"{args.file}: {len(rp.words)} words; replay runs streams of at most 16")
    use_compile_cache()
    rows = args.batch or rp.rows
    got = JaxRunner(rp.cfg, rows, rp.pe, rp.on_fault, core=rp.core).run([(rp.state, rp.words)])[0]
    command = args.against or (rp.data.get("against") if not args.reference else None)
    if command:
        try:
            with casefile.External(command, rp.cfg, rp.on_fault) as ext:
                want = ext.run_state(rp.state, rp.words, rp.pe)
        except casefile.ExternalError as e:
            raise CliError(f"--against: {e}") from None
        names = ("jax", "external")
    else:
        want = reference_outcome(rp.state, rp.words, rp.pe, rp.on_fault, rp.cfg, rp.core)
        names = ("jax", "reference")
    diffs = differences(got, want, names)
    saved = rp.data.get("differences")
    if args.json:
        print(json.dumps({"file": args.file, "models": list(names), "differ": bool(diffs),
                          "differences": diffs,
                          "results": {names[0]: {"fault": got.fault, "executed": got.executed,
                                                 "pc": hex(got.pc)},
                                      names[1]: {"fault": want.fault, "executed": want.executed,
                                                 "pc": hex(want.pc)}},
                          "saved_differences": saved}, indent=1))
        return 1 if diffs else 0
    out = [f"replay {args.file}: {len(rp.words)} words, {'the Core' if rp.core else f'PE {rp.pe}'}, "
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
    print("\n".join(out))
    return 1 if diffs else 0


# ----------------------------------------------------------------- warmup

WARMUP_OPS = "ops"          # --config ops: pj.ops.matmul's private configs
WARMUP_DEFAULT_CONFIGS = ("tiny", "small", WARMUP_OPS)
_SOURCE_TEXT = {"compiled": "compiled", "cache": "loaded from cache", "memory": "already in memory"}


def _warmup_progress(enabled: bool):
    """(callback, stop): a rich bar on stderr; a plain line per program when it is a log."""
    if not enabled:
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    con = _console(stderr=True)
    if not con.is_terminal:
        def plain(done, total, label, res):
            if res is not None:
                con.print(f"warmup: {done}/{total} {label}: {res.seconds:.1f} s, "
                          f"{_SOURCE_TEXT[res.source]}", markup=False, highlight=False,
                          soft_wrap=True)
        return plain, lambda: None
    prog = Progress(TextColumn("warmup"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.description}"), TimeElapsedColumn(),
                    console=con, transient=True)
    state = {}

    def update(done, total, label, res):
        if "task" not in state:
            prog.start()
            state["task"] = prog.add_task(label, total=total)
        prog.update(state["task"], completed=done, description=label if res is None else "")

    def stop():
        if "task" in state:
            prog.stop()
    return update, stop


def cmd_warmup(args) -> int:
    from ptojax import warmup as cc
    configs = list(dict.fromkeys(args.config or WARMUP_DEFAULT_CONFIGS))
    profiles = list(dict.fromkeys(args.profile or PROFILES))
    presets = [c for c in configs if c != WARMUP_OPS]
    path = ensure_compile_cache()
    before = _cache_entries(path)
    err = _console(stderr=True)
    if not args.json:
        err.print(f"warmup: persistent cache {path}" if path else
                  f"warmup: the persistent cache is off (${CACHE_ENV} is empty or JAX's "
                  f"compilation cache is disabled): programs compile but are not kept",
                  markup=False, highlight=False, soft_wrap=True)
    update, stop = _warmup_progress(not args.no_progress and not args.json)
    t0 = time.perf_counter()
    try:
        results = cc.warmup(presets, profiles, matmul=WARMUP_OPS in configs, progress=update)
    finally:
        stop()
    seconds = time.perf_counter() - t0
    added = _cache_entries(path) - before if path else 0
    if args.json:
        print(json.dumps({"cache_dir": path, "seconds": round(seconds, 3), "new_entries": added,
                          "programs": [dict(dataclasses.asdict(r), source=r.source,
                                            seconds=round(r.seconds, 3),
                                            compile_seconds=round(r.compile_seconds, 3))
                                       for r in results]}, indent=2))
        return 0
    from rich import box
    from rich.table import Table
    t = Table(title="ptojax warmup", box=box.SIMPLE_HEAD)
    for col, kw in (("program", {}), ("config", {}), ("profile", {}),
                    ("seconds", {"justify": "right"}), ("result", {}), ("fault", {})):
        t.add_column(col, no_wrap=True, **kw)
    for r in results:
        t.add_row(r.name, r.config, r.profile, f"{r.seconds:.2f}", _SOURCE_TEXT[r.source],
                  r.fault if r.fault != "Fault_None" else "-")
    con = _console()
    con.print(t)
    n = {k: sum(r.source == k for r in results) for k in _SOURCE_TEXT}
    con.print(f"{len(results)} programs in {seconds:.1f} s: {n['compiled']} compiled, "
              f"{n['cache']} loaded from the cache, {n['memory']} already in memory"
              + (f"; {added} new cache entries in {path}" if path else "; cache off"),
              markup=False, highlight=False, soft_wrap=True)
    return 0


def _cache_entries(path) -> int:
    try:
        return sum(1 for _ in os.scandir(path)) if path else 0
    except OSError:
        return 0


# ----------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    configs = ", ".join(f"{n} ({c.state_bytes:,} B/state)" for n, c in pj.PRESETS.items())
    ap = argparse.ArgumentParser(
        prog="ptojax",
        description="ptojax: an executable, batched, bit-exact model of the PTO tile ISA's "
                    "CUBE slice on JAX.",
        epilog="Exit status: 0 when the command ran (an architectural fault is a result, "
               "not an error), 2 for bad input. Compiled code stays in JAX's "
               f"persistent cache (${CACHE_ENV}, default ~/.cache/ptojax/jax-cache; set it "
               "empty to turn that off).")
    ap.add_argument("--version", action="version", version=f"ptojax {pj.__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run", help="run a program on a fresh machine and report faults, tiles and memory",
        description="Run a word stream (assembly, or hex words) on a fresh State and report "
                    "the fault, the tiles it changed and the GM bytes it changed.")
    r.add_argument("program", help="program file, or - for stdin: assembly text, or hex words "
                                   "(one or more per line; detected when every token is hex)")
    r.add_argument("--hex", action="store_true", help="the program is hex words")
    r.add_argument("--gm", metavar="FILE", help="binary GM image written at address 0")
    r.add_argument("--gm-hex", metavar="ADDR:HEXBYTES", action="append",
                   help="bytes written into GM at ADDR, e.g. 0x100:003c0040 (repeatable)")
    r.add_argument("--gpr", metavar="[PE:]REG=VALUE", action="append",
                   help="set a GPR, e.g. a0=0x100 or 1:a1=8 (repeatable; PE defaults to --pe)")
    r.add_argument("--pe", type=int, default=0, help="the PE that runs the stream (0..3)")
    r.add_argument("--core", action="store_true",
                   help="run on all four PEs of the Core together (pj.run_core): each block "
                        "completes as a collective, e.g. a cooperative TMATMUL publishes one "
                        "fragment per PE")
    r.add_argument("--config", choices=list(pj.PRESETS), default=PROGRAM_DEFAULT_CONFIG,
                   help=f"machine sizes (default {PROGRAM_DEFAULT_CONFIG}, the ASL model's): {configs}")
    r.add_argument("--profile", choices=list(PROFILES), default="portable",
                   help="numeric profile of the matrix family (TMATMUL/TGEMV): portable "
                        "(default, the ASL model's raw-word multiply-accumulate) or ieee "
                        "(binary32 arithmetic on decoded values); docs/numerics.md")
    r.add_argument("--on-fault", choices=["abandon", "hold"], default="abandon",
                   help="after a fault, discard the open block (default) or keep it pending")
    r.add_argument("--reference", action="store_true",
                   help="run the plain-Python reference model instead of the JAX model")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("asm", help="assemble text into hex words",
                       description="Assemble program text; print one hex word per line.")
    a.add_argument("file", help="assembly file, or - for stdin")
    a.add_argument("--json", action="store_true", help="print a JSON list of hex strings")
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="disassemble hex words into text",
                       description="Disassemble hex words (whitespace/comma separated; a JSON "
                                   "list from `asm --json` works too).")
    d.add_argument("file", help="file of hex words, or - for stdin")
    d.add_argument("-a", "--addresses", action="store_true",
                   help="prefix each line with its address and word")
    d.set_defaults(func=cmd_disasm)

    m = sub.add_parser("demo", help="a guided run: TLOAD, TSTORE, a fault, TMATMUL, the oracle, "
                                    "a batch",
                       description="Load a 2x3 FP16 matrix into a CUBE_M16 tile, store it back, "
                                   "hit a fault, multiply it by a 3x2 FP16 matrix with TMATMUL "
                                   "in both numeric profiles (checked against numpy), check all "
                                   "of it against the reference model, then run a batch of "
                                   "bundles at once.")
    m.add_argument("--config", choices=list(pj.PRESETS), default=DEMO_DEFAULT_CONFIG,
                   help=f"machine sizes (default {DEMO_DEFAULT_CONFIG})")
    m.add_argument("--batch", type=int, default=1000, help="bundles in the batch step (default 1000)")
    m.add_argument("--seed", type=int, default=0, help="seed of the random batch bundles")
    m.set_defaults(func=cmd_demo)

    f = sub.add_parser(
        "fuzz", help="differential campaign: pj.batch.run against the reference model",
        description="Draw random bundle streams (legal ones and ones mutated towards each fault), "
                    "run them in batches on pj.batch.run and on pj.reference.run, compare every "
                    "State leaf, the fault and the executed count, shrink each mismatch to a "
                    "minimal case and write it as a replayable JSON file; report coverage.",
        epilog="Exit status: 0 no mismatch, 1 mismatches found (files written), 2 bad input or "
               "a failing --against command, 130 interrupted (the report covers the cases run).")
    f.add_argument("--ops", default="all", metavar="LIST",
                   help="operations, e.g. tload,tstore,mgather_cas,tmatmul,tgemvmx_acc (default all): "
                        "keep cases with a BSTART of one of them, and cases with no BSTART at all; "
                        "matrix operations draw the generator's TMATMUL/TGEMV kinds for those forms")
    f.add_argument("--kinds", metavar="PATTERNS",
                   help="comma list of fnmatch patterns on the generator's case kind (e.g. 'cube_*')")
    f.add_argument("--cas-weight", type=float, metavar="P",
                   help="probability that a drawn case is an MGATHER.CAS kind (default: 0 without "
                        "mgather_cas in --ops, 1 when it is the only op, else 1/3)")
    f.add_argument("--matmul-weight", type=float, metavar="P",
                   help="probability that a drawn case is a TMATMUL/TGEMV kind (default: 0 unless "
                        "--ops names a matrix operation, 1 when it names only matrix operations, "
                        "else 1/3)")
    f.add_argument("--core", action="store_true",
                   help="run every case on the Core's four PEs: pj.batch.run(core=True) against "
                        "pj.reference.run_core (docs/shared-decisions.md); draws cooperative "
                        "TMATMUL and Shared TLOAD/TSTORE kinds too (--coop-weight)")
    f.add_argument("--coop-weight", type=float, metavar="P",
                   help="with --core: probability that a drawn case is a cooperative / Shared kind "
                        "(default 1/3 when --ops includes a TMATMUL form or is all, else 0)")
    f.add_argument("--count", type=int, default=1000, help="cases to run (default 1000)")
    f.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    f.add_argument("--batch", type=int, default=256,
                   help="rows per pj.batch.run call, the last one a never-executed filler row "
                        "that pins the compiled shape (default 256)")
    f.add_argument("--sample", type=float, default=1.0, metavar="FRACTION",
                   help="run this seeded fraction of the cases on the reference model too "
                        "(default 1: all)")
    f.add_argument("--config", choices=list(pj.PRESETS), default=FUZZ_DEFAULT_CONFIG,
                   help=f"machine sizes (default {FUZZ_DEFAULT_CONFIG}): {configs}")
    f.add_argument("--on-fault", choices=["abandon", "hold"], default="abandon")
    f.add_argument("--profile", choices=list(PROFILES), default="portable",
                   help="numeric profile of the matrix family (MachineConfig.profile) of both models "
                        "(default portable)")
    f.add_argument("--pe", type=int, default=0, help="the current PE of every case (default 0)")
    f.add_argument("--jobs", type=int, default=None,
                   help="reference-model worker processes (default: one per CPU core); 1 runs "
                        "the reference in this process, overlapping the JAX batches")
    f.add_argument("--json", action="store_true", help="print the report as JSON")
    f.add_argument("--out", metavar="DIR",
                   help=f"where mismatch files and report.json go (default ./{FUZZ_DEFAULT_OUT}, "
                        "only created for mismatches)")
    f.add_argument("--no-shrink", action="store_true", help="write mismatches as found")
    f.add_argument("--shrink-limit", type=int, default=3,
                   help="shrink the first case of this many distinct mismatch kinds (default 3)")
    f.add_argument("--shrink-seconds", type=float, default=120.0,
                   help="time budget per shrink (default 120)")
    f.add_argument("--max-files", type=int, default=20,
                   help="mismatch files written at most, one per distinct kind (default 20)")
    f.add_argument("--export", metavar="DIR",
                   help="also write cases as initial state + words + the reference model's final "
                        "state (pto.asl-model.arch-state.v1 envelopes)")
    f.add_argument("--export-limit", type=int, metavar="K", help="export only the first K cases")
    f.add_argument("--against", metavar="CMD",
                   help="also run every case on an external command speaking the "
                        "ptojax.fuzz-against.v1 line protocol and compare its final states")
    f.add_argument("--shard", metavar="I/N",
                   help="run case k only when k %% N == I (one share of the campaign)")
    f.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() and take the share "
                        "jax.process_index()/jax.process_count()")
    f.add_argument("--coordinator", metavar="HOST:PORT", help="with --distributed")
    f.add_argument("--num-processes", type=int, help="with --distributed")
    f.add_argument("--process-id", type=int, help="with --distributed")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.add_argument("--quiet", action="store_true", help="no progress bar or status lines")
    f.set_defaults(func=cmd_fuzz)

    rp = sub.add_parser("replay", help="rerun a saved fuzz case on both models and show the difference",
                        description="Rerun a mismatch file written by `ptojax fuzz` (or an exported "
                                    "case) on pj.batch.run and on the reference model (or the "
                                    "external command that found it) and show the difference "
                                    "field by field.",
                        epilog="Exit status: 0 the models agree, 1 they differ, 2 bad input.")
    rp.add_argument("file", help="a ptojax.fuzz-case.v1 or ptojax.fuzz-export.v1 JSON file")
    rp.add_argument("--against", metavar="CMD", help="compare with this external command")
    rp.add_argument("--reference", action="store_true",
                    help="compare with the reference model even if an external command found it")
    rp.add_argument("--batch", type=int, help="rows of the compiled shape (default: the file's)")
    rp.add_argument("--json", action="store_true", help="print the differences as JSON")
    rp.set_defaults(func=cmd_replay)

    w = sub.add_parser(
        "warmup", help="compile the common programs into the persistent cache ahead of a pipeline",
        description="Run small TLOAD, TSTORE, MGATHER.CAS and TMATMUL programs through pj.run, "
                    "a cooperative TMATMUL through pj.run_core, and pj.ops.matmul, in each "
                    "config and profile, so JAX's persistent compilation cache holds what a "
                    "first call compiles; print each program's seconds and whether it was "
                    "compiled or loaded from the cache.",
        epilog=f"The cache is ${CACHE_ENV} (default ~/.cache/ptojax/jax-cache); with it "
               "empty nothing is kept. Compiles run one at a time, 1-20 s each on a CPU.")
    w.add_argument("--config", action="append", choices=list(pj.PRESETS) + [WARMUP_OPS],
                   help="machine sizes to warm (repeatable; default tiny, small and ops: "
                        "pj.ops.matmul's own configs)")
    w.add_argument("--profile", action="append", choices=list(PROFILES),
                   help="numeric profiles to warm (repeatable; default both)")
    w.add_argument("--json", action="store_true", help="print the results as JSON")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    w.set_defaults(func=cmd_warmup)

    b = sub.add_parser("bench", help="run a benchmark: layouts or bundles (ARGS go to it)",
                       description="Run benchmarks/<NAME>.py from the repository; "
                                   "`ptojax bench NAME --help` lists its options.")
    b.add_argument("name", choices=["layouts", "bundles"])
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    b.set_defaults(func=cmd_bench)
    return ap


def main(argv=None) -> int:
    """Entry point of the `ptojax` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as e:
        print(f"ptojax {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `ptojax ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
