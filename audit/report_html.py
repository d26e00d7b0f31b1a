"""``lakegate audit report --html``: the report's data (:mod:`audit.report`) drawn as one
self-contained HTML page: plotly charts (plotly.js inlined from the installed package, so
the file opens offline and loads nothing), the same numbers as tables, and the data as JSON.

Everything in the log is the callers' text (user names, tables, reasons): the template
escapes it, plotly's JSON escapes ``<``, and chart labels are HTML-escaped because plotly
reads a few HTML tags in SVG text.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape
from plotly.offline import get_plotlyjs

_ENV = Environment(
    loader=PackageLoader("audit", "report_templates"),
    autoescape=select_autoescape(("html", "j2")),
    trim_blocks=True,
    lstrip_blocks=True,
)
_CONFIG = {"displayModeBar": False, "responsive": True}


def _label(text: object) -> str:
    return html.escape(str(text), quote=False)


def _chart(fig: go.Figure, div_id: str, title: str) -> str:
    fig.update_layout(
        title={"text": _label(title)},
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        height=360,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)


def _over_time(series: dict[str, dict[str, int]], buckets: list[str]) -> go.Figure:
    fig = go.Figure(
        [
            go.Bar(name=_label(name), x=buckets, y=[counts.get(b, 0) for b in buckets])
            for name, counts in series.items()
        ]
    )
    fig.update_layout(barmode="stack", xaxis={"type": "category"}, yaxis={"title": "statements"})
    return fig


def _denials(rows: list[list[Any]]) -> go.Figure:
    by_reason: dict[str, dict[str, int]] = {}
    for table, _cmd, reason, count, _users, _last in rows:
        per = by_reason.setdefault(str(reason or "(no reason)"), {})
        key = str(table or "(no table)")
        per[key] = per.get(key, 0) + int(count)
    tables = sorted({t for per in by_reason.values() for t in per})
    fig = go.Figure(
        [
            go.Bar(name=_label(reason), x=[_label(t) for t in tables],
                   y=[per.get(t, 0) for t in tables])
            for reason, per in sorted(by_reason.items())
        ]
    )  # fmt: skip
    fig.update_layout(barmode="stack", xaxis={"type": "category"}, yaxis={"title": "denials"})
    return fig


def _masked(tagged: list[dict[str, Any]]) -> go.Figure:
    names = [_label(f"{t['table']}.{t['column']}") for t in tagged]
    fig = go.Figure(
        [
            go.Bar(name="clear", x=names, y=[t["clear"] for t in tagged]),
            go.Bar(name="masked", x=names, y=[t["masked"] for t in tagged]),
        ]
    )
    fig.update_layout(barmode="group", xaxis={"type": "category"}, yaxis={"title": "statements"})
    return fig


def _readers(tagged: list[dict[str, Any]]) -> go.Figure:
    names = [_label(f"{t['table']}.{t['column']}") for t in tagged]
    users = sorted({r["user"] for t in tagged for r in t["topReaders"]})
    per = [{r["user"]: r["statements"] for r in t["topReaders"]} for t in tagged]
    fig = go.Figure([go.Bar(name=_label(u), x=names, y=[p.get(u, 0) for p in per]) for u in users])
    fig.update_layout(barmode="group", xaxis={"type": "category"}, yaxis={"title": "statements"})
    return fig


def render(data: dict[str, Any]) -> str:
    """The whole page for :func:`audit.report.report_data`'s ``data``."""
    access, tagged = data["access"], data["tagged"]
    charts: dict[str, str] = {
        "table": _chart(
            _over_time(access["byTable"], access["buckets"]),
            "chart-access-table",
            f"Statements per {access['bucket']}, by table",
        ),
        "user": _chart(
            _over_time(access["byUser"], access["buckets"]),
            "chart-access-user",
            f"Statements per {access['bucket']}, by user",
        ),
        "denials": _chart(
            _denials(data["denials"]["rows"]), "chart-denials", "Denials by table and reason"
        ),
        "masked": _chart(_masked(tagged), "chart-masked", "Tagged columns: clear vs masked"),
        "readers": _chart(_readers(tagged), "chart-readers", "Top readers of tagged columns"),
    }
    template = _ENV.get_template("report.html.j2")
    return template.render(data=data, charts=charts, plotlyjs=get_plotlyjs())


def write_report(data: dict[str, Any], path: Path) -> None:
    """Write the page (UTF-8) to ``path``."""
    path.write_text(render(data), encoding="utf-8")
