"""Fixtures: the broker under test (see harness.py for how it is chosen) and
unique topic names so tests can run in parallel against one broker."""

from __future__ import annotations

import faulthandler
import os
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402


def pytest_report_header(config):
    return f"broker under test: {harness.target_description()}"


# pytest-timeout (pytest.ini) fails a test from a SIGALRM handler, which runs
# only when the main thread is back in Python; a test stuck inside librdkafka
# never is, and once hung the whole suite (the CI of 28dfead ran into its
# 90 minutes). This watchdog is the backstop: past the timeout and a grace,
# every thread's stack goes to the real stderr and the worker exits (a
# failure, and client-tests.sh starts no replacement).
HARD_GRACE_S = 120
_real_stderr = None


def pytest_configure(config):
    global _real_stderr
    _real_stderr = os.fdopen(os.dup(2), "w")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = float(item.config.getini("timeout") or 0)
    if limit > 0:
        faulthandler.dump_traceback_later(limit + HARD_GRACE_S, exit=True, file=_real_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        for name in ("broker", "fresh_broker"):
            broker = item.funcargs.get(name)
            if isinstance(broker, harness.Broker) and broker.log is not None:
                rep.sections.append((f"{broker.kind} broker log (tail, {broker.log})", broker.log_tail(80)))


def _managed(tmp_path_factory, name: str) -> harness.ManagedBroker:
    workdir = tmp_path_factory.mktemp(name)
    return harness.new_managed_broker(Path(workdir))


@pytest.fixture(scope="module")
def broker(request, tmp_path_factory):
    """The broker shared by one test module: external, or started for the module."""
    external = harness.external_bootstrap()
    if external:
        yield harness.ExternalBroker(external)
        return
    b = _managed(tmp_path_factory, re.sub(r"\W", "_", request.module.__name__))
    try:
        yield b
    finally:
        b.stop()
        if b.starts and not request.session.testsfailed:
            shutil.rmtree(b.data_dir, ignore_errors=True)


@pytest.fixture
def fresh_broker(request, tmp_path_factory):
    """A broker of this test's own, which the test may kill -9 and restart."""
    if harness.external_bootstrap():
        pytest.skip("needs a broker the suite starts (HELIX_TEST_BOOTSTRAP points at an external one)")
    b = _managed(tmp_path_factory, re.sub(r"\W", "_", request.node.name)[:40])
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test (or earlier run against the same broker) uses."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"
