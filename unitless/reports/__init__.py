"""What people read of a run, free of Beam: the end-of-run summary and the table of a model
directory's models (summary.py), one checkpoint summarised (inspect.py), and the learning curve
drawn from predictions (curve.py)."""
