"""Drift between datasets: comparing and judging two sets of statistics (`drift_judging`), the report
of each kind (`drift_reports`) and watch mode's alerts (`alerts`). The statistics themselves are pure
(bpe_ops.drift_stats)."""
