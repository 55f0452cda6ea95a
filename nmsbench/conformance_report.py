"""The conformance report's file and its renderings: one CSV row per cell (implementation on
a device x case family), the matrix as a terminal table (rich), as Markdown, and read back
for the dashboard. Reads and writes with pandas only (no torch): the dashboard imports it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from .conformance_cases import CASE_FAMILIES
from .conformance_rules import BY_KEY, NUMBERS, rule_label

COLUMNS = ["impl", "device", "family", "case_family", "verdict", "rules", "rule", "cases", "differing", "refused",
           "max_n", "vs_torchvision", "message", "example", "seconds",
           "machine", "cpu", "gpu", "torch", "torchvision", "nmsbench", "git_commit", "created", "command"]
REQUIRED = ("impl", "device", "case_family", "verdict", "rules", "example")
ENVIRONMENT = ("machine", "cpu", "gpu", "torch", "torchvision", "nmsbench", "git_commit")
NAME_MARK = "conformance"  # the dashboard reads *conformance*.csv; results loaders leave them alone
SYMBOLS = {"agrees": "✓", "refuses": "refuses", "n/a": "–", "unexplained": "UNEXPLAINED"}
STYLES = {"agrees": "green", "differs": "yellow", "unexplained": "bold red", "refuses": "cyan", "n/a": "dim"}


def is_conformance_file(path) -> bool:
    """Whether a results-folder CSV is a conformance report (by its name)."""
    name = Path(str(path)).name
    return NAME_MARK in name and name.endswith(".csv")


def to_frame(report, environment: dict | None = None, command: str = "") -> pd.DataFrame:
    """One row per cell of a :class:`nmsbench.conformance.Report`."""
    env = environment or {}
    rows = []
    for c in report.cells:
        rows.append({
            "impl": c.impl, "device": c.device, "family": c.family, "case_family": c.case_family, "verdict": c.verdict,
            "rules": "+".join(c.rules), "rule": " + ".join(BY_KEY[k].name for k in c.rules), "cases": c.cases,
            "differing": c.differing, "refused": c.refused, "max_n": c.max_n, "vs_torchvision": c.vs_torchvision,
            "message": c.message, "example": json.dumps(c.example) if c.example else "", "seconds": round(c.seconds, 4),
            **{k: env.get(k, "") for k in ENVIRONMENT}, "created": env.get("timestamp", ""), "command": command})
    return pd.DataFrame(rows, columns=COLUMNS)


def read_conformance(source, name: str | None = None) -> pd.DataFrame:
    """A conformance CSV (a path or a file-like object), or a ValueError naming what is wrong."""
    name = name or Path(str(source)).name
    try:
        frame = pd.read_csv(source, dtype={"rules": str, "rule": str, "example": str, "message": str,
                                           "vs_torchvision": str}, keep_default_na=False)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ValueError(f"{name}: not a readable CSV ({' '.join(str(e).split())})") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: not an `nmsbench conformance` file (missing columns: {', '.join(missing)})")
    bad = sorted(set(frame["verdict"]) - {"agrees", "differs", "unexplained", "refuses", "n/a"})
    if bad:
        raise ValueError(f"{name}: unknown verdict(s) {', '.join(map(str, bad))}")
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
    return frame


def example(row) -> dict | None:
    """The row's smallest differing example, or None."""
    text = row.get("example", "") if hasattr(row, "get") else row["example"]
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _rules(row) -> list[str]:
    return [k for k in str(row["rules"] or "").split("+") if k in BY_KEY]


def cell_text(row, markdown: bool = False) -> str:
    """What a cell of the matrix says: agrees, differs with its rule numbers, refuses, n/a."""
    verdict = row["verdict"]
    if verdict == "differs":
        label = rule_label(_rules(row))
        return f"differs ({label})" if markdown else f"≠ {label}"
    if verdict == "agrees" and str(row.get("max_n", "")) not in ("", "nan", "None"):
        n = int(float(row["max_n"]))
        return f"agrees (N ≤ {n:,})" if markdown else f"✓ ≤{n}"
    if markdown:
        return {"n/a": "—", "unexplained": "**unexplained**"}.get(verdict, verdict)
    return SYMBOLS.get(verdict, verdict)


def labels(frame: pd.DataFrame) -> pd.Series:
    return frame["impl"] + " @ " + frame["device"]


def matrix(frame: pd.DataFrame, markdown: bool = False) -> pd.DataFrame:
    """Implementations x case families (in the families' order), each cell's text."""
    families = [k for k in CASE_FAMILIES if k in set(frame["case_family"])]
    text = frame.assign(_row=labels(frame), _cell=[cell_text(r, markdown) for _, r in frame.iterrows()])
    out = text.pivot_table(index="_row", columns="case_family", values="_cell", aggfunc="first", sort=False)
    out = out.reindex(columns=families).fillna("")
    out.index.name = None
    out.columns.name = None
    return out


def counts(frame: pd.DataFrame) -> dict:
    return {v: int((frame["verdict"] == v).sum()) for v in ("agrees", "differs", "unexplained", "refuses", "n/a")}


def summary(frame: pd.DataFrame) -> str:
    c = counts(frame)
    subjects, families = labels(frame).nunique(), frame["case_family"].nunique()
    return (f"{len(frame)} cells ({subjects} implementation{'s' if subjects != 1 else ''} x {families} case "
            f"famil{'ies' if families != 1 else 'y'}): "
            f"{c['agrees']} agree, {c['differs']} differ (explained), {c['unexplained']} unexplained, "
            f"{c['refuses']} refuse, {c['n/a']} n/a")


def used_rules(frame: pd.DataFrame) -> list[str]:
    keys = {k for _, row in frame.iterrows() for k in _rules(row)}
    return sorted(keys, key=NUMBERS.get)


def _short(value: float) -> str:
    return f"{value:.9g}"


def describe_example(row) -> str:
    """One line: the example's boxes, scores, threshold and what each side keeps."""
    data = example(row)
    if not data:
        return ""
    fmt = "cx, cy, w, h" if data.get("fmt") == "cxcywh" else "x1, y1, x2, y2"
    boxes = "; ".join("(" + ", ".join(_short(v) for v in b) + ")" for b in data["boxes"])
    count = len(data["boxes"])
    text = (f"{count} box{'' if count == 1 else 'es'} ({fmt}, {data.get('dtype', '')}): {boxes}; scores "
            f"{', '.join(_short(v) for v in data['scores'])}")
    if data.get("labels") is not None:
        text += f"; labels {', '.join(map(str, data['labels']))}"
    text += f"; IoU threshold {data['iou_threshold']!r}"
    for key, what in (("score_threshold", "score threshold"), ("max_per_class", "per-class cap")):
        if data.get(key) is not None:
            text += f"; {what} {data[key]!r}"

    def kept(out) -> str:
        if out is None:
            return "no reference"
        if "refused" in out:
            return f"refuses ({out['refused']})"
        return f"keeps {out['keep']}"

    return f"{text}. It {kept(data.get('observed'))}; the definition {kept(data.get('expected'))}."


def to_markdown(frame: pd.DataFrame) -> str:
    """The matrix, the rules it cites, the case families and the smallest differing examples."""
    m = matrix(frame, markdown=True)
    heads = [CASE_FAMILIES[k].short for k in m.columns]
    lines = [f"{summary(frame)}.", "", "| implementation | " + " | ".join(heads) + " |",
             "|---|" + "---|" * len(heads)]
    for name, row in m.iterrows():
        lines.append(f"| {name} | " + " | ".join(row.tolist()) + " |")
    lines += ["", "| rule | convention | found in |", "|---|---|---|"]
    lines += [f"| R{NUMBERS[k]} | {BY_KEY[k].name} | {BY_KEY[k].who} |" for k in used_rules(frame)]
    lines += ["", "| column | case family |", "|---|---|"]
    lines += [f"| {CASE_FAMILIES[k].short} | {CASE_FAMILIES[k].title} |" for k in m.columns]
    differing = frame[frame["verdict"].isin(["differs", "unexplained"])]
    if len(differing):
        lines += ["", "Smallest differing examples:", ""]
        for _, row in differing.iterrows():
            cited = f" ({rule_label(_rules(row))})" if row["verdict"] == "differs" else " (unexplained)"
            lines.append(f"- **{row['impl']} @ {row['device']}**, {CASE_FAMILIES[row['case_family']].short}{cited}: "
                         f"{describe_example(row)}")
    refusing = frame[frame["verdict"] == "refuses"]
    if len(refusing):
        lines += ["", "Refusals:", ""]
        for message, group in refusing.groupby("message", sort=False):
            cells = ", ".join(f"{r['impl']} @ {r['device']} ({CASE_FAMILIES[r['case_family']].short})"
                              for _, r in group.iterrows())
            lines.append(f"- {cells}: {message}")
    return "\n".join(lines) + "\n"


def to_csv(frame: pd.DataFrame) -> str:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue()


def rich_table(frame: pd.DataFrame):
    """(the matrix as a rich Table, the legend lines under it)."""
    from rich.markup import escape
    from rich.table import Table

    m = matrix(frame)
    table = Table(title="NMS conformance: each implementation against its family's definition", show_lines=False,
                  header_style="bold")
    table.add_column("implementation", no_wrap=True)
    for key in m.columns:
        table.add_column(CASE_FAMILIES[key].short, no_wrap=True)
    verdicts = frame.assign(_row=labels(frame)).set_index(["_row", "case_family"])["verdict"].to_dict()
    for name, row in m.iterrows():
        cells = []
        for key, text in zip(m.columns, row.tolist()):
            style = STYLES.get(verdicts.get((name, key), ""), "")
            cells.append(f"[{style}]{text}[/]" if style and text else text)
        table.add_row(escape(name), *cells)
    legend = [summary(frame)]
    legend += [escape(f"R{NUMBERS[k]}: {BY_KEY[k].name} ({BY_KEY[k].who})") for k in used_rules(frame)]
    legend.append("columns: " + "; ".join(f"{CASE_FAMILIES[k].short} = {CASE_FAMILIES[k].title}" for k in m.columns))
    return table, legend
