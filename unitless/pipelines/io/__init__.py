"""Every Beam source and sink of unitless: files and Kafka partitions in, predictions and dead
letters out. Parsing is in ``parse/``, Kafka clients and the sinks themselves in
``connectors/`` (both free of Beam); these modules only drive them from DoFns: sources.py (the
transforms and the graph's reading step), files.py (files and the user's own records),
partitions.py (Kafka partitions and the shards' feedback topic), sinks.py (predictions and
dead letters out) and dead_letters.py (what every source refuses).

Sources write the records they refuse to the dead-letter sink themselves, durably, before they
hand on the block after them: once a checkpoint records a position past a refused record, that
record's dead letter exists, and a resumed run (which reads the source again) does not repeat
the dead letters at or before ``logged_through[source]``.
"""
