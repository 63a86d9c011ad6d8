"""franz-go's own integration suite against a 3-node Helix cluster.

franz-go (github.com/twmb/franz-go, a third-party Go client) tests its
client against a live broker named by ``KGO_SEEDS``: produce and consume at
every compression, consumer groups of every balancer (``TestGroupETL``),
transactions with a group-committing ETL (``TestTxnEtl``), regex
consumption, pausing, purging, partition additions, static membership and
several dozen regression tests named for the issues that found them. Its
tests are the client author's, not ours: this file only fetches a pinned
release from the Go module proxy, builds the test binary once per machine
and runs it, with replication factor 3, against real helix-server processes.

The tests that need a broker feature Helix does not build skip themselves
(share groups: Kafka 4.2; KIP-848 consumer groups; OAUTHBEARER; the SCRAM
tests, which want a second listener named in their environment); every
other test must pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import harness
import javalibs
from cluster_harness import HelixCluster

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None,
                                 reason="starts its own Helix nodes")]

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
NEEDS_GO = (1, 26)  # its go.mod says go 1.26.0
# The heart of the suite: had any of these skipped, the run would prove little.
CORE = ["TestGroupETL", "TestTxnEtl", "TestClient_Produce", "TestConsumeRegex", "TestIssue434",
        "TestIssue337", "TestGroupSimple", "TestAddRemovePartitions", "TestDirectPartitionPurge"]


def go_version() -> tuple[int, int] | None:
    if shutil.which("go") is None:
        return None
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, timeout=60).stdout
    m = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def kgo_test_binary() -> tuple[Path, Path]:
    """franz-go's pkg/kgo tests compiled (`go test -c`) once per machine, and
    the package's source directory they run in (a test reads config.go)."""
    work = javalibs.CACHE / f"franz-go-{VERSION}-src"
    binary = javalibs.CACHE / f"franz-go-{VERSION}-kgo.test"
    with javalibs._cache_lock():
        if binary.exists() and (work / "pkg" / "kgo" / "config.go").exists():
            return binary, work / "pkg" / "kgo"
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        out = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
                             capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        source = Path(re.search(r'"Dir":\s*"([^"]+)"', out.stdout).group(1))
        # The module cache is read-only: build from a copy.
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(source, work)
        for p in work.rglob("*"):
            p.chmod(p.stat().st_mode | 0o200)
        tmp = binary.with_suffix(".tmp")
        built = subprocess.run(["go", "test", "-c", "-o", str(tmp), "./pkg/kgo/"], cwd=work,
                               capture_output=True, text=True, timeout=900, env=env)
        assert built.returncode == 0, built.stdout + built.stderr
        tmp.rename(binary)
    return binary, work / "pkg" / "kgo"


def test_franz_go_kgo_suite_passes_on_three_nodes(tmp_path):
    version = go_version()
    if version is None or version < NEEDS_GO:
        pytest.skip(f"franz-go {VERSION} needs Go {NEEDS_GO[0]}.{NEEDS_GO[1]}; found {version}")
    binary, package = kgo_test_binary()
    cluster = HelixCluster(tmp_path / "cluster", 3).start()
    try:
        env = {**os.environ, "KGO_SEEDS": cluster.bootstrap, "KGO_TEST_RF": "3",
               # 50,000 records per ETL stage instead of 500,000: the same
               # paths, a CI-sized run.
               "KGO_TEST_RECORDS": "50000", "KGO_LOG_LEVEL": "none"}
        run = subprocess.run([str(binary), "-test.v", "-test.timeout", "900s"], cwd=package,
                             capture_output=True, text=True, timeout=1000, env=env)
        (tmp_path / "kgo.log").write_text(run.stdout + run.stderr)
        failed = re.findall(r"^\s*--- FAIL: (\S+)", run.stdout, re.M)
        passed = set(re.findall(r"^--- PASS: (\S+)", run.stdout, re.M))
        tail = "\n".join((run.stdout + run.stderr).splitlines()[-60:])
        assert run.returncode == 0 and not failed, (
            f"franz-go {VERSION} kgo tests failed: {failed} (log: {tmp_path / 'kgo.log'})\n{tail}\n"
            f"{cluster.logs()}")
        missing = [t for t in CORE if t not in passed]
        assert not missing, f"these core tests did not pass (skipped?): {missing}\n{tail}"
    finally:
        cluster.stop()
