"""`perfbench verify`: the first-day check of an Ascend machine (docs/verify.md).

Five independent items (environment, ops, model, parallel, profile), a one-page summary and a size-capped
bundle. `runner.run_verify` runs them (torch); `read.read_bundle` renders a bundle without torch, so this
package imports nothing at import time.
"""
