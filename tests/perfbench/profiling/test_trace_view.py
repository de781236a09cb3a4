from __future__ import annotations

import pandas as pd
import pytest

from perfbench.profiling.chrome import parse_chrome_trace, read_trace_json
from perfbench.profiling.scopes import Scope
from perfbench.profiling.tables import compute_vs_communication
from perfbench.profiling.trace_view import read_trace_view, trace_view_events

from .conftest import NPU_FIXTURES, require
from .synthetic import npu_trace_view


def test_device_tasks_take_context_from_async_npu_flows():
    view = read_trace_view(npu_trace_view())

    names = [t.name for t in view.tasks]
    assert names == ["aclnnMatmul_MatMulV3Common_MatMulV3", "aclnnRmsNorm_RmsNormAiCore_RmsNorm",
                     "hcom_allReduce__586_0_1", "aclnnCast_CastAiCore_Cast"]  # no EVENT_WAIT, no plane task
    assert view.attributed == 3
    matmul, norm, allreduce, cast = view.tasks
    assert (matmul.scope.phase, matmul.scope.step, matmul.scope.layer, matmul.scope.module) == (
        "decode", 2, 3, "attn")
    assert norm.scope.module == "norm" and norm.scope.layer == 3
    assert allreduce.communication and allreduce.scope.module == "moe"
    assert cast.scope == Scope(step=7)  # no flow: only the step of the ProfilerStep window it ran in
    assert view.scope_by_start()[1736408883704643212] == matmul.scope


def test_trace_view_events_table_has_host_and_device_rows():
    events = trace_view_events(npu_trace_view(), rank=4)

    assert not events["name"].str.startswith(("pb|", "ProfilerStep#")).any()
    device = events[events["side"] == "device"].set_index("name")
    assert device.loc["hcom_allReduce__586_0_1", "category"] == "communication"
    assert device.loc["aclnnRmsNorm_RmsNormAiCore_RmsNorm", "category"] == "norm"
    assert device.loc["aclnnMatmul_MatMulV3Common_MatMulV3", "stream"] == "2"
    host = events[events["side"] == "host"].set_index("name")
    # aten::linear (50 µs) encloses aclnnMatmul (20 µs): its exclusive time is 30 µs
    assert host.loc["aten::linear", "dur_us"] == pytest.approx(30.0)
    assert host.loc["aten::linear", "module"] == "attn"
    assert set(events["rank"]) == {4}
    assert events["start_us"].min() == 0.0


@pytest.mark.parametrize("relative, tasks, with_flow", [
    # 187 compute kernels + 4 HCCL ops = the 191 kernel_details.csv rows, each with a flow (formats doc 5)
    ("msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json", 191, 191),
    # older torch_npu: 276 tasks of type Other/AI_CPU, of which the file gives 274 an async_npu flow
    ("msprof_analyze_ut/timeline_advice/trace_view.json", 276, 274),
])
def test_real_trace_views_attribute_kernels_with_a_flow(relative, tasks, with_flow):
    view = read_trace_view(read_trace_json(require(NPU_FIXTURES / relative)))

    assert len(view.tasks) == tasks
    assert view.attributed == with_flow
    assert sum(t.communication for t in view.tasks) == (4 if "level1" in relative else 0)


def test_bare_trace_view_steps_equal_step_trace_time():
    """Device work issued from the autograd/DDP thread (no ProfilerStep range of its own) counts in the step
    whose window holds it, as in the profiler's own step_trace_time.csv (within 0.01%)."""
    output = require(NPU_FIXTURES / "msinsight_pytorch_text_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT")
    ours = compute_vs_communication(parse_chrome_trace(output / "trace_view.json"))
    theirs = pd.read_csv(output / "step_trace_time.csv")

    assert len(ours) == len(theirs)
    for row in theirs.itertuples(index=False):
        step = ours[ours["step"] == row.Step].iloc[0]
        assert step["compute_us"] == pytest.approx(row.Computing, rel=1e-4)
        assert step["communication_us"] == pytest.approx(row.Communication, rel=1e-4)
        assert step["free_us"] == pytest.approx(row.Free, rel=1e-4)
        assert step["overlapped_us"] == pytest.approx(row.Overlapped, rel=1e-4)
