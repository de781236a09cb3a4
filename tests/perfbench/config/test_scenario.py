"""Scenario YAML: recipe sections as they are, the perfbench section, derived defaults, overrides, errors."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from model.toggles import TOGGLE_NAMES
from perfbench.cli import main
from perfbench.config.scenario import (
    SCENARIOS_DIR,
    SECTIONS,
    WorkloadSection,
    build_scenario,
    list_scenarios,
    load_scenario,
)
from perfbench.config.schema import Section
from perfbench.errors import UserError

RECIPE_35B = SCENARIOS_DIR / "recipe" / "qwen3_5_35b_ep8.yaml"


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def cli_output(result) -> str:
    return result.output  # click >= 8.2: stdout and stderr as the terminal shows them


# ---- valid input --------------------------------------------------------------------------------
def test_recipe_yaml_loads_and_derives_perfbench_defaults():
    sc = load_scenario(str(RECIPE_35B))
    pb = sc.perfbench
    assert pb.model == "/data/models/Qwen3.5-35B-A3B" and sc.model_key == "model_config.model_path"
    assert pb.with_ckpt is True
    wl = pb.workload
    assert wl.batch_sizes == [4] and wl.input_lens == [2048] and wl.output_len == 128
    assert pb.measure.profile is False  # model_config.enable_profiler: False
    # the recipe's request: always-on fused ops, eager -> no graph, mm_all_reduce off, dispatch/combine on
    assert pb.toggles == {"fused_rope": True, "fused_attention": True, "fused_rmsnorm": True,
                          "chunk_gdr": True, "mm_all_reduce": False, "moe_dispatch_combine": True,
                          "graph_mode": False, "merged_projections": True, "grouped_moe": True}
    assert sc.parallel_config.moe_ep_size == 8
    assert sc.model_config.recipe_extras == {"packed_sequence": False}
    assert sc.model_config.custom_params.recipe_extras == {"enable_decode_moe_dispatch_combine_v2": False}
    assert pb.sweep.design == "none"


def test_graph_mode_and_mm_all_reduce_follow_the_recipe(tmp_path):
    path = write(tmp_path, """
        model_config:
          exe_mode: ge_graph
          custom_params: {enable_mm_all_reduce_base: true, num_hidden_layers: 2}
        perfbench: {toggles: {chunk_gdr: false}}
    """)
    pb = load_scenario(str(path)).perfbench
    assert pb.toggles["graph_mode"] is True and pb.toggles["mm_all_reduce"] is True
    assert pb.toggles["chunk_gdr"] is False  # perfbench.toggles overrides the recipe's request
    assert pb.num_layers == 2


def test_perfbench_only_scenario_defaults(tmp_path):
    sc = load_scenario(str(write(tmp_path, "perfbench: {device: cpu}\n", "mine.yaml")))
    pb = sc.perfbench
    assert sc.name == "mine" and pb.model == "tiny" and pb.with_ckpt is False and pb.seed == 0
    assert pb.workload.batch_sizes == [1] and pb.workload.input_lens == [256] and pb.workload.output_len == 32
    assert pb.measure.profile is True and pb.sweep.toggles == list(TOGGLE_NAMES)


def test_a_minimal_scenario_takes_the_defaults(tmp_path):
    sc = load_scenario(str(write(tmp_path, "perfbench: {}\n")))
    assert sc.perfbench.model == "tiny" and sc.parallel_config.world_size == 1


def test_overrides_apply_with_yaml_values(tmp_path):
    sc = load_scenario(str(RECIPE_35B), [
        "perfbench.model=tiny", "parallel_config.world_size=2", "parallel_config.attn_tp_size=2",
        "parallel_config.embed_tp_size=2", "parallel_config.lmhead_tp_size=2",
        "perfbench.workload.batch_sizes=[1, 2]", "perfbench.toggles.graph_mode=true", "perfbench.env.X=1",
        "perfbench.sweep.design=one_at_a_time", "perfbench.sweep.toggles=[chunk_gdr]"])
    pb = sc.perfbench
    assert pb.model == "tiny" and pb.with_ckpt is False  # a preset has no checkpoint
    assert pb.workload.batch_sizes == [1, 2] and pb.toggles["graph_mode"] is True
    assert pb.env == {"X": "1"} and pb.sweep.varied() == ["chunk_gdr"]
    assert sc.parallel_config.world_size == 2


def test_scalar_list_values_are_normalised(tmp_path):
    path = write(tmp_path, "perfbench: {workload: {batch_sizes: 2, input_lens: 64}}\n")
    pb = load_scenario(str(path)).perfbench
    assert pb.workload.batch_sizes == [2] and pb.workload.input_lens == [64]


def test_cumulative_order_defaults_to_swept_toggles(tmp_path):
    path = write(tmp_path, "perfbench: {sweep: {design: cumulative, toggles: [graph_mode, chunk_gdr]}}\n")
    assert load_scenario(str(path)).perfbench.sweep.order == ["graph_mode", "chunk_gdr"]


def test_explicit_runs_accept_per_run_env(tmp_path):
    path = write(tmp_path, """
        perfbench:
          sweep:
            design: explicit
            runs:
              - {chunk_gdr: true, env: {PERFBENCH_FAULT: raise}}
              - {toggles: {chunk_gdr: false}, env: {A: "b"}}
    """)
    runs = load_scenario(str(path)).perfbench.sweep.runs
    assert runs[0].toggles == {"chunk_gdr": True} and runs[0].env == {"PERFBENCH_FAULT": "raise"}
    assert runs[1].toggles == {"chunk_gdr": False} and runs[1].env == {"A": "b"}


def test_scenario_is_found_by_name_and_serialises():
    sc = load_scenario("ci_smoke")
    assert sc.name == "ci_smoke" and sc.perfbench.num_layers == 4
    json.dumps(sc.as_dict())  # scenario.json must be plain JSON


SHIPPED = sorted(SCENARIOS_DIR.glob("*.yaml")) + sorted(SCENARIOS_DIR.glob("recipe/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenario_loads(path):
    sc = load_scenario(str(path))
    assert sc.perfbench.workload.batch_sizes and sc.perfbench.name
    assert path.read_text().startswith("#"), "each scenario opens with a comment saying what it measures"


def test_list_scenarios_reads_the_header_comment():
    names = dict(list_scenarios())
    assert {"default_cpu", "ci_smoke", "small_cpu"} <= set(names)
    assert names["default_cpu"]


def test_every_field_has_help_text():
    def sections(cls):
        yield cls
        for field in cls.model_fields.values():
            factory = field.default_factory
            if isinstance(factory, type) and issubclass(factory, Section):
                yield from sections(factory)

    for top in (c for c in SECTIONS.values() if c is not None):
        for cls in sections(top):
            for name, field in cls.model_fields.items():
                assert field.description, f"{cls.PATH}.{name} has no help"


def test_list_options_prints_every_key_path_with_its_help():
    result = CliRunner().invoke(main, ["list", "options"])
    assert result.exit_code == 0, cli_output(result)
    lines = result.output.splitlines()
    row = next(line for line in lines if line.startswith("perfbench.measure.min_iterations "))
    assert "5" in row and "adaptive stopping: timed calls at least" in row
    assert any(line.startswith("model_config.custom_params.num_hidden_layers ") for line in lines)
    assert not any("recipe_extras" in line for line in lines)


def test_sections_validate_when_built_in_python():
    with pytest.raises(ValidationError, match="batch_sizes"):
        WorkloadSection(batch_sizes=[0])
    with pytest.raises(UserError, match=r"^perfbench\.workload\.batch_sizes\[0\]: must be a positive integer, got 0$"):
        WorkloadSection.from_yaml({"batch_sizes": [0]})


# ---- malformed input: one line naming the key path ---------------------------------------------------------
MALFORMED = {
    "empty-file": ("", "holds no scenario"),
    "only-comments": ("# perfbench:\n#   device: cpu\n", "holds no scenario"),
    "empty-mapping": ("{}\n", "holds no scenario"),
    "top-level-scalar": ("perfbench\n", "top level must be a mapping"),
    "truncated": ("perfbench:\n  workload: {batch_sizes: [1, 2\n", "invalid YAML"),
    "top-level-list": ("- a\n- b\n", "top level must be a mapping"),
    "unknown-section": ("perfbenc: {}\n", "perfbenc"),
    "section-not-mapping": ("perfbench: [1, 2]\n", "perfbench"),
    "unknown-toggle": ("perfbench: {toggles: {fused_ropee: true}}\n", "perfbench.toggles.fused_ropee"),
    "toggle-wrong-type": ("perfbench: {toggles: {chunk_gdr: maybe}}\n", "perfbench.toggles.chunk_gdr"),
    "negative-batch": ("perfbench: {workload: {batch_sizes: [1, -4]}}\n",
                       "perfbench.workload.batch_sizes[1]"),
    "batch-wrong-type": ("perfbench: {workload: {batch_sizes: [four]}}\n",
                         "perfbench.workload.batch_sizes[0]"),
    "zero-iterations": ("perfbench: {measure: {iterations: 0}}\n", "perfbench.measure.iterations"),
    "negative-timeout": ("perfbench: {measure: {timeout_s: -1}}\n", "perfbench.measure.timeout_s"),
    "unknown-device": ("perfbench: {device: gpu}\n", "perfbench.device"),
    "unknown-dtype": ("perfbench: {dtype: fp8}\n", "perfbench.dtype"),
    "parallel-not-dividing": ("parallel_config: {world_size: 8, attn_tp_size: 3}\n",
                              "parallel_config.attn_tp_size"),
    "parallel-mixed-tp-ep": ("parallel_config: {world_size: 8, moe_tp_size: 2}\n",
                             "parallel_config.moe_tp_size"),
    "parallel-vs-model": ("parallel_config: {world_size: 8, attn_tp_size: 8}\n",  # tiny has 4 heads
                          "parallel_config.attn_tp_size"),
    "parallel-unknown-key": ("parallel_config: {world_sise: 2}\n", "parallel_config.world_sise"),
    "unknown-preset": ("perfbench: {model: tinyy}\n", "perfbench.model"),
    "preset-with-ckpt": ("perfbench: {model: tiny, with_ckpt: true}\n", "perfbench.with_ckpt"),
    "unknown-design": ("perfbench: {sweep: {design: random}}\n", "perfbench.sweep.design"),
    "cumulative-unknown": ("perfbench: {sweep: {design: cumulative, order: [chunk_gdr, graph]}}\n",
                           "perfbench.sweep.order"),
    "swept-twice": ("perfbench: {sweep: {design: grid, toggles: [chunk_gdr, chunk_gdr]}}\n",
                    "perfbench.sweep.toggles[1]"),
    "explicit-unknown": ("perfbench: {sweep: {design: explicit, runs: [{chunk_gdr: true}, {gdr: true}]}}\n",
                         "perfbench.sweep.runs[1].gdr"),
    "explicit-empty": ("perfbench: {sweep: {design: explicit}}\n", "perfbench.sweep.runs"),
    "duplicate-key": ("scheduler_config:\n  batch_size: 1\n  batch_size: 2\n", "scheduler_config.batch_size"),
    "yaml-syntax": ("perfbench:\n  device: cpu\n    dtype: float32\n", "line 3"),
    "recipe-typo": ("model_config: {exe_mod: eager}\n", "model_config.exe_mod"),
    "bad-exe-mode": ("model_config: {exe_mode: graph}\n", "model_config.exe_mode"),
    "custom-param-typo": ("model_config: {custom_params: {enable_mm_allreduce: true}}\n",
                          "model_config.custom_params.enable_mm_allreduce"),
    "static-kernel-eager": ("model_config: {enable_static_kernel: true}\n",
                            "model_config.enable_static_kernel"),
    "env-not-string": ("perfbench: {env: {HCCL_DETERMINISTIC: true}}\n", "perfbench.env.HCCL_DETERMINISTIC"),
    "batch-vs-dp": ("parallel_config: {world_size: 2}\nperfbench: {workload: {batch_sizes: [3]}}\n",
                    "perfbench.workload.batch_sizes[0]"),
    "top-p-range": ("data_config: {top_p: 1.5}\n", "data_config.top_p"),
}


@pytest.mark.parametrize("text,key", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_scenario_is_one_line_naming_the_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as info:
        load_scenario(str(path))
    msg = str(info.value)
    assert key in msg and "\n" not in msg
    assert msg.startswith("scenario.yaml: ")


def test_error_names_the_bad_value_and_the_fix(tmp_path):
    with pytest.raises(UserError) as info:
        load_scenario(str(write(tmp_path, "perfbench: {workload: {batch_sizes: [1, -4]}}\n")))
    expected = "scenario.yaml: perfbench.workload.batch_sizes[1]: must be a positive integer, got -4"
    assert str(info.value) == expected
    with pytest.raises(UserError, match="toggles are fused_rope, "):
        load_scenario(str(write(tmp_path, "perfbench: {toggles: {rope: true}}\n")))


EXACT_MESSAGES = {
    "min-iterations": ("perfbench: {measure: {min_iterations: 0}}\n",
                       "perfbench.measure.min_iterations: must be a positive integer, got 0"),
    "negative-warmup": ("perfbench: {measure: {warmup: -1}}\n",
                        "perfbench.measure.warmup: must be a non-negative integer, got -1"),
    "above-max": ("data_config: {top_p: 1.5}\n", "data_config.top_p: must be <= 1.0, got 1.5"),
    "below-min": ("data_config: {temperature: -1}\n", "data_config.temperature: must be >= 0.0, got -1"),
    "choice": ("perfbench: {device: gpu}\n", "perfbench.device: must be one of auto, cpu, cuda, npu, got 'gpu'"),
    "not-a-bool": ("perfbench: {workload: {ragged: maybe}}\n",
                   "perfbench.workload.ragged: must be true or false, got 'maybe'"),
    "not-an-int": ("perfbench: {seed: 1.5}\n", "perfbench.seed: must be an integer, got 1.5"),
    "bool-for-int": ("scheduler_config: {batch_size: true}\n",
                     "scheduler_config.batch_size: must be an integer, got True"),
    "whole-section": ("perfbench: {cluster: {nnodes: 2, node_rank: 2}}\n",
                      "perfbench.cluster.node_rank: must be below nnodes (2), got 2"),
    "not-a-mapping": ("perfbench: {measure: 3}\n", "perfbench.measure: must be a mapping, got 3"),
    "export-type": ("perfbench: {measure: {profile_export_type: sqlite}}\n",
                    "perfbench.measure.profile_export_type: must be one of text, db, got 'sqlite'"),
    "db-on-cpu": ("perfbench: {device: cpu, measure: {profile_export_type: db}}\n",
                  "perfbench.measure.profile_export_type: db is the torch_npu profiler's export: only device npu "
                  "(or auto on an NPU machine) writes it, got device cpu"),
}


@pytest.mark.parametrize("text,expected", EXACT_MESSAGES.values(), ids=EXACT_MESSAGES.keys())
def test_error_is_the_key_path_what_it_must_be_and_the_value(tmp_path, text, expected):
    with pytest.raises(UserError) as info:
        load_scenario(str(write(tmp_path, text)))
    assert str(info.value) == f"scenario.yaml: {expected}"


def test_unknown_key_lists_the_keys_of_its_own_section(tmp_path):
    with pytest.raises(UserError) as info:
        load_scenario(str(write(tmp_path, "perfbench: {sweep: {runs: [{toggles: {chunk_gdr: true}, when: 1}]}}\n")))
    assert str(info.value) == "scenario.yaml: perfbench.sweep.runs[0].when: unknown key; allowed: toggles, env"


def test_null_containers_take_their_defaults_and_numbers_stand_for_text(tmp_path):
    sc = load_scenario(str(write(tmp_path, """
        model_config: {platform_version: 950}
        perfbench: {toggles: null, env: {OMP_NUM_THREADS: 4}, measure: null, sweep: {runs: null}}
        """)))
    assert sc.model_config.platform_version == "950" and sc.perfbench.env == {"OMP_NUM_THREADS": "4"}
    assert sc.perfbench.measure.min_iterations == 5 and sc.perfbench.sweep.runs == []


BAD_OVERRIDES = {
    "no-equals": ("perfbench.device", "--set 'perfbench.device'"),
    "unknown-section": ("perf.device=cpu", "--set perf.device"),
    "unknown-key": ("perfbench.workload.batchsize=2", "perfbench.workload keys are"),
    "too-deep": ("perfbench.device.x=1", "perfbench.device is a value"),
    "bad-value": ("perfbench.workload.batch_sizes=[1, -2]", "perfbench.workload.batch_sizes[1]"),
    "unparsable": ("perfbench.workload.batch_sizes=[1, 2", "cannot parse value"),
    "parallel-unknown": ("parallel_config.tp=2", "parallel_config keys are"),
}


@pytest.mark.parametrize("override,expected", BAD_OVERRIDES.values(), ids=BAD_OVERRIDES.keys())
def test_bad_override_is_one_line(override, expected):
    with pytest.raises(UserError) as info:
        load_scenario("ci_smoke", [override])
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_unknown_scenario_name_lists_the_shipped_ones():
    with pytest.raises(UserError, match="shipped: .*default_cpu"):
        load_scenario("no_such_scenario")


@pytest.mark.parametrize("case", ["negative-batch", "unknown-toggle", "yaml-syntax", "parallel-not-dividing",
                                  "explicit-unknown", "empty-file", "truncated"])
def test_cli_dry_run_reports_bad_scenarios_without_traceback(tmp_path, case):
    text, key = MALFORMED[case]
    path = write(tmp_path, text)
    result = CliRunner().invoke(main, ["run", str(path), "--dry-run"])
    out = cli_output(result)
    assert result.exit_code == 2, out
    assert key in out and "Traceback" not in out and "error: " in out


def test_build_scenario_accepts_a_dict():
    sc = build_scenario({"perfbench": {"workload": {"batch_sizes": [2]}}}, source="inline.yaml")
    assert sc.name == "inline" and sc.perfbench.workload.batch_sizes == [2]


@pytest.mark.slow
def test_shipped_scenarios_work_after_a_plain_install(tmp_path):
    """A non-editable install (a wheel, no source tree beside it) lists and dry-runs its shipped scenarios."""
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    # build from a copy: setuptools writes build/ and *.egg-info beside the sources it builds
    source = tmp_path / "source"
    for name in ("model", "perfbench", "scenarios", "gates"):
        shutil.copytree(repo / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repo / name, source / name)
    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                              "--no-compile", "--target", str(target), str(source)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "perfbench.cli", *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=300)

    listed = cli("list", "scenarios")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "default_cpu" in listed.stdout and "qwen3_5_35b_ep8" in listed.stdout
    where = cli("run", "ci_smoke", "--dry-run")
    assert where.returncode == 0, where.stderr[-2000:]
    assert str(target) in subprocess.run([sys.executable, "-c", "import perfbench; print(perfbench.__file__)"],
                                         cwd=elsewhere, env=env, capture_output=True, text=True).stdout


def test_a_checkout_reads_its_own_scenarios_not_an_installed_copys(tmp_path):
    from perfbench.config.scenario import scenarios_dir

    root = Path(__file__).resolve().parents[3]
    assert SCENARIOS_DIR.resolve() == root / "scenarios"  # not the scenarios of another checkout installed here
    # the near miss: an installed perfbench (no pyproject.toml beside it) reads the package data
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "__init__.py").touch()
    assert scenarios_dir(tmp_path) != tmp_path / "scenarios"
    (tmp_path / "pyproject.toml").touch()
    assert scenarios_dir(tmp_path) == tmp_path / "scenarios"
