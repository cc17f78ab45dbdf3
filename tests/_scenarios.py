"""Load an oracle scenario test file a second time with its runner replaced.

The oracle's test files (tests/test_reference_*.py) hold the golden vectors
and one test per ordered check, written against pj.reference.run. Loading such
a file again with `run` bound to pj.run makes the JAX executor meet every one
of them without a second copy of the scenarios.
"""

import functools
import importlib.util
import pathlib


def rebind(filename: str, runner, module_name: str, *, reference_only=None) -> dict:
    """The test functions of tests/`filename`, with its `run` replaced by `runner`
    (or, for a dict, each named runner replaced: {"run": ..., "run_core": ...}).

    reference_only: when given, the names of the file's tests that run no
    bundle (encoders, the decoder, reference-side helpers): they are left out,
    so they run once, in the oracle's file, and every other test fails unless
    it calls a replaced runner at least once: a copy that never reaches the
    executor it is bound to would test nothing of its own."""
    spec = importlib.util.spec_from_file_location(
        module_name, pathlib.Path(__file__).with_name(filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls = [0]

    def counted(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            calls[0] += 1
            return fn(*args, **kwargs)
        return call

    runners = runner if isinstance(runner, dict) else {"run": runner}
    for name, fn in runners.items():
        setattr(module, name, counted(fn) if reference_only is not None else fn)
    tests = {name: obj for name, obj in vars(module).items() if name.startswith("test_")}
    if reference_only is None:
        return tests
    unknown = sorted(set(reference_only) - tests.keys())
    assert not unknown, f"reference_only names no test of {filename}: {unknown}"

    def must_call(test):
        @functools.wraps(test)          # keeps the parametrize marks and the signature
        def checked(*args, **kwargs):
            before = calls[0]
            test(*args, **kwargs)
            assert calls[0] > before, (
                f"{test.__name__} never called {'/'.join(runners)}: it tests nothing of its "
                f"own on this executor (list it in reference_only)")
        return checked

    return {name: must_call(test) for name, test in tests.items() if name not in reference_only}
