"""A model key's model as a run keeps it (``KeyedModel``: the learner with its input positions
and checkpoints' bookkeeping), the models of a group learned together (``ModelGroup``) and
the prediction rows they make (``predictions``). Free of Beam and of files."""
