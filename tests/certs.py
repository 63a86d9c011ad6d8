"""Certificates for the TLS tests, made with the ``openssl`` CLI: a CA, and
certificates it signs (for 127.0.0.1 when given a subject alternative
name). Valid for two days: long enough for any run."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    """d/NAME.pem and d/NAME.key: a self-signed CA."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_cert(d: Path, name: str, ca: str, subject: str, san: str | None = None) -> None:
    """d/NAME.pem and d/NAME.key, signed by the CA d/CA.pem."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", str(ext), cwd=d)


def keystore(d: Path, name: str) -> Path:
    """d/NAME-keystore.pem: the certificate and its key in one PEM file
    (Kafka's ssl.keystore.type=PEM), as Helix reads it."""
    out = d / f"{name}-keystore.pem"
    out.write_text((d / f"{name}.pem").read_text() + (d / f"{name}.key").read_text())
    return out


def server_keystore(d: Path) -> Path:
    """A new directory ``d`` with a CA (``ca``) and a server certificate it
    signed for localhost / 127.0.0.1: the server's keystore (PEM)."""
    d.mkdir()
    make_ca(d, "ca")
    make_cert(d, "server", "ca", "/CN=localhost", san="IP:127.0.0.1,DNS:localhost")
    return keystore(d, "server")
