"""The projection scored on published multi-node results (``python -m analysis.project``):
:mod:`.scoring` turns each case of ``benchmarks/projection_cases.yaml`` into the points the
error model is fitted on and scored with (drawing over what the case does not state,
:mod:`.unknowns`), :mod:`.backtest` scores them with the shipped model or
nested cross-validated (the noise chosen inside the folds, :mod:`.noise_selection`), beside
the sealed test (:mod:`.sealed`), and :mod:`.totals` sums a set of scored points up."""
