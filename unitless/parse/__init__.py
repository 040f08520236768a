"""Bytes to blocks: raw records (CSV, libsvm/svmlight, VW text, JSON lines, Parquet rows, the
user's own records) parsed into columnar ``ExampleBlock``s (records.py), one module per format
(csv.py, jsonl.py, libsvm.py, vw.py; Parquet's record batches through tables.py), what they
share (spec.py: what is read of a record; rows.py: a record at a time) and the one table of
formats (formats.py). Free of Beam and of I/O: readers hand it records, it hands back blocks
and dead letters.

Every format goes through one record model: a label, an optional importance weight, id and model
key, and named features. Feature names are hashed into 2^bits (``unitless.learner.hash_feature``)
with a constant/bias feature unless it is turned off. Numeric columns give name -> value; string
values of categorical columns (and JSON strings) give the one-hot feature "column=value".

Every record is untrusted. Whatever goes wrong with one record makes it a DeadLetter carrying
the record exactly as read (bytes) and a short reason; nothing in a record can stop the reader.
Chunks are parsed whole by Arrow where they can be (the fast path); a chunk Arrow refuses, or
that is not plainly one record per line, goes through the format's careful per-record parser.
"""
