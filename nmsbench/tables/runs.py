"""The runs behind a results table: which files, machines, versions and commits."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from ..results import ENV_COLUMNS


def environment_table(frame: pd.DataFrame, commands: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One column per results file and hardware in ``frame``, one row per fact: GPU,
    driver, versions, commit, time span, row counts by status and (where the sidecar JSON
    gave it) the command that made the file."""
    fields = ["machine", "cpu", "gpu", "driver", "cuda", "torch", "torchvision", "cupy", "numba", "nmsbench",
              "git_commit", "python", "time", "rows", "ok", "error", "skipped"]
    if frame.empty:
        return pd.DataFrame(index=pd.Index(fields, name="field"))
    columns = {}
    for (source, hardware), part in frame.groupby(["source", "hardware"], sort=True):
        facts = {c: ", ".join(sorted(set(part[c]) - {""})) for c in ENV_COLUMNS if c != "timestamp"}
        if part["device"].eq("cuda").sum() == 0:
            facts.update(gpu="(cpu rows)", driver=facts["driver"] and f"({facts['driver']})")
        facts["time"] = _span(part["timestamp"])
        status = part["status"].value_counts()
        facts.update(rows=f"{len(part):,}", **{s: f"{int(status.get(s, 0)):,}" for s in ("ok", "error", "skipped")})
        if commands and commands.get(source):
            facts["command"] = commands[source]
        columns[f"{source} · {hardware}"] = facts
    out = pd.DataFrame(columns)
    order = fields + [f for f in out.index if f not in fields]
    out = out.reindex(order).fillna("")
    out.index.name = "field"
    return out


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per results file and hardware: file, machine, GPU (or CPU), devices, driver,
    commit, time, implementations and row counts by status; the compact form of
    :func:`environment_table` (the versions stay there)."""
    columns = ["file", "machine", "GPU / CPU", "devices", "driver", "commit", "time (UTC)", "implementations",
               "rows", "ok", "error", "skipped"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for (source, hardware), part in frame.groupby(["source", "hardware"], sort=True):
        status = part["status"].value_counts()
        cuda = part["device"].eq("cuda").any()
        out.append({
            "file": source, "machine": ", ".join(sorted(set(part["machine"]) - {""})),
            "GPU / CPU": hardware.split(": ", 1)[-1], "devices": ", ".join(sorted(set(part["device"]) - {""})),
            "driver": ", ".join(sorted(set(part["driver"]) - {""})) if cuda else "",
            "commit": ", ".join(sorted(set(part["git_commit"]) - {""})), "time (UTC)": _span(part["timestamp"]),
            "implementations": part["impl"].nunique(), "rows": len(part),
            **{s: int(status.get(s, 0)) for s in ("ok", "error", "skipped")},
        })
    return pd.DataFrame(out, columns=columns)


def _span(stamps: pd.Series) -> str:
    values = sorted(set(stamps) - {""})
    if not values:
        return ""
    return values[0] if len(values) == 1 else f"{values[0]} .. {values[-1]}"
