"""Is a registered query one SELECT statement: the syntax check every entry point runs first
(the sketch engine's own checks live in ``operators.sketch_safety.registration``)."""

from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp

_CLAUSES = {"Where": "WHERE", "Group": "GROUP BY", "Having": "HAVING", "Order": "ORDER BY", "Limit": "LIMIT",
            "From": "FROM", "Join": "JOIN", "Select": "SELECT"}

def _parse_error_text(text: str) -> str:
    """sqlglot's description of a parse error in the words of SQL, not of its classes."""
    text = text.strip().splitlines()[0] if text.strip() else "cannot parse"
    m = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>", text)
    if m:
        return f"incomplete {_CLAUSES.get(m.group(1), m.group(1))}"
    text = re.sub(r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end of the query", text)
    text = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", lambda t: repr(t.group(1)), text)
    text = re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", text)
    return text[:1].lower() + text[1:]

def sql_problem(sql: str, dialect: str = "postgres") -> str | None:
    """Why ``sql`` is not one SELECT statement (a syntax error, several statements, another
    kind of statement), or None. Run before the sketch front end, whose parser reads a
    misspelt keyword as an expression ('SELEC * FRM t' parses as an alias)."""

    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        return "the SQL is empty"
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.CRITICAL)  # its warnings would add lines to a one-line error
    try:
        trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if getattr(e, "errors", None) else {}
        at = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        near = f" near {first['highlight']!r}" if first.get("highlight") else ""
        return f"syntax error{at}{near}: {_parse_error_text(first.get('description') or str(e))}"
    except sqlglot.errors.SqlglotError as e:
        return f"syntax error: {str(e).splitlines()[0]}"
    except RecursionError:
        return "nested too deeply to parse (parentheses or subqueries)"
    finally:
        log.setLevel(level)
    if len(trees) != 1:
        return f"{len(trees)} statements given; a sketch is defined by one SELECT query"
    tree = trees[0]
    if isinstance(tree, exp.Query):
        return None
    word = text.split(None, 1)[0]
    if word.upper() in ("SELECT", "WITH", "("):
        return f"syntax error: cannot read this as a SELECT query (it parses as {type(tree).__name__})"
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Alter,
                         exp.Merge, exp.Command, exp.Set, exp.Use)):
        return f"{word.upper()} is not a query: only a SELECT query can be sketched"
    return f"syntax error: a query starts with SELECT, found {word[:40]!r}"
