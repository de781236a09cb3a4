"""What the emulator's end-to-end tests share: the `perfbench` command in a fresh process, and a small model
and scenario with the dims the NPU ops document."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from model.config import Qwen3_5MoeTextConfig

ROOT = Path(__file__).resolve().parents[2]


def perfbench(*args: str, timeout: float = 600, first_on_path: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    """`python -m perfbench.cli ARGS` on this tree; the emulator only where ARGS ask for it. `first_on_path`: a
    folder put before the tree on PYTHONPATH in this process and every process it starts (torchrun's ranks too)."""
    paths = [*([str(first_on_path)] if first_on_path else []), str(ROOT)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("PERFBENCH_EMULATE_NPU", None)
    return subprocess.run([sys.executable, "-m", "perfbench.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def write_npu_scenario(folder: Path, toggles: dict[str, bool], parallel: str | None = None, profile: bool = True,
                       **dims: int) -> Path:
    """A 4-layer bf16 scenario (FIA has no fp32) of the tiny preset with the head dims the NPU ops document
    (GDN 128/128) and `dims` changed, one timed iteration of a ragged batch of 2; returns the YAML's path."""
    config = dataclasses.replace(Qwen3_5MoeTextConfig.tiny(), head_dim=256, linear_key_head_dim=128,
                                 linear_value_head_dim=128, **dims)
    (folder / "config.json").write_text(json.dumps(config.to_hf_dict()))
    measure = "{warmup: 0, iterations: 1, timeout_s: 300" + ("" if profile else ", profile: false") + "}"
    scenario = folder / "npu_scenario.yaml"
    scenario.write_text(f"""
{f"parallel_config: {parallel}" if parallel else ""}
perfbench:
  device: npu
  dtype: bfloat16
  model: {folder / "config.json"}
  num_layers: 4
  with_ckpt: false
  seed: 0
  toggles: {json.dumps(toggles)}
  workload: {{batch_sizes: [2], input_lens: [16], output_len: 3, ragged: true}}
  measure: {measure}
""")
    return scenario


def plant_in_every_process(folder: Path, family: str, factor: float) -> Path:
    """A folder whose sitecustomize.py plants `family`'s fault (tests/planted_faults.py) in every Python process
    that has it on its path: how a fault reaches the worker and each torchrun rank without a hook in perfbench."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.planted_faults import planted\n"
        f"PLANT = planted({family!r}, {factor!r})  # held: a dropped generator would undo the plant\n"
        "PLANT.__enter__()\n")
    return folder
