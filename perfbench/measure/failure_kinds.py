"""Which kind of failure a run had (results/records.py FailureKind), each with a one-line reason.

A run fails in a stage: everything before the first timed iteration (import, model build, plan check, warm-up
and compile) is start-up; the timed iterations and the profiled one are the benchmark. `stage` marks an
exception with the stage it left; the worker turns it into a kind. A run that measured can still be a failure
of its question: a requested toggle that never took effect, or logits outside the dtype's tolerance.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from perfbench.results import REL_ERROR_TOLERANCE, Failure, RunResult

STARTUP, BENCHMARK = "startup", "benchmark"
_STAGE_ATTR = "perfbench_stage"
_OOM = re.compile(r"out of memory|OutOfMemoryError|MemoryError|Cannot allocate memory|NPU out of memory", re.I)
_STARTUP = re.compile(r"ModuleNotFoundError|ImportError|No module named")


def tagged(err: BaseException, name: str) -> BaseException:
    """`err` marked as raised in stage `name`, unless an inner stage marked it already."""
    if not hasattr(err, _STAGE_ATTR):
        with contextlib.suppress(AttributeError, TypeError):
            setattr(err, _STAGE_ATTR, name)
    return err


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Mark an exception leaving the block as raised in stage `name`."""
    try:
        yield
    except BaseException as err:
        tagged(err, name)
        raise


# advice torch appends to a compile error, which would otherwise be its last (and only shown) line
_ADVICE = re.compile(r"^(Set TORCHDYNAMO_VERBOSE=|For even more developer context|You can suppress this exception)")
_COMPILER_ERROR = re.compile(r"\b(?:fatal )?error\b", re.I)
_COMPILE_ERROR_KIND = re.compile(r"\b(\w*CompileError)\b")


def _shorten(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit - 3] + "..."


def one_line(text: str, limit: int = 200) -> str:
    line = next((x.strip() for x in reversed(text.strip().splitlines()) if x.strip() and not _ADVICE.match(x.strip())),
                "")
    return _shorten(line, limit)


def compile_error_line(text: str, limit: int = 200) -> str | None:
    """The compiler's own first error line of a compile failure (inductor's CppCompileError: the g++ output after
    "Output:"), named by the error's kind; None for any other exception."""
    kind = _COMPILE_ERROR_KIND.search(text)
    if kind is None:
        return None
    _, found, output = text.partition("\nOutput:\n")
    lines = [x.strip() for x in output.splitlines() if x.strip() and not _ADVICE.match(x.strip())] if found else []
    first = next((x for x in lines if _COMPILER_ERROR.search(x)), lines[0] if lines else None)
    return _shorten(f"{kind.group(1)}: {first}", limit) if first else None


def of_exception(err: BaseException, log: Path | None = None) -> Failure:
    """The kind of an exception a run raised: oom, plan_refused, startup_fail or benchmark_fail by stage. A compile
    failure's reason is the compiler's first error line and, when given, the `log` holding the whole error."""
    text = f"{type(err).__name__}: {err}"
    compiler = compile_error_line(text)
    reason = f"{compiler}{f' (full log: {log})' if log else ''}" if compiler else one_line(text)
    if isinstance(err, MemoryError) or _OOM.search(text):
        return Failure(kind="oom", reason=reason)
    if type(err).__name__ == "PlanMismatchError":
        return Failure(kind="plan_refused", reason=reason)
    if isinstance(err, ImportError) or getattr(err, _STAGE_ATTR, STARTUP) == STARTUP:
        return Failure(kind="startup_fail", reason=reason)
    return Failure(kind="benchmark_fail", reason=reason)


def of_lost_process(why: str, log_tail: str, timed_out: bool) -> Failure:
    """The kind of a run whose process left no result: timeout, or what its log's last lines say."""
    if timed_out:
        return Failure(kind="timeout", reason=why)
    if _OOM.search(log_tail):
        return Failure(kind="oom", reason=f"{why}; the log says: {one_line(log_tail)}")
    if _STARTUP.search(log_tail):
        return Failure(kind="startup_fail", reason=f"{why}; the log says: {one_line(log_tail)}")
    return Failure(kind="benchmark_fail", reason=why)


def of_measured(result: RunResult) -> Failure:
    """An ok run's failure of its question, if any: numerics outside tolerance or not compared although asked
    for, else a requested toggle that never took effect; empty when it measured what it was asked."""
    numerics_failed = numerics_failure(result)
    if numerics_failed:
        return Failure(kind="numerics_fail", reason=numerics_failed)
    refused = [d for t, d in result.plan.decisions.items() if d.requested and d.state == "inactive"]
    if refused:
        return Failure(kind="plan_refused", reason="; ".join(f"{d.name} requested, inactive: {d.reason}"
                                                              for d in refused))
    return Failure()


def numerics_failure(result: RunResult) -> str:
    """Why a run's numerics fail (empty when they pass or the check was turned off): a relative error past the
    dtype's tolerance (REL_ERROR_TOLERANCE), naming where, or no comparison although the run asked for one."""
    numerics, dtype = result.numerics, result.spec.dtype
    if not result.spec.numerics_check:
        return ""
    error = numerics.max_rel_error
    if error is None:
        return f"numerics not compared: {numerics.not_compared or 'nothing was recorded'}"
    bound = REL_ERROR_TOLERANCE.get(dtype)
    if bound is not None and not error <= bound:
        return f"relative error {error:.3g} > {bound:g} ({dtype}) at {numerics.where}"
    return ""
