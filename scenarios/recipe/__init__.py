"""cann-recipes-infer Qwen3.5 YAMLs as that project ships them (valid perfbench input)."""
