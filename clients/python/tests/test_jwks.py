"""End users with an identity provider's tokens: RS256 tokens verified against a JWKS that the
server fetches over HTTP (as from Auth0, Keycloak or Clerk), and the forged ones it refuses.

Real RSA keys (``cryptography``) and real JWTs (PyJWT), a JWKS served on loopback, a real server
started with ``--jwt-jwks URL``; the tokens go through the client as ``token=``.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from typing import Any, Iterator

import pytest

jwt = pytest.importorskip("jwt")
rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from jwt.algorithms import RSAAlgorithm  # noqa: E402

from stepwise import Stepwise, StepwiseError  # noqa: E402
from stepwise.testing import local_server  # noqa: E402

AUDIENCE = "stepwise-api"
ISSUER = "https://id.example.test/"


def new_key() -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Jwks:
    """A JWKS served over HTTP on loopback, counting how often it is fetched."""

    def __init__(self, keys: dict[str, Any]) -> None:
        self.keys = keys
        self.fetches = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                outer.fetches += 1
                body = json.dumps(outer.document()).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def document(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            jwk.update({"kid": kid, "alg": "RS256", "use": "sig"})
            keys.append(jwk)
        return {"keys": keys}


def token(key: Any, kid: str | None, **claims: Any) -> str:
    now = int(time.time())
    body = {"sub": "ursula", "tenant": "acme", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 600}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    headers = {"kid": kid} if kid else {}
    return str(jwt.encode(body, key, algorithm="RS256", headers=headers))


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Jwks, Any]]:
    signing = new_key()
    jwks = Jwks({"key-1": signing})
    database = f"sqlite://{tmp_path_factory.mktemp('jwks') / 'stepwise.db'}"
    args = ["--jwt-jwks", jwks.url, "--jwt-audience", AUDIENCE, "--jwt-issuer", ISSUER]
    with local_server(database=database, args=args) as server:
        yield server.url, jwks, signing
    jwks.httpd.shutdown()


def status_of(url: str, credential: str) -> int:
    try:
        list(Stepwise(url, token=credential).list_sessions())
        return 200
    except StepwiseError as error:
        return int(error.status or 0)


def test_an_identity_providers_rs256_token_acts_as_its_user(idp: tuple[str, Jwks, Any]) -> None:
    url, jwks, signing = idp
    name = f"ursula-{uuid.uuid4().hex[:8]}"
    ursula = Stepwise(url, token=token(signing, "key-1"))
    session = ursula.create_session(name=name)
    assert session["user_id"] == "ursula" and session["tenant_id"] == "acme"
    # A list of audiences holding ours is taken too (as Auth0 sends them).
    both = Stepwise(url, token=token(signing, "key-1", aud=[AUDIENCE, "https://other.example.test/"]))
    assert [s["id"] for s in both.list_sessions(name=name)] == [session["id"]]
    # Another user of the same provider does not see it.
    victor = Stepwise(url, token=token(signing, "key-1", sub="victor"))
    with pytest.raises(StepwiseError) as refused:
        victor.get_session(session["id"])
    assert refused.value.status == 404 and refused.value.code == "not_found"
    assert jwks.fetches >= 1


def test_forged_and_mismatched_rs256_tokens_are_refused(idp: tuple[str, Jwks, Any]) -> None:
    url, jwks, signing = idp
    stranger = new_key()
    public_pem = signing.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    hs_claims = {"sub": "ursula", "tenant": "acme", "aud": AUDIENCE, "iss": ISSUER, "exp": now + 600}
    # PyJWT refuses to HMAC with a PEM key; the bytes are signed by hand as an attacker would.
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "key-1"}).encode())
    body = b64(json.dumps(hs_claims).encode())
    mac = hmac.new(public_pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    confused = f"{head}.{body}.{b64(mac)}"
    cases = {
        "signed by another key under our kid": token(stranger, "key-1"),
        "an unknown kid": token(signing, "key-9"),
        "HS256 keyed with the JWKS public key": confused,
        "expired": token(signing, "key-1", exp=now - 600, iat=now - 1200),
        "wrong audience": token(signing, "key-1", aud="another-api"),
        "wrong issuer": token(signing, "key-1", iss="https://evil.example.test/"),
        "no sub": token(signing, "key-1", sub=None),
        "no tenant (no default tenant set)": token(signing, "key-1", tenant=None),
    }
    for why, credential in cases.items():
        assert status_of(url, credential) == 401, why
    # The good token still works after all of those.
    assert status_of(url, token(signing, "key-1")) == 200


def test_a_token_without_a_tenant_takes_the_default_tenant(tmp_path: Any) -> None:
    signing = new_key()
    jwks = Jwks({"only": signing})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks.document()))
    jwks.httpd.shutdown()
    args = ["--jwt-jwks", str(path), "--jwt-default-tenant", "acme"]
    with local_server(database=f"sqlite://{tmp_path / 'stepwise.db'}", args=args) as server:
        # No kid: the only key of the algorithm verifies it; no tenant claim: the default one.
        client = Stepwise(server.url, token=token(signing, None, tenant=None, aud=None, iss=None))
        session = client.create_session()
        assert session["tenant_id"] == "acme" and session["user_id"] == "ursula"
        # A server that verifies tokens is not open: no credential is a 401.
        with pytest.raises(StepwiseError) as refused:
            list(Stepwise(server.url).list_sessions())
        assert refused.value.status == 401
