"""pyproject lists its packages by hand (scenarios/ and gates/ install as perfbench.scenarios and
perfbench.gates): the list must hold every package of the tree, so a new one cannot be left out of a wheel."""

from __future__ import annotations

from pathlib import Path

import tomllib
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_the_listed_packages_are_the_trees_packages_and_the_shipped_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = set(find_packages(str(ROOT), include=["model*", "perfbench*"]))
    mapped = {name for name, folder in config["package-dir"].items() if (ROOT / folder / "__init__.py").is_file()}
    assert mapped == {"perfbench.scenarios", "perfbench.scenarios.recipe", "perfbench.gates"}
    assert set(config["packages"]) == tree | mapped
    assert not (ROOT / "perfbench" / "scenarios").exists()  # one home for the shipped scenarios
