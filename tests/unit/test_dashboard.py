"""The generated Grafana dashboard is self-consistent (the e2e test runs its queries)."""

from __future__ import annotations

import re

from batchop import dashboard
from batchop.api.constants import PROM_LABEL_MODEL


def test_panels_have_unique_ids_targets_and_do_not_overlap() -> None:
    board = dashboard.build_dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        assert p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine


def test_every_variable_used_is_defined() -> None:
    board = dashboard.build_dashboard()
    defined = {v["name"] for v in board["templating"]["list"]}
    text = str(board)
    used = set(re.findall(r"\$\{?([a-z]\w*)", text))
    assert used <= defined, used - defined


def test_per_model_queries_select_the_chosen_model() -> None:
    for title, q in dashboard.all_queries():
        if title.startswith("Operator:"):
            continue  # operator-wide panel
        assert 'namespace="$namespace"' in q.expr, title
        assert f'{PROM_LABEL_MODEL}="$batchedmodel"' in q.expr, title


def test_decisions_are_annotations_from_the_operator_metrics() -> None:
    board = dashboard.build_dashboard()
    (ann,) = [a for a in board["annotations"]["list"] if a.get("expr")]
    assert "batchop_decisions_total" in ann["expr"]
    assert ann["expr"] == dashboard.DECISIONS.expr


def test_substitute_fills_every_grafana_variable() -> None:
    for _, q in dashboard.all_queries():
        assert "$" not in dashboard.substitute(q.expr, "ns", "bm", "1m")


def test_rejected_requests_are_shown_from_triton_and_the_operator() -> None:
    queries = {q.expr: q.source for title, q in dashboard.all_queries() if "Rejected" in title}
    triton = [e for e, source in queries.items() if source == "triton"]
    assert len(triton) == 1 and 'reason="REJECTED"' in triton[0]
    assert "nv_inference_request_failure" in triton[0] and "rate(" in triton[0]
    assert any("batchop_rejected_requests_per_second" in e for e in queries)
    shipped = dashboard.rendered_files()["dashboard.json"]
    assert "nv_inference_request_failure" in shipped
