"""The clients verify TLS as httpx does by default (certifi's bundle, or ``SSL_CERT_FILE``),
with one context per process that every client shares, so opening a client is cheap.

The server is a small loopback HTTPS server of the test's own with a self-signed certificate
made by ``openssl``."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from stepwise import AsyncStepwise, Stepwise, StepwiseError
from stepwise._tls import default_ssl_context


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def https_url(certificate: tuple[Path, Path]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_unknown_certificate_is_refused(https_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with Stepwise(https_url, max_retries=0) as client:
        with pytest.raises(StepwiseError) as caught:
            client.request("GET", "/healthz")
    assert caught.value.code == "connection_error"
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


def test_ssl_cert_file_is_trusted_by_both_clients(
    https_url: str, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with Stepwise(https_url, max_retries=0) as client:
        assert client.request("GET", "/healthz") == {"status": "ok"}

    async def main() -> None:
        async with AsyncStepwise(https_url, max_retries=0) as client:
            assert await client.request("GET", "/healthz") == {"status": "ok"}

    asyncio.run(main())


def test_clients_share_one_context_per_setting(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared = default_ssl_context()
    assert default_ssl_context() is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    assert default_ssl_context() is not shared
