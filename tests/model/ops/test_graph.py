"""Decode-step compilers (model/ops/graph.py) that run without an accelerator."""

from __future__ import annotations

import pytest
import torch

from model.cache import Qwen3_5MoeCache
from model.config import Qwen3_5MoeTextConfig
from model.ops.graph import compile_cuda


def fake_step(tokens: torch.Tensor, cache: Qwen3_5MoeCache) -> torch.Tensor:
    """Writes the cache in place, as the model's decode step does (the mutation CUDA graphs must allow)."""
    cache.recurrent[0].add_(1.0)
    cache.kv_lens.add_(1)
    return tokens.float() + cache.kv_lens.float() + cache.recurrent[0].sum()


def test_cuda_graph_step_marks_every_cache_tensor_static(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor runs a graph that mutates its inputs through CUDA graphs only for static-address inputs; the
    wrapper must mark every cache tensor so. The compile itself is CUDA's business (benchmarks/cuda_check.py
    counts skipped CUDA graphs on a GPU); here torch.compile is replaced by the identity."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(options) or fn)
    cfg = Qwen3_5MoeTextConfig.tiny().with_layers(4)
    eager_cache = Qwen3_5MoeCache.allocate(cfg, 2, 8, torch.float32, "cpu")
    graph_cache = Qwen3_5MoeCache.allocate(cfg, 2, 8, torch.float32, "cpu")
    step = compile_cuda(fake_step)
    assert compiled == [{"mode": "reduce-overhead", "fullgraph": True, "dynamic": False}]
    tokens = torch.tensor([3, 5])
    for _ in range(3):
        assert torch.equal(step(tokens, graph_cache), fake_step(tokens, eager_cache))
    tensors = graph_cache.tensors()
    # two per layer (key/value or conv/recurrent state) and kv_lens
    assert len(tensors) == 2 * len(cfg.layer_types) + 1
    assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in tensors)
    assert torch.equal(graph_cache.kv_lens, torch.tensor([3, 3]))
    # a new cache (other addresses) is marked too
    other = Qwen3_5MoeCache.allocate(cfg, 2, 8, torch.float32, "cpu")
    step(tokens, other)
    assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in other.tensors())
