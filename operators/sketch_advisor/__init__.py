"""Cost-based sketch attribute selection: sample, estimate sketch sizes, pick the smallest safe one.

``advise(sql, tables, fragments=100, theta=0.05, seed=0) -> [Candidate]`` (best first),
``verify(sql, tables, candidates)`` (true shares via the reference oracle) and
``advise_for_cli(sql, tables, verify)`` (the printed table for ``ivmstream sketch advise``).
"""

from operators.sketch_advisor.advise import Candidate, advise, advise_for_cli, candidates_for, shape_of, size_from_groups, verify
from operators.sketch_advisor.estimate import estimate, expected_size, fragment_probability, half_width, haas, pass_probability
from operators.sketch_advisor.sample import bootstrap_means, stratified_sample

__all__ = [
    "Candidate", "advise", "advise_for_cli", "bootstrap_means", "candidates_for", "size_from_groups", "estimate", "expected_size",
    "fragment_probability", "haas", "half_width", "pass_probability", "shape_of", "stratified_sample", "verify",
]
