"""The regression gate: rules (YAML), checks (per-run comparisons) and the engine that applies them."""
