"""Throughput of the layout kernels (ptojax.layouts) against numpy.

For every layout (the CUBE CELL layouts and the ordinary ND, DN, ZN, NZ ones)
x element width and geometric batch sizes from one tile up to --max-bytes of
payload, one run measures side by side:

* jax ND -> layout: nd_to_cube, words only (defined=False) and with the
  definedness mask; nd_to_ordinary for ND/DN/ZN/NZ (whole tiles, all
  defined: no mask variant, "-" in the tables);
* jax layout -> ND: cube_to_nd, ordinary_to_nd;
* numpy doing the same conversions (vectorised reshape/transpose for the bound
  geometry; masks, pad words and the CUBE_N8 cell compaction for the rows with
  per-tile random valid shapes, which only the CUBE layouts have);
* numpy copying the same bytes: arr.copy() (fresh output, as every conversion
  here allocates its result; the headline's reference) and np.copyto into a
  preallocated array (no page faults; in the tables and JSON).

Payload bytes are the bytes of the row-major input matrix as held in its
container (uint32/uint16/uint8; b4 holds one nibble per uint8, so one byte per
element). Each timing is the best of a few repeats after a warm-up call, with
jax.block_until_ready on the JAX results. Inputs are placed on the device
before timing, so host transfers are not counted.

    python benchmarks/layouts.py                  # full run, 128 MiB top size
    python benchmarks/layouts.py --quick          # CI smoke: tiny sizes
    python benchmarks/layouts.py --max-bytes 32M --out r.json --plot r.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

CUBE_LAYOUTS = ("CUBE_M16", "CUBE_M32", "CUBE_N8")
ORDINARY = ("ND", "DN", "ZN", "NZ")        # RowMajor, ColumnMajor and the fractal layouts
LAYOUTS = CUBE_LAYOUTS + ORDINARY
# width class -> (representative dtype, container)
WIDTHS = {"b32": ("FP32", np.uint32), "b16": ("FP16", np.uint16),
          "b8": ("E4M3", np.uint8), "b4": ("U4X2", np.uint8)}
TILES = {"CUBE_M16": (16, 64), "CUBE_M32": (32, 64), "CUBE_N8": (64, 64),
         **{lay: (64, 64) for lay in ORDINARY}}
RANDOM_VALID_WIDTH = "b16"          # one extra row per layout with random valid shapes
RANDOM_VALID_PAD = "Max"

METHODS = ("jax_to_layout", "jax_to_layout_defined", "jax_to_nd",
           "np_to_layout", "np_to_nd", "np_copy", "np_copyto")


# ----------------------------------------------------------------- numpy conversions


def _cdiv(a, b):
    return -(-a // b)


def _swap_b4(t):
    lead = t.shape[:-1]
    return t.reshape(*lead, 2, 2, 4).swapaxes(-3, -2).reshape(*lead, 16)


def np_nd_to_cube(x, layout, cr, cc, swap, vr=None, vc=None, padw=0):
    """Row-major [B, R, C] -> CUBE payload [B, W] (same slots as nd_to_cube).

    vr/vc None: full-valid tiles (pure reshape/transpose). Otherwise [B] arrays:
    valid elements, padw in the rest of each tile's storage region, 0 past it.
    """
    B, R, C = x.shape
    if layout == "CUBE_N8":
        kr, nr = _cdiv(R, cr), _cdiv(C, 8)
        if (kr * cr, nr * 8) != (R, C):
            x = np.pad(x, ((0, 0), (0, kr * cr - R), (0, nr * 8 - C)))
        f = x.reshape(B, kr, cr, nr, 8).transpose(0, 3, 1, 4, 2)      # [B, n, k, c8, r]
        if vr is None:
            return np.ascontiguousarray(f).reshape(B, -1)
        n = np.arange(nr)[:, None, None, None]
        k = np.arange(kr)[None, :, None, None]
        c8 = np.arange(8)[None, None, :, None]
        r = np.arange(cr)[None, None, None, :]
        b5 = (B, 1, 1, 1, 1)
        krep, nrep = (vr + cr - 1) // cr, (vc + 7) // 8
        valid = ((k * cr + r)[None] < vr.reshape(b5)) & ((n * 8 + c8)[None] < vc.reshape(b5))
        inside = (k[None] < krep.reshape(b5)) & (n[None] < nrep.reshape(b5))
        words = np.where(valid, f, np.where(inside, x.dtype.type(padw), x.dtype.type(0)))
        words = words.reshape(B, nr * kr, 8 * cr)
        j = np.arange(nr * kr)[None, :]
        kk = krep[:, None]
        src = np.where(j < kk * nrep[:, None], (j // kk) * kr + j % kk, nr * kr - 1)
        return np.take_along_axis(words, src[:, :, None], axis=1).reshape(B, -1)
    ncell = _cdiv(C, cc)
    if (cr, ncell * cc) != (R, C):
        x = np.pad(x, ((0, 0), (0, cr - R), (0, ncell * cc - C)))
    t = x.reshape(B, cr, ncell, cc).transpose(0, 2, 1, 3)              # [B, cell, r, c]
    if swap:
        t = _swap_b4(t)
    if vr is None:
        return np.ascontiguousarray(t).reshape(B, -1)
    p = np.arange(cc)
    j = p ^ (12 * (((p >> 2) ^ (p >> 3)) & 1)) if swap else p
    rows = np.arange(cr)[None, :, None]
    cols = np.arange(ncell)[:, None, None] * cc + j[None, None, :]
    b4 = (B, 1, 1, 1)
    valid = (rows[None] < vr.reshape(b4)) & (cols[None] < vc.reshape(b4))
    inside = cols[None] < (((vc + cc - 1) // cc) * cc).reshape(b4)
    words = np.where(valid, t, np.where(inside, x.dtype.type(padw), x.dtype.type(0)))
    return words.reshape(B, -1)


def np_cube_to_nd(words, layout, cr, cc, swap, R, C, vr=None, vc=None):
    """CUBE payload [B, W] -> row-major [B, R, C]; 0 outside the valid region."""
    B = words.shape[0]
    if layout == "CUBE_N8":
        kr, nr = _cdiv(R, cr), _cdiv(C, 8)
        cells = words[:, : nr * kr * 8 * cr].reshape(B, nr * kr, 8 * cr)
        if vr is not None:
            i = np.arange(nr * kr)[None, :]
            krep = ((vr + cr - 1) // cr)[:, None]
            n, k = i // kr, i % kr
            dst = np.where(k < krep, n * krep + k, 0)
            cells = np.take_along_axis(cells, dst[:, :, None], axis=1)
        x = cells.reshape(B, nr, kr, 8, cr).transpose(0, 2, 4, 1, 3).reshape(B, kr * cr, nr * 8)
    else:
        ncell = _cdiv(C, cc)
        t = words[:, : ncell * cr * cc].reshape(B, ncell, cr, cc)
        if swap:
            t = _swap_b4(t)
        x = t.transpose(0, 2, 1, 3).reshape(B, cr, ncell * cc)
    x = x[:, :R, :C]
    if vr is None:
        return np.ascontiguousarray(x)
    valid = ((np.arange(R)[None, :, None] < vr[:, None, None])
             & (np.arange(C)[None, None, :] < vc[:, None, None]))
    return np.where(valid, x, x.dtype.type(0))


def np_nd_to_ordinary(x, layout, inner):
    """Row-major [B, R, C] -> [B, R*C] in ND/DN/ZN/NZ order (as nd_to_ordinary:
    a ZN band of 16 rows column by column, an NZ band of `inner` columns row
    by row), always a fresh array (np.array copies even where it is a view)."""
    B, R, C = x.shape
    if layout == "ND":
        t = x
    elif layout == "DN":
        t = x.transpose(0, 2, 1)
    elif layout == "ZN":
        t = x.reshape(B, R // 16, 16, C).transpose(0, 1, 3, 2)
    else:
        t = x.reshape(B, R, C // inner, inner).transpose(0, 2, 1, 3)
    return np.array(t, order="C").reshape(B, -1)


def np_ordinary_to_nd(words, layout, inner, R, C):
    """The inverse of np_nd_to_ordinary (a fresh array too)."""
    B = words.shape[0]
    if layout == "ND":
        t = words.reshape(B, R, C)
    elif layout == "DN":
        t = words.reshape(B, C, R).transpose(0, 2, 1)
    elif layout == "ZN":
        t = words.reshape(B, R // 16, C, 16).transpose(0, 1, 3, 2)
    else:
        t = words.reshape(B, C // inner, R, inner).transpose(0, 2, 1, 3)
    return np.array(t, order="C").reshape(B, R, C)


# ----------------------------------------------------------------- timing


def _best_time(fn, repeats, min_total=0.2, max_repeats=200):
    """Best wall time of fn() after one warm-up call; at least `repeats` runs,
    more for fast calls (until min_total seconds or max_repeats)."""
    fn()
    best, total, n = math.inf, 0.0, 0
    while n < repeats or (total < min_total and n < max_repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, total, n = min(best, dt), total + dt, n + 1
    return best


def _batches(tile_bytes, max_bytes, step, quick):
    top = max(1, _cdiv(max_bytes, tile_bytes))
    if quick:   # one small batch per series: bounded compiles for CI
        return [top]
    out, b = [], 1
    while b < top:
        out.append(b)
        b *= step
    out.append(top)
    return out


def _parse_bytes(s: str) -> int:
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def run_case(layout, width, batch, *, random_valid, repeats, rng, check, min_total=0.2):
    import jax
    import ptojax as pj
    L = pj.layouts

    dt, container = WIDTHS[width]
    R, C = TILES[layout]
    ordinary = layout in ORDINARY
    if not ordinary:
        cr, cc = L.cell_shape(layout, dt)
    swap = layout == "CUBE_M16" and width == "b4"
    hi = 16 if width == "b4" else int(np.iinfo(container).max) + 1
    x_np = rng.integers(0, hi, size=(batch, R, C), dtype=np.uint64).astype(container)
    payload = x_np.nbytes
    if random_valid:
        vr_np = rng.integers(1, R + 1, size=batch).astype(np.int32)
        vc_np = rng.integers(1, C + 1, size=batch).astype(np.int32)
        pad = RANDOM_VALID_PAD
        padw = pj.tables.pad_word(dt, pad) & ((1 << (8 * np.dtype(container).itemsize)) - 1)
    else:
        vr_np = vc_np = None
        pad, padw = "Null", 0
    x_j = jax.device_put(x_np)
    # per-tile extents go to the public API as concrete numpy arrays (checked there)
    vr_a = R if vr_np is None else vr_np
    vc_a = C if vc_np is None else vc_np

    inner = L.fractal_width(dt)

    def jf():
        if ordinary:
            return jax.block_until_ready(L.nd_to_ordinary(x_j, layout, dt))
        return jax.block_until_ready(L.nd_to_cube(x_j, layout, dt, vr_a, vc_a, pad=pad,
                                                  defined=False))

    def jfd():
        return jax.block_until_ready(L.nd_to_cube(x_j, layout, dt, vr_a, vc_a, pad=pad))

    words_j = jf()

    def jb():
        if ordinary:
            return jax.block_until_ready(L.ordinary_to_nd(words_j, layout, dt, R, C))
        return jax.block_until_ready(L.cube_to_nd(words_j, layout, dt, vr_a, vc_a, shape=(R, C)))

    def nf():
        if ordinary:
            return np_nd_to_ordinary(x_np, layout, inner)
        return np_nd_to_cube(x_np, layout, cr, cc, swap, vr_np, vc_np, padw)

    words_np = nf()

    def nb():
        if ordinary:
            return np_ordinary_to_nd(words_np, layout, inner, R, C)
        return np_cube_to_nd(words_np, layout, cr, cc, swap, R, C, vr_np, vc_np)

    def ncopy():             # fresh output, like every conversion here
        return x_np.copy()

    dst = np.empty_like(x_np)

    def ncopyto():           # preallocated output (no page faults)
        np.copyto(dst, x_np)

    if check:   # the numpy conversion must be the same conversion
        if not np.array_equal(np.asarray(words_j), words_np):
            raise AssertionError(f"numpy to-layout differs from ptojax: {layout} {width} B={batch}")
        back_np = nb()
        if not np.array_equal(np.asarray(jb()), back_np):
            raise AssertionError(f"numpy to-ND differs from ptojax: {layout} {width} B={batch}")
        ref_back = x_np if vr_np is None else np.where(
            (np.arange(R)[None, :, None] < vr_np[:, None, None])
            & (np.arange(C)[None, None, :] < vc_np[:, None, None]), x_np, 0)
        if not np.array_equal(back_np, ref_back):
            raise AssertionError(f"round trip failed: {layout} {width} B={batch}")

    times = {
        "jax_to_layout": _best_time(jf, repeats, min_total),
        # an ordinary tile converted whole is all defined: no mask variant
        "jax_to_layout_defined": None if ordinary else _best_time(jfd, repeats, min_total),
        "jax_to_nd": _best_time(jb, repeats, min_total),
        "np_to_layout": _best_time(nf, repeats, min_total),
        "np_to_nd": _best_time(nb, repeats, min_total),
        "np_copy": _best_time(ncopy, repeats, min_total),
        "np_copyto": _best_time(ncopyto, repeats, min_total),
    }
    words_j = x_j = dst = None     # free the buffers before the next size
    return {
        "layout": layout, "width": width, "dtype": dt,
        "container": np.dtype(container).name + ("-nibbles" if width == "b4" else ""),
        "tile": [R, C], "valid": "random" if random_valid else "full",
        "pad": pad, "batch": batch, "payload_bytes": payload,
        "storage_words_per_tile": int(words_np.shape[1]),
        "seconds": times,
        "bytes_per_s": {k: None if v is None else payload / v for k, v in times.items()},
    }


def _ratio(a, b):
    return None if a is None or b is None else a / b


def headline(rows):
    """Largest batch of every (layout, width, valid) series."""
    last = {}
    for r in rows:
        key = (r["layout"], r["width"], r["valid"])
        if key not in last or r["batch"] > last[key]["batch"]:
            last[key] = r
    out = []
    for (layout, width, valid), r in last.items():
        bps = r["bytes_per_s"]
        out.append({
            "layout": layout, "width": width, "valid": valid, "batch": r["batch"],
            "payload_bytes": r["payload_bytes"],
            **{f"{m}_GBps": None if bps[m] is None else bps[m] / 1e9 for m in METHODS},
            "to_layout_vs_copy": _ratio(bps["jax_to_layout"], bps["np_copy"]),
            "to_layout_defined_vs_copy": _ratio(bps["jax_to_layout_defined"], bps["np_copy"]),
            "to_nd_vs_copy": _ratio(bps["jax_to_nd"], bps["np_copy"]),
            "to_layout_speedup_vs_numpy": _ratio(bps["jax_to_layout"], bps["np_to_layout"]),
            "to_layout_defined_speedup_vs_numpy": _ratio(bps["jax_to_layout_defined"],
                                                         bps["np_to_layout"]),
            "to_nd_speedup_vs_numpy": _ratio(bps["jax_to_nd"], bps["np_to_nd"]),
        })
    return out


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _f(v, scale=1.0):
    return "-" if v is None else f"{v / scale:.2f}"


def _print_tables(rows, head, console=None):
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:   # plain text
        Console = Table = None

    cols = ["layout", "width", "valid", "batch", "payload",
            "to layout", "+def", "to ND", "np to layout", "np to ND", "np copy", "np copyto"]
    body = [[r["layout"], r["width"], r["valid"], str(r["batch"]), _fmt_bytes(r["payload_bytes"]),
             *(_f(r["bytes_per_s"][m], 1e9) for m in METHODS)] for r in rows]
    hcols = ["layout", "width", "valid", "payload", "to layout GB/s", "+def GB/s", "to ND GB/s",
             "np copy GB/s", "to layout/copy", "+def/copy", "to ND/copy",
             "to layout x np", "+def x np", "to ND x np"]
    hbody = [[h["layout"], h["width"], h["valid"], _fmt_bytes(h["payload_bytes"]),
              _f(h["jax_to_layout_GBps"]), _f(h["jax_to_layout_defined_GBps"]),
              _f(h["jax_to_nd_GBps"]), _f(h["np_copy_GBps"]),
              _f(h["to_layout_vs_copy"]), _f(h["to_layout_defined_vs_copy"]),
              _f(h["to_nd_vs_copy"]), _f(h["to_layout_speedup_vs_numpy"]),
              _f(h["to_layout_defined_speedup_vs_numpy"]), _f(h["to_nd_speedup_vs_numpy"])]
             for h in head]
    titles = ("Throughput, GB/s of payload (input matrix bytes)",
              "Headline (largest batch): fraction of numpy copy, speed-up over numpy conversion")
    if Table is None:
        for title, c, b in ((titles[0], cols, body), (titles[1], hcols, hbody)):
            print(title)
            w = [max(len(x) for x in col) for col in zip(c, *b)]
            for line in [c, *b]:
                print("  ".join(s.rjust(n) for s, n in zip(line, w)))
            print()
        return
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    for title, c, b in ((titles[0], cols, body), (titles[1], hcols, hbody)):
        t = Table(title=title)
        for name in c:
            t.add_column(name, justify="right" if name not in ("layout", "width", "valid") else "left")
        for line in b:
            t.add_row(*line)
        console.print(t)


# the conversions drawn, and the ceiling they are measured against: a plain
# numpy copy of the same bytes into a fresh output, as every conversion writes
_PLOTTED = ("jax_to_layout", "jax_to_layout_defined", "jax_to_nd", "np_to_layout", "np_to_nd")
_CEILING = "np_copy"


def _plot(rows, path):
    """One panel per (layout, width) that was measured, nothing else: the
    conversions' GB/s against payload bytes, the plain copy as a grey ceiling
    line, one legend for the figure."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot", file=sys.stderr)
        return None
    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in rows)]
    widths = [w for w in WIDTHS if any(r["width"] == w for r in rows)]
    measured = {(r["layout"], r["width"]) for r in rows}
    if not measured:
        return None
    fig, axes = plt.subplots(len(layouts), len(widths),
                             figsize=(4.2 * len(widths) + 1, 2.4 * len(layouts) + 1.2),
                             sharex=True, squeeze=False)
    handles = {}
    for i, layout in enumerate(layouts):
        for j, width in enumerate(widths):
            ax = axes[i][j]
            if (layout, width) not in measured:
                ax.set_visible(False)       # e.g. the random-valid rows: b16 only
                continue
            for valid, style in (("full", "-"), ("random", ":")):
                series = sorted((r for r in rows if r["layout"] == layout and r["width"] == width
                                 and r["valid"] == valid), key=lambda r: r["batch"])
                if not series:
                    continue
                xs = [r["payload_bytes"] for r in series]
                for k, m in enumerate(_PLOTTED + (_CEILING,)):
                    if any(r["bytes_per_s"][m] is None for r in series):
                        continue
                    ceiling = m == _CEILING
                    if ceiling and valid != "full":
                        continue
                    (line,) = ax.plot(xs, [r["bytes_per_s"][m] / 1e9 for r in series],
                                      "--" if ceiling else style,
                                      color="0.55" if ceiling else f"C{k}",
                                      marker="_" if ceiling else "o", ms=12 if ceiling else 3,
                                      lw=2 if ceiling else 1.2)
                    label = ("plain copy (ceiling)" if ceiling else m) + \
                        ("" if valid == "full" else ", random valid shapes")
                    handles.setdefault(label, line)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{layout} {width}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if j == 0:
                ax.set_ylabel("GB/s")
            if i == len(layouts) - 1:
                ax.set_xlabel("payload bytes")
    fig.legend(list(handles.values()), list(handles), loc="lower center",
               ncol=min(4, len(handles)), fontsize=8, frameon=False)
    fig.suptitle("ptojax layout kernels against numpy and a plain copy of the same bytes")
    fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(handles) > 4), 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# peak resident bytes of one measurement, per payload byte: the input on both
# sides, both conversions' outputs, numpy's, the copies and the checks
# (measured: 0.72 GB peak at a 64 MiB b32 payload, 0.2 GB of it the process)
PEAK_PER_PAYLOAD_BYTE = 9


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size_arg(n: int) -> str:
    """A power-of-two byte count as --max-bytes takes it (2G, 512M, 64K)."""
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift:
            return f"{n >> shift}{unit}"
    return str(n)


def check_fits(max_bytes: int, available: int | None) -> str | None:
    """Why a run to payloads of `max_bytes` would not fit in memory, else None."""
    need = PEAK_PER_PAYLOAD_BYTE * max_bytes
    if available is not None and need > available:
        fits = 1 << max(10, (available // PEAK_PER_PAYLOAD_BYTE).bit_length() - 1)
        return (f"--max-bytes {_fmt_bytes(max_bytes)} needs about {_fmt_bytes(need)} at its largest "
                f"batch ({PEAK_PER_PAYLOAD_BYTE} x the payload: inputs, both conversions, numpy's, "
                f"the copies), and {_fmt_bytes(available)} is available; "
                f"use --max-bytes {_size_arg(fits)} or less")
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ptojax-bench-layouts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one tiny batch per series (<= 16 KiB), 1 repeat (CI smoke)")
    ap.add_argument("--max-bytes", default=None,
                    help="largest payload per measurement, e.g. 128M (default 128M; --quick 16K)")
    ap.add_argument("--step", type=int, default=4, help="geometric batch step (default 4)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats (default 3; --quick 1)")
    ap.add_argument("--out", default="bench-results/layouts.json", help="JSON output path")
    ap.add_argument("--plot", nargs="?", const="", default=None,
                    help="write a PNG plot (default path: --out with .png)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset")
    ap.add_argument("--widths", default=",".join(WIDTHS), help="comma-separated subset")
    ap.add_argument("--no-random", action="store_true", help="skip the random-valid rows")
    ap.add_argument("--no-check", action="store_true", help="skip the numpy-vs-ptojax check")
    ap.add_argument("--quiet", action="store_true", help="no tables on stdout")
    args = ap.parse_args(argv)

    max_bytes = _parse_bytes(args.max_bytes) if args.max_bytes else (16 << 10 if args.quick else 128 << 20)
    why = check_fits(max_bytes, available_memory())
    if why:
        ap.error(why)           # before any work
    repeats = args.repeats or (1 if args.quick else 3)
    layouts = [s.strip().upper() for s in args.layouts.split(",") if s.strip()]
    widths = [s.strip().lower() for s in args.widths.split(",") if s.strip()]
    for s in layouts:
        if s not in LAYOUTS:
            ap.error(f"unknown layout {s}; expected one of {', '.join(LAYOUTS)}")
    for s in widths:
        if s not in WIDTHS:
            ap.error(f"unknown width {s}; expected one of {', '.join(WIDTHS)}")

    import jax

    series = [(lay, w, False) for lay in layouts for w in widths]
    if not args.no_random:
        series += [(lay, RANDOM_VALID_WIDTH, True) for lay in layouts if lay in CUBE_LAYOUTS]
    rng = np.random.default_rng(0)
    rows = []
    t_start = time.perf_counter()
    for layout, width, rand in series:
        R, C = TILES[layout]
        tile_bytes = R * C * np.dtype(WIDTHS[width][1]).itemsize
        for b in _batches(tile_bytes, max_bytes, args.step, args.quick):
            rows.append(run_case(layout, width, b, random_valid=rand, repeats=repeats, rng=rng,
                                 check=not args.no_check,
                                 min_total=0.0 if args.quick else 0.2))
            if not args.quiet:
                r = rows[-1]
                print(f"  {layout:8s} {width:3s} {r['valid']:6s} B={b:<7d} "
                      f"{_fmt_bytes(r['payload_bytes']):>10s}  "
                      + " ".join(f"{m}={_f(r['bytes_per_s'][m], 1e9)}" for m in METHODS),
                      file=sys.stderr, flush=True)
    head = headline(rows)
    dev = jax.devices()[0]
    result = {
        "benchmark": "ptojax.layouts nd_to_cube / cube_to_nd, nd_to_ordinary / ordinary_to_nd",
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "glibc_hugepage_malloc": __import__("ptojax._hugepages", fromlist=["active"]).active(),
            "device": str(getattr(dev, "device_kind", dev)), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "max_bytes": max_bytes, "step": args.step,
            "repeats": repeats, "quick": args.quick, "tiles": TILES,
            "dtypes": {w: [d, np.dtype(c).name] for w, (d, c) in WIDTHS.items()},
            "payload_bytes": "row-major input matrix bytes in its container (b4: 1 byte/nibble)",
            "timing": "best of repeats after a warm-up call; jax.block_until_ready",
            "elapsed_s": time.perf_counter() - t_start,
        },
        "methods": list(METHODS),
        "rows": rows,
        "headline": head,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if args.plot is not None:
        png = _plot(rows, args.plot or out.with_suffix(".png"))
        if png:
            result["plot"] = png
    if not args.quiet:
        _print_tables(rows, head)
        print(f"JSON: {out}" + (f"  plot: {result['plot']}" if result.get("plot") else ""))
    return result


if __name__ == "__main__":
    from ptojax._hugepages import reexec_with_hugepage_malloc
    reexec_with_hugepage_malloc()
    main()
