"""Sketch safety (PBDS §6): prove with z3 that a sketch on an attribute cannot change a query's result.

``check_safety(sql, table, attribute, tables=…) -> SafetyResult(safe, reason)``,
``require_safe`` (raises ``UnsafeSketchError``) and ``safe_attributes(sql, schema)``.

The check builds, bottom-up, pred(Q) (selections incl. HAVING, plus min/max statistics of the
base columns), expr(Q) (projection equations and aggregate sign facts) and Ψ (how a tuple over
the sketch instance relates to the full-data tuple it maps to), and proves the gc conditions
as z3 validity questions. Rules (PBDS digest §4; [R] = digest reconstruction):

* table access: Ψ = every column equal; pred = statistics bounds;
* selection / join condition / HAVING [R]: Ψ ∧ conds ∧ conds^𝒫𝒮 ∧ θ^𝒫𝒮 → θ;
* projection [R]: output columns are the expressions' terms (expr is implicit);
* join [R]: conjunction of both sides, the ON condition checked as a selection;
* aggregation: group-by values must be implied equal; then for each f(a)→b, tried in order:
  (1) b^𝒫𝒮 = b if every sketch attribute is implied equal to a group-by value (whole groups),
  (2) b^𝒫𝒮 ≤ b for count, and for sum over a ≥ 0 (conds → a ≥ 0),
  (3) b^𝒫𝒮 ≥ b for sum over a ≤ 0 — the digest's repaired reading ("≤ 0", not the
  extraction's "≥ 0"), (4) otherwise no relation (avg always lands here).
  Two deliberate refinements, both sound and both exercised by the differential test: max and
  min are treated as monotone whatever the sign (the paper's sign condition on them is
  conservative), and the relation of the input a itself (Ψ may only give a^𝒫𝒮 ≤ a after an
  inner aggregate) is taken into account instead of assuming equality;
* DISTINCT [R]: every output column implied equal;
* ORDER BY … LIMIT: each ascending key o ≤ o^𝒫𝒮 (descending: o^𝒫𝒮 ≤ o); in addition the
  tie-break on the output columns (the reference oracle's total order) must satisfy c ≤ c^𝒫𝒮
  up to a unique key (the group-by columns), or ties could be cut differently;
* UNION [R]: both branches; an output column keeps the relation both branches imply.

NULLs (SQL three-valued logic), for the columns ``nullable=`` names (from ``tables``: those
that hold a NULL): a row or group is kept only if its condition is TRUE. The two-valued proof
stays sound because (a) AND/OR/NOT, comparisons, IN, BETWEEN and arithmetic are monotone in
unknowns, (b) a value NULL over the full data is NULL over the sketch instance too (a NULL
aggregate means no non-NULL input in the whole group), and (c) nothing is assumed of a value
that may be NULL: no min/max bound for a nullable column, COUNT(x) ≥ 0 (not ≥ 1) for a
nullable x, and where an aggregate's input may be NULL over the sketch instance only, the
cases that need every value of a whole group (SUM, AVG, MIN ≤, MAX ≥) are off. Refused with
the reason: a CASE WHEN whose condition differs between the two sides and may be NULL (CASE
is not monotone), and an ORDER BY … LIMIT key or tie-break column that may be NULL and is not
implied equal (engines put NULL first or last differently). A NULL partition value lives in
its own fragment (``RangePartition``), so GROUP BY on the sketch attribute keeps the NULL
group whole. Unsupported constructs raise ``UnsupportedSqlError``.
"""

from operators.sketch_safety.check import (SafetyResult, check_safety, nulls_of, require_safe, safe_attributes, schema_of,
                                          stats_of)

__all__ = ["SafetyResult", "check_safety", "nulls_of", "require_safe", "safe_attributes", "schema_of", "stats_of"]
