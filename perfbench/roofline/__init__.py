"""Roofline: documented device peaks, pricing of model/cost.py counts, `perfbench estimate`, and measured time
next to roofline time in run tables (docs/roofline.md)."""
