"""The ground floor: the config schema, the error types and codes, the jar locations and the
mirror plan. Plain data and checks that every other package shares; it imports nothing of ours."""
