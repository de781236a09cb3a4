"""The run's time by stage: what each run recorded, a block group's shared timing counted once."""

from __future__ import annotations

from perfbench.run.runner import stage_line
from tests.records_kit import run_result


def test_stages_add_up_with_a_block_group_timed_once_and_the_rest_is_start_up():
    group = {"process": "p1", "group": "g", "index": [0], "epoch": [0]}
    runs = [run_result("a", stages={"reference_s": 3.0, "build_s": 1.0, "warmup_s": 10.0, "timing_s": 20.0,
                                    "numerics_s": 2.0, "profile_s": 4.0}, blocks=group),
            run_result("b", stages={"build_s": 1.0, "warmup_s": 6.0, "timing_s": 20.0, "numerics_s": 2.0},
                       blocks=group),
            run_result("c", stages={"timing_s": 5.0})]  # timed on its own
    line = stage_line(runs, wall_s=80.0)
    # reference 3, build 2, warm-up 16, timing 20 + 5, numerics 4, profile 4: 54 s, so 26 s of start-up and the rest
    assert line == ("time by stage: reference 3 s, build 2 s, warm-up and compile 16 s, timing 25 s, numerics 4 s, "
                    "profile 4 s, start-up and the rest 26 s; wall 80 s")
