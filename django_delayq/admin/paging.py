"""The job list's paginator: it counts at most ``cap + 1`` rows (``SELECT COUNT(*) FROM
(SELECT id ... LIMIT cap + 1)``), so no page of the list counts a table of millions.

Django's change list counts the filtered rows on every page to know how many pages there
are (``show_full_result_count = False`` only drops its second count, of the unfiltered
table). Past ``cap`` the paginator's ``count`` is ``cap``, which Django's own templates
show as any count ("10000 jobs", in the reader's language); ``more`` says there are more,
and the job list's templates add a note saying so.

``CappedChangeList`` is Django's change list, but past the cap it never lists more than a
page, whatever ``list_max_show_all`` allows (no "Show all", ``?all=`` ignored), and a page
number past the last opens the last page with the same filters and search
(``PastLastPage``), where Django would drop them all (``?e=1``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.paginator import InvalidPage, Paginator
from django.http import HttpRequest
from django.utils.functional import cached_property

if TYPE_CHECKING:  # generic for the type checker only: Django's classes take no [...]
    _PaginatorBase = Paginator[Any]
else:
    _PaginatorBase = Paginator


class CappedPaginator(_PaginatorBase):
    #: At most this many rows are counted; the pages reach this far.
    cap = 10_000

    @cached_property
    def _counted(self) -> int:
        """The rows, up to ``cap + 1``: one index range scan at most that long."""
        rows: Any = self.object_list
        if not hasattr(rows, "values"):  # a list: Django's own count
            return len(rows)
        return int(rows.values("pk").order_by()[:self.cap + 1].count())

    @cached_property
    def count(self) -> int:
        return min(self._counted, self.cap)

    @cached_property
    def more(self) -> bool:
        """More rows than ``cap``: the list counts and shows ``cap`` of them."""
        return self._counted > self.cap


class PastLastPage(Exception):
    """A page number past the last page: the view redirects to ``url``, the last page."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class CappedChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        try:
            super().get_results(request)
        except IncorrectLookupParameters:  # raised for a page that is not one (only)
            self._past_last(self.model_admin.get_paginator(request, self.queryset,
                                                           self.list_per_page))
            raise
        if getattr(self.paginator, "more", False):
            # Django lists every row when its count (here the cap) is under
            # list_max_show_all (?all=) or list_per_page: past the cap, one page at most.
            self.can_show_all = False
            self._past_last(self.paginator)
            try:
                self.result_list = self.paginator.page(self.page_num).object_list
            except InvalidPage as exc:  # page 0: as Django answers it (?e=1)
                raise IncorrectLookupParameters from exc

    def _past_last(self, paginator: Any) -> None:
        if self.page_num > paginator.num_pages:
            raise PastLastPage(self.get_query_string({PAGE_VAR: paginator.num_pages}))
