"""Delayed outcomes: what joins examples with labels that come later (free of Beam)."""
