"""Re-allocation epochs: the weights move to new storage, keep their values and their Parameter objects, and runs
whose captured accelerator graph may hold the weights' addresses are left where they are."""

from __future__ import annotations

import torch

from perfbench.measure.epochs import Relocator, relocatable


def test_relocation_moves_the_storage_and_keeps_values_and_parameters():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))
    module.register_buffer("table", torch.arange(10.0))
    params = list(module.parameters())
    before = {name: t.detach().clone() for name, t in [*module.named_parameters(), *module.named_buffers()]}
    pointers = {name: t.data_ptr() for name, t in [*module.named_parameters(), *module.named_buffers()]}
    x = torch.randn(3, 64)
    expected = module(x)
    relocator = Relocator(module, seed=1)
    moved = relocator.relocate()
    assert moved == sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    after = dict([*module.named_parameters(), *module.named_buffers()])
    assert all(torch.equal(after[name], value) for name, value in before.items())
    assert all(after[name].data_ptr() != pointers[name] for name in pointers)
    assert [p is q for p, q in zip(params, module.parameters())] == [True] * len(params)
    assert torch.equal(module(x), expected)
    assert len(relocator.spacers) == len(pointers)  # kept until the next epoch, so the shift holds


def test_only_weights_no_captured_graph_holds_are_moved():
    assert relocatable("cpu", graph_mode=True) and relocatable("cuda", graph_mode=False)
    assert not relocatable("cuda", graph_mode=True) and not relocatable("npu", graph_mode=True)
