"""Model storage, free of Beam: checkpoint files (``checkpoint_file``) in their layouts on disk
(``by_group``, ``group_writer``, ``per_key``, ``shards``; read through the ``catalog``),
start records (``starts``) and where a resumed run continues (``resume``)."""
