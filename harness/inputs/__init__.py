"""What a run is asked to do: scenarios, expectations, tolerances, the release plan. Pydantic and YAML only; every
room may import these as data (docs/ARCHITECTURE.md, "Rooms")."""
