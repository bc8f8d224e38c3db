"""What a run is asked to do and how it is judged: scenarios, expectations, tolerances. Pydantic and YAML only."""
