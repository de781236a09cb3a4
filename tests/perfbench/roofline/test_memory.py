"""The memory estimate a sweep is checked against before anything runs: its parts against what the model
really allocates, and `perfbench run --dry-run` refusing a shape that cannot fit, naming the estimate and the
free memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from model.backend import Capabilities
from model.cache import Qwen3_5MoeCache
from model.config import Qwen3_5MoeTextConfig
from model.parallel_config import ParallelConfig
from perfbench.cli import main
from perfbench.config.scenario import load_scenario
from perfbench.config.sweep import plan_sweep
from perfbench.roofline import memory
from perfbench.roofline.memory import available_bytes, estimate_run
from perfbench.run import runner

GIB = 2**30


def fake_meminfo(tmp_path: Path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {4 * available_kb} kB\nMemFree:        1 kB\n"
                    f"MemAvailable:   {available_kb} kB\n")
    return path


def one_run(sets: list[str]):
    sc = load_scenario("ci_smoke", ["perfbench.sweep.design=none", "perfbench.device=cpu", *sets])
    return plan_sweep(sc, Capabilities(device="cpu", device_name="cpu")).runs[0]


def test_state_estimate_is_what_the_cache_allocates():
    config = Qwen3_5MoeTextConfig.tiny()
    planned = one_run(["perfbench.workload.batch_sizes=[3]", "perfbench.workload.input_lens=[40]",
                       "perfbench.workload.output_len=9"])
    cache = Qwen3_5MoeCache.allocate(config, 3, 40 + 9, torch.float32, "cpu")
    allocated = sum(t.numel() * t.element_size() for t in cache.tensors()[:-1])  # without kv_lens
    assert estimate_run(config, ParallelConfig(), planned).state == allocated


def test_activations_grow_with_the_square_of_the_prompt_under_the_unfused_reference():
    config = Qwen3_5MoeTextConfig.tiny()
    short, long = (estimate_run(config, ParallelConfig(), one_run([f"perfbench.workload.input_lens=[{n}]"]))
                   for n in (4096, 8192))
    # the [B, heads, T, T] fp32 scores dominate: doubling T about quadruples the activations
    assert 3.5 < long.activations / short.activations <= 4.0
    assert long.activations >= 2 * config.num_attention_heads * 8192**2 * 4


def test_available_bytes_reads_mem_available(tmp_path):
    assert available_bytes(fake_meminfo(tmp_path, 3 * 1024**2)) == 3 * GIB
    assert available_bytes(tmp_path / "absent") is None


def test_dry_run_refuses_a_shape_that_does_not_fit_naming_estimate_and_free_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, 1024**2))  # 1 GiB available
    ok = CliRunner().invoke(main, ["run", "ci_smoke", "--dry-run"])
    assert ok.exit_code == 0 and "run id" in ok.stdout, ok.stderr
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--dry-run", "--set", "perfbench.workload.batch_sizes=[64]",
                                       "--set", "perfbench.workload.input_lens=[4096]"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "needs about" in lines[0] and "weights" in lines[0] and "KV cache" in lines[0]
    assert "activations" in lines[0] and "1 GiB available" in lines[0] and "b64 i4096" in lines[0]
    assert "run id" not in result.stdout


def test_a_real_run_is_refused_before_its_folder_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, 1024**2))

    def must_not_run(*args: object, **kwargs: object) -> None:  # a missed refusal must not allocate ~24 GB
        raise AssertionError("the sweep started: the memory check did not refuse it")

    monkeypatch.setattr(runner, "run_sweep", must_not_run)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--out", str(out), "--set",
                                       "perfbench.workload.batch_sizes=[64]", "--set",
                                       "perfbench.workload.input_lens=[4096]"])
    assert result.exit_code == 2 and "needs about" in result.stderr and not out.exists()


def test_ranks_sharing_the_host_multiply_the_estimate(tmp_path, monkeypatch):  # one more case of the class
    # cpu_ep2: two ranks on this host, each holding its own state; the same shape fits one rank's budget
    sets = ["--set", "perfbench.workload.batch_sizes=[2]", "--set", "perfbench.workload.input_lens=[2048]"]
    one = load_scenario("cpu_ep2", [s for s in sets if s != "--set"])
    planned = plan_sweep(one, Capabilities(device="cpu", device_name="cpu")).runs
    per_rank = max(estimate_run(Qwen3_5MoeTextConfig.tiny().with_layers(4), one.parallel_config, p).total
                   for p in planned)
    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, int(1.5 * per_rank) // 1024))
    result = CliRunner().invoke(main, ["run", "cpu_ep2", "--dry-run", *sets])
    assert result.exit_code == 2 and "x 2 ranks" in result.stderr, result.stderr


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="no /proc/meminfo")
def test_a_terabyte_shape_is_refused_on_this_machine():
    # b4096 x 32000 tokens: the KV cache alone is over 100 GiB, the reference's attention scores petabytes
    result = CliRunner().invoke(main, ["run", "ci_smoke", "--dry-run", "--set", "perfbench.workload.batch_sizes=[4096]",
                                       "--set", "perfbench.workload.input_lens=[32000]"])
    assert result.exit_code == 2 and "available (MemAvailable)" in result.stderr, result.stderr


# ---- the numerics replay's layer taps ------------------------------------------------------------------------

def test_tap_estimate_is_what_the_reference_records_and_the_replay_captures():
    from model.modeling import Qwen3_5MoeForCausalLM
    from model.replay import Capture
    from perfbench.roofline.memory import TAP_VALUES, tap_bytes

    planned = one_run(["perfbench.workload.batch_sizes=[2]", "perfbench.workload.input_lens=[8]",
                       "perfbench.workload.output_len=3", "perfbench.model=tiny"])
    config = Qwen3_5MoeTextConfig.tiny()
    model = Qwen3_5MoeForCausalLM.from_pretrained("tiny", dtype=torch.float32, device="cpu", optimizations="none",
                                                  dummy_weights=True, seed=0)
    ids, seq_lens = model.pad_prompts([[1] * 8, [2] * 5])
    capture = Capture()
    model.generate_padded(ids, seq_lens, model.new_cache(2, 11), 3, capture=capture)
    recorded = sum(t.inputs.nbytes + t.outputs.nbytes for t in capture.taps)  # the reference: 4 values
    assert tap_bytes(config, planned) == recorded * TAP_VALUES / 4
    off = one_run(["perfbench.workload.batch_sizes=[2]", "perfbench.measure.numerics_check=false"])
    assert tap_bytes(config, off) == 0


def _fits_without_taps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sets: list[str]) -> None:
    """This host's memory set between a run's estimate without the taps and with them."""
    sc = load_scenario("ci_smoke", ["perfbench.device=cpu", *sets])
    config = sc.model_config_here()
    assert config is not None
    est = max((estimate_run(config, sc.parallel_config, p)
               for p in plan_sweep(sc, Capabilities(device="cpu", device_name="cpu")).runs), key=lambda e: e.total)
    assert est.taps > 0.2 * est.total
    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, int(est.total - est.taps / 2) // 1024))


def test_dry_run_refuses_a_run_whose_numerics_reference_taps_do_not_fit(tmp_path, monkeypatch):
    # many decode steps of a wide batch: the taps grow with every token, the unfused scores with the prompt only
    sets = ["perfbench.workload.batch_sizes=[32]", "perfbench.workload.input_lens=[64]",
            "perfbench.workload.output_len=1024"]
    _fits_without_taps(tmp_path, monkeypatch, sets)
    args = ["run", "ci_smoke", "--dry-run", *(x for s in sets for x in ("--set", s))]
    result = CliRunner().invoke(main, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "numerics reference taps" in lines[0], result.stderr
    # the near miss: the same run without the numerics check fits
    result = CliRunner().invoke(main, [*args, "--set", "perfbench.measure.numerics_check=false"])
    assert result.exit_code == 0, result.stderr


def test_a_device_runs_taps_are_checked_against_the_memory_of_the_host_with_the_device(tmp_path, monkeypatch):
    from perfbench.errors import UserError

    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, 1024**2))  # 1 GiB
    sets = ["perfbench.model=qwen3.5-35b-a3b", "perfbench.workload.batch_sizes=[16]",
            "perfbench.workload.input_lens=[4096]"]
    sc = load_scenario("qwen3_5_35b_ep8", sets)
    caps = Capabilities(device="npu", device_name="npu here")
    with pytest.raises(UserError, match="of host memory \\(numerics reference taps") as err:
        memory.check_memory(plan_sweep(sc, caps, device_present=True))
    assert len(str(err.value).splitlines()) == 1
    off = load_scenario("qwen3_5_35b_ep8", [*sets, "perfbench.measure.numerics_check=false"])
    memory.check_memory(plan_sweep(off, caps, device_present=True))  # the device's memory is the device's
    # the near miss: a dry run where the device is absent knows nothing of the host that will run it
    result = CliRunner().invoke(main, ["run", "qwen3_5_35b_ep8", "--dry-run", *(x for s in sets for x in ("--set", s))])
    assert result.exit_code == 0, result.stderr


def test_an_emulated_npu_run_is_checked_whole_on_this_host(tmp_path, monkeypatch):
    # under --emulate-npu the run's device memory is this host's: weights and activations count, not the taps alone
    monkeypatch.setattr(memory, "MEMINFO", fake_meminfo(tmp_path, 1024**2))  # 1 GiB
    args = ["run", "ci_smoke", "--dry-run", "--set", "perfbench.device=npu", "--set",
            "perfbench.measure.numerics_check=false", "--set", "perfbench.workload.batch_sizes=[64]", "--set",
            "perfbench.workload.input_lens=[4096]"]
    from perfbench.emulation import npu

    try:
        result = CliRunner().invoke(main, [*args, "--emulate-npu", "910b"])
    finally:
        npu.deactivate()
    assert result.exit_code == 2 and "activations" in result.stderr, result.stderr
    # the near miss: the same npu run without the emulator is the device's to hold
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
