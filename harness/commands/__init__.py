"""One module per command family; each `cmd_*` takes the parsed arguments and returns the exit code."""
