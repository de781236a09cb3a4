"""Hostile input to the history store: credentials in store URLs never shown, bad options and bad folders refused
with one line (exit 2) before anything is stored, and one bad series never breaks the others."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfbench.cli import main
from perfbench.history import location
from perfbench.history.store import open_store, snapshots
from tests.cli_helpers import one_error_line


def _cli(*args: str):
    return CliRunner().invoke(main, ["history", *args])


SECRET = "s3cr@t/pw"


@pytest.mark.parametrize("url", [
    f"postgresql://me:{SECRET}@127.0.0.1:9/none",  # an unencoded @ and / in the password
    f"postgresql://me@127.0.0.1:9/none?password={SECRET}&sslmode=disable",
    f"postgresql://me@127.0.0.1:9/none?sslmode=disable&sslpassword={SECRET}",
    "postgresql://me:s3cr?t@127.0.0.1:9/none",  # a ? in the password
    f"postgresql://me@127.0.0.1:9/none?PassWord={SECRET}",
    f"postgres://me:{SECRET}@127.0.0.1:9/none",
    f"postgresql://:{SECRET}@127.0.0.1:9/none?host=/tmp",
    f"postgresql://me@127.0.0.1:9/none?sslmode=require&authtoken={SECRET}",
])
def test_a_store_url_never_shows_its_password(url, monkeypatch):
    shown = location.shown(url)
    assert "s3cr" not in shown and "127.0.0.1:9/none" in shown
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", "1")
    for args in (("show", "--db", url), ("ingest", "/nonexistent-folder", "--db", url), ("migrate", "--db", url)):
        result = _cli(*args)
        assert result.exit_code == 2 and "s3cr" not in result.output, result.output


def test_a_key_value_string_never_shows_its_password():
    assert location.shown("host=127.0.0.1 password = s3cr dbname=h") == "host=127.0.0.1 password = *** dbname=h"


def test_a_url_without_credentials_is_shown_as_given():
    for url in ("postgresql://me@db.example:5432/h", "postgresql://db.example/h?sslmode=require", "/tmp/h.sqlite"):
        assert location.shown(url) == url


def test_an_unparsable_port_is_one_line():
    line = one_error_line(_cli("show", "--db", "postgresql://me:pw@host:notaport/db"))
    assert "not a database URL" in line and "pw" not in line.replace("postgresql", "")


def test_an_empty_db_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBENCH_HISTORY_DB", str(tmp_path / "env.sqlite"))
    assert "--db is empty" in one_error_line(_cli("show", "--db", ""))
    assert "--db is empty" in one_error_line(_cli("show", "--db", "  "))
    assert _cli("show").exit_code == 0  # near miss: no --db at all takes the environment's store


@pytest.mark.parametrize("wait", ["-5", "inf", "nan", "-inf", "soon"])
def test_a_wait_that_is_not_a_finite_number_of_seconds_is_refused(wait, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", wait)
    assert "PERFBENCH_HISTORY_WAIT_S" in one_error_line(_cli("show", "--db", str(tmp_path / "h.sqlite")))


def test_a_wait_of_zero_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBENCH_HISTORY_WAIT_S", "0")
    assert _cli("show", "--db", str(tmp_path / "h.sqlite")).exit_code == 0


@pytest.fixture
def populated(tmp_path, sweep) -> str:
    db = str(tmp_path / "h.sqlite")
    assert _cli("ingest", str(sweep(tmp_path / "good", sha="a" * 40)), "--db", db).exit_code == 0
    return db


def test_bad_options_of_changes_and_page_are_refused(tmp_path, populated):
    assert "--min-magnitude nan" in one_error_line(_cli("changes", "--db", populated, "--min-magnitude", "nan"))
    assert "--min-magnitude" in one_error_line(_cli("page", "--db", populated, "--out", str(tmp_path / "p.html"),
                                                    "--min-magnitude", "inf"))
    assert "--since is empty" in one_error_line(_cli("changes", "--db", populated, "--since", ""))
    for url in ("javascript:alert(1)//{sha}", "data:text/html,{sha}", "file:///etc/{sha}", "//evil/{sha}"):
        line = one_error_line(_cli("page", "--db", populated, "--out", str(tmp_path / "p.html"), "--commit-url", url))
        assert "--commit-url" in line
    assert not (tmp_path / "p.html").exists()
    ok = _cli("page", "--db", populated, "--out", str(tmp_path / "p.html"), "--commit-url",
              "https://github.com/o/r/commit/{sha}", "--min-magnitude", "0")
    assert ok.exit_code == 0, ok.output


def _rewrite_run(folder: Path, line: int, change) -> None:
    lines = (folder / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[line - 1])
    change(record)
    lines[line - 1] = json.dumps(record)
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")


def _set_sample(value: float):
    def change(record: dict) -> None:
        record["samples"]["ttft_ms"][3] = value
    return change


@pytest.mark.parametrize(("change", "field"), [
    (_set_sample(-4.0), "samples.ttft_ms holds -4.0"),
    (_set_sample(1e308), "samples.ttft_ms holds 1e+308"),
    (_set_sample(0.0), "samples.ttft_ms holds 0.0"),
    (lambda r: r["samples"].__setitem__("tpot_ms", []), "samples.tpot_ms is empty"),
    (lambda r: r.__setitem__("schema_version", -3), "schema_version"),
    (lambda r: r["env"].__setitem__("git_sha", "HEAD~1"), "env.git_sha: 'HEAD~1'"),
    (lambda r: r["env"].__setitem__("git_sha", "--output=/tmp/x"), "env.git_sha: '--output=/tmp/x'"),
    (lambda r: r["summary"].__setitem__("compile_s", -1.0), "summary.compile_s"),
])
def test_a_folder_with_an_unusable_value_is_refused_naming_folder_and_field(change, field, tmp_path, sweep,
                                                                            populated):
    before = snapshots(open_store(populated))
    bad = sweep(tmp_path / "bad", sha="b" * 40)
    for line in (1, 2, 3):
        if field.startswith("env.git_sha"):
            _rewrite_run(bad, line, change)  # a folder's runs agree on their commit
    if not field.startswith("env.git_sha"):
        _rewrite_run(bad, 2, change)
    other = sweep(tmp_path / "other", sha="c" * 40)
    line = one_error_line(_cli("ingest", str(other), str(bad), "--db", populated))
    assert str(bad / "results.jsonl") in line and field in line, line
    assert snapshots(open_store(populated)) == before  # nothing stored, not even the good folder


def test_a_bad_stored_point_breaks_neither_its_neighbours_nor_other_series(tmp_path, sweep):
    """A store written before ingest checked samples may hold a negative or huge point: changes and page still
    answer for every series, the bad point left out of its own."""
    from tests.perfbench.history.conftest import make_repo

    shas = make_repo(tmp_path / "repo", 8)
    folders = [str(sweep(tmp_path / f"c{i}", sha=sha, gdr=2.2 if i < 4 else 1.7)) for i, sha in enumerate(shas)]
    db = str(tmp_path / "h.sqlite")
    assert _cli("ingest", *folders, "--db", db, "--repo", str(tmp_path / "repo")).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute("update points set value = -1.0, low = -2.0 where family = 'median' and plan = 'all off' "
                     "and metric = 'ttft_ms' and id % 3 = 0")
        conn.execute("update points set value = 1e308, high = 1e308 where family = 'speedup' and plan = 'rope' "
                     "and metric = 'tpot_ms'")
    changes = _cli("changes", "--db", db, "--plan", "gdr")
    assert changes.exit_code == 0 and "gdr TTFT speed-up 2.20x -> 1.70x" in changes.stdout, changes.output
    assert _cli("changes", "--db", db).exit_code == 0


def test_nothing_option_shaped_reaches_git(tmp_path, monkeypatch):
    """git_order's calls take a hex sha only, after --end-of-options: an option-shaped value is never run, and a
    ref given by the user (--since) is read as a ref, never as an option (no file written)."""
    import subprocess

    from perfbench.history import git_order
    from tests.perfbench.history.conftest import make_repo

    (sha,) = make_repo(tmp_path / "repo", 1)
    repo = tmp_path / "repo"
    target = tmp_path / "written"
    calls: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(args, **kwargs):
        calls.append(list(args))
        return real_run(args, **kwargs)

    monkeypatch.setattr(subprocess, "run", recording_run)
    for hostile in (f"--output={target}", "--stdin", "HEAD~1", sha.upper()):
        assert git_order.first_parent_order(repo, hostile) is None
        assert git_order.commit_date(repo, hostile) is None
    assert calls == []  # refused before git is run
    assert git_order.resolve_ref(repo, f"--output={target}") is None and not target.exists()
    # near miss: the real sha is placed and dated, each call with --end-of-options before it
    assert git_order.first_parent_order(repo, sha) == 1 and git_order.commit_date(repo, sha).startswith("2026-11-01")
    placing = [c for c in calls if "--is-shallow-repository" not in c]
    assert len(placing) == 3 and all(c[c.index("--end-of-options") + 1].startswith(("--output", sha)) for c in placing)
