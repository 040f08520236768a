"""Model storage, free of Beam: checkpoint files (``checkpoint_file``) in their layout on disk
(``per_key``, ``shards``), start records (``starts``), where a resumed run continues
(``resume``), and a model key's learner with its bookkeeping (``keyed_model``)."""
