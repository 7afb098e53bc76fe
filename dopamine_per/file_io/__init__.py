"""General file I/O: atomic writes, bounded reads, safe pickles, gzip'd files.

* `atomic_files`: atomic writes, digests, regular-file-only bounded reads,
  and the errors (`CheckpointError`, `CorruptCheckpointError`).
* `transaction`: several files replaced as one (staged files and a redo
  journal), for checkpoints written again under the same names.
* `safe_pickle`: unpickling plain data only, within `PickleLimits`.
* `gzip_files`: Dopamine's per-attribute checkpoint files (gzip'd ``.npy``
  arrays and pickles), written atomically and read safely.
* `run_lock`: one trainer per run directory (`RunDirectoryLock`, a kernel
  lock that goes away with its process).

Used by the replay memories' checkpoints, the experiment checkpointer, the
logger, the learning curve and the trainer. Nothing here imports
TensorFlow, except to reach a path with a URL scheme (``gs://``,
``ram://``) through ``tf.io.gfile``, and then only when such a path is
used.
"""
