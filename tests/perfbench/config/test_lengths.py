"""Ragged workloads from a length distribution: the shipped file, seeded draws per batch, the sweep's specs,
the prompts a worker builds, the realised lengths in the report, and bad files as one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.backend import Capabilities
from perfbench.config.lengths import LENGTHS_DIR, draw, load_lengths
from perfbench.config.scenario import load_scenario
from perfbench.config.sweep import plan_sweep
from perfbench.errors import UserError
from perfbench.measure.iteration import make_workload
from perfbench.report.latency import realised_lengths
from tests.records_kit import run_result

CPU = Capabilities(device="cpu", device_name="cpu")


def test_the_shipped_distribution_has_lengths_and_no_text() -> None:
    lines = (LENGTHS_DIR / "chat_synthetic.jsonl").read_text().splitlines()
    assert len(lines) == 200 and all(set(json.loads(line)) == {"input_len", "output_len"} for line in lines)
    requests = load_lengths("chat_synthetic")
    assert min(r.input_len for r in requests) >= 8 and max(r.input_len for r in requests) <= 2048


def test_draws_are_seeded_per_batch_and_seed() -> None:
    requests = load_lengths("chat_synthetic")
    first, again = draw(requests, 4, seed=0), draw(requests, 4, seed=0)
    assert first == again and len(first.input_lens) == 4
    assert draw(requests, 4, seed=1) != first
    pool = {(r.input_len, r.output_len) for r in requests}
    assert all(pair in pool for pair in zip(first.input_lens, first.output_lens))


def test_the_sweep_draws_each_batch_and_the_worker_builds_those_prompts(tmp_path: Path) -> None:
    path = tmp_path / "three.jsonl"
    path.write_text('{"input_len": 5, "output_len": 3}\n{"input_len": 9, "output_len": 7}\n'
                    '{"input_len": 20, "output_len": 2}\n')
    scenario = load_scenario("ci_smoke", [f"perfbench.workload.lengths={path}", "perfbench.workload.batch_sizes=[1,3]",
                                          "perfbench.sweep.runs=[{}]"])
    specs = {r.spec.batch_size: r.spec for r in plan_sweep(scenario, CPU).runs}
    expected = draw(load_lengths(str(path)), 3, seed=0)
    spec = specs[3]
    assert spec.prompt_lens == expected.input_lens and spec.requested_output_lens == expected.output_lens
    # the batch's longest prompt and longest asked output are the run's shape
    assert spec.input_len == max(expected.input_lens) and spec.output_len == max(expected.output_lens)
    prompts = make_workload(spec, vocab_size=100).prompts
    assert [len(p) for p in prompts] == expected.input_lens
    text = realised_lengths(run_result("r", spec=spec))
    assert text.startswith(f"prompts {','.join(map(str, expected.input_lens))}; {spec.output_len} tokens each")
    # a scenario without a distribution keeps its ids: nothing is added to the spec
    plain = plan_sweep(load_scenario("ci_smoke", ["perfbench.sweep.runs=[{}]"]), CPU)
    assert all(r.spec.prompt_lens is None for r in plain.runs)


@pytest.mark.parametrize("text,needle", [
    ('{"input_len": 0, "output_len": 3}\n', "line 1"),
    ('{"input_len": 4}\n', "line 1"),
    ('not json\n', "line 1"),
    ('{"input_len": 4, "output_len": 3}\n{"input_len": 4, "output_len": 3, "prompt": "hi"}\n', "line 2"),
    ('\n', "holds no request"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(UserError, match=needle) as err:
        load_scenario("ci_smoke", [f"perfbench.workload.lengths={path}"])
    assert "\n" not in str(err.value)
