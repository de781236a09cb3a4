"""The child side of a run: what a worker process does to build, time and record one run or a block group."""
