"""Every repository path and every test a document cites exists, so a reader who
follows a reference finds it (docs/*.md and README.md)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
# a repository path: tests/..., ptojax/..., ...; docs/arch/... are the spec's own
PATH = re.compile(r"(?<![\w/.-])((?:tests|ptojax|examples|benchmarks|docs|\.ci)/[\w./*-]*\w)")
TEST = re.compile(r"`(test_\w+)`")
TEST_DEFS = {name for p in (ROOT / "tests").glob("*.py")
             for name in re.findall(r"def (test_\w+)", p.read_text())}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_cited_paths_exist(doc):
    missing = [p for p in PATH.findall(doc.read_text())
               if not p.startswith("docs/arch/") and not list(ROOT.glob(p))]
    assert not missing, f"{doc.name} cites {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_cited_tests_exist(doc):
    # a name ending in "_" is a prefix (`test_check_6_*`); a test module counts too
    missing = [t for t in TEST.findall(doc.read_text())
               if not (t in TEST_DEFS or (ROOT / "tests" / f"{t}.py").exists()
                       or (t.endswith("_") and any(d.startswith(t) for d in TEST_DEFS)))]
    assert not missing, f"{doc.name} cites {missing}"
