"""The docs name paths that exist: README's Layout table (every path it names, and every package and module of
perfbench/ in it), the module paths docs/architecture.md names, and README's test command is .ci/run's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(r"`([^`]+)`")
# a backticked path: a folder (`measure/`) or a Python file (`run/ab.py`, `blocks.py`)
PATH = re.compile(r"^[\w./-]+(/|\.py)$")
# a backticked dotted name: a module (`model.tracing`) or a name in one (`blocks.measure_block_group`,
# `results.load_folder`); `perfbench.` ones are scenario keys, and file names (`ab.json`) are not modules
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
FILE_SUFFIXES = {"json", "jsonl", "csv", "html", "py", "md", "yaml", "gz", "env", "txt", "db"}


def layout_rows(readme: str) -> list[tuple[list[str], list[str]]]:
    """(paths of the first column, backticked paths of the second) per row of the `## Layout` table."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 2 or cells[0] in ("path", "---"):
            continue
        rows.append((CODE.findall(cells[0]), [p for p in CODE.findall(cells[1]) if PATH.match(p)]))
    return rows


def layout_problems(readme: str, root: Path) -> list[str]:
    """Paths the Layout table names that are not in the tree: a first-column path at the root, a path in the
    description under one of its row's folders (or at the root)."""
    problems = []
    rows = layout_rows(readme)
    if not rows:
        return ["no rows in the Layout table"]
    for paths, named in rows:
        problems += [f"{p}: not in the tree" for p in paths if not (root / p).exists()]
        folders = [root / p for p in paths if p.endswith("/")] + [root]
        problems += [f"{p} (in the row of {', '.join(paths)}): not in the tree" for p in named
                     if not any((folder / p).exists() for folder in folders)]
    return problems


def unlisted_parts(readme: str, root: Path) -> list[str]:
    """perfbench's packages and top-level modules that no first-column path of the Layout table names."""
    listed = {p.rstrip("/") for paths, _ in layout_rows(readme) for p in paths}
    package = root / "perfbench"
    parts = [p for p in package.iterdir() if (p / "__init__.py").is_file() or (p.suffix == ".py"
                                                                               and p.name != "__init__.py")]
    return sorted(str(p.relative_to(root)) for p in parts if str(p.relative_to(root)) not in listed)


def _modules_named(first: str, root: Path) -> list[Path]:
    """The modules and packages a dotted name's first part can name: `model`, or a module or package anywhere
    under perfbench/ or model/ (`blocks` is perfbench/measure/blocks.py)."""
    if first == "model":
        return [root / "model"]
    found = [p for base in ("perfbench", "model") for p in (root / base).rglob(first) if (p / "__init__.py").is_file()]
    return found + [p for base in ("perfbench", "model") for p in (root / base).rglob(f"{first}.py")]


def _name_in(module: Path, rest: list[str]) -> bool:
    """Does `rest` (submodules, then a name) lead somewhere inside `module`? A name counts when its module's
    source mentions it (defined or re-exported)."""
    for part in rest:
        if module.is_dir() and (module / part).is_dir():
            module = module / part
        elif module.is_dir() and (module / f"{part}.py").is_file():
            module = module / f"{part}.py"
        else:
            source = module / "__init__.py" if module.is_dir() else module
            return re.search(rf"\b{re.escape(part)}\b", source.read_text()) is not None
    return True


def doc_path_problems(text: str, root: Path) -> list[str]:
    """Backticked paths and module names of a doc that are not in the tree. A bare file name (`blocks.py`) may
    be anywhere under perfbench/ or model/; a path with a folder may start at the root, perfbench/ or model/; a
    dotted name whose first part is a module must lead to a module or a name its source mentions."""
    problems = []
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # fenced blocks would pair the backticks wrongly
    for token in sorted(set(CODE.findall(text))):
        parts = token.split(".")
        if DOTTED.match(token) and parts[0] != "perfbench" and parts[-1] not in FILE_SUFFIXES:
            modules = _modules_named(parts[0], root)
            if modules and not any(_name_in(m, parts[1:]) for m in modules):
                problems.append(f"{token}: not in the code")
        elif PATH.match(token) and not token.startswith(("-", ".")):
            if "/" in token.rstrip("/"):
                found = any((base / token).exists() for base in (root, root / "perfbench", root / "model"))
            else:
                found = any(root.glob(f"perfbench/**/{token}")) or any(root.glob(f"model/**/{token}")) or \
                    (root / token).exists()
            if not found:
                problems.append(f"{token}: not in the tree")
    return problems


def readme_test_command(readme: str) -> list[str]:
    """Command 2 of README's first code block (the dev install and the tests), without its comments."""
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    command = block.split("\n# 2.", 1)[1].split("\n", 1)[1]
    return [line for line in command.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ci_command(script: str) -> list[str]:
    """The commands of .ci/run, without the shebang, comments, `set` and the `cd` to the repository."""
    return [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")
            and not line.startswith(("set ", "cd "))]


def test_every_path_the_readme_layout_table_names_exists() -> None:
    assert layout_problems((ROOT / "README.md").read_text(), ROOT) == []


def test_every_perfbench_package_and_module_is_in_the_layout_table() -> None:
    assert unlisted_parts((ROOT / "README.md").read_text(), ROOT) == []


def test_a_moved_module_in_the_layout_table_is_named(tmp_path: Path) -> None:
    (tmp_path / "perfbench" / "run").mkdir(parents=True)
    (tmp_path / "perfbench" / "measure").mkdir()
    (tmp_path / "perfbench" / "measure" / "blocks.py").touch()
    (tmp_path / "perfbench" / "measure" / "__init__.py").touch()
    (tmp_path / "perfbench" / "run" / "__init__.py").touch()
    (tmp_path / "perfbench" / "errors.py").touch()
    table = "# x\n\n## Layout\n\n| path | what |\n|---|---|\n| `perfbench/run/` | {run} |\n{measure}\n## Next\n"
    moved = table.format(run="`blocks.py` (interleaved blocks)", measure="")
    assert layout_problems(moved, tmp_path) == ["blocks.py (in the row of perfbench/run/): not in the tree"]
    assert unlisted_parts(moved, tmp_path) == ["perfbench/errors.py", "perfbench/measure"]
    # near miss: the same table with the module where it is, and every part listed
    placed = table.format(run="runner", measure="| `perfbench/measure/`, `perfbench/errors.py` | `blocks.py` |")
    assert layout_problems(placed, tmp_path) == []
    assert unlisted_parts(placed, tmp_path) == []


def test_the_module_paths_docs_architecture_names_exist() -> None:
    assert doc_path_problems((ROOT / "docs" / "architecture.md").read_text(), ROOT) == []


def test_a_stale_module_path_in_a_doc_is_named() -> None:
    stale = "`model.scopes` adds the ranges; `run/measure.py` holds the steps; `results._checked_keys` checks"
    assert doc_path_problems(stale, ROOT) == ["model.scopes: not in the code", "results._checked_keys: not in the "
                                              "code", "run/measure.py: not in the tree"]
    # near miss: where those things live now, names inside modules, a scenario key and a file name
    assert doc_path_problems("`model/tracing.py`, `measure/run_steps.py`, `model.tracing.Scopes`, `blocks.py`, "
                             "`results.load_folder`, `blocks.measure_block_group`, `perfbench.targets`, `ab.json`",
                             ROOT) == []


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = readme_test_command((ROOT / "README.md").read_text())
    assert readme and any("python -m mypy" in line for line in readme)
    assert readme == ci_command((ROOT / ".ci" / "run").read_text())
    # near miss and fault: a README whose command drifted from the script
    drifted = (ROOT / "README.md").read_text().replace("python -m mypy && ", "")
    assert readme_test_command(drifted) != ci_command((ROOT / ".ci" / "run").read_text())
