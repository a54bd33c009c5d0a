"""Layer 5: evaluation. Greedy and sampled episodes of a policy on goals (``evaluate``), one metrics module
(``metrics``: one name per quantity, confidence intervals), the results directory's names and failure classes
(``schema``), its writer (``report``) and HTML page (``html_report``), paired comparison (``compare``), a training
run's TensorBoard scalars read back (``training_logs``) and the evaluation command line (``__main__``)."""
