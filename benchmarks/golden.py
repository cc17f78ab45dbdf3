"""Cost per operand shape of pj.ops.matmul: one compile, then host-speed calls;
with --gemm, pj.golden.gemm at square sizes next to numpy's float32 matmul.

pj.ops.matmul runs the real bundle sequence (CUBE TLOADs, TMATMUL, TSTORE) on
a private machine whose sizes come from a fixed size class, never from the
operands, so every shape of a class (M up to 32, K and N up to 64 and more)
reuses one compiled program. This script measures exactly that, in a fresh
process:

* the first call (FP16, ieee profile): the compile plus one run;
* then each further random shape (M in 1..32, K and N in 1..64, fixed seed;
  CUBE_M16 for M <= 16, else CUBE_M32), one call each, timed separately;
  the budget is 50 ms per further shape.

Every result is checked against numpy: the inputs are small integers in
FP16, so every product and every binary32 sum is exact. The number of
compiled variants of the executor (`run_stream._cache_size()`) is recorded
before and after the further shapes: it must not grow.

    python benchmarks/golden.py                 # 50 shapes
    python benchmarks/golden.py --shapes 200 --out r.json

--gemm SIZES (e.g. 64,128,256,512,1024): pj.golden.gemm on N x N x N
products of five kinds, each size's first call (in this fresh process the
kind's first size pays its compile, or its load from JAX's persistent cache)
and a warm call, and numpy's float32 `a @ b` on the same matrices (the median
of five) in the same run:

* S8 portable: checked equal to the exact integer product;
* S8 portable, core=True (cooperative TMATMULs on the Core, default
  128 x 64 x 64 tiles): the same check;
* FP16 ieee: checked within binary32 accumulation error of the exact product;
* FP16 ieee, core=True: the same check;
* BF16 ieee with an FP32 -> FP16 + ReLU epilogue (pre_quant=1, relu="relu"):
  checked within FP16 rounding of numpy's product.

    python benchmarks/golden.py --gemm 64,128,256,512,1024 --out bench-results/gemm.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _checkout  # noqa: E402  (benchmarks/_checkout.py)

BUDGET_MS = 50.0


def shapes(n, seed):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 33)), int(rng.integers(1, 65)), int(rng.integers(1, 65)))
            for _ in range(n)], rng


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ptojax-bench-golden", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=50, help="random shapes, the first one included (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="shape and value seed (default 0)")
    ap.add_argument("--profile", default="ieee", choices=("ieee", "portable"),
                    help="numeric profile (default ieee; results are checked in ieee only)")
    ap.add_argument("--out", default="bench-results/golden.json", help="JSON output path")
    ap.add_argument("--quiet", action="store_true", help="no table on stdout")
    ap.add_argument("--gemm", metavar="SIZES", help="pj.golden.gemm at these N x N x N sizes instead")
    args = ap.parse_args(argv)
    if args.gemm:
        try:
            sizes = [int(x) for x in args.gemm.split(",")]
        except ValueError:
            ap.error(f"--gemm takes sizes like 64,128,256, got {args.gemm!r}")
        if not sizes or min(sizes) < 1:
            ap.error("--gemm sizes must be positive")
        out = "bench-results/gemm.json" if args.out == ap.get_default("out") else args.out
        return gemm_main(sizes, args.seed, out, args.quiet)
    if args.shapes < 2:
        ap.error("--shapes must be at least 2 (the first call and one more)")

    t_import = time.perf_counter()
    import jax

    import ptojax as pj
    from ptojax import golden
    from ptojax.machine import run_stream
    import_s = time.perf_counter() - t_import

    todo, rng = shapes(args.shapes, args.seed)
    rows = []
    cache = []
    for i, (m, k, n) in enumerate(todo):
        a = rng.integers(-8, 9, (m, k)).astype(np.float16)
        b = rng.integers(-8, 9, (k, n)).astype(np.float16)
        layout = "CUBE_M16" if m <= 16 else "CUBE_M32"
        t0 = time.perf_counter()
        d = pj.ops.matmul(a, b, dtype="FP16", layout=layout, profile=args.profile)
        dt = time.perf_counter() - t0
        ok = (d.shape == (m, n) and d.dtype == np.float32
              and (args.profile != "ieee" or np.array_equal(d, a.astype(np.float32) @ b.astype(np.float32))))
        if not ok:
            raise RuntimeError(f"shape {m}x{k}x{n}: pj.ops.matmul disagrees with numpy")
        rows.append({"m": m, "k": k, "n": n, "layout": layout, "seconds": dt, "first_call": i == 0})
        cache.append(run_stream._cache_size())
        if not args.quiet:
            print(f"  {i:3d}  {m:2d}x{k:2d}x{n:2d} {layout}  {dt * 1e3:9.2f} ms", file=sys.stderr, flush=True)

    further = np.array([r["seconds"] for r in rows[1:]]) * 1e3
    summary = {
        "import_s": import_s,
        "first_call_s": rows[0]["seconds"],
        "further_shapes": len(further),
        "per_shape_ms_median": float(np.median(further)),
        "per_shape_ms_mean": float(further.mean()),
        "per_shape_ms_max": float(further.max()),
        "total_further_s": float(further.sum() / 1e3),
        "budget_ms": BUDGET_MS,
        "within_budget": bool(further.sum() <= BUDGET_MS * len(further)),
        "run_stream_variants_after_first": cache[0],
        "run_stream_variants_at_end": cache[-1],
        "recompiled": cache[-1] != cache[0],
        "checked_against_numpy": args.profile == "ieee",
    }
    dev = jax.devices()[0]
    result = {
        "benchmark": "pj.ops.matmul: first call, then cost per further operand shape",
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "device": str(getattr(dev, "device_kind", dev)), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "commit": _checkout.commit(),
            "dtype": "FP16", "profile": args.profile, "seed": args.seed,
            "shape_range": {"m": [1, 32], "k": [1, 64], "n": [1, 64]},
            "size_classes": [list(c) for c in golden.SIZE_CLASSES],
            "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir,
            "timing": "perf_counter around each pj.ops.matmul call (numpy in, numpy out)",
        },
        "summary": summary,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if not args.quiet:
        print_table(result)
        print(f"JSON: {out}")
    return result


def print_table(result):
    from rich.console import Console
    from rich.table import Table

    s, meta = result["summary"], result["meta"]
    t = Table(title=f"pj.ops.matmul FP16 ({meta['profile']}), {s['further_shapes'] + 1} random shapes "
                    f"M<=32, K,N<=64, on {meta['backend']}")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row("import ptojax", f"{s['import_s']:.2f} s")
    t.add_row("first call (compile + run)", f"{s['first_call_s']:.2f} s")
    t.add_row("further shape, median", f"{s['per_shape_ms_median']:.1f} ms")
    t.add_row("further shape, mean", f"{s['per_shape_ms_mean']:.1f} ms")
    t.add_row("further shape, max", f"{s['per_shape_ms_max']:.1f} ms")
    t.add_row(f"within {s['budget_ms']:.0f} ms per shape", "yes" if s["within_budget"] else "NO")
    t.add_row("executor variants (after first / at end)",
              f"{s['run_stream_variants_after_first']} / {s['run_stream_variants_at_end']}")
    Console(width=None if sys.stdout.isatty() else 120, highlight=False).print(t)


GEMM_KINDS = {
    "S8 portable": dict(dtype="S8", profile="portable"),
    "S8 portable, core": dict(dtype="S8", profile="portable", core=True),
    "FP16 ieee": dict(dtype="FP16", profile="ieee"),
    "FP16 ieee, core": dict(dtype="FP16", profile="ieee", core=True),
    "BF16 ieee, FP16+ReLU epilogue": dict(dtype="BF16", profile="ieee", pre_quant=1, relu="relu"),
}


def _operands(kind, n, rng):
    import ml_dtypes
    if kind.startswith("S8"):
        return rng.integers(-128, 128, (n, n)).astype(np.int8), rng.integers(-128, 128, (n, n)).astype(np.int8)
    t = np.float16 if kind.startswith("FP16") else ml_dtypes.bfloat16
    return rng.standard_normal((n, n)).astype(t), rng.standard_normal((n, n)).astype(t)


def _check(kind, a, b, d):
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if kind.startswith("S8"):
        return d.dtype == np.int32 and np.array_equal(d, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))
    bound = a.shape[1] * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    if kind.startswith("FP16"):
        return d.dtype == np.float32 and bool(np.all(np.abs(d - exact) <= bound))
    want = np.maximum(exact, 0)
    return d.dtype == np.float16 and bool(np.all(np.abs(d.astype(np.float64) - want)
                                                 <= bound + 2.0**-10 * np.abs(want) + 2.0**-24))


def gemm_main(sizes, seed, out_path, quiet):
    t_import = time.perf_counter()
    import jax

    import ptojax as pj
    from ptojax.golden import tiling
    import_s = time.perf_counter() - t_import
    rng = np.random.default_rng(seed)
    rows = []
    for kind, kw in GEMM_KINDS.items():
        for n in sizes:
            a, b = _operands(kind, n, rng)
            t0 = time.perf_counter()
            d = pj.golden.gemm(a, b, **kw)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            d = pj.golden.gemm(a, b, **kw)
            warm = time.perf_counter() - t0
            if not _check(kind, a, b, d):
                raise RuntimeError(f"{kind} {n}^3: pj.golden.gemm disagrees with its check")
            af, bf = a.astype(np.float32), b.astype(np.float32)
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                af @ bf
                ts.append(time.perf_counter() - t0)
            np_s = float(np.median(ts))
            rows.append({"kind": kind, "core": kw.get("core", False), "n": n, "first_s": first,
                         "warm_s": warm, "numpy_f32_s": np_s, "warm_over_numpy": warm / np_s})
            if not quiet:
                print(f"  {kind:32s} {n:5d}^3  first {first:7.2f} s  warm {warm:8.3f} s  "
                      f"numpy {np_s * 1e3:8.3f} ms  {warm / np_s:8.0f}x", file=sys.stderr, flush=True)
    dev = jax.devices()[0]
    result = {
        "benchmark": "pj.golden.gemm: N x N x N products, first call and warm, against numpy float32",
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "device": str(getattr(dev, "device_kind", dev)), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "commit": _checkout.commit(), "seed": seed,
            "import_s": import_s, "gemm_rows": tiling.GEMM_ROWS,
            "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir,
            "timing": "perf_counter around each pj.golden.gemm call (numpy in, numpy out); "
                      "numpy: median of five float32 a @ b",
        },
        "rows": rows,
    }
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if not quiet:
        print(f"JSON: {out}")
    return result


if __name__ == "__main__":
    main()
