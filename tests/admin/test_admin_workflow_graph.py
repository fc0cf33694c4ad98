"""The workflow graph on a job's page: the chain, group or after= graph it belongs to,
drawn as an SVG on the server with each job's status, links to each job, arrows dashed
while the child waits; bounded in jobs and queries; every text escaped."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from django_delayq import chain, group, job, schedule
from django_delayq.admin import workflow_graph
from django_delayq.core import ids
from django_delayq.models import Job, JobDependency, JobStatus
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _graph(client, job_id: str) -> str:  # type: ignore[no-untyped-def]
    html = client.get(reverse("admin:django_delayq_job_change", args=(job_id,))).content
    return html.decode().split("field-workflow_graph_display", 1)[1].split("</svg>", 1)[0]


def _nodes(svg: str) -> dict[str, str]:
    """job id -> status, for each box drawn."""
    return {part.split('"', 1)[0]: part.split('data-status="', 1)[1].split('"', 1)[0]
            for part in svg.split('class="delayq-node" data-job="')[1:]}


def test_a_chain_from_its_middle_job_with_each_state(delayq_settings, admin_client):
    first, middle, last = chain(job("tests.jobs.add").s(1, 2), job("tests.jobs.noop").s(),
                                job("tests.jobs.noop").s())
    run_due_jobs(max_jobs=1)  # the first one ran: the middle one is released
    svg = _graph(admin_client, middle.id)
    assert _nodes(svg) == {first.id: JobStatus.SUCCEEDED, middle.id: JobStatus.SCHEDULED,
                           last.id: JobStatus.WAITING}
    assert svg.count("marker-end=") == 2  # two arrows
    assert svg.count('stroke-dasharray="5 4"') == 1  # the last one still waits
    assert 'stroke-width="3"' in svg  # the job whose page it is
    assert reverse("admin:django_delayq_job_change", args=(last.id,)) in svg


def test_a_group_and_its_summary_from_one_member(delayq_settings, admin_client):
    res = group([job("tests.jobs.noop").s() for _ in range(3)],
                then=job("tests.jobs.noop").s())
    members = list(res.ids)
    assert res.then is not None
    nodes = _nodes(_graph(admin_client, members[0]))
    assert set(nodes) == {*members, res.then.id}


def test_no_dependency_draws_nothing(delayq_settings, admin_client):
    alone = schedule("tests.jobs.noop", delay=60).id
    html = admin_client.get(reverse("admin:django_delayq_job_change", args=(alone,)))
    cell = html.content.decode().split("field-workflow_graph_display", 1)[1]
    assert "<svg" not in cell.split("</div>", 2)[1]


def test_a_big_graph_is_cut_in_bounded_queries(delayq_settings,
                                               django_assert_max_num_queries):
    now = timezone.now()
    hub = Job.objects.create(id=ids.new_id(), queue="default", callable_path="<script>x",
                             status=JobStatus.RUNNING, attempts=1, max_attempts=1, run_at=now)
    kids = [ids.new_id() for _ in range(80)]
    Job.objects.bulk_create(Job(id=pk, queue="default", callable_path="tests.jobs.noop",
                                status=JobStatus.WAITING, max_attempts=1, run_at=now)
                            for pk in kids)
    JobDependency.objects.bulk_create(JobDependency(parent_id=hub.pk, child_id=pk)
                                      for pk in kids)
    with django_assert_max_num_queries(4):
        svg = str(workflow_graph.render(hub))
    assert svg.startswith('<p class="delayq-note">More than 60 jobs')
    assert len(_nodes(svg)) == workflow_graph.MAX_JOBS
    assert "<script>" not in svg and "&lt;script&gt;x" in svg


def test_depth_places_a_child_after_its_deepest_parent():
    g = workflow_graph.Graph(ids=["a", "b", "c", "d"],
                             edges=[("a", "b", True), ("b", "c", False), ("a", "c", False),
                                    ("d", "c", False)])
    assert workflow_graph.depths(g) == {"a": 0, "b": 1, "c": 2, "d": 0}


def test_parents_left_says_what_it_means(delayq_settings, admin_client):
    _first, second = chain(job("tests.jobs.noop").s(), job("tests.jobs.noop").s())
    html = admin_client.get(reverse("admin:django_delayq_job_change", args=(second.id,)))
    cell = html.content.decode().split("field-parents_left_display", 1)[1][:400]
    assert "1 (it is sent to Redis when all have finished)" in cell
    assert "released to Redis at 0" not in html.content.decode()
