"""unitless: scale-invariant online learning on Apache Beam."""

__version__ = "0.1.0"
