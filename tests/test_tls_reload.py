"""Certificates reloaded without a restart (issue 34 item 2, ADR 0028):
the keystore of a node's TLS listeners is replaced on disk (as a renewal
tool does: write beside it, rename over it) and new connections get the
new certificate while the node keeps serving, clients connected before
included; a file replaced by one that does not load leaves the previous
certificate in use and says so in the log.

The peer transport's mutual TLS uses the same reloading configuration
(helix-server unit tests `tls::tests`)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import harness
from certs import keystore, make_ca, make_cert

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
                       reason="starts a Helix node of its own with a TLS listener"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


def served_subject(port: int, ca: Path) -> str:
    """The CN of the certificate the listener shows a new connection."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
    return subject["commonName"]


def replace(target: Path, text: str) -> None:
    """Writes beside `target` and renames over it, as renewal tools do."""
    tmp = target.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, target)


def await_subject(port: int, ca: Path, cn: str) -> None:
    deadline = time.monotonic() + 60
    while (seen := served_subject(port, ca)) != cn:
        assert time.monotonic() < deadline, f"still serving {seen}, not {cn}"
        time.sleep(0.2)


def ssl_producer(port: int, ca: Path) -> Producer:
    return Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                     "ssl.ca.location": str(ca), "acks": "all"})


def test_a_replaced_keystore_is_served_without_a_restart(tmp_path):
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    certs = tmp_path / "certs"
    certs.mkdir()
    make_ca(certs, "ca")
    for cn in ("first", "second"):
        make_cert(certs, cn, "ca", f"/CN={cn}", san="IP:127.0.0.1")
    live = certs / "live-keystore.pem"
    live.write_text(keystore(certs, "first").read_text())
    ca = certs / "ca.pem"

    broker = harness.HelixBroker(binary, tmp_path / "node")
    ssl_port = harness.free_port()
    broker.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}",
        "--ssl-keystore-location", str(live),
    ]
    broker.start()
    try:
        assert served_subject(ssl_port, ca) == "first"
        before = ssl_producer(ssl_port, ca)
        before.produce("reloaded", value=b"before")
        assert before.flush(60) == 0

        replace(live, keystore(certs, "second").read_text())
        await_subject(ssl_port, ca, "second")
        # A client connected before the renewal keeps working across it,
        # and a new one connects to the new certificate.
        before.produce("reloaded", value=b"after")
        assert before.flush(60) == 0
        after = ssl_producer(ssl_port, ca)
        after.produce("reloaded", value=b"new client")
        assert after.flush(60) == 0

        # A broken file changes nothing but the log.
        replace(live, "not a certificate\n")
        deadline = time.monotonic() + 60
        while "do not load" not in broker.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the broken keystore was not noticed"
            time.sleep(0.2)
        assert served_subject(ssl_port, ca) == "second"
        assert broker.alive()
    finally:
        broker.stop()
