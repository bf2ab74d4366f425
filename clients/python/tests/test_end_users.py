"""End users: tokens an admin mints, the roles of keys, and what each credential may see.

Against a real server whose database has an admin key (made with `stepwise keys create`), and,
for what the client sends, against mock transports.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import time
import uuid
from typing import Any, Callable, Iterator

import httpx
import pytest

from stepwise import AsyncStepwise, ForbiddenError, Stepwise, StepwiseError
from stepwise.testing import LocalServer, find_binary, local_server

# A revoked key reaches every running server within 5 s (docs/cli.md); waited on up to this.
REVOKE_PATIENCE_S = 10.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_key(database: str, tenant: str, user: str, role: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", user, "--role", role],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


class Keyed:
    """A server with API keys, and its tenant's admin key."""

    def __init__(self, server: LocalServer, admin_key: str) -> None:
        self.server = server
        self.url = server.url
        self.admin_key = admin_key

    def admin(self) -> Stepwise:
        return Stepwise(self.url, api_key=self.admin_key)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    database = f"sqlite://{tmp_path_factory.mktemp('end-users') / 'stepwise.db'}"
    admin_key = make_key(database, "acme", "ops", "admin")
    with local_server(database=database) as server:
        yield Keyed(server, admin_key)


def wait_until(condition: Callable[[], Any], what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


# --- what the client sends (mock transports) --------------------------------------------


def recorder() -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "DELETE":
            return httpx.Response(204)
        if request.method == "GET" and request.url.path in ("/v1/keys", "/v1/sessions"):
            return httpx.Response(200, json={"items": [{"id": "k1"}], "next_cursor": None})
        return httpx.Response(201, json={"ok": True})

    return seen, handler


def test_a_token_is_the_bearer_like_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    monkeypatch.delenv("STEPWISE_TOKEN", raising=False)
    seen, handler = recorder()
    with Stepwise("http://x.test", token="tok-1", transport=httpx.MockTransport(handler)) as c:
        assert c.api_key == "tok-1"
        c.health()
    with Stepwise("http://x.test", api_key="key-1", transport=httpx.MockTransport(handler)) as c:
        c.health()
    assert [r.headers["authorization"] for r in seen] == ["Bearer tok-1", "Bearer key-1"]

    for make in (Stepwise, AsyncStepwise):
        with pytest.raises(TypeError, match="api_key or token, not both"):
            make("http://x.test", api_key="key-1", token="tok-1")

    # The environment: STEPWISE_API_KEY, else STEPWISE_TOKEN; an argument wins over both.
    monkeypatch.setenv("STEPWISE_TOKEN", "env-token")
    assert Stepwise("http://x.test").api_key == "env-token"
    monkeypatch.setenv("STEPWISE_API_KEY", "env-key")
    assert Stepwise("http://x.test").api_key == "env-key"
    assert Stepwise("http://x.test", token="tok-2").api_key == "tok-2"
    assert AsyncStepwise("http://x.test", token="tok-2").api_key == "tok-2"


async def test_the_async_client_sends_the_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ok"})

    async with AsyncStepwise("http://x.test", token="tok-a", transport=httpx.MockTransport(handler)) as c:
        await c.health()
    assert seen[0].headers["authorization"] == "Bearer tok-a"


def test_tokens_and_keys_requests() -> None:
    seen, handler = recorder()
    with Stepwise("http://x.test", transport=httpx.MockTransport(handler)) as c:
        c.tokens.create("alice")
        c.tokens.create("alice", ttl_s=120)
        c.keys.create("bob")
        c.keys.create("ops", role="admin", name="deploy")
        assert [k["id"] for k in c.keys.list()] == ["k1"]
        assert c.keys.delete("k/1") is None
        list(c.list_sessions(user_id="alice"))
        with pytest.raises(ValueError, match="user_id"):
            c.tokens.create("")
        with pytest.raises(ValueError, match="key_id"):
            c.keys.delete("")
    sent = [(r.method, r.url.raw_path.decode(), json.loads(r.content) if r.content else None) for r in seen]
    assert sent[:6] == [
        ("POST", "/v1/tokens", {"user_id": "alice"}),
        ("POST", "/v1/tokens", {"user_id": "alice", "ttl_s": 120}),
        ("POST", "/v1/keys", {"user_id": "bob", "role": "user"}),
        ("POST", "/v1/keys", {"user_id": "ops", "role": "admin", "name": "deploy"}),
        ("GET", "/v1/keys", None),
        ("DELETE", "/v1/keys/k%2F1", None),
    ]
    assert seen[6].url.params["user_id"] == "alice"


def test_forbidden_is_a_forbidden_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tokens":
            return httpx.Response(403, json={"error": {"code": "forbidden", "message": "an admin credential is required"}})
        return httpx.Response(403, text="no")  # not the API's error shape: the status says it

    with Stepwise("http://x.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(ForbiddenError) as e:
            c.tokens.create("alice")
        with pytest.raises(ForbiddenError) as bare:
            c.health()
    assert (e.value.status, e.value.code) == (403, "forbidden")
    assert isinstance(e.value, StepwiseError)
    assert bare.value.code == "forbidden"
    assert repr(e.value).startswith("ForbiddenError(status=403")
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is ForbiddenError and str(again) == str(e.value)
    assert type(pickle.loads(pickle.dumps(StepwiseError("conflict", "x", status=409)))) is StepwiseError


# --- against a server -------------------------------------------------------------------


def test_an_end_users_token_sees_only_its_own_sessions(keyed: Keyed) -> None:
    alice_name, bob_name = unique("alice"), unique("bob")
    with keyed.admin() as admin:
        minted = admin.tokens.create(alice_name)
        assert minted["user_id"] == alice_name
        assert isinstance(minted["token"], str) and minted["token"]
        assert "T" in minted["expires_at"]
        bob_token = admin.tokens.create(bob_name, ttl_s=600)["token"]
        # Another admin's session, which no end user sees.
        ops_session = admin.create_session(title="ops only")

        with Stepwise(keyed.url, token=minted["token"]) as alice, Stepwise(keyed.url, token=bob_token) as bob:
            mine = alice.create_session(title="alice's")
            bobs = bob.create_session(title="bob's")
            assert [s["id"] for s in alice.list_sessions()] == [mine["id"]]
            assert [s["id"] for s in bob.list_sessions()] == [bobs["id"]]
            assert alice.get_session(mine["id"])["title"] == "alice's"

            for other in (mine["id"], ops_session["id"]):
                with pytest.raises(StepwiseError) as e:
                    bob.get_session(other)
                assert (e.value.status, e.value.code) == (404, "not_found")

            # The admin sees them all, and one end user's with user_id.
            everyone = {s["id"] for s in admin.list_sessions()}
            assert {mine["id"], bobs["id"], ops_session["id"]} <= everyone
            assert [s["id"] for s in admin.list_sessions(user_id=alice_name)] == [mine["id"]]

            # An end user may not mint tokens or manage keys.
            with pytest.raises(ForbiddenError) as forbidden:
                alice.tokens.create(bob_name)
            assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")
            with pytest.raises(ForbiddenError):
                list(alice.keys.list())
            with pytest.raises(ForbiddenError):
                alice.keys.create(alice_name, role="admin")

        with pytest.raises(StepwiseError) as bad:
            admin.tokens.create(alice_name, ttl_s=10)
        assert (bad.value.status, bad.value.code) == (400, "invalid_request")

    with Stepwise(keyed.url, token="not-a-token") as stranger:
        with pytest.raises(StepwiseError) as e:
            list(stranger.list_sessions())
        assert (e.value.status, e.value.code) == (401, "unauthorized")


async def test_an_end_users_token_sees_only_its_own_sessions_async(keyed: Keyed) -> None:
    alice_name, bob_name = unique("alice"), unique("bob")
    async with AsyncStepwise(keyed.url, api_key=keyed.admin_key) as admin:
        alice_token = (await admin.tokens.create(alice_name))["token"]
        bob_token = (await admin.tokens.create(bob_name, ttl_s=60))["token"]
        async with AsyncStepwise(keyed.url, token=alice_token) as alice, AsyncStepwise(keyed.url, token=bob_token) as bob:
            mine = await alice.create_session(title="alice's, async")
            assert [s["id"] async for s in alice.list_sessions()] == [mine["id"]]
            assert [s["id"] async for s in bob.list_sessions()] == []
            assert (await alice.get_session(mine["id"]))["id"] == mine["id"]
            with pytest.raises(StepwiseError) as e:
                await bob.get_session(mine["id"])
            assert (e.value.status, e.value.code) == (404, "not_found")
            assert [s["id"] async for s in admin.list_sessions(user_id=alice_name)] == [mine["id"]]
            with pytest.raises(ForbiddenError):
                await alice.tokens.create(alice_name)
            with pytest.raises(ForbiddenError):
                [k async for k in alice.keys.list()]


def test_event_streams_take_the_token_in_the_header_or_the_query(keyed: Keyed) -> None:
    with keyed.admin() as admin:
        token = admin.tokens.create(unique("viewer"))["token"]
    with Stepwise(keyed.url, token=token) as viewer:
        session = viewer.create_session(title="streamed")
        viewer.post_message(session["id"], "2+3")
        # The client's own stream (the header).
        stream = viewer.events(session["id"])
        first = next(stream)
        stream.close()  # type: ignore[attr-defined]
        assert (first.id, first.type) == (1, "message.created")
    # What an EventSource in a browser sends: the token in the query.
    path = f"/v1/sessions/{session['id']}/events"
    with httpx.Client(base_url=keyed.url, timeout=10) as raw:
        with raw.stream("GET", path, params={"access_token": token}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
        assert raw.get(path, params={"access_token": "not-a-token"}).status_code == 401


def test_keys_create_list_delete(keyed: Keyed) -> None:
    user = unique("carol")
    with keyed.admin() as admin:
        made = admin.keys.create(user, name="carol's laptop")
        assert made["user_id"] == user and made["role"] == "user" and made["name"] == "carol's laptop"
        assert isinstance(made["key"], str) and made["key"] and made["id"] and made["created_at"]
        listed = {k["id"]: k for k in admin.keys.list()}
        assert made["id"] in listed
        assert listed[made["id"]]["role"] == "user" and listed[made["id"]]["user_id"] == user
        assert all("key" not in k for k in listed.values())  # the secret is shown once only

        with Stepwise(keyed.url, api_key=made["key"]) as carol:
            own = carol.create_session(title="carol's")
            assert [s["id"] for s in carol.list_sessions()] == [own["id"]]
            with pytest.raises(ForbiddenError):
                list(carol.keys.list())

            assert admin.keys.delete(made["id"]) is None
            assert made["id"] not in {k["id"] for k in admin.keys.list()}

            def refused() -> bool:
                try:
                    carol.get_session(own["id"])
                except StepwiseError as e:
                    assert (e.status, e.code) == (401, "unauthorized")
                    return True
                return False

            wait_until(refused, "the deleted key to be refused", REVOKE_PATIENCE_S)

        with pytest.raises(StepwiseError) as missing:
            admin.keys.delete(str(uuid.uuid4()))
        assert (missing.value.status, missing.value.code) == (404, "not_found")

        # An admin key made over the API is an admin: it mints tokens.
        ops = admin.keys.create(unique("ops"), role="admin")
        with Stepwise(keyed.url, api_key=ops["key"]) as second_admin:
            assert second_admin.tokens.create(user)["user_id"] == user
        admin.keys.delete(ops["id"])


async def test_keys_create_list_delete_async(keyed: Keyed) -> None:
    user = unique("dave")
    async with AsyncStepwise(keyed.url, api_key=keyed.admin_key) as admin:
        made = await admin.keys.create(user, role="worker")
        assert made["role"] == "worker"
        assert made["id"] in [k["id"] async for k in admin.keys.list()]
        assert await admin.keys.delete(made["id"]) is None
        assert made["id"] not in [k["id"] async for k in admin.keys.list()]


def test_a_token_works_in_an_adapter(keyed: Keyed) -> None:
    """The adapters take a client, or an `api_key`: a token in either is the user's."""
    pytest.importorskip("pydantic")
    from pydantic import BaseModel

    from stepwise.state import StepwiseState

    class Notes(BaseModel):
        text: str = ""

    with keyed.admin() as admin:
        erin = unique("erin")
        token = admin.tokens.create(erin)["token"]
        with StepwiseState(Notes, base_url=keyed.url, api_key=token) as store:
            store.save("notes-1", Notes(text="hello"))
            assert store.flush(timeout=30)
        with Stepwise(keyed.url, token=token) as erins, StepwiseState(Notes, erins) as again:
            assert again.load("notes-1") == Notes(text="hello")
        assert [s["id"] for s in admin.list_sessions(user_id=erin)] != []
