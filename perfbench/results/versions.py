"""Schema versions of a result record, and the migration of an older record to the current one."""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 7
# Versions of a result record (one line of results.jsonl, or result.json):
#   1  no `schema_version` key; otherwise the fields of version 2 without `spec.expected_plan`
#   2  `schema_version`, `spec.expected_plan` (the runner's resolved plan, checked by the worker)
#   3  samples.tpot_ms one per iteration (samples.tpot_steps_ms: every step); stop_reason, stability; spec
#      adaptive-stopping and round fields
#   4  expert_load: per-expert MoE routing counts (perfbench/analysis/expert_load.py); {} in older records
#   5  blocks (interleaved block indices, perfbench/measure/blocks.py), spec.timing and spec.block_group; older
#      records were timed on their own: {}, "separate", ""
#   6  failure: the failure kind and its one-line reason (records.py FailureKind), {} (not recorded) in older
#      records; spec.profile_export_type, "text" in older records
#   7  env.code: where each process imported model/ and perfbench/ from (path, commit, dirty, rank, host;
#      measure/code_origin.py), [] (not recorded) in older records
# `migrate` brings an older record up to SCHEMA_VERSION; a newer one is refused.


def migrate(raw: dict[str, Any], where: str = "result") -> dict[str, Any]:
    """A result record brought up to SCHEMA_VERSION (a copy); a record from a newer perfbench is refused."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{where}: schema_version must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version {version} is newer than this perfbench reads "
                         f"({SCHEMA_VERSION}); upgrade perfbench to read it")
    # 1 -> 2, 3 -> 4, 4 -> 5, 5 -> 6, 6 -> 7: only added fields (schema_version, spec.expected_plan;
    # expert_load; blocks, spec.timing, spec.block_group; failure, spec.profile_export_type; env.code), whose
    # defaults say "not recorded" or "timed on its own".
    if version < 3:
        raw = {**raw, "samples": _per_iteration_tpot(raw)}
    return {**raw, "schema_version": SCHEMA_VERSION}


def _per_iteration_tpot(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept every decode step in samples.tpot_ms, iteration after iteration (output_len - 1 each):
    those become tpot_steps_ms, and tpot_ms the mean of each iteration's steps."""
    samples = dict(raw.get("samples") or {})
    steps = samples.get("tpot_ms")
    per_iteration = int((raw.get("spec") or {}).get("output_len", 0)) - 1
    if not steps or per_iteration < 1 or len(steps) % per_iteration:
        return samples
    samples["tpot_steps_ms"] = steps
    samples["tpot_ms"] = [sum(steps[i:i + per_iteration]) / per_iteration
                          for i in range(0, len(steps), per_iteration)]
    return samples
