"""Shipped gate rules (YAML) for `perfbench gate --rules`, installed as perfbench.gates."""
