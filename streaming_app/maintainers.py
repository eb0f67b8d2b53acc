"""Every maintainer the config asks for, in the order the job runs them."""

from __future__ import annotations


def maintainers_for(cfg) -> list:
    from streaming_app.triangles.maintainer import TriangleMaintainer
    from streaming_app.views.maintainer import ViewMaintainer

    out: list = []
    out += [TriangleMaintainer(g, cfg.state) for g in cfg.graphs]
    out += [ViewMaintainer(v, cfg.state) for v in cfg.views]
    from streaming_app.sketches.maintainer import SketchStreamMaintainer

    if cfg.state.backend == "statestore":  # the sketch operators run inside the streaming query
        return out
    out.append(SketchStreamMaintainer(cfg))  # idle (one log lookup per batch) until a query is registered
    return out
