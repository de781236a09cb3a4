"""A run's memory split: weights and state counted from the tensors (each storage once), the rest the peak
leaves, in every run's summary and CSV row."""

from __future__ import annotations

import csv

import pytest
import torch

from model.config import load_config
from model.cost import total_weight_bytes
from model.parallel_config import ParallelConfig
from perfbench.measure import worker
from perfbench.measure.memory_split import MB, graph_pool_mb, memory_split, storage_mb
from perfbench.results import RunSpec, write_results


def test_a_tied_weight_and_a_view_count_once() -> None:
    emb = torch.nn.Embedding(100, 16)
    head = torch.nn.Linear(16, 100, bias=False)
    head.weight = emb.weight  # tied, as an lm_head tied to the embedding
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    state = [torch.zeros(4, 8), torch.zeros(4, 8)[1:]]  # a view of a distinct second tensor
    assert storage_mb(model.parameters()) == pytest.approx(100 * 16 * 4 / MB)
    assert storage_mb(state) == pytest.approx(2 * 4 * 8 * 4 / MB)
    split = memory_split("cpu", model, state)
    assert split["mem_weights_mb"] == pytest.approx(100 * 16 * 4 / MB)
    assert split["mem_rest_mb"] == pytest.approx(split["peak_mem_mb"] - split["mem_weights_mb"]
                                                  - split["mem_state_mb"])
    assert graph_pool_mb("cpu") is None and split["mem_graph_pool_mb"] is None


def test_a_runs_weights_match_the_analytic_count_and_reach_the_csv(tmp_path) -> None:
    spec = RunSpec(run_id="r1", scenario="s", num_layers=2, input_len=8, output_len=2, iterations=1,
                   profile=False, numerics_check=False)
    result = worker.run(spec, tmp_path)
    assert result.status == "ok", result.error
    config = load_config("tiny", 2)
    # model/cost.py counts the same weights from the config alone (the memory-fits check uses it)
    analytic_mb = total_weight_bytes(config, ParallelConfig(), 4) / MB
    assert result.summary.mem_weights_mb == pytest.approx(analytic_mb, rel=0.02)
    assert result.summary.mem_state_mb > 0 and result.summary.mem_rest_mb > 0
    assert result.summary.peak_mem_mb >= result.summary.mem_weights_mb + result.summary.mem_state_mb
    write_results(tmp_path, [result])
    (row,) = csv.DictReader((tmp_path / "results.csv").open())
    assert float(row["mem_weights_mb"]) == pytest.approx(result.summary.mem_weights_mb)
    assert row["mem_graph_pool_mb"] == ""  # CPU: not reported
