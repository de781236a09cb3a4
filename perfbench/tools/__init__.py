"""Side commands: `perfbench doctor` and `perfbench list`."""
