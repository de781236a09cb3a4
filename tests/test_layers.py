"""The stages depend one way (pyproject's import-linter contracts), and no module imports itself through others,
counting imports inside functions (the lazy ones) and under TYPE_CHECKING too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import grimp

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contracts_hold():
    assert shutil.which("lint-imports"), "import-linter is a dev dependency"
    # this checkout's perfbench, not the one an editable install may point at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stdout[-4000:]
    tally = re.search(r"Contracts: (\d+) kept, (\d+) broken", done.stdout)
    assert tally, done.stdout[-4000:]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert (int(tally[1]), int(tally[2])) == (len(contracts), 0), done.stdout[-4000:]
    for contract in contracts:
        assert f"{contract['name']} KEPT" in done.stdout, contract["name"]


def test_every_top_level_module_is_in_a_layer():
    """A module in no layer may import any stage unchecked."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {name.strip() for c in contracts if c["type"] == "layers" for layer in c["layers"]
               for name in re.split(r"[|:]", layer)}
    top_level = {f"perfbench.{p.stem}" for p in (ROOT / "perfbench").iterdir()
                 if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert top_level - layered == set()


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycles_counting_lazy_and_type_checking_imports():
    # a cycle kept apart only by a lazy or TYPE_CHECKING import is still a cycle: a module that cannot be
    # imported at the top of the other, and annotations that name a class the module may not load
    graph = grimp.build_graph("perfbench", "model")
    assert len(graph.modules) > 100  # the whole tree was read
    # grimp reads both kinds: one import of each, known to be there
    assert graph.direct_import_exists(importer="perfbench.cli", imported="perfbench.run.runner")  # in a function
    assert graph.direct_import_exists(importer="model", imported="model.modeling")  # under TYPE_CHECKING
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.z")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y", "a.z"]]
