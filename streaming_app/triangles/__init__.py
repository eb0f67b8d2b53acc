"""Triangle counts of CDC-fed graphs (``[[graphs]]``): the job's wiring of the IVM^ε engine."""
