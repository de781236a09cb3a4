"""The GDN layer's causal depthwise conv (prefill over a ragged batch, then decode) against F.conv1d."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.backend import Capabilities
from model.config import Qwen3_5MoeTextConfig
from model.layers.gated_deltanet import Qwen3_5MoeGatedDeltaNet
from model.ops.opset import build_ops
from model.optimizations import resolve_plan
from tests.model.ops._compare import assert_close


def _layer() -> Qwen3_5MoeGatedDeltaNet:
    config = Qwen3_5MoeTextConfig.tiny()
    ops = build_ops(resolve_plan("none", Capabilities(device="cpu", device_name="cpu")))
    layer = Qwen3_5MoeGatedDeltaNet(config, 0, ops, torch.float32, "cpu")
    layer.conv_weight.copy_(torch.randn(layer.conv_weight.shape, generator=torch.Generator().manual_seed(1)))
    return layer


def _reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """silu(causal depthwise conv) of one prompt x [L, C] with zero left padding, via F.conv1d."""
    k = weight.shape[-1]
    y = F.conv1d(F.pad(x.t()[None], (k - 1, 0)), weight, groups=x.shape[1])
    return F.silu(y[0].t())


def test_prefill_conv_and_state_match_conv1d_on_ragged_rows_then_decode() -> None:
    layer = _layer()
    k, c = layer.kernel, layer.conv_dim
    lens = torch.tensor([9, 1, 2, 3, 4])  # rows shorter than, equal to and longer than the K-1 = 3 state
    qkv = torch.randn(len(lens), 9, c, generator=torch.Generator().manual_seed(2))
    state = torch.full((len(lens), c, k - 1), float("nan"))
    out = layer._conv_prefill(qkv, lens, state)
    nxt = torch.randn(len(lens), 1, c, generator=torch.Generator().manual_seed(3))
    step = layer._conv_decode(nxt, state)
    for b, n in enumerate(lens.tolist()):
        assert_close(f"row {b} prefill", _reference(qkv[b, :n], layer.conv_weight), out[b, :n], 1e-6, 1e-6)
        whole = torch.cat([qkv[b, :n], nxt[b]])  # decode continues the same causal conv
        assert_close(f"row {b} decode", _reference(whole, layer.conv_weight)[-1], step[b, 0], 1e-6, 1e-6)
