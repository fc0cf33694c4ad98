"""The job list's paginator: it counts at most ``cap + 1`` rows (``SELECT COUNT(*) FROM
(SELECT id ... LIMIT cap + 1)``), so no page of the list counts a table of millions.

Django's change list counts the filtered rows on every page to know how many pages there
are (``show_full_result_count = False`` only drops its second count, of the unfiltered
table). Past ``cap`` the list has pages up to the cap (``num_pages``), says "10000+" where
it shows the number (``shown_count``), and refuses "show all" (more rows than
``list_max_show_all``); a narrower filter or search reaches the older rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
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
        """More rows than ``cap``: the list shows ``cap`` of them and says "+"."""
        return self._counted > self.cap

    @cached_property
    def shown_count(self) -> str:
        """The count as the list shows it: ``"10000+"`` past the cap."""
        return "%d+" % self.cap if self.more else str(self.count)
