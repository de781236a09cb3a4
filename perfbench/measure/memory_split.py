"""A run's peak memory split into what holds it: weights, the KV cache and GDN state, and the rest.

Weights and state are counted from the tensors themselves (each storage once), so they are exact on every
device. The peak is the device allocator's (CUDA, NPU) or, on CPU, the process's peak resident set, which also
holds the Python runtime and libraries: there "rest" is activations and workspace plus the process itself.
The graph pool is what the CUDA caching allocator keeps in private pools (CUDA graph capture); other devices
do not report it and leave it empty.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from model.backend import peak_memory_mb

MB = 2**20


def storage_mb(tensors: Iterable[torch.Tensor]) -> float:
    """Megabytes of the distinct storages behind `tensors` (a tied or viewed tensor counts once)."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values()) / MB


def graph_pool_mb(device: str) -> float | None:
    """Reserved memory in the CUDA allocator's private pools (graph capture); None where not reported."""
    if device != "cuda" or not torch.cuda.is_available():
        return None
    segments = torch.cuda.memory_snapshot()
    return sum(s["total_size"] for s in segments if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)) / MB


def memory_split(device: str, model: torch.nn.Module, state: Iterable[torch.Tensor]) -> dict[str, float | None]:
    """Summary fields: peak, weights, state (KV cache + GDN conv and recurrent state), rest, graph pool (MB)."""
    peak = peak_memory_mb(device)
    weights = storage_mb([*model.parameters(), *model.buffers()])
    held = storage_mb(state)
    return {"peak_mem_mb": peak, "mem_weights_mb": weights, "mem_state_mb": held,
            "mem_rest_mb": max(peak - weights - held, 0.0), "mem_graph_pool_mb": graph_pool_mb(device)}
