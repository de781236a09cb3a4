"""Running: the runner (sweep -> run folders), the per-run launcher and worker, and in-process measurement."""
