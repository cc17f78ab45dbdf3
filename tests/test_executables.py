"""Executables kept on disk (ptojax/executables.py).

The executor's own round trip through a fresh process is
test_compile_cache.py's reload test; these use a one-line program, which
compiles in milliseconds, on a temporary directory.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptojax import executables as ex


def scale(x, y, n, flip=False):
    return (x * n + y, -x if flip else x)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "executables"
    monkeypatch.setattr(ex, "executables_dir", lambda: str(d))
    return d


def _fresh(**kw):
    """A new PersistentJit of `scale`: what a new process starts with."""
    return ex.PersistentJit(scale, static_argnames=("n", "flip"), **kw)


@pytest.fixture
def seen():
    """The jax.monitoring events recorded during the test."""
    events: list = []

    def listen(event, **_):
        events.append(event)
    jax.monitoring.register_event_listener(listen)
    yield events
    jax.monitoring.unregister_event_listener(listen)


def test_a_later_instance_loads_what_the_first_wrote(folder, caplog, seen):
    x, y = jnp.arange(4, dtype=jnp.int32), jnp.int32(3)
    first = _fresh()
    out = first(x, y, n=5)
    assert seen.count(ex.WRITTEN_EVENT) == 1
    files = sorted(os.listdir(folder))
    assert sorted(f.rsplit(".")[-1] for f in files) == ["bin", "ref"]
    assert all(f.startswith("scale-") for f in files)

    second = _fresh()
    with caplog.at_level(logging.DEBUG, logger="ptojax.executables"):
        again = second(x, y, 5)                  # positional static: the same program
    assert "loaded executable" in caplog.text
    assert seen.count(ex.LOADED_EVENT) == 1
    assert sorted(os.listdir(folder)) == files
    for a, b in zip(out, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert second._cache_size() == 1


def test_a_process_keeps_only_the_recently_used_executables_loaded(folder, monkeypatch, seen):
    """Each loaded XLA:CPU executable holds its own memory maps, and a process
    may have 65,530: the least recently used ones are dropped, and loaded again
    from their files when called."""
    monkeypatch.setattr(ex, "MAX_LOADED", 2)
    f = _fresh()
    x = jnp.arange(4, dtype=jnp.int32)
    first = np.asarray(f(x, jnp.int32(1), n=2)[0])
    f(x, jnp.int32(1), n=3)
    f(x, jnp.int32(1), n=2)                       # used again: n=3 is now the oldest
    f(x, jnp.int32(1), n=4)
    assert len(f._executables) == 2 and f._cache_size() == 3
    assert seen.count(ex.LOADED_EVENT) == 0
    f(x, jnp.int32(1), n=3)                       # dropped: loaded from its file
    assert seen.count(ex.LOADED_EVENT) == 1 and seen.count(ex.WRITTEN_EVENT) == 3
    np.testing.assert_array_equal(np.asarray(f(x, jnp.int32(1), n=2)[0]), first)
    assert seen.count(ex.LOADED_EVENT) == 2       # n=2 was the oldest when n=3 came back


def test_every_static_value_and_shape_is_a_program_of_its_own(folder):
    f = _fresh()
    x = jnp.arange(4, dtype=jnp.int32)
    f(x, jnp.int32(1), n=2)
    f(x, jnp.int32(1), n=3)
    f(x, jnp.int32(1), n=3, flip=True)
    f(jnp.arange(8, dtype=jnp.int32), jnp.int32(1), n=3)
    f(x.astype(jnp.float32), jnp.float32(1), n=3)
    f(x, jnp.int32(1), n=3)                       # in memory already
    assert f._cache_size() == 5
    assert len(os.listdir(folder)) == 10          # a .ref and a .bin each
    assert np.asarray(f(x, jnp.int32(1), n=3, flip=True)[1]).tolist() == [0, -1, -2, -3]


def test_a_changed_source_traces_again_but_loads_the_same_program(folder, monkeypatch, seen):
    x = jnp.arange(4, dtype=jnp.int32)
    _fresh()(x, jnp.int32(1), n=2)
    monkeypatch.setattr(ex, "source_digest", lambda: "another ptojax")
    _fresh()(x, jnp.int32(1), n=2)
    files = os.listdir(folder)
    assert sum(f.endswith(".ref") for f in files) == 2    # a key of its own
    assert sum(f.endswith(".bin") for f in files) == 1    # the same program text
    assert seen.count(ex.WRITTEN_EVENT) == 1 and seen.count(ex.LOADED_EVENT) == 1


@jax.tree_util.register_pytree_node_class
class Tagged:
    """A pytree with static metadata the program never reads (as a State's Rules)."""

    def __init__(self, x, tag):
        self.x, self.tag = x, tag

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, children):
        return cls(children[0], tag)


def double(t):
    return Tagged(t.x * 2, t.tag)


def test_one_program_serves_pytrees_of_other_metadata(folder, seen):
    """The same program text for two keys that differ only in pytree metadata:
    one executable, called with each key's own pytrees."""
    x = jnp.arange(3, dtype=jnp.int32)
    for tag in ("a", "b", "a", "b"):             # each a fresh process's first call
        out = ex.PersistentJit(double, static_argnames=())(Tagged(x, tag))
        assert out.tag == tag and np.asarray(out.x).tolist() == [0, 2, 4]
    files = os.listdir(folder)
    assert sum(f.endswith(".ref") for f in files) == 2
    assert sum(f.endswith(".bin") for f in files) == 1
    assert seen.count(ex.WRITTEN_EVENT) == 1 and seen.count(ex.LOADED_EVENT) == 3


def test_an_unreadable_file_is_compiled_afresh_and_replaced(folder, caplog):
    x, y = jnp.arange(4, dtype=jnp.int32), jnp.int32(3)
    want = np.asarray(_fresh()(x, y, n=5)[0])
    (path,) = [folder / f for f in os.listdir(folder) if f.endswith(".bin")]
    path.write_bytes(b"not an executable")
    with caplog.at_level(logging.WARNING, logger="ptojax.executables"):
        got = _fresh()(x, y, n=5)
    assert "could not load" in caplog.text
    np.testing.assert_array_equal(np.asarray(got[0]), want)
    assert path.stat().st_size > 100                     # replaced by a good one
    np.testing.assert_array_equal(np.asarray(_fresh()(x, y, n=5)[0]), want)


def test_donated_arguments_are_donated_after_a_load(folder):
    x, y = jnp.arange(4, dtype=jnp.int32), jnp.int32(3)
    _fresh(donate_argnums=(0,))(x + 0, y, n=2)
    x = x + 0
    out = _fresh(donate_argnums=(0,))(x, y, n=2)
    assert x.is_deleted()
    assert np.asarray(out[0]).tolist() == [3, 5, 7, 9]


def test_no_folder_means_a_plain_compile(monkeypatch, seen):
    monkeypatch.setattr(ex, "executables_dir", lambda: None)
    out = _fresh()(jnp.arange(3, dtype=jnp.int32), jnp.int32(0), n=2)
    assert np.asarray(out[0]).tolist() == [0, 2, 4]
    assert ex.WRITTEN_EVENT not in seen


KEY = textwrap.dedent('''\
    import jax, jax.numpy as jnp
    from ptojax.executables import PersistentJit
    from ptojax.machine import stream, STREAM_STATIC
    import ptojax as pj
    f = PersistentJit(stream, static_argnames=STREAM_STATIC)
    cfg = pj.preset("tiny")
    key = ((cfg, 8, frozenset({"TLOAD", "TSTORE", "MATMUL", "SHARED"}), False, False),
           jax.tree_util.tree_structure((1, 2)), ((4,), jnp.uint32, False), True)
    print(f._file_key(key))
''')


def test_a_programs_file_name_is_the_same_in_every_process(tmp_path):
    """A set's iteration order changes with the string hash seed from process
    to process; the key must not."""
    script = tmp_path / "key.py"
    script.write_text(KEY)
    keys = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PTOJAX_JAX_CACHE="")
        p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        keys.add(p.stdout.strip())
    assert len(keys) == 1, keys
