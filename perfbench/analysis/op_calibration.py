"""What `ab --ops` can see on this host: simulated op-level jobs drawn from recorded A/A op epochs
(`perfbench calibrate --ops`).

The recorded op epochs (perfbench/results/op_noise_record.py) hold every group's and branch's log ratio head / base
per epoch. A simulated job draws as many whole epochs as a job at the cap would have (all groups of an epoch
together, so their correlation stays; without replacement, in a fresh random order, as calibration.py draws
timed epochs), and judges them with `op_ab.judge_ops`, the judgement `ab --ops` uses. A/A jobs give the family's
false rate: the share of jobs that name any group or branch. Then, for each group in turn, `shift` is injected into
that group alone (log(1 + shift) on its estimates) and into its branch by the group's share of it
(log(1 + shift * share)): the share of jobs that name the group is its detection rate, and the share that name
anything else but its branch is the false naming under a real change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from perfbench.analysis.op_ab import Key, family_times, judge_ops
from perfbench.analysis.sequential import DecisionRule
from perfbench.results.op_ab_record import OpPair
from perfbench.results.op_group import OpGroup
from perfbench.results.op_noise_record import OpDetection, OpNoise, OpNoiseEpoch

DEFAULT_SHIFT = 0.10
DEFAULT_JOBS = 200


def _name(key: Key) -> str:
    return f"{key[0]}/{key[1]}"


def _key(name: str) -> Key:
    rid, _, rest = name.partition("/")
    return rid, rest


def op_noise(pairs: Sequence[OpPair], epoch_seconds: Sequence[float]) -> OpNoise:
    """The op epochs of an A/A `ab --ops` job as recorded noise: per epoch, each key's log ratio where both arms
    ran it; `epoch_seconds[k]`: the wall time of epoch k (timed and op epoch together)."""
    groups, branches = family_times(pairs)
    epochs_of: dict[str, list[int]] = {}
    for p in pairs:
        epochs_of.setdefault(p.run_id, []).append(p.epoch)
    logs: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
    for family, index in ((groups, 0), (branches, 1)):
        for key, (base, head) in family.items():
            for epoch, b, h in zip(epochs_of[key[0]], base, head):
                if b > 0 and h > 0:
                    logs.setdefault(epoch, ({}, {}))[index][_name(key)] = math.log(h / b)
    shares = {}
    for key, (base, _) in groups.items():
        branch = branches.get((key[0], OpGroup.from_label(key[1]).branch))
        total = sum(branch[0]) if branch is not None else 0.0
        shares[_name(key)] = sum(base) / total if total > 0 else 0.0
    epochs = [OpNoiseEpoch(seconds=epoch_seconds[e] if e < len(epoch_seconds) and epoch_seconds[e] > 0 else 1.0,
                           groups=g, branches=b) for e, (g, b) in sorted(logs.items())]
    return OpNoise(epochs=epochs, shares=shares)


def _columns(epochs: Sequence[OpNoiseEpoch], family: str) -> tuple[list[str], np.ndarray]:
    """The keys every epoch has, and the epochs x keys log ratios."""
    rows = [getattr(e, family) for e in epochs]
    keys = sorted(set.intersection(*(set(r) for r in rows))) if rows else []
    return keys, np.array([[r[k] for k in keys] for r in rows], dtype=float).reshape(len(rows), len(keys))


def epochs_per_job(noise: OpNoise, cap_s: float, startup_s: float) -> int:
    """The op epochs a job at the cap would have (one per timed epoch), at least 2."""
    mean_s = float(np.mean([e.seconds for e in noise.epochs])) if noise.epochs else 1.0
    return max(2, int((cap_s - startup_s) // mean_s))


def simulate_named(noise: OpNoise, target: str | None, shift: float, jobs: int, per_job: int, rule: DecisionRule,
                   seed: int = 0) -> list[set[str]]:
    """What each of `jobs` simulated jobs names (groups and branches, as "<run_id>/<name>"), with `shift` injected
    into the group `target` (None: A/A)."""
    group_keys, group_logs = _columns(noise.epochs, "groups")
    branch_keys, branch_logs = _columns(noise.epochs, "branches")
    group_logs, branch_logs = group_logs.copy(), branch_logs.copy()
    if target is not None:
        rid, label = _key(target)
        branch = _name((rid, OpGroup.from_label(label).branch))
        if target in group_keys:
            group_logs[:, group_keys.index(target)] += math.log1p(shift)
        if branch in branch_keys:
            branch_logs[:, branch_keys.index(branch)] += math.log1p(shift * noise.shares.get(target, 0.0))
    rng = np.random.default_rng([seed, len(target or ""), int(round(shift * 1e6))])
    count = len(noise.epochs)
    out = []
    for _ in range(jobs):
        drawn: list[int] = []
        while len(drawn) < per_job:
            drawn += rng.permutation(count).tolist()[:per_job - len(drawn)]
        judged = judge_ops({_key(k): group_logs[drawn, i].tolist() for i, k in enumerate(group_keys)},
                           {_key(k): branch_logs[drawn, i].tolist() for i, k in enumerate(branch_keys)}, rule)
        out.append({_name(k) for k in judged.named()})
    return out


def calibrate_ops(noise: OpNoise, rule: DecisionRule, cap_s: float, startup_s: float, jobs: int = DEFAULT_JOBS,
                  shift: float = DEFAULT_SHIFT, seed: int = 0) -> OpNoise:
    """`noise` with the simulation's findings: the family's false rate and each group's detection rate."""
    per_job = epochs_per_job(noise, cap_s, startup_s)
    aa = simulate_named(noise, None, 0.0, jobs, per_job, rule, seed)
    group_keys, _ = _columns(noise.epochs, "groups")
    detection = []
    for target in group_keys:
        rid, label = _key(target)
        branch = _name((rid, OpGroup.from_label(label).branch))
        named = simulate_named(noise, target, shift, jobs, per_job, rule, seed)
        detection.append(OpDetection(group=target, share_of_branch=round(noise.shares.get(target, 0.0), 4),
                                     detected=float(np.mean([target in n for n in named])),
                                     others_named=float(np.mean([bool(n - {target, branch}) for n in named]))))
    detection.sort(key=lambda d: (-d.detected, d.group))
    return noise.model_copy(update={"jobs": jobs, "epochs_per_job": per_job, "shift": shift,
                                    "false_rate": float(np.mean([bool(n) for n in aa])), "detection": detection})
