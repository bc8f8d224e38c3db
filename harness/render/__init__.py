"""What records look like to people and CI: tables, step summary, JUnit, the bench chart."""
