"""Cost-based sketch attribute selection: sample, estimate sketch sizes, pick the smallest safe one.

``advise(sql, tables, fragments=100, theta=0.05, seed=0) -> [Candidate]`` (best first),
``verify(sql, tables, candidates, how=...)`` (true shares by a capture, or by an oracle the caller passes),
``advise_report`` / ``format_advice`` (ranked candidates, refused attributes with the reason, the
winner) and ``advise_for_cli(sql, tables, verify)`` (the printed table for ``ivmstream sketch advise``).
"""

from operators.sketch_advisor.advise import (Advice, Candidate, Refused, advise, advise_for_cli, advise_report, candidates_for,
                                            format_advice, screen, shape_of, size_from_groups, verify)
from operators.sketch_advisor.estimate import estimate, expected_size, fragment_probability, half_width, haas, pass_probability
from operators.sketch_advisor.sample import bootstrap_means, stratified_sample

__all__ = [
    "Advice", "Candidate", "Refused", "advise", "advise_for_cli", "advise_report", "format_advice", "screen", "bootstrap_means", "candidates_for", "size_from_groups", "estimate", "expected_size",
    "fragment_probability", "haas", "half_width", "pass_probability", "shape_of", "stratified_sample", "verify",
]
