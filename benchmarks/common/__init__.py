"""What the benchmark scripts share, one module per job: where things are (``paths``), the
machine and its load (``machine``), result files and tables (``results``), the data sets
(``data``), our learners over a stream (``learners``), commands run and timed from outside
(``runs``) and everything Vowpal Wabbit (``vw``). Nothing here is timed as a test."""
