"""The flink semantics profile: conventions, periodic generation and idleness, alignment,
window operators and the StatusWatermarkValve."""
