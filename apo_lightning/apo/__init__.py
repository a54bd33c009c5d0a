"""Layer 4: the algorithm. Log-probabilities at generated tokens (``logprobs``), V* for A*-PO stage 1 (``vstar``),
the training objectives, one file each behind one interface (``objectives``), and the argument checks and masking
their losses share (``checks``). Pure tensor functions and bookkeeping: no Lightning, no rollouts."""
