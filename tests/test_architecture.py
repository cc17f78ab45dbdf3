"""The import graph of ptojax keeps the layering of docs/architecture.md.

Every module is parsed with `ast`; its imports of ptojax modules, at module
level, inside functions and under `if TYPE_CHECKING:` alike, are edges of the
graph (EDGES). `from pkg import x` is an edge to the module pkg.x when there
is one, else to pkg. Importing a submodule also runs its package's __init__;
that implicit edge is not counted (a package __init__ that re-exports its
submodules is no cycle), so the rules are about what a module names, which is
what its author chose.

The layering rules read RUN_EDGES, the edges less those under
`if TYPE_CHECKING:` (only the type checker runs them). The cycle and the
private-name rules read every edge: a circle that closes only through a
function-level or a type-only import still ties its modules together (neither
can be read, moved or tested without the other, and the deferred import only
hides the circle from the interpreter), and a private name is private to its
module whoever imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ptojax

ROOT = Path(ptojax.__file__).resolve().parent

# Layers, lowest first: a module may import its own layer and the ones below.
LAYERS = (
    ("tables", ("ptojax.tables", "ptojax.families", "ptojax.isa.forms", "ptojax.cas_order",
                "ptojax.version", "ptojax.compile_cache", "ptojax.executables", "ptojax._x64",
                "ptojax._hugepages",
                "ptojax.pytree")),
    ("state", ("ptojax.indexing", "ptojax.state", "ptojax.storage", "ptojax.block_domain",
               "ptojax.layouts*",
               "ptojax.numerics", "ptojax.result", "ptojax.tileview")),
    # instruction words; the State's interchange format (it needs only the State)
    ("isa", ("ptojax.isa*", "ptojax.interop*")),
    ("ops", ("ptojax.ops.*",)),
    # the word-stream executor
    ("run", ("ptojax.machine",)),
    # batches of streams; the golden results run real bundles through both, and the
    # pj.ops namespace (ops/__init__.py) names pj.golden's helpers by their first names
    ("batch", ("ptojax.batch*", "ptojax.golden*", "ptojax.ops", "ptojax.warmup")),
    # the public namespace; the oracle, which only the layers above may use
    ("api", ("ptojax", "ptojax.reference*")),
    # campaigns; the report of one run and the guided tour's steps, which the CLI prints
    ("fuzz", ("ptojax.fuzz*", "ptojax.report", "ptojax.demo")),
    ("cli", ("ptojax.cli*", "ptojax.__main__")),
)

# The reference model is written from the spec, not from the executor: it imports
# itself and only these (tables, the family records and the catalog; the public
# State and RunResult at its edges, and the check that a State's block lies in the
# domain both models run from; the CAS lane orders, an implementation-defined option both models select;
# the ieee profile's codecs of the wider formats).
REFERENCE_MAY_IMPORT = ("ptojax.reference*", "ptojax.tables", "ptojax.families",
                        "ptojax.isa.forms", "ptojax.state", "ptojax.block_domain", "ptojax.result", "ptojax.cas_order",
                        "ptojax.numerics")


def _matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return module.startswith(pattern[:-1])
    if pattern.endswith("*"):
        return module == pattern[:-1] or module.startswith(pattern[:-1] + ".")
    return module == pattern


def _modules() -> dict:
    """{module name: path} of every module of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("ptojax",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> list:
    """(line, imported module, imported name or None, type only) of every ptojax
    import, wherever it stands; `type only`: under `if TYPE_CHECKING:`."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text(), str(path))
    # imports under `if TYPE_CHECKING:` name types for the checker only: no edge at run time
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                 for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        typing = id(node) in type_only
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None, typing) for a in node.names if _matches(a.name, "ptojax*")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not _matches(target, "ptojax*"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub, None, typing) if sub in MODULES
                           else (node.lineno, target, a.name, typing))
    return out


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}
# every import edge, run-time, function-level and type-only: (line, module, name or None)
EDGES = {m: [(line, t, name) for line, t, name, _ in imports] for m, imports in IMPORTS.items()}
# the edges the interpreter runs (those under `if TYPE_CHECKING:` left out): the layering's
RUN_EDGES = {m: [(line, t, name) for line, t, name, typing in imports if not typing]
             for m, imports in IMPORTS.items()}


def _layer(module: str) -> int:
    # the most specific pattern wins ("ptojax.ops" the namespace over "ptojax.ops.*")
    best = None
    for rank, (_, patterns) in enumerate(LAYERS):
        for p in patterns:
            if _matches(module, p) and (best is None or len(p.rstrip("*")) > best[0]):
                best = (len(p.rstrip("*")), rank)
    assert best is not None, f"{module} has no layer in LAYERS"
    return best[1]


def test_every_module_has_a_layer():
    for m in MODULES:
        _layer(m)


def test_imports_point_down_the_layers():
    bad = []
    for m, edges in RUN_EDGES.items():
        for line, target, _ in edges:
            if _layer(target) > _layer(m):
                bad.append(f"{MODULES[m].relative_to(ROOT.parent)}:{line}: {m} "
                           f"({LAYERS[_layer(m)][0]}) imports {target} ({LAYERS[_layer(target)][0]})")
    assert not bad, "\n".join(bad)


def test_the_reference_imports_only_tables_the_catalog_and_itself():
    bad = [f"{m}:{line} imports {target}"
           for m, edges in RUN_EDGES.items() if _matches(m, "ptojax.reference*")
           for line, target, _ in edges
           if not any(_matches(target, p) for p in REFERENCE_MAY_IMPORT)]
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_module():
    """A leading underscore marks a name private to its module (a private
    *module*, such as _x64, is private to the package and may be imported in it).
    Every edge counts: a type-only import of a private name couples the modules
    as much as a run-time one."""
    bad = [f"{m}:{line} imports {name} from {target}"
           for m, edges in EDGES.items() for line, target, name in edges
           if name and name.startswith("_") and not name.startswith("__")]
    assert not bad, "\n".join(bad)


def _cycles() -> list:
    """Strongly connected components of more than one module (or a self-import)
    of the graph of every edge (EDGES)."""
    graph = {m: sorted({t for _, t, _ in edges if t in MODULES}) for m, edges in EDGES.items()}
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph[v]:
                out.append(sorted(scc))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No circle of imports, counting every edge: those inside functions and
    under `if TYPE_CHECKING:` too. Deferring an import (into a function, or to
    the type checker) lets a circle run, but its modules still need each other:
    a record both sides use belongs in a module below both (as ops/family.py's
    RowWrite, ops/matrix_records.py, reference/cas_trace.py)."""
    lines = []
    for scc in _cycles():
        edges = sorted({f"{m}:{line} imports {target}"
                        for m in scc for line, target, _ in EDGES[m] if target in scc})
        lines.append(f"circle of {', '.join(scc)}: " + "; ".join(edges))
    assert not lines, "\n".join(lines)


@pytest.mark.parametrize("family", ["commands", "transport", "mgather_cas", "matrix", "postprocess",
                                    "shared", "shared_transport"])
def test_operation_families_have_one_name_on_both_sides(family):
    assert f"ptojax.ops.{family}" in MODULES and f"ptojax.reference.{family}" in MODULES


def test_importing_ptojax_starts_no_jax_backend():
    """`ptojax fuzz --distributed` calls jax.distributed.initialize after the
    imports, and JAX refuses it once a backend exists (a module-level constant
    computed with jnp did start one)."""
    import subprocess
    import sys
    code = ("import ptojax, ptojax.cli.fuzz, ptojax.fuzz.campaign\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge.backends_are_initialized(), 'importing ptojax started a backend'\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
