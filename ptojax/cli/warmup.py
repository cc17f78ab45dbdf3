"""`ptojax warmup`: compile the common programs (ptojax.warmup) into JAX's persistent cache."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, cast

from ptojax.compile_cache import CACHE_ENV, ensure_compile_cache
from ptojax.state import PROFILES

from .common import console

WARMUP_OPS = "ops"          # --config ops: pj.ops.matmul's private configs
WARMUP_DEFAULT_CONFIGS = ("tiny", "small", WARMUP_OPS)
_SOURCE_TEXT = {"compiled": "compiled", "cache": "loaded from cache", "memory": "already in memory"}


def _warmup_progress(enabled: bool):
    """(callback, stop): a rich bar on stderr; a plain line per program when it is a log."""
    if not enabled:
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    con = console(stderr=True)
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
    from ptojax import warmup
    configs = list(dict.fromkeys(args.config or WARMUP_DEFAULT_CONFIGS))
    profiles = list(dict.fromkeys(args.profile or PROFILES))
    presets = [c for c in configs if c != WARMUP_OPS]
    path = ensure_compile_cache()
    before = _cache_entries(path)
    err = console(stderr=True)
    if not args.json:
        err.print(f"warmup: persistent cache {path}" if path else
                  f"warmup: the persistent cache is off (${CACHE_ENV} is empty or JAX's "
                  f"compilation cache is disabled): programs compile but are not kept",
                  markup=False, highlight=False, soft_wrap=True)
    update, stop = _warmup_progress(not args.no_progress and not args.json)
    t0 = time.perf_counter()
    try:
        results = warmup.warmup(presets, profiles, matmul=WARMUP_OPS in configs,
                                 programs=args.program, progress=update)
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
        t.add_column(col, no_wrap=True, **cast("dict[str, Any]", kw))    # add_column's keywords mix types
    for r in results:
        t.add_row(r.name, r.config, r.profile, f"{r.seconds:.2f}", _SOURCE_TEXT[r.source],
                  r.fault if r.fault != "Fault_None" else "-")
    con = console()
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
