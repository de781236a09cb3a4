"""How one node starts its share of a run's ranks: torchrun's node arguments and who writes the result.

Single node: torchrun on loopback (static rendezvous at 127.0.0.1). Several nodes: torchrun on every node with
a c10d rendezvous at an endpoint on node 0; node 0's torchrun hosts the rendezvous store (`is_host`), so the
order the nodes start in does not matter. Global ranks under c10d are assigned by the rendezvous, not by node
rank, so the result is written by local rank 0 of node 0 (the `perfbench run` that owns the results folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfbench.errors import UserError

if TYPE_CHECKING:  # the worker imports this module; the scenario schema stays out of it
    from perfbench.config.scenario import ClusterSection

NODE_RANK_ENV = "PERFBENCH_NODE_RANK"  # set in every rank's environment: the node rank perfbench gave it
EXECUTOR_ENV = "PERFBENCH_EXECUTOR"  # the executor that started the run (local, ray), for the record


@dataclass(frozen=True)
class NodeLaunch:
    """One node's part of a run."""

    nnodes: int = 1
    nproc_per_node: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # HOST:PORT on node 0; None on a single node (loopback)

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    def with_rank(self, node_rank: int, rdzv_endpoint: str | None = None) -> NodeLaunch:
        return NodeLaunch(self.nnodes, self.nproc_per_node, node_rank, rdzv_endpoint or self.rdzv_endpoint)

    def torchrun_args(self, rdzv_id: str, port: int) -> list[str]:
        """torchrun's node arguments; `port` is the loopback master port of a single-node run."""
        if not self.multi_node:
            return ["--nnodes", "1", "--nproc-per-node", str(self.nproc_per_node), "--master-addr", "127.0.0.1",
                    "--master-port", str(port)]
        if self.rdzv_endpoint is None:
            raise ValueError("a multi-node launch needs a rendezvous endpoint")  # checked by launch_for
        return ["--nnodes", str(self.nnodes), "--nproc-per-node", str(self.nproc_per_node),
                "--node-rank", str(self.node_rank), "--rdzv-backend", "c10d",
                # values from the scenario joined to their option: never read as an option themselves
                f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={rdzv_id}",
                "--rdzv-conf", f"is_host={int(self.node_rank == 0)}"]


def launch_for(cluster: ClusterSection, world_size: int, need_endpoint: bool = True) -> NodeLaunch:
    """This node's launch from a validated `perfbench.cluster` section."""
    per_node = cluster.nproc_per_node or world_size // cluster.nnodes
    if cluster.nnodes > 1 and need_endpoint and cluster.rdzv_endpoint is None:
        raise UserError(f"{cluster.PATH}.rdzv_endpoint: nnodes {cluster.nnodes} needs the HOST:PORT of "
                        f"the rendezvous on node 0 (--rdzv-endpoint), or --executor ray")
    return NodeLaunch(cluster.nnodes, per_node, cluster.node_rank, cluster.rdzv_endpoint)


def is_result_writer() -> bool:
    """The one process of a run that writes result.json and the trace tables: local rank 0 of node 0."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get(NODE_RANK_ENV, "0") == "0"
