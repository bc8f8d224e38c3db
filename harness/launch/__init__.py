"""Starting one cell: its run directory, its environment, torchrun through processes/, and what it left behind
(RawRun), before it is judged."""
