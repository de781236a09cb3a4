"""`perfbench history`: result folders, ab folders and baselines over time, in one SQL store.

  location.py   which store (--db, PERFBENCH_HISTORY_DB, the per-user default) and its engine
  schema.py     the tables and their versioned migrations (schema_version)
  records.py    the typed rows a folder becomes (ab.json is read by perfbench/results/ab_record.py)
  extract.py    one folder -> a `Snapshot` (metrics, paired speed-ups, ab verdicts, op families)
  git_order.py  a commit's position on first-parent history, its date, shallow clones
  store.py      ingest (one transaction, keyed by content), forget, migrate; reads without locks
  series.py     points grouped into series that never mix machines, software or emulation
  changes.py    change points on a series (binary segmentation, confirmed by a test on the CIs)
  page.py       the offline trend page
  commands.py   the text each subcommand prints
"""
