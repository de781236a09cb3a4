"""Executors: where a sweep's runs execute (this machine one after another, or a Ray cluster in parallel)."""
