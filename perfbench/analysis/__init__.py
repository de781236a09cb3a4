"""Analysis of results: statistics, per-toggle attribution."""
