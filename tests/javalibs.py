"""Kafka's Java artifacts from Maven Central, fetched once into a cache
(~/.cache/helix-tests, or HELIX_TEST_CACHE) with `mvn dependency:copy-dependencies`
on tests/java/pom.xml, and the test programs compiled there with plain javac."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

JAVA_DIR = Path(__file__).resolve().parent / "java"
CACHE = Path(os.environ.get("HELIX_TEST_CACHE", Path.home() / ".cache" / "helix-tests"))


@contextmanager
def _cache_lock():
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # pytest-xdist workers share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def maven_libs(artifact: str, version: str) -> Path:
    """Directory holding org.apache.kafka:ARTIFACT:VERSION and its dependencies."""
    libs = CACHE / f"{artifact}-{version}"
    with _cache_lock():
        if not (libs / f"{artifact}-{version}.jar").exists():
            subprocess.run(
                ["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), "dependency:copy-dependencies",
                 f"-Dkafka.artifact={artifact}", f"-Dkafka.version={version}", f"-DoutputDirectory={libs}"],
                check=True, capture_output=True, timeout=300,
            )
    return libs


def compiled(source: Path, libs: Path) -> Path:
    """Classes directory of SOURCE compiled against LIBS (once per source content)."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    classes = CACHE / f"classes-{source.stem}-{libs.name}-{digest}"
    with _cache_lock():
        if not (classes / f"{source.stem}.class").exists():
            tmp = classes.with_suffix(".tmp")
            tmp.mkdir(exist_ok=True)
            subprocess.run(["javac", "-cp", f"{libs}/*", "-d", str(tmp), str(source)],
                           check=True, capture_output=True, timeout=300)
            tmp.rename(classes)
    return classes


def java(classpath: str, main: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, main, *args],
        capture_output=True, timeout=timeout,
    )
