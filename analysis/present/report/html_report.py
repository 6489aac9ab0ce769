"""``report.html``: the summary as one page that opens offline with nothing beside it.

It says what ``report.md`` says, from the same inputs (the summary document, the display
tables) plus the charts as SVG text, inlined: no file, script, font or style sheet is
referenced, so the page can be mailed, attached to a ticket or printed as it is. Every piece
of text is escaped (job names, paths and error messages may hold ``<`` and ``&``). Like
``report.md`` it is a deterministic function of its inputs: no generation time.

:func:`figure_svg` renders a matplotlib Figure to SVG text in memory; this module never
imports matplotlib itself.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.compute.metrics import efficiency_column
from analysis.present.display import DisplayTable, devices_header, sig, with_ci
from analysis.present.report.report import FINDINGS_SECTIONS

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --head: #f3f5f7; --alt: #fafbfc;
  --note: #fff8e5; --note-line: #e3b341; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 28px 24px 56px; }
h1 { font-size: 1.9em; margin: 0 0 .25em; }
h2 { font-size: 1.35em; margin: 2.2em 0 .7em; padding-bottom: .25em;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05em; margin: 1.4em 0 .4em; }
p { margin: .5em 0; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  background: var(--head); padding: .1em .3em; border-radius: 4px; }
.lede { font-size: 1.05em; }
nav { margin: 1em 0 0; font-size: .92em; display: flex; flex-wrap: wrap; gap: .2em 1.2em; }
nav a { color: #0550ae; text-decoration: none; }
nav a:hover { text-decoration: underline; }
.notes { background: var(--note); border-left: 4px solid var(--note-line);
  padding: .6em 1em .6em 2.2em; margin: 0; border-radius: 0 6px 6px 0; }
.notes li { margin: .25em 0; }
.finding { max-width: 62em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr));
  gap: 28px 32px; align-items: start; }
figure { margin: 0; break-inside: avoid; page-break-inside: avoid; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: .9em; color: var(--muted); margin-top: .2em; text-align: center; }
.absent { color: var(--muted); font-style: italic; }
.table-wrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px;
  margin: .5em 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px;
  font-variant-numeric: tabular-nums; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left;
  vertical-align: top; }
th { background: var(--head); font-weight: 600; }
tbody tr:nth-child(even) { background: var(--alt); }
tbody tr:last-child td { border-bottom: none; }
td { overflow-wrap: break-word; }
.num { text-align: right; }
.nw { white-space: nowrap; }
td.ci { white-space: normal; }
td.long { min-width: 13em; }
th.long { min-width: 5em; }
.caption { font-size: .85em; color: var(--muted); margin: .2em 0 0; }
.caption p { margin: .25em 0; max-width: 80em; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .3em 1.2em; margin: 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.warn { color: #9a6700; font-weight: 600; }
ul.method li { margin: .3em 0; }
@media (max-width: 700px) {
  main { padding: 16px; }
  .charts { grid-template-columns: 1fr; }
}
@media print {
  body { font-size: 10pt; }
  main { max-width: none; padding: 0; }
  nav { display: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  .charts { grid-template-columns: 1fr 1fr; gap: 12px; }
  .table-wrap { overflow: visible; border: none; }
  table { font-size: 7.5pt; }
  th, td { padding: 3px 5px; }
  td.nw { white-space: normal; }
  td.long { min-width: 0; }
  tr { break-inside: avoid; page-break-inside: avoid; }
  .notes { background: none; }
}
@page { margin: 14mm; }
"""

_PROLOG = re.compile(r"\A.*?(?=<svg[\s>])", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_ROOT = re.compile(r"<svg\b[^>]*>")
_SIZE = re.compile(r'\s(?:width|height)="[^"]*"')
_ID = re.compile(r'(?<=\s)id="([^"]+)"')
_HREF = re.compile(r'\b((?:xlink:)?href)="#([^"]+)"')
_URL = re.compile(r"url\(#([^)]+)\)")
_SHORT = 30
"""Cells up to this many characters stay on one line; longer ones wrap."""
_INTERVAL = re.compile(r"^(?P<value>[^\s\[\]]+(?: [^\s\[\]]+)?) (?P<ci>\[[^\[\]]+\])$")
"""``2.5 [-2.7, 7.3]``, ``1.95x [1.85, 2.05]``: a figure and its interval."""
_WORD_SLASH = re.compile(r"(?<=[A-Za-z]{4})/(?=[A-Za-z]{4})")
"""A slash between two words (``Compute/sample``), not inside a unit (``GB/s``)."""


def figure_svg(fig: Any) -> str:
    """A matplotlib Figure as SVG text, rendered in memory, without a timestamp."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def inline_svg(svg: str, prefix: str, label: str = "") -> str:
    """SVG file text made fit to sit inside an HTML page: the XML prolog, DOCTYPE and
    metadata removed, every id prefixed with ``prefix`` (the charts of one page would share
    matplotlib's glyph and clip ids otherwise), the fixed width and height dropped (the
    page sizes it; the viewBox keeps its shape), and labelled for screen readers."""
    text = _METADATA.sub("", _PROLOG.sub("", svg, count=1))
    text = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = _HREF.sub(lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"', text)
    text = _URL.sub(lambda m: f"url(#{prefix}{m.group(1)})", text)
    root = _ROOT.search(text)
    if root is None:
        raise ValueError("not SVG text: no <svg> element")
    tag = _SIZE.sub("", root.group(0))
    tag = tag[:-1] + f' role="img" aria-label="{_e(label)}">'
    return text[: root.start()] + tag + text[root.end() :].rstrip() + "\n"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


# --- pieces ---------------------------------------------------------------------------------


def headline_table(doc: dict[str, Any]) -> DisplayTable | None:
    """Every configuration at every scale: throughput, speedup and efficiency with their
    intervals, formatted as in the speedup tables (strong scaling: parallel efficiency;
    weak: per-device throughput efficiency). None without a finished run."""
    rows = doc["scaling"]
    if not rows:
        return None
    dev = devices_header([r["accelerator"] for r in rows])
    eff_of = {
        series: efficiency_column(r["scaling_mode"] for r in rows if r["series"] == series)
        for series in {r["series"] for r in rows}
    }
    out = []
    for r in rows:
        eff = eff_of[r["series"]]
        mark = " (baseline)" if r["is_baseline"] else ""
        out.append(
            [
                r["series"],
                f"{r['world_size']}{mark}",
                str(r["nodes"]),
                str(r["n"]),
                sig(r["samples_per_s_mean"]),
                with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                with_ci(r[eff], r[f"{eff}_ci_low"], r[f"{eff}_ci_high"], "%"),
                r["parity"] or "",
            ]
        )
    columns = [
        "Configuration",
        dev,
        "Nodes",
        "n",
        "Mean throughput (samples/s)",
        "Speedup [95% CI]",
        "Efficiency [95% CI]",
        "Parity",
    ]
    return DisplayTable(
        "headline",
        "At a glance",
        pd.DataFrame(out, columns=columns, dtype="object"),
        caption=[
            "Mean throughput against each configuration's baseline; efficiency is the "
            "parallel efficiency (strong scaling) or the per-device throughput efficiency "
            "(weak scaling). Every column, and how each figure is computed, is in the tables "
            "and the method below."
        ],
        right=set(columns[1:7]),
    )


def html_table(table: DisplayTable) -> str:
    """Heading, table (numbers right-aligned) and caption of one display table."""
    cols = list(table.frame.columns)

    def cell(tag: str, col: Any, value: Any, short: int) -> str:
        text = str(value)
        names = ["num"] if col in table.right else []
        interval = _INTERVAL.match(text) if tag == "td" else None
        if interval:
            # a figure and its interval: the interval may go under the figure, so a table of
            # many such columns fits the page instead of scrolling sideways
            names.append("ci")
            inner = f'{_e(interval["value"])} <span class="nw">{_e(interval["ci"])}</span>'
        else:
            names.append("nw" if len(text) <= short else "long")
            inner = _e(text)
            if tag == "th":  # "Compute/sample": a heading may break after its slash
                inner = _WORD_SLASH.sub("/<wbr>", inner)
        scope = ' scope="col"' if tag == "th" else ""
        return f'<{tag} class="{" ".join(names)}"{scope}>{inner}</{tag}>'

    head = "".join(cell("th", c, c, 10) for c in cols)  # longer headings wrap
    body = "\n".join(
        "<tr>" + "".join(cell("td", c, v, _SHORT) for c, v in zip(cols, row, strict=True)) + "</tr>"
        for row in table.frame.itertuples(index=False)
    )
    caption = "".join(f"<p>{_e(c)}</p>" for c in table.caption)
    return (
        f"<h2>{_e(table.title)}</h2>\n"
        f'<div class="table-wrap"><table data-table="{_e(table.name)}">\n'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div>"
        + (f'\n<div class="caption">{caption}</div>' if caption else "")
    )


def _provenance(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    facts: list[tuple[str, str]] = [
        ("Inputs", ", ".join(doc["inputs"]) + f" ({doc['files_read']} file(s) read)")
    ]
    if env:
        facts.append(("Devices", ", ".join(f"{k} × {v} run(s)" for k, v in env["devices"].items())))
        facts.append(("Nodes", ", ".join(env["node_names"]) or "—"))
        facts.append(("Launchers", ", ".join(env["launchers"])))
    out = ['<dl class="facts">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts]
    for package, values in (env.get("versions") or {}).items():
        mixed = ' <span class="warn">(differs between runs)</span>' if len(values) > 1 else ""
        out.append(f"<dt>{_e(package)}</dt><dd>{_e(', '.join(values))}{mixed}</dd>")
    if env:
        first, last = env["first_start"] or "—", env["last_finish"] or "—"
        out.append(f"<dt>Runs between</dt><dd>{_e(first)} and {_e(last)}</dd>")
        if env["sweep_ids"]:
            out.append(f"<dt>Sweeps</dt><dd>{_e(', '.join(env['sweep_ids']))}</dd>")
    out.append(
        f"<dt>Formats</dt><dd>summary schema {_e(doc['schema_version'])}, record schema "
        f"{_e(doc['record_schema_version'])}</dd>"
    )
    out.append("</dl>")
    if not env:
        out.append('<p class="absent">No finished run: nothing to say about hardware.</p>')
    return "\n".join(out)


def _method(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    items = [f"<li><strong>{_e(k)}</strong>: {_e(v)}</li>" for k, v in doc["methods"].items()]
    items.append(
        f"<li>confidence level {s['confidence']:.0%}; high-variance flag at CV &gt; "
        f"{s['cv_threshold']:.0%}; parity tolerances: loss {s['loss_tolerance']:.0%} relative, "
        f"accuracy {100 * s['acc_tolerance']:g} points.</li>"
    )
    return '<h2>Method</h2>\n<ul class="method">\n' + "\n".join(items) + "\n</ul>"


def _charts(doc: dict[str, Any], charts: Sequence[tuple[str, str]] | None) -> str:
    if charts is None or not charts:
        why = (
            "Charts were not drawn for this summary (<code>--no-charts</code>); the tables "
            "below hold every figure."
            if doc["runs"]
            else "No finished run: no charts."
        )
        return f'<p class="absent">{why}</p>'
    out = ['<div class="charts">']
    for i, (title, svg) in enumerate(charts, start=1):
        out.append(
            f'<figure id="chart-{i}">{inline_svg(svg, f"c{i}-", title)}'
            f"<figcaption>{_e(title)}</figcaption></figure>"
        )
    out.append("</div>")
    return "\n".join(out)


# --- the page -------------------------------------------------------------------------------


def _trace_links(doc: dict[str, Any], table: str) -> str:
    """Under a top-operations table: its run's trace files, which Perfetto and HTA open."""
    for entry in doc.get("profiles") or []:
        if entry["table"] == table and entry["traces"]:
            links = ", ".join(
                f'<a href="{_e(path)}">rank {_e(rank)}</a>'
                for rank, path in entry["traces"].items()
            )
            return f'\n<p class="traces">Traces (open in Perfetto or HTA): {links}</p>'
    return ""


def _study_html(doc: dict[str, Any]) -> str:
    """report.html's "Scaling study" section's inner HTML ("" without a plan)."""
    if not doc.get("plan_study"):
        return ""
    from analysis.present.plan.text import display_table, table_heading

    parts = ["<h2>Scaling study</h2>"]
    for s in doc["plan_study"]:
        frame = pd.DataFrame(s["rows"], columns=s["columns"])
        parts += [
            f"<h3>{_e(s['series'])}</h3>",
            f'<p class="finding">{_e(s["answer"])}</p>',
            f"<p>{_e(table_heading(s['scaling_mode']))}</p>",
            html_table(display_table(s["series"], frame)),
            f'<p class="finding">{_e(s["chosen"])}</p>',
            f'<p class="finding">{_e(s["method"])}</p>',
        ]
    return "\n".join(parts)


def report_html(
    *,
    doc: dict[str, Any],
    tables: Sequence[DisplayTable],
    charts: Sequence[tuple[str, str]] | None,
) -> str:
    """``report.html``: context, headline, notes, findings, charts, every table, provenance
    and method on one page. ``charts``: (title, SVG text) in page order; None when the
    charts were not drawn."""
    n_runs, n_fail = len(doc["runs"]), len(doc["failures"])
    series = len({r["series"] for r in doc["groups"]})
    inputs = ", ".join(f"<code>{_e(i)}</code>" for i in doc["inputs"])
    sections: list[tuple[str, str, str]] = []  # (anchor, nav label or "", inner HTML)

    headline = headline_table(doc)
    if headline is not None:
        sections.append(("headline", "At a glance", html_table(headline)))
    if doc["notes"]:
        items = "".join(f"<li>{_e(n)}</li>" for n in doc["notes"])
        notes = f'<h2>Read this first</h2>\n<ul class="notes">{items}</ul>'
        sections.append(("notes", "Read this first", notes))
    for key, anchor, heading, label in FINDINGS_SECTIONS:
        if doc.get(key):
            inner = f"<h2>{_e(heading)}</h2>" + "".join(
                f'\n<h3>{_e(f["series"])}</h3>\n<p class="finding">{_e(f["text"])}</p>'
                for f in doc[key]
            )
            sections.append((anchor, label, inner))
    study = _study_html(doc)
    if study:
        sections.append(("plan", "Scaling study", study))
    sections.append(("charts", "Charts", "<h2>Charts</h2>\n" + _charts(doc, charts)))
    seen: dict[str, int] = {}
    for table in tables:
        seen[table.name] = seen.get(table.name, 0) + 1
        n = seen[table.name]
        label = "Speedup" if table.name == "scaling" else table.title
        anchor = f"table-{table.name}" + (f"-{n}" if n > 1 else "")
        # one nav entry for the per-series speedup tables
        inner = html_table(table) + _trace_links(doc, table.name)
        sections.append((anchor, label if n == 1 else "", inner))
    provenance = "<h2>Hardware and software</h2>\n" + _provenance(doc)
    sections.append(("provenance", "Hardware and software", provenance))
    sections.append(("method", "Method", _method(doc)))

    nav = "".join(f'<a href="#{a}">{_e(label)}</a>' for a, label, _ in sections if label)
    body = [
        "<header>",
        "<h1>Scaling report</h1>",
        f'<p class="lede">{n_runs} finished job(s) in {series} configuration series, {n_fail} '
        f"failed or incomplete; read from {inputs} ({_e(doc['files_read'])} file(s)).</p>",
        f"<nav>{nav}</nav>",
        "</header>",
        *(f'<section id="{a}">\n{inner}\n</section>' for a, _, inner in sections),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>Scaling report</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )
