"""``delayq_worker --metrics-port``: a real worker process serves /metrics on loopback
unless ``--metrics-addr`` names another address; seen from outside the process, the way
another host on the network would see it."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_delayq import compat
from tests.helpers import wait_until
from tests.redis_server import free_port
from tests.worker.conftest import worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker,
              pytest.mark.skipif(compat.prometheus_client is None, reason="no prometheus")]

PROC_NET = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
LISTEN = "0A"


@pytest.fixture
def start_worker(delayq_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(delayq_settings, tmp_path)


def answers(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=2) as resp:
            return resp.status == 200 and b"delayq_redis_up" in resp.read()
    except OSError:
        return False


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets in LISTEN state on ``port``, from the kernel's table
    (IPv4 only; an IPv6 wildcard shows as "::")."""
    found = set()
    for table in PROC_NET:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr_hex, port_hex = local.split(":")
            if state != LISTEN or int(port_hex, 16) != port:
                continue
            if len(addr_hex) == 8:
                found.add(socket.inet_ntoa(bytes.fromhex(addr_hex)[::-1]))
            else:
                found.add("::" if int(addr_hex, 16) == 0 else addr_hex)
    return found


def non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the route
        except OSError:
            return None
        addr = str(sock.getsockname()[0])
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


@pytest.mark.skipif(not PROC_NET[0].exists() and non_loopback_address() is None,
                    reason="no /proc/net/tcp and no non-loopback address to look from")
def test_metrics_listen_on_loopback_by_default(start_worker) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    proc = start_worker("--metrics-port", str(port))
    wait_until(lambda: proc.poll() is not None or answers("127.0.0.1", port), timeout=30)
    assert proc.poll() is None, "worker exited"
    checked = False
    if PROC_NET[0].exists():
        assert listening_addresses(port) == {"127.0.0.1"}  # not 0.0.0.0, not ::
        checked = True
    outside = non_loopback_address()
    if outside is not None:
        assert not answers(outside, port)
        checked = True
    assert checked


@pytest.mark.skipif(not PROC_NET[0].exists(), reason="127.0.0.2 is a loopback address on Linux only")
def test_metrics_addr_names_the_address(start_worker) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    proc = start_worker("--metrics-port", str(port), "--metrics-addr", "127.0.0.2")
    wait_until(lambda: proc.poll() is not None or answers("127.0.0.2", port), timeout=30)
    assert proc.poll() is None, "worker exited"
    assert listening_addresses(port) == {"127.0.0.2"}
    assert not answers("127.0.0.1", port)


def test_an_address_that_cannot_be_bound_is_a_clear_error(start_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = start_worker("--metrics-port", str(free_port()), "--metrics-addr", "192.0.2.1")
    assert proc.wait(60) != 0
    log = (tmp_path / "worker-0.log").read_text()
    assert "cannot serve metrics on 192.0.2.1" in log, log
