"""What `ab --processes one` compares between the arms: settings an arm changed, not torch's own handshakes."""

from __future__ import annotations

import pytest

from perfbench.measure.arm_modules import ProcessState


def test_a_changed_setting_is_a_difference_and_torchs_private_pointer_is_not(monkeypatch: pytest.MonkeyPatch):
    import torch

    monkeypatch.delenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", raising=False)
    monkeypatch.delenv("PERFBENCH_TEST_SETTING", raising=False)
    before = ProcessState.capture()
    # what inductor does when it loads a compiled C++ kernel (torch/_inductor/codecache.py)
    monkeypatch.setenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "139838590995488")
    assert before.differences(ProcessState.capture()) == []

    monkeypatch.setenv("PERFBENCH_TEST_SETTING", "1")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        setting, threads_line = before.differences(ProcessState.capture())
        # off the env allow-list: the line shows that it changed, not its value (the line reaches ab.json)
        assert setting.startswith("env.PERFBENCH_TEST_SETTING: (unset) -> <withheld ")
        assert threads_line == f"torch.num_threads: {threads} -> {threads + 1}"
    finally:
        torch.set_num_threads(threads)
