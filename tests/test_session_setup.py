"""tests/conftest.py's session setup: the persistent inductor cache's folder is named by the code and versions
(another source byte, another folder; a doc, the same), an override names it outright, heavy files go first, and
files that must not overlap share one xdist group."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from tests.conftest import (
    HEAVY_FILES,
    SHARED_GROUPS,
    TEST_CACHE_ENV,
    file_group,
    heavy_first,
    persistent_cache_folder,
    source_key,
)


def _tree(root: Path) -> Path:
    for name in ("model/layers/attn.py", "perfbench/cli.py", "docs/x.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x = 1\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    return root


def test_the_cache_key_follows_the_sources_and_not_the_docs(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    key = source_key(root)
    assert key == source_key(root)  # the same code, the same folder (both xdist workers, the next CI run)
    (root / "docs" / "x.md").write_text("other prose\n")
    assert source_key(root) == key  # near miss: a doc is not a kernel's input
    for changed in ("model/layers/attn.py", "perfbench/cli.py", "pyproject.toml"):
        before = (root / changed).read_text()
        (root / changed).write_text(before + "# edited\n")
        assert source_key(root) != key, changed
        (root / changed).write_text(before)
    (root / "perfbench" / "new.py").write_text("")
    assert source_key(root) != key  # a new (even empty) module is new code


def test_the_cache_folder_is_per_user_and_keyed_unless_overridden(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    folder = persistent_cache_folder({}, root)
    assert folder == Path(platformdirs.user_cache_dir("perfbench")) / "test-inductor" / source_key(root)
    assert persistent_cache_folder({TEST_CACHE_ENV: str(tmp_path / "ci")}, root) == tmp_path / "ci"
    assert persistent_cache_folder({TEST_CACHE_ENV: ""}, root) == folder  # an empty value is no override


def test_heavy_files_go_first_and_the_rest_keep_their_order() -> None:
    light = ["tests/a/test_one.py", "tests/b/test_two.py"]
    order = heavy_first([light[0], HEAVY_FILES[2], light[1], HEAVY_FILES[0]])
    assert order == [HEAVY_FILES[0], HEAVY_FILES[2], *light]
    assert heavy_first(light) == light


def test_the_cpu_hog_never_runs_beside_the_smoke_gate() -> None:
    assert file_group("tests/perfbench/analysis/test_stability.py") == file_group("tests/test_ci_smoke.py")
    assert file_group("tests/a/test_one.py") == "tests/a/test_one.py"  # near miss: any other file is its own group
    assert all(Path(__file__).resolve().parents[1].joinpath(name).is_file() for name in SHARED_GROUPS)
