"""`--executor ray`: each run a Ray task that holds the devices it needs; runs go in parallel as the cluster's
resources allow, and the driver (this process) records each result as it arrives.

A run of one node is one task asking for nproc_per_node `CPU`, `GPU` or `NPU` resources. A run of several
nodes gets a placement group of one such bundle per node (STRICT_SPREAD: a node each); a probe task on
bundle 0 picks the c10d rendezvous endpoint, then one task per bundle starts that node's torchrun. Inside a
task the run goes through `perfbench.run.attempt.execute` like a local run, with CUDA_VISIBLE_DEVICES /
ASCEND_RT_VISIBLE_DEVICES set to the device ids Ray assigned, so runs sharing a node never share a device.

Ray is an optional extra (`pip install -e ".[ray]"`), imported only here. Every node needs perfbench
installed at the same version; logs and traces stay in `--out` as seen from the node that ran them (use a
shared filesystem to have them beside results.jsonl, which the driver always writes).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from perfbench.config.sweep import PlannedRun
from perfbench.errors import UserError
from perfbench.measure.node_launch import NodeLaunch
from perfbench.results import RunPlan, RunResult
from perfbench.run.executors.base import Finished

RESOURCE_OF_DEVICE = {"cpu": "CPU", "cuda": "GPU", "npu": "NPU"}
VISIBLE_DEVICES_ENV = {"GPU": "CUDA_VISIBLE_DEVICES", "NPU": "ASCEND_RT_VISIBLE_DEVICES"}


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise UserError('--executor ray: Ray is not installed here; install the extra: pip install -e ".[ray]"') \
            from None
    return ray


def task_options(device: str, nproc: int) -> dict[str, Any]:
    """Ray resources of one node's part of a run: nproc devices (CPU runs: nproc cores)."""
    resource = RESOURCE_OF_DEVICE[device]
    if resource == "CPU":
        return {"num_cpus": nproc}
    if resource == "GPU":
        return {"num_cpus": 0, "num_gpus": nproc}
    return {"num_cpus": 0, "resources": {resource: nproc}}


def visible_devices(assigned: dict[str, list[str]]) -> dict[str, str]:
    """The visible-device variables for the accelerator ids Ray assigned to this task."""
    return {VISIBLE_DEVICES_ENV[kind]: ",".join(ids) for kind, ids in assigned.items()
            if kind in VISIBLE_DEVICES_ENV and ids}


def _task_env() -> dict[str, str]:
    import ray

    return {**os.environ, **visible_devices(ray.get_runtime_context().get_accelerator_ids())}


def _run_node0(planned: PlannedRun, out: str, env: dict[str, object],
               launch: NodeLaunch | None) -> tuple[RunResult, float]:
    from perfbench.run.attempt import execute

    return execute(planned, Path(out), env, launch=launch, base_env=_task_env(), executor="ray")


def _run_node_share(planned: PlannedRun, out: str, launch: NodeLaunch) -> int | None:
    from perfbench.run.executors.follower import run_node_share

    return run_node_share(planned, Path(out), launch, base_env=_task_env(), executor="ray").returncode


def _rendezvous_endpoint() -> str:
    """HOST:PORT on this node for the c10d rendezvous (the port is free now; torchrun binds it moments later)."""
    import ray

    host = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return f"{host}:{sock.getsockname()[1]}"


def _ray_failure(planned: PlannedRun, env: dict[str, object], err: BaseException) -> Finished:
    spec = planned.spec
    why = " ".join(str(err).split())[:2000]
    return planned, RunResult(run_id=spec.run_id, status="error", spec=spec,
                              error=f"ray task failed: {type(err).__name__}: {why}", plan=RunPlan.of(planned.plan),
                              env=dict(env)), 0.0


class RayExecutor:
    name = "ray"
    started_word = "queued"

    def __init__(self, address: str | None, launch: NodeLaunch) -> None:
        self.ray = import_ray()
        self.address = address
        self.launch = launch  # nnodes and nproc_per_node of every run; Ray picks the nodes and the endpoint
        self.remote_node0 = self.ray.remote(_run_node0)
        self.remote_node_share = self.ray.remote(_run_node_share)
        self.remote_endpoint = self.ray.remote(_rendezvous_endpoint)

    def _connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, logging_level="WARNING", log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as err:
                raise UserError(f"--address {self.address}: cannot connect to a Ray cluster "
                                f"({' '.join(str(err).split())[:300]})") from None

    def _check_capacity(self, device: str) -> None:
        """Refuse up front a run no node set of this cluster can hold (it would wait forever)."""
        resource = RESOURCE_OF_DEVICE[device]
        need = self.launch.nproc_per_node
        fitting = sum(1 for node in self.ray.nodes()
                      if node.get("Alive") and node.get("Resources", {}).get(resource, 0) >= need)
        if fitting < self.launch.nnodes:
            raise UserError(f"--executor ray: a run needs {self.launch.nnodes} node(s) with {need} {resource} "
                            f"each; this Ray cluster has {fitting}")

    def run(self, runs: Sequence[PlannedRun], out: Path, env: dict[str, object],
            announce: Callable[[PlannedRun], None]) -> Iterator[Finished]:
        if not runs:
            return
        ray = self.ray
        self._connect()
        self._check_capacity(runs[0].spec.device)
        out_path = str(out.absolute())
        pending: dict[Any, Callable[[Any], Finished | None]] = {}
        for planned in runs:
            announce(planned)
            if self.launch.multi_node:
                self._submit_multi_node(planned, out_path, env, pending)
            else:
                self._submit_single_node(planned, out_path, env, pending)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            finished = pending.pop(ready[0])(ready[0])
            if finished is not None:
                yield finished

    def _submit_single_node(self, planned: PlannedRun, out: str, env: dict[str, object],
                            pending: dict[Any, Callable[[Any], Finished | None]]) -> None:
        ray = self.ray
        options = task_options(planned.spec.device, self.launch.nproc_per_node)
        ref = self.remote_node0.options(max_retries=0, **options).remote(planned, out, env, None)

        def done(ref: Any) -> Finished:
            try:
                result, wall = ray.get(ref)
            except ray.exceptions.RayError as err:
                return _ray_failure(planned, env, err)
            return planned, result, wall

        pending[ref] = done

    def _submit_multi_node(self, planned: PlannedRun, out: str, env: dict[str, object],
                           pending: dict[Any, Callable[[Any], Finished | None]]) -> None:
        ray = self.ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        launch = self.launch
        options = task_options(planned.spec.device, launch.nproc_per_node)
        bundle = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0),
                  **options.get("resources", {})}
        group = placement_group([{k: v for k, v in bundle.items() if v}] * launch.nnodes, strategy="STRICT_SPREAD")

        def on(index: int) -> dict[str, Any]:
            return {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
                    "max_retries": 0}

        probe = self.remote_endpoint.options(num_cpus=0, **on(0)).remote()

        def started(probe_ref: Any) -> Finished | None:
            try:
                endpoint = ray.get(probe_ref)
            except ray.exceptions.RayError as err:
                remove_placement_group(group)
                return _ray_failure(planned, env, err)
            shares = [self.remote_node_share.options(**options, **on(rank))
                      .remote(planned, out, launch.with_rank(rank, endpoint)) for rank in range(1, launch.nnodes)]
            node0 = self.remote_node0.options(**options, **on(0)).remote(
                planned, out, env, launch.with_rank(0, endpoint))

            def done(ref: Any) -> Finished:
                try:
                    result, wall = ray.get(ref)
                    finished: Finished = (planned, result, wall)
                except ray.exceptions.RayError as err:
                    finished = _ray_failure(planned, env, err)
                # the other nodes' ranks end with node 0's (collectives fail, or their own timeout); a share
                # still running now is stopped with its process group
                _, running = ray.wait(shares, num_returns=len(shares), timeout=30)
                for share in running:
                    ray.cancel(share, force=True)
                remove_placement_group(group)
                return finished

            pending[node0] = done
            return None

        pending[probe] = started
