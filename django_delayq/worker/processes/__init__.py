"""``delayq_worker --processes N``: the supervisor of N child worker processes
(``supervisor.py``), each child as the supervisor sees it and the taking back of a dead
child's jobs (``children.py``). A child's end of its link to the
supervisor is the worker's (``worker/tracking.py``)."""
