"""A missing checkpoint, a bad config.json or a weight of the wrong shape: one clear error naming the file and
the field or tensor."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from model import Qwen3_5MoeForCausalLM
from model.config import ConfigError, Qwen3_5MoeTextConfig, load_config
from model.weights import CheckpointError


def small_config() -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_key_head_dim=8,
                                linear_num_value_heads=2, linear_value_head_dim=8, num_experts=4,
                                num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                                full_attention_interval=2)


def write_checkpoint(folder, config: Qwen3_5MoeTextConfig, mutate=None) -> None:
    """A complete safetensors checkpoint of `config` (our own model's keys = HF's on-disk keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config.to_hf_dict()))
    model = Qwen3_5MoeForCausalLM.from_pretrained(str(folder), dummy_weights=True)
    tensors = {}
    for key, slot in model.slots().items():
        tensors[key] = (slot.param[slot.dest] if slot.dest else slot.param).detach().clone().contiguous()
    if mutate:
        mutate(tensors)
    save_file(tensors, str(folder / "model.safetensors"))


def one_line(err: Exception) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def test_roundtrip_of_written_checkpoint_loads(tmp_path):
    write_checkpoint(tmp_path / "ok", small_config())
    model = Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path / "ok"))
    assert model.generate([[1, 2, 3]], max_new_tokens=2).logits.shape == (1, 2, 64)


def test_missing_checkpoint_folder_names_the_path(tmp_path):
    with pytest.raises(ConfigError) as err:
        Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path / "nowhere"))
    assert str(tmp_path / "nowhere") in one_line(err.value)


def test_folder_without_weights_names_the_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(small_config().to_hf_dict()))
    with pytest.raises(CheckpointError) as err:
        Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path))
    assert "no *.safetensors" in one_line(err.value) and str(tmp_path) in str(err.value)


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"])
def test_config_missing_required_field(tmp_path, field):
    raw = small_config().to_hf_dict()
    del raw[field]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    msg = one_line(err.value)
    assert "config.json" in msg and f"`{field}`" in msg


@pytest.mark.parametrize("field,value", [("num_key_value_heads", 3), ("hidden_size", -1), ("rms_norm_eps", "x"),
                                         ("num_experts_per_tok", 9), ("hidden_act", "gelu"),
                                         ("layer_types", ["linear_attention", "sliding"])])
def test_config_invalid_field(tmp_path, field, value):
    raw = small_config().to_hf_dict()
    raw[field] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    msg = one_line(err.value)
    assert "config.json" in msg and field in msg


def test_config_not_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert "not valid JSON" in one_line(err.value)


def test_nested_text_config_is_read(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe",
                                                      "text_config": small_config().to_hf_dict()}))
    assert load_config(tmp_path).hidden_size == 32


def test_weight_shape_mismatch_names_file_and_tensor(tmp_path):
    key = "model.layers.0.linear_attn.in_proj_z.weight"

    def widen(tensors):
        tensors[key] = torch.zeros(17, 32)

    write_checkpoint(tmp_path / "bad", small_config(), widen)
    with pytest.raises(CheckpointError) as err:
        Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path / "bad"))
    msg = one_line(err.value)
    assert "model.safetensors" in msg and key in msg and "[17, 32]" in msg


def test_missing_tensor_is_named(tmp_path):
    key = "model.layers.1.self_attn.o_proj.weight"
    write_checkpoint(tmp_path / "short", small_config(), lambda t: t.pop(key))
    with pytest.raises(CheckpointError) as err:
        Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path / "short"))
    assert key in one_line(err.value)


def test_pickle_only_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(small_config().to_hf_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(CheckpointError) as err:
        Qwen3_5MoeForCausalLM.from_pretrained(str(tmp_path))
    assert "safetensors only" in one_line(err.value)
