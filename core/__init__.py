"""The ground floor: the config schema, the error types and codes, the jar locations, the
mirror plan and the process liveness check. Plain data and checks that every other package
shares; it imports nothing of ours."""
