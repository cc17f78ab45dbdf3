"""Large-array throughput on Linux: let glibc back big allocations with huge pages.

XLA:CPU allocates every result afresh; with 4 KiB pages the first touch of a
128 MiB result costs more than the conversion itself (numpy asks for
transparent huge pages on its own big arrays, XLA does not). glibc >= 2.35
reads `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` at process start, so benchmark
entry points and the CLI's batch commands re-execute themselves once with it
set (a library caller sets it in its own environment: README, Benchmarks).
"""

from __future__ import annotations

import os
import sys

TUNABLE = "glibc.malloc.hugetlb=1"


def active() -> bool:
    return TUNABLE in os.environ.get("GLIBC_TUNABLES", "")


def reexec_with_hugepage_malloc() -> None:
    """Restart this process with the tunable set (Linux; no-op when already set)."""
    if sys.platform != "linux" or active() or os.environ.get("PTOJAX_NO_HUGEPAGE_REEXEC"):
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), TUNABLE]))
    env["PTOJAX_NO_HUGEPAGE_REEXEC"] = "1"      # never loop
    sys.stdout.flush()
    # orig_argv keeps `-m module` and interpreter options (sys.argv has a path instead)
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable] + sys.argv
    os.execve(sys.executable, [sys.executable] + argv[1:], env)
