"""What a run wrote: the record models (results, measures, rank measures), which every room may import as data
types, and store.py, which writes and reads the results files (docs/ARCHITECTURE.md, "Rooms")."""
