"""Layer 3: baselines and teachers. Scripted policies (random, rule, oracle) and their episode loop
(``scripted``), oracle demonstrations in the chat format (``demonstrations``), turn drills (``drills``), and the
tiny policy's tokenizer corpus and build (``corpus``)."""
