"""The shipped scenarios (YAML), installed as perfbench.scenarios; `perfbench list scenarios` lists them."""
