"""A job's workflow on its admin page: the parents it waits for (``after=``) and the
children that wait for it, each a link with its status (at most ``LISTED`` each); why a
child was cancelled is its last error, which names the parent ("parent <id> ended dead").

And drawn: the chain, group or ``after=`` graph it is part of, as an SVG made on the
server, each job a box in its status's colour linking to its page, each dependency an
arrow from parent to child (dashed while the child still waits for that parent). No
script and no outside asset; every text is escaped.

The graph is read from the ``JobDependency`` edges (indexed both ways), breadth first
from the job, one query per step, and cut at ``MAX_JOBS`` jobs (the picture says so);
then one query reads the jobs' status and callable. Jobs are placed in columns by their
depth (the longest run of parents before them), in the order they were found.

And the requeue lineage, both ways: the job a requeue copied (``requeued_from``) and the
jobs requeued from this one (an indexed lookup on ``requeued_from``; at most ``LISTED``).
Where a requeue under the same id started the attempts over is marked in the attempt
history (``job_admin.JobAttemptInline.requeue_mark``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q
from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_delayq.admin.display import LINK, STATUS_COLOURS, job_link, job_list, job_url, seconds
from django_delayq.models import Job, JobDependency, JobStatus

LISTED = 20
MAX_JOBS = 60
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 180, 42, 56, 12, 8
NAME_CHARS = 24


@dataclass(slots=True)
class Graph:
    ids: list[str] = field(default_factory=list)  # in the order found, the job first
    edges: list[tuple[str, str, bool]] = field(default_factory=list)  # parent, child, resolved
    cut: bool = False  # more jobs than MAX_JOBS


def collect(job_id: str, limit: int = MAX_JOBS) -> Graph:
    """The connected jobs around ``job_id`` and the edges between them."""
    graph = Graph(ids=[job_id])
    seen, frontier, edges = {job_id}, [job_id], set()
    while frontier and not graph.cut:
        rows = JobDependency.objects.filter(
            Q(parent_id__in=frontier) | Q(child_id__in=frontier)).order_by("pk").values_list(
            "parent_id", "child_id", "resolved")[:limit * 4]
        frontier = []
        for parent, child, resolved in rows:
            for pk in (parent, child):
                if pk not in seen and len(seen) >= limit:
                    graph.cut = True
                elif pk not in seen:
                    seen.add(pk)
                    graph.ids.append(pk)
                    frontier.append(pk)
            if parent in seen and child in seen:
                edges.add((parent, child, resolved))
    graph.edges = sorted(edges, key=lambda e: (graph.ids.index(e[0]), graph.ids.index(e[1])))
    return graph


def depths(graph: Graph) -> dict[str, int]:
    """Each job's column: 0 without parents in the graph, else one more than its deepest
    parent (edges form no cycle: ``after=`` refuses one; at most ``MAX_JOBS`` deep)."""
    parents: dict[str, list[str]] = {pk: [] for pk in graph.ids}
    for parent, child, _resolved in graph.edges:
        parents[child].append(parent)
    depth: dict[str, int] = {}

    def of(pk: str, below: frozenset[str] = frozenset()) -> int:
        """``below``: the jobs on the way here, never followed again (a cycle in edited
        rows ends, drawn as it may be)."""
        if pk not in depth:
            below = below | {pk}
            depth[pk] = max((of(p, below) + 1 for p in parents[pk] if p not in below), default=0)
        return depth[pk]
    return {pk: of(pk) for pk in graph.ids}


def render(job: Job, site: str = "admin") -> SafeString | str:
    """The SVG for ``job``'s workflow, or "-" when it has no dependency."""
    graph = collect(job.pk)
    if len(graph.ids) == 1:
        return "-"
    rows = {pk: (status, path) for pk, status, path in Job.objects.filter(
        pk__in=graph.ids).values_list("pk", "status", "callable_path")}
    place = _positions(graph)
    return render_to_string("admin/django_delayq/job/_workflow_graph.html", {
        "cut": graph.cut, "max_jobs": MAX_JOBS, "box_w": BOX_W, "box_h": BOX_H,
        "width": max(x for x, _y in place.values()) + BOX_W + PAD,
        "height": max(y for _x, y in place.values()) + BOX_H + PAD,
        "edges": [_edge(place[p], place[c], done) for p, c, done in graph.edges],
        "jobs": [_box(pk, place[pk], rows.get(pk), pk == job.pk, site) for pk in graph.ids]})


def _positions(graph: Graph) -> dict[str, tuple[int, int]]:
    depth, used, place = depths(graph), Counter[int](), {}
    for pk in graph.ids:
        column = depth[pk]
        place[pk] = (PAD + column * (BOX_W + GAP_X), PAD + used[column] * (BOX_H + GAP_Y))
        used[column] += 1
    return place


def _edge(start: tuple[int, int], end: tuple[int, int], resolved: bool) -> dict[str, Any]:
    x1, y1, x2, y2 = start[0] + BOX_W, start[1] + BOX_H // 2, end[0], end[1] + BOX_H // 2
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "mid": (x1 + x2) // 2, "resolved": resolved}


def _box(pk: str, at: tuple[int, int], row: tuple[str, str] | None, current: bool,
         site: str) -> dict[str, Any]:
    status, path = row if row is not None else ("", _("(row deleted)"))
    name = path.rsplit(".", 1)[-1]
    return {"pk": pk, "status": status, "path": path, "current": current,
            "colour": STATUS_COLOURS.get(JobStatus(status), "#888") if status else "#888",
            "name": name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "\u2026",
            "label": JobStatus(status).label if status else "-",
            "url": job_url(site, "change", pk),
            "x": at[0], "y": at[1], "tx": at[0] + 12, "y1": at[1] + 17, "y2": at[1] + 33}


def parents(job: Job, site: str = "admin") -> str:
    """The jobs this one waits for; those not finished yet are marked "waited for"."""
    return _listed(site, "parent_id", child_id=job.pk)


def children(job: Job, site: str = "admin") -> str:
    """The jobs waiting for this one (or that did)."""
    return _listed(site, "child_id", parent_id=job.pk)


def _listed(site: str, other: str, **edge: str) -> str:
    """The jobs at the ``other`` end of the edges ``edge`` selects, each with its status;
    a parent not finished yet is marked "waited for"."""
    edges = JobDependency.objects.filter(**edge).order_by("pk")
    rows = list(edges.values_list(other, "resolved")[:LISTED])
    if not rows:
        return "-"
    total = edges.count() if len(rows) == LISTED else len(rows)
    status = dict(Job.objects.filter(pk__in=[pk for pk, _r in rows]).values_list("pk", "status"))
    return job_list([(job_link(pk, site=site, css=LINK), status.get(pk, _("(row deleted)")),
                      _("waited for") if other == "parent_id" and not resolved else "")
                     for pk, resolved in rows],
                    _("… %(n)d in all") % {"n": total} if total > len(rows) else "")


# -- requeue lineage ---------------------------------------------------------------------

def requeued_from(job: Job, admin_site: str = "admin") -> str:
    """A link to the original of a copy made by a requeue; "-" for an original."""
    return job_link(job.requeued_from, site=admin_site, css=LINK) if job.requeued_from else "-"


def requeued_as(job: Job, admin_site: str = "admin") -> str:
    """Links to the jobs copied from ``job`` by a requeue, oldest first (at most ``LISTED``)."""
    copies = list(Job.objects.filter(requeued_from=job.pk).order_by("created_at")
                  .values_list("pk", "status", "created_at")[:LISTED + 1])
    if not copies:
        return "-"
    return job_list([(job_link(pk, site=admin_site, css=LINK), status, seconds(created))
                     for pk, status, created in copies[:LISTED]],
                    _("… and more") if len(copies) > LISTED else "")
