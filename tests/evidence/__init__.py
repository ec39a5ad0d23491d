"""Standalone reproducers of upstream bugs (plain Beam only), kept as evidence for reports."""
