"""The report of a `perfbench ab` folder: the verdict per run and metric first, then how the job decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfbench.report.page import Section, Text
from perfbench.report.table import Column, Table

AB_FILE = "ab.json"


def ab_section(folder: Path) -> Section | None:
    """None for a folder that is not an ab job's."""
    path = Path(folder) / AB_FILE
    if not path.is_file():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    emulated = record.get("emulation")
    section = Section("A/B: head against base" + (f" ({emulated}: CPU timings)" if emulated else ""))
    base, head = record.get("base", {}), record.get("head", {})
    section.blocks.append(Text(
        f"base {base.get('ref')} ({(base.get('sha') or 'working tree')[:12]}), head {head.get('ref')} "
        f"({(head.get('sha') or 'working tree')[:12]}{', uncommitted changes' if head.get('dirty') else ''}); "
        f"scenario {record.get('scenario')}; stopped: {record.get('stopped')}; {len(record.get('pairs', []))} "
        f"pairs; exit code {record.get('exit_code')}"))
    rows = [{"run": rid, "metric": metric, "ratio": v["ratio"], "lo": v["ci_low"], "hi": v["ci_high"],
             "verdict": v["verdict"], "pairs": v["pairs"], "processes": v["processes"]}
            for rid, per in record.get("verdicts", {}).items() for metric, v in per.items()]
    section.blocks.append(Table("ab_verdicts", [
        Column("run"), Column("metric"), Column("ratio", "head / base", ci=("lo", "hi"), suffix="x"),
        Column("verdict", mark_key="verdict"), Column("pairs"), Column("processes", "worker generations")], rows,
        caption=f"Latency ratio head / base from interleaved pairs, 95% CI (bootstrap over worker generations, "
                f"then pairs); same: the whole CI within +-{record.get('settings', {}).get('threshold', 0):.0%}"))
    trail = [{"generation": t["generation"], "elapsed_s": t["elapsed_s"], "pairs": t["pairs"],
              "verdicts": "; ".join(f"{rid} {m} {v}" for rid, per in t["verdicts"].items() for m, v in per.items())}
             for t in record.get("trail", [])]
    section.blocks.append(Table("ab_trail", [Column("generation"), Column("elapsed_s", "elapsed s"),
                                             Column("pairs", "pairs per run"), Column("verdicts")], trail,
                                caption="The sequential decision: verdicts after each worker generation",
                                collapsed=True))
    return section
