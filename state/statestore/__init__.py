"""The statestore backend: keyed operators inside the streaming query, their state in Spark's state store."""
