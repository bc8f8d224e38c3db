"""Planning a run before any cell starts: arms and their diffs, reuse of earlier records, time estimates, which
devices each cell holds, the release environments."""
