"""`ptojax bench NAME`: runs benchmarks/NAME.py of the repository checkout."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ptojax as pj

from .common import CliError


def _bench_path(name: str) -> Path:
    return Path(pj.__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"


def cmd_bench(args) -> int:
    path = _bench_path(args.name)
    if not path.is_file():
        raise CliError(f"benchmark {args.name}: {path} not found; the benchmarks live in the "
                       f"repository's benchmarks/ folder, next to the ptojax package, and are not "
                       f"installed with it: run from a checkout (pip install -e .)")
    spec = importlib.util.spec_from_file_location(f"ptojax_bench_{args.name}", path)
    assert spec is not None and spec.loader is not None     # a .py file: the source loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(list(args.args))
    return 0
