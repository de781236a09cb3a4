"""A folder is what it measured, not where it lay: new content at one path adds a point, the same content changes
nothing (a hash check only), a resumed run replaces its rows; `history forget` removes folders."""

from __future__ import annotations

from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history import extract
from perfbench.history.series import Filters, load_series
from perfbench.history.store import open_store, snapshots
from tests.cli_helpers import one_error_line


def _cli(*args: str):
    return CliRunner().invoke(main, ["history", *args])


def test_new_content_at_the_same_path_adds_a_point(tmp_path, sweep):
    db, folder = str(tmp_path / "h.sqlite"), tmp_path / "reports" / "sweep"
    for i in range(3):  # three pipelines, each writing its folder to the same workspace path
        sweep(folder, sha=f"{i + 1:040x}", gdr=2.0 + i, started_at=f"2026-12-0{i + 1}T10:00:00+00:00")
        result = _cli("ingest", str(folder), "--db", db)
        assert result.exit_code == 0 and result.stdout.startswith(f"added {folder.resolve()}"), result.output
    (series,) = load_series(open_store(db), Filters(family="speedup", plan="gdr", metric="ttft_ms"))
    assert sorted(round(p.value, 6) for p in series.points) == [2.0, 3.0, 4.0]
    assert {p.folder for p in series.points} == {str(folder.resolve())}


def test_the_same_content_again_costs_a_hash_check_only(tmp_path, sweep, monkeypatch):
    db = str(tmp_path / "h.sqlite")
    folder = sweep(tmp_path / "r", sha="a" * 40)
    assert _cli("ingest", str(folder), "--db", db).exit_code == 0
    stored = snapshots(open_store(db))

    def no_extraction(*_args: object) -> None:
        raise AssertionError("an unchanged folder was read again")

    monkeypatch.setattr("perfbench.history.commands.snapshot", no_extraction)
    again = _cli("ingest", str(folder), "--db", db)
    assert again.exit_code == 0 and again.stdout.strip() == f"unchanged {folder.resolve()}"
    assert snapshots(open_store(db)) == stored
    # near miss: the same folder with new content is read (and would be stored)
    sweep(folder, sha="b" * 40)
    assert "an unchanged folder was read again" in str(_cli("ingest", str(folder), "--db", db).exception)


def test_a_resumed_run_replaces_its_rows_and_another_run_of_the_commit_adds_one(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    folder = sweep(tmp_path / "r", sha="a" * 40, gdr=2.0)
    assert _cli("ingest", str(folder), "--db", db).exit_code == 0
    sweep(folder, sha="a" * 40, gdr=2.5)  # resumed: the same runs, started at the same time, now complete
    assert _cli("ingest", str(folder), "--db", db).stdout.startswith(f"replaced {folder.resolve()}")
    sweep(folder, sha="a" * 40, gdr=2.6, started_at="2026-12-02T10:00:00+00:00")  # measured again later
    assert _cli("ingest", str(folder), "--db", db).stdout.startswith(f"added {folder.resolve()}")
    values = sorted(p.value for s in snapshots(open_store(db)) for p in s.points
                    if (p.family, p.plan, p.metric) == ("speedup", "gdr", "ttft_ms"))
    assert values == [2.5, 2.6]


def test_forget_removes_a_folder_by_content_path_or_commit(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    folders = [sweep(tmp_path / f"f{i}", sha=c * 40) for i, c in enumerate("abc")]
    assert _cli("ingest", *map(str, folders), "--db", db).exit_code == 0
    gone = _cli("forget", str(folders[0]), "--db", db)
    assert gone.exit_code == 0 and gone.stdout.strip() == (
        f"forgot {folders[0].resolve()} (results, {'a' * 10}, 16 points)")
    by_sha = _cli("forget", "b" * 12, "--db", db)
    assert by_sha.exit_code == 0 and by_sha.stdout.startswith(f"forgot {folders[1].resolve()}")
    assert [s.path for s in snapshots(open_store(db))] == [str(folders[2].resolve())]
    # refused, nothing removed: a commit stored nowhere, a ref that is not hex, an option-shaped value
    assert "nothing stored matches" in one_error_line(_cli("forget", "deadbeef", "--db", db))
    assert "neither a folder nor a commit" in one_error_line(_cli("forget", "HEAD~1", "--db", db))
    assert "neither a folder nor a commit" in one_error_line(_cli("forget", "--", "--output=x", "--db", db))
    assert len(snapshots(open_store(db))) == 1


def test_forget_of_a_deleted_folder_uses_the_path_it_was_stored_from(tmp_path, sweep):
    db = str(tmp_path / "h.sqlite")
    folder = sweep(tmp_path / "gone", sha="c" * 40)
    assert _cli("ingest", str(folder), "--db", db).exit_code == 0
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    assert _cli("forget", str(folder), "--db", db).stdout.startswith(f"forgot {folder.resolve()}")
    assert snapshots(open_store(db)) == []


def test_content_hash_names_what_was_measured(tmp_path, sweep):
    a = sweep(tmp_path / "a", sha="a" * 40)
    b = sweep(tmp_path / "b", sha="a" * 40)
    assert extract.content_hash(a) == extract.content_hash(b)  # the same records at two paths
    sweep(b, sha="a" * 40, gdr=3.0)
    assert extract.content_hash(a) != extract.content_hash(b)
