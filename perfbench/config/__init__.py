"""Configuration: scenario YAML schema, the Scenario dataclasses, and the sweep that expands it into runs."""
