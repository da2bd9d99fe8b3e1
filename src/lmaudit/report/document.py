"""A report as a list of sections, rendered to one self-contained HTML file and to Markdown.

Figures are PNG bytes: embedded as base64 data URIs in the HTML (no external
reference of any kind) and written beside the Markdown in ``report_files/``.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from lmaudit.utils import atomic_path

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1d2330;background:#fafbfc;line-height:1.45;padding:0 1rem}
h1{font-size:1.7rem;margin-bottom:.2rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #dde2ea;
padding-bottom:.3rem}.sub{color:#5b6475;margin-top:0}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.9rem;background:#fff}
th,td{border:1px solid #dde2ea;padding:.3rem .6rem;text-align:right}th{background:#eef1f6}
td:first-child,th:first-child{text-align:left}
.figs{display:flex;flex-wrap:wrap;gap:1rem}.fig{background:#fff;border:1px solid #dde2ea;padding:.5rem}
.fig img{max-width:100%;height:auto;display:block}.fig p{margin:.3rem 0 0;color:#5b6475;font-size:.85rem}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;font-size:.88rem}dt{color:#5b6475}
dd{margin:0;font-family:ui-monospace,Menlo,monospace;word-break:break-all}
.summary{background:#fff;border:1px solid #dde2ea;border-left:6px solid #7f8896;padding:.5rem 1rem;margin:.8rem 0 1rem}
.summary h2{margin:.2rem 0 .4rem;border:0;padding:0;font-size:1.3rem}.summary ul{margin:.3rem 0;padding-left:1.2rem}
.summary li{margin:.15rem 0}.summary .rule{color:#5b6475;font-size:.82rem;margin:.4rem 0 .2rem}
.level-low{border-left-color:#2ca02c}.level-moderate{border-left-color:#e3a008}.level-high{border-left-color:#ff7f0e}
.level-severe{border-left-color:#d62728}
table.records td:last-child{text-align:left;font-family:ui-monospace,Menlo,monospace;font-size:.8rem}
table.records th:last-child,table.records td:nth-child(2),table.records th:nth-child(2){text-align:left}
"""


@dataclass
class Figure:
    name: str  # file stem, e.g. "roc"
    caption: str
    png: bytes


@dataclass
class Summary:
    """The verdict that opens a report: a headline, a level (low … severe, or None), short points, the rule used."""

    headline: str
    level: str | None
    points: list[str]
    rule: str = ""


@dataclass
class Section:
    title: str
    text: str = ""
    table: tuple[list[str], list[list[str]]] | None = None  # (header, rows)
    figures: list[Figure] = field(default_factory=list)
    table_class: str = ""  # an HTML class of the table (e.g. "records": a left-aligned text column last)


@dataclass
class Report:
    title: str
    subtitle: str
    facts: dict[str, str]
    sections: list[Section]
    summary: Summary | None = None  # shown first, above the facts

    @property
    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]


def _html_table(header: list[str], rows: list[list[str]], css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    cls = f" class='{html.escape(css_class)}'" if css_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def notebook_html(title: str, lines: list[str], table: tuple[list[str], list[list[str]]] | None = None) -> str:
    """What a notebook shows of a result: its title, its verdict lines and its table (no page around them)."""
    text = "".join(f"<p>{html.escape(line)}</p>" for line in lines if line)
    return (f"<div class='lmaudit'><strong>{html.escape(title)}</strong>{text}"
            + (_html_table(*table) if table else "") + "</div>")


class ReportView:
    """A report to look at in a notebook: ``_repr_html_`` shows the whole page (in a frame of its own, so its styles
    stay its own); ``html`` is the page, ``report`` what it was built from."""

    def __init__(self, report: "Report") -> None:
        self.report = report
        self.html = render_html(report)

    def _repr_html_(self) -> str:
        return (f"<iframe srcdoc=\"{html.escape(self.html, quote=True)}\" style='width:100%;height:720px;border:0'>"
                "</iframe>")

    def __repr__(self) -> str:
        return f"<ReportView {self.report.title}: {self.report.summary.headline if self.report.summary else ''}>"


def _html_summary(summary: Summary) -> str:
    level = f" level-{summary.level}" if summary.level else ""
    items = "".join(f"<li>{html.escape(p)}</li>" for p in summary.points)
    rule = f"<p class='rule'>{html.escape(summary.rule)}</p>" if summary.rule else ""
    return (f"<section id='summary' class='summary{level}'><h2>{html.escape(summary.headline)}</h2>"
            f"<ul>{items}</ul>{rule}</section>")


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1><p class='sub'>{html.escape(report.subtitle)}</p>",
        _html_summary(report.summary) if report.summary else "",
        "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in report.facts.items())
        + "</dl>",
    ]
    for s in report.sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            parts.append(f"<p>{html.escape(s.text)}</p>")
        if s.table:
            parts.append(_html_table(*s.table, s.table_class))
        if s.figures:
            parts.append("<div class='figs'>")
            for f in s.figures:
                data = base64.b64encode(f.png).decode("ascii")
                parts.append(f"<div class='fig'><img alt='{html.escape(f.caption)}' src='data:image/png;base64,{data}'>"
                             f"<p>{html.escape(f.caption)}</p></div>")
            parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


# Markdown punctuation escaped with a backslash wherever it occurs; "]" where a link, an image or a link definition
# would follow it (so "[0.70, 0.90]" stays as it is); "_" only where it could open or close emphasis (not inside a
# word such as min_k); and what opens a block (a heading, a list, a rule) at the start of a line.
_MD_INLINE = re.compile(r"([\\`*|~])|\](?=[(\[:])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_BLOCK = re.compile(r"^(\s*)(?:([#+=-])|(\d+)([.)]))")


def _unblock(match: re.Match) -> str:
    if match.group(2):
        return f"{match.group(1)}\\{match.group(2)}"
    return f"{match.group(1)}{match.group(3)}\\{match.group(4)}"


def md_text(text: str, *, one_line: bool = True, block: bool = True) -> str:
    """``text`` as Markdown shows it verbatim: HTML escaped (``<script>`` is text, never markup), Markdown's
    punctuation escaped (no link, image, emphasis, code span or table cell can open), (``one_line``) line breaks
    as spaces, and (``block``: text that starts a line) no heading, list or rule opened."""
    text = html.escape(str(text), quote=False)
    text = _MD_INLINE.sub(lambda m: "\\" + m.group(0), text)
    lines = [" ".join(text.split("\n"))] if one_line else text.split("\n")
    return "\n".join(_MD_BLOCK.sub(_unblock, line) if block else line for line in lines)


def _md_cell(text: str) -> str:
    return md_text(text, block=False)


def _md_code(text: str) -> str:
    """``text`` as one inline code span (verbatim: no Markdown or HTML inside one), fenced with more backticks
    than it holds in a row."""
    flat = " ".join(str(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def render_markdown(report: Report, files_dir: str = "report_files") -> str:
    """The report as Markdown: every field (titles, texts, cells, facts, record ids) escaped (:func:`md_text`)."""
    lines = [f"# {md_text(report.title)}", "", md_text(report.subtitle), ""]
    if report.summary:
        lines += [f"## {md_text(report.summary.headline)}", ""] + [f"- {md_text(p)}" for p in report.summary.points]
        lines += ["", f"*{md_text(report.summary.rule)}*", ""] if report.summary.rule else [""]
    lines += [f"- **{md_text(k)}**: {_md_code(v)}" for k, v in report.facts.items()]
    for s in report.sections:
        lines += ["", f"## {md_text(s.title)}", ""]
        if s.text:
            lines += [md_text(s.text, one_line=False), ""]
        if s.table:
            header, rows = s.table
            lines.append("| " + " | ".join(map(_md_cell, header)) + " |")
            lines.append("|---|" + "---:|" * (len(header) - 1))
            lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]
            lines.append("")
        lines += [f"![{md_text(f.caption)}]({files_dir}/{f.name}.png)" for f in s.figures]
    return "\n".join(lines) + "\n"


def write(report: Report, folder: Path) -> tuple[Path, Path]:
    """Write ``report.html`` (self-contained) and ``report.md`` (+ ``report_files/*.png``) into ``folder``."""
    files = folder / "report_files"
    files.mkdir(parents=True, exist_ok=True)
    for f in report.figures:
        with atomic_path(files / f"{f.name}.png") as tmp:
            tmp.write_bytes(f.png)
    with atomic_path(folder / "report.html") as tmp:
        tmp.write_text(render_html(report), encoding="utf-8")
    with atomic_path(folder / "report.md") as tmp:
        tmp.write_text(render_markdown(report), encoding="utf-8")
    return folder / "report.html", folder / "report.md"
