"""Load an oracle scenario test file a second time with its runner replaced.

The oracle's test files (tests/test_reference_*.py) hold the golden vectors
and one test per ordered check, written against pj.reference.run. Loading such
a file again with `run` bound to pj.run makes the JAX executor meet every one
of them without a second copy of the scenarios.
"""

import importlib.util
import pathlib


def rebind(filename: str, runner, module_name: str) -> dict:
    """The test functions of tests/`filename`, with its `run` replaced by `runner`
    (or, for a dict, each named runner replaced: {"run": ..., "run_core": ...})."""
    spec = importlib.util.spec_from_file_location(
        module_name, pathlib.Path(__file__).with_name(filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, fn in (runner if isinstance(runner, dict) else {"run": runner}).items():
        setattr(module, name, fn)
    return {name: obj for name, obj in vars(module).items() if name.startswith("test_")}
