"""JAX's persistent compilation cache for library users (ptojax/compile_cache.py).

The reload test runs two fresh processes on one temporary cache: the first
compiles pj.run's executor and writes its executable (ptojax/executables.py),
the second must load it without tracing or compiling it, write nothing, and
give the same State bit for bit. It pays for one compile of the tiny config.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import pytest

import ptojax as pj
from ptojax import compile_cache as cc
from ptojax import warmup as wu
from ptojax._x64 import x64

RELOAD = textwrap.dedent('''\
    import hashlib, logging, sys
    logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
    logging.getLogger("ptojax.executables").setLevel(logging.DEBUG)
    import jax
    import jax.monitoring
    import numpy as np
    import ptojax as pj
    TRACED = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, fun_name="", **_: TRACED.append(fun_name)
        if event == "/jax/core/compile/jaxpr_trace_duration" else None)
    from ptojax.state import state_leaves
    cfg = pj.preset("tiny")
    s = pj.reset(cfg)                       # the first entry point turns the cache on
    s = pj.write_memory(s, 0x100, np.array([[1, 2, 3], [4, 5, 6]], np.float16).view(np.uint8).reshape(-1))
    s = pj.write_gpr(s, "a0", 0x100)
    s = pj.write_gpr(s, "a1", 6)
    words = pj.asm.assemble("""
    BSTART.TLOAD FP16
    B.DATR {ND2M16, DTYPE_NONE, Max}
    B.DIM zero, 3, ->LB0
    B.DIM zero, 2, ->LB1
    B.IOR a0, a1
    B.IOT mask=1000, last, ->M<1>
    BSTOP
    """)
    r = pj.run(s, words)
    h = hashlib.sha256()
    for a in state_leaves(r.state).values():
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    print("traces", sum("stream" in name for name in TRACED))
    print("dir", jax.config.jax_compilation_cache_dir)
    print("result", r.fault, r.executed, h.hexdigest())
''')


def _fresh_process(cache, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["PTOJAX_JAX_CACHE"] = str(cache)
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    return lines, p.stderr


def test_second_process_loads_from_the_cache_bit_identical(tmp_path):
    cache = tmp_path / "jax-cache"
    executables = cache / "ptojax-executables"
    first, log1 = _fresh_process(cache, tmp_path)
    assert first["dir"] == str(cache)
    assert first["result"].startswith("Fault_None 7 ")
    assert first["traces"] == "1", "the first process traces the executor once"
    assert "wrote executable" in log1 and "loaded executable" not in log1
    files = sorted(os.listdir(executables))
    assert sorted(f.split(".")[-1] for f in files) == ["bin", "ref"], files     # the program, its key
    assert all(f.startswith("stream-") for f in files), files
    # the executor writes no JAX cache entry of its own, and JAX's millisecond
    # helper compiles stay out of the cache (MIN_COMPILE_SECS)
    entries = sorted(os.listdir(cache))
    assert len(entries) <= 2, entries

    second, log2 = _fresh_process(cache, tmp_path)
    assert "loaded executable" in log2, log2[-3000:]
    assert second["traces"] == "0", "the second process traced the executor"
    assert sorted(os.listdir(executables)) == files     # loaded, nothing compiled anew
    assert sorted(os.listdir(cache)) == entries
    assert second["result"] == first["result"]          # the same State, bit for bit


def _entry_point():
    """What every public jitted entry point runs first (their `x64` decorator),
    without compiling anything while a test's cache directory is configured."""
    x64(lambda: None)()


@pytest.fixture
def fresh_hook(monkeypatch):
    """Run ensure_compile_cache as if for the first time in a process, then put
    this session's JAX cache settings back."""
    saved = (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache,
             jax.config.jax_persistent_cache_min_compile_time_secs)
    monkeypatch.setattr(cc, "_checked", False)
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_enable_compilation_cache", saved[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[2])


def test_empty_env_var_turns_the_cache_off(fresh_hook, monkeypatch):
    monkeypatch.setenv(cc.CACHE_ENV, "")
    assert cc.ensure_compile_cache() is None
    assert jax.config.jax_compilation_cache_dir is None


def test_env_var_names_the_directory_and_the_hook_runs_once(fresh_hook, monkeypatch, tmp_path):
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "c"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    assert cc.ensure_compile_cache() == str(tmp_path / "c")
    assert (tmp_path / "c").is_dir()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == cc.MIN_COMPILE_SECS
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "other"))
    _entry_point()                                       # no second look
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")


def test_a_directory_the_caller_configured_is_kept(fresh_hook, monkeypatch, tmp_path):
    mine = str(tmp_path / "mine")
    jax.config.update("jax_compilation_cache_dir", mine)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 3.0)
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "ptojax"))
    _entry_point()
    assert cc._checked
    assert jax.config.jax_compilation_cache_dir == mine
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 3.0
    assert not (tmp_path / "ptojax").exists()


def test_a_disabled_cache_stays_disabled(fresh_hook, monkeypatch, tmp_path):
    jax.config.update("jax_enable_compilation_cache", False)
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "c"))
    assert cc.ensure_compile_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
    assert not (tmp_path / "c").exists()


def test_warmup_programs_run_clean_on_the_reference_model():
    """The warm-up programs are real, fault-free programs (checked on the
    pure-Python model: no compile)."""
    for config in wu.DEFAULT_WARMUP_CONFIGS:
        cfg = pj.preset(config)
        for prog in wu.WARMUP_PROGRAMS:
            words = pj.asm.assemble(prog.text)
            run = pj.reference.run_core if prog.core else pj.reference.run
            r = run(wu._state(prog, cfg), words, cfg=cfg)
            assert (r.fault, r.executed) == ("Fault_None", len(words)), (config, prog.name)
    names = [s[0] for s in wu.warmup_programs(("tiny",), ("portable", "ieee"))]
    assert names == [p.name for p in wu.WARMUP_PROGRAMS] * 2 + ["ops.matmul"] * 2
    with pytest.raises(ValueError):
        wu.warmup_programs(("huge",), ("portable",))
    with pytest.raises(ValueError):
        wu.warmup_programs(("tiny",), ("exact",))
