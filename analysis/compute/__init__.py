"""Computing: statistics, the scaling metrics, the waterfall, the step model and its projection."""
