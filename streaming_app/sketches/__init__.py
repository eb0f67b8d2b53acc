"""Provenance sketches in the streaming job: registration, maintenance, outputs, CLI and queries.

The engine is ``operators.sketch`` (with ``sketch_safety`` and ``sketch_advisor``); this
package wires it into the job and the command line.
"""
