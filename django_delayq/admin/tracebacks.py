"""A stored traceback as the job's page shows it: whole (no height limit, long lines
wrapped), the exception first, then the frames, where each run of the worker's own frames
(files inside the ``django_delayq`` package: the runner that called the job) is folded
into one ``<details>`` line. Everything is escaped; a text that is not a Python traceback
is shown as it is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby

from django.template.loader import render_to_string
from django.utils.translation import ngettext

FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')
OWN = re.compile(r"[\\/]django_delayq[\\/]")


@dataclass(frozen=True, slots=True)
class Part:
    text: str
    own: bool = False  # a frame of the worker's own code
    frame: bool = False


def parts(text: str) -> list[Part]:
    """``text`` cut into frames (a ``File`` line and the indented lines under it) and
    the lines between them (headers, chain notes, the exception)."""
    out: list[Part] = []
    lines, i = text.splitlines(), 0
    while i < len(lines):  # a frame takes the lines indented deeper, up to the next frame
        match, j = FRAME.match(lines[i]), i + 1
        while (match and j < len(lines) and _indent(lines[j]) > _indent(lines[i])
               and not FRAME.match(lines[j])):
            j += 1
        out.append(Part("\n".join(lines[i:j]), own=bool(match and OWN.search(match["file"])),
                        frame=match is not None))
        i = j
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip()) if line.strip() else 10**6


def exception_lines(found: list[Part]) -> str:
    """The lines after the last frame: the exception raised (with its message)."""
    last = max((i for i, p in enumerate(found) if p.frame), default=-1)
    return "\n".join(p.text for p in found[last + 1:]).strip()


def render(text: str | None) -> str:
    """The traceback as HTML (escaped), or "-" without one: each run of the worker's own
    frames folded into one ``<details>`` line, the other lines as they are."""
    if not text:
        return "-"
    found = parts(text)
    runs: list[tuple[str, str]] = []  # (the fold's summary, or "" for lines shown; text)
    for own, group in groupby(found, key=lambda part: part.frame and part.own):
        texts = [p.text for p in group]
        fold = ngettext("%d frame of django_delayq (the worker)",
                        "%d frames of django_delayq (the worker)", len(texts)) % len(texts)
        runs.append((fold, "\n".join(texts)) if own else ("", "\n".join(texts) + "\n"))
    if runs and not runs[-1][0]:  # no newline after the last line
        runs[-1] = ("", runs[-1][1].rstrip("\n"))
    return render_to_string("admin/django_delayq/job/_traceback.html",
                            {"head": exception_lines(found), "runs": runs})
