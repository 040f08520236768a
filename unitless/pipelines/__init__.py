"""Beam pipelines: training (predict-then-update per model key) and scoring."""
