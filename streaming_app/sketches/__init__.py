"""Provenance sketches in the streaming job: registration, maintenance, outputs, CLI and queries.

The engine is ``operators.sketch`` (checks: ``operators.sketch_safety``, attribute choice:
``operators.sketch_advisor``); this package wires it into the job and the command line:

* ``tables`` - the output tables (``registered_queries``, ``sketch_deltas``, ``sketches``)
  and their value encodings;
* ``registry`` - ``Part`` / ``Registration`` and the ``registered_queries`` reads and writes;
* ``register`` - ``register_query`` / ``drop_query`` (checks, boundaries, first capture);
* ``query_state`` - one query's state: capture, restore, bring forward from the change feed;
* ``pushdown`` - selections and columns pushed into the change-feed reads;
* ``delta_side`` - join inputs kept in their Delta mirror (``DeltaSide``, a ``SideStore``);
* ``outputs`` - a batch's ``sketch_deltas`` + ``sketches`` rows; ``snapshots`` - each query's
  engine snapshots in the one snapshot store (``state_snapshots``, maintainer ``sketch.<query>``);
* ``maintainer`` - ``SketchStreamMaintainer``, the job's maintainer; ``progress`` - its line
  per batch;
* ``cli`` - ``ivmstream sketch ...`` and ``ivmstream query``; ``query`` - show, filter, lazy
  refresh and running a query with a sketch's predicate.
"""
