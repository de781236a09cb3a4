"""The report of a `perfbench ab` folder: the verdict per run and metric first, then how the job decided."""

from __future__ import annotations

from pathlib import Path

from perfbench.pages.page import Section, Text
from perfbench.pages.table import Column, Table
from perfbench.results.ab_record import is_ab_folder, read_ab_record


def ab_section(folder: Path) -> Section | None:
    """None for a folder that is not an ab job's."""
    if not is_ab_folder(folder):
        return None
    record = read_ab_record(folder)
    emulated = record.emulation
    section = Section("A/B: head against base" + (f" ({emulated}: CPU timings)" if emulated else ""))
    base, head = record.base, record.head
    unit = "epochs" if record.mode == "one process" else "worker generations"
    section.blocks.append(Text(
        f"base {base.ref} ({(base.sha or 'working tree')[:12]}), head {head.ref} "
        f"({(head.sha or 'working tree')[:12]}{', uncommitted changes' if head.dirty else ''}); "
        f"scenario {record.scenario}; {record.mode}{f' ({record.mode_reason})' if record.mode_reason else ''}; "
        f"stopped: {record.stopped}; {len(record.pairs)} pairs; exit code {record.exit_code}"))
    rows = [{"run": rid, "metric": metric, "ratio": v.ratio, "lo": v.ci_low, "hi": v.ci_high,
             "verdict": v.verdict + (" (regression)" if v.regression else ""), "pairs": v.pairs,
             "clusters": v.clusters, "level": f"{v.level:.1%}",
             "needs": "" if v.seconds_needed is None else f"~{v.seconds_needed:.0f} s more"}
            for rid, per in record.verdicts.items() for metric, v in per.items()]
    band = record.settings.band or 0.0
    margin = record.settings.margin or 0.0
    section.blocks.append(Table("ab_verdicts", [
        Column("run"), Column("metric"), Column("ratio", "head / base", ci=("lo", "hi"), suffix="x"),
        Column("verdict", mark_key="verdict"), Column("pairs"), Column("clusters", unit), Column("level", "CI"),
        Column("needs", "to decide")], rows,
        caption=f"Latency ratio head / base from interleaved pairs; CI: Student t over {unit} (Yuen's trimmed t "
                f"from 10), at the level of the look that ended the job; same: the whole CI within +-{band:.0%}; "
                f"slower/faster: beyond +-{margin:.0%}; regression: slower after Holm's correction across the job"))
    trail = [{"look": t.look, "elapsed_s": t.elapsed_s, "pairs": t.pairs, "clusters": t.clusters,
              "level": f"{t.level:.1%}",
              "verdicts": "; ".join(f"{rid} {m} {v}" for rid, per in t.verdicts.items() for m, v in per.items())}
             for t in record.trail]
    section.blocks.append(Table("ab_trail", [Column("look"), Column("elapsed_s", "elapsed s"),
                                             Column("pairs", "pairs per run"), Column("clusters", unit),
                                             Column("level", "CI"), Column("verdicts")], trail,
                                caption="The sequential decision: verdicts at each planned look", collapsed=True))
    return section
