//! End users (`docs/security.md`), against a real node over HTTP: roles on every endpoint
//! family, a `user` held to its own sessions (another user's is 404 on every family, and the
//! owner gets 2xx on the same call), the app's own JWTs (HS256 with a shared secret, EdDSA
//! and ES256 from a JWKS file) and each way a token is refused, tokens minted by the
//! deployment, keys over HTTP, CORS and `?access_token=`.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{Options, TestServer, wait_for};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};
use stepwise_server::{CorsOrigins, JwtSettings, ServerConfig};
use stepwise_store::AccessRole;
use stepwise_store::prelude::*;

const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn jwt_settings() -> JwtSettings {
    JwtSettings {
        secret: Some(SECRET.into()),
        tenant_claim: "tenant".into(),
        ..JwtSettings::default()
    }
}

/// A server verifying `jwt`, with an admin key of tenant `acme` (answered).
async fn start(jwt: JwtSettings, cors: &[&str]) -> (TestServer, String) {
    let server = TestServer::start_with(Options {
        server: ServerConfig {
            jwt,
            cors_origins: CorsOrigins::new(&cors.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("origins"),
            ..ServerConfig::default()
        },
        ..Options::default()
    })
    .await;
    let admin = key(&server, "acme", "boss", AccessRole::Admin).await;
    (server, admin)
}

async fn key(server: &TestServer, tenant: &str, user: &str, role: AccessRole) -> String {
    server.api_key(tenant, user, role).await
}

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign")
}

fn claims(user: &str) -> Value {
    json!({"sub": user, "tenant": "acme", "exp": now() + 600, "iat": now()})
}

/// A call as `token`: (status, body).
async fn call(
    server: &TestServer,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = server.url(path);
    let request = match method {
        "GET" => server.client.get(url),
        "POST" => server.client.post(url),
        "PUT" => server.client.put(url),
        "PATCH" => server.client.patch(url),
        "DELETE" => server.client.delete(url),
        other => panic!("method {other}"),
    };
    let request = request.bearer_auth(token);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    // Streams: the status is what is checked; read no further than the headers.
    if response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return (status, Value::Null);
    }
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn mint(server: &TestServer, admin: &str, user: &str) -> String {
    let (status, body) = call(
        server,
        admin,
        "POST",
        "/v1/tokens",
        Some(json!({"user_id": user, "ttl_s": 600})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["user_id"], user);
    body["token"].as_str().expect("token").to_string()
}

fn checkpoint_body() -> Value {
    json!({
        "checkpoint_ns": "",
        "parent_checkpoint_id": null,
        "checkpoint": {"type": "json", "data": "eyJ2IjoxfQ=="},
        "metadata": {"source": "input", "step": -1},
        "channel_versions": {},
        "blobs": [],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_session_is_not_found_on_every_family_and_the_owners_is_there() {
    let (server, admin) = start(jwt_settings(), &[]).await;
    let alice = mint(&server, &admin, "alice").await;
    let bob = hs256(claims("bob"));

    // Alice's session, with a finished run (steps, snapshots), items and a LangGraph thread.
    let (status, posted) = call(
        &server,
        &alice,
        "POST",
        "/v1/messages",
        Some(json!({"content": "2+3", "session": {"name": "alice-chat"}})),
    )
    .await;
    assert_eq!(status, 202, "{posted}");
    let session = posted["session_id"].as_str().expect("session").to_string();
    let execution = posted["execution"]["id"]
        .as_str()
        .expect("execution")
        .to_string();
    wait_for(|| async {
        let (_, run) = call(
            &server,
            &alice,
            "GET",
            &format!("/v1/executions/{execution}"),
            None,
        )
        .await;
        (run["status"] == "completed").then_some(())
    })
    .await;
    let (status, snapshots) = call(
        &server,
        &alice,
        "GET",
        &format!("/v1/executions/{execution}/snapshots"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let snapshot = snapshots["items"][0]["id"]
        .as_str()
        .expect("snapshot")
        .to_string();
    let (status, _) = call(
        &server,
        &alice,
        "PUT",
        "/v1/threads/alice-thread/checkpoints/1",
        Some(checkpoint_body()),
    )
    .await;
    assert_eq!(status, 201);
    // AG-UI's connect to a thread that is not the caller's answers as for an unknown one:
    // a run with no messages.
    let connect = |token: &str| {
        server
            .client
            .post(server.url("/v1/ag-ui/connect"))
            .bearer_auth(token)
            .json(&json!({"threadId": session, "runId": "r1", "messages": [], "tools": [], "context": [], "state": null, "forwardedProps": null}))
            .send()
    };
    let bobs = connect(&bob)
        .await
        .expect("connect")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        bobs.contains(r#""messages":[]"#) && !bobs.contains("2+3"),
        "{bobs}"
    );
    let hers = connect(&alice)
        .await
        .expect("connect")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        hers.contains("2+3"),
        "the owner's connect replays her thread: {hers}"
    );
    let (status, opened) = call(
        &server,
        &alice,
        "POST",
        &format!("/v1/sessions/{session}/executions"),
        Some(json!({"agent_type": "external"})),
    )
    .await;
    assert_eq!(status, 201, "{opened}");
    let external = opened["id"].as_str().expect("external").to_string();

    let s = &session;
    let e = &execution;
    let x = &external;
    let calls: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/sessions/{s}"), None),
        (
            "PATCH",
            format!("/v1/sessions/{s}"),
            Some(json!({"title": "mine"})),
        ),
        ("GET", format!("/v1/sessions/{s}/messages"), None),
        (
            "POST",
            format!("/v1/sessions/{s}/messages"),
            Some(json!({"content": "1+1"})),
        ),
        ("GET", format!("/v1/sessions/{s}/memory"), None),
        ("GET", format!("/v1/sessions/{s}/executions"), None),
        ("GET", format!("/v1/sessions/{s}/export"), None),
        ("POST", format!("/v1/sessions/{s}/fork"), Some(json!({}))),
        ("GET", format!("/v1/sessions/{s}/items"), None),
        (
            "POST",
            format!("/v1/sessions/{s}/items"),
            Some(json!({"items": [{"role": "user", "content": "hi"}]})),
        ),
        (
            "POST",
            format!("/v1/sessions/{s}/items/pop"),
            Some(json!({})),
        ),
        ("GET", format!("/v1/executions/{e}"), None),
        ("GET", format!("/v1/executions/{e}/steps"), None),
        ("GET", format!("/v1/executions/{e}/snapshots"), None),
        ("GET", format!("/v1/snapshots/{snapshot}"), None),
        (
            "POST",
            format!("/v1/executions/{x}/steps"),
            Some(json!({"model_output": "thinking"})),
        ),
        (
            "POST",
            format!("/v1/executions/{x}/messages"),
            Some(json!({"role": "info", "content": "working"})),
        ),
        (
            "POST",
            format!("/v1/executions/{x}/complete"),
            Some(json!({"final_answer": "done"})),
        ),
        ("GET", "/v1/threads/alice-thread".to_string(), None),
        (
            "GET",
            "/v1/threads/alice-thread/checkpoints".to_string(),
            None,
        ),
        (
            "GET",
            "/v1/threads/alice-thread/checkpoints/latest".to_string(),
            None,
        ),
        (
            "GET",
            "/v1/threads/alice-thread/checkpoints/1".to_string(),
            None,
        ),
        ("DELETE", format!("/v1/sessions/{s}/items"), None),
        ("DELETE", "/v1/threads/alice-thread".to_string(), None),
        ("DELETE", format!("/v1/sessions/{s}"), None),
    ];
    for (method, path, body) in calls {
        let (status, answer) = call(&server, &bob, method, &path, body.clone()).await;
        assert_eq!(status, 404, "bob: {method} {path} -> {answer}");
        assert_eq!(answer["error"]["code"], "not_found", "bob: {method} {path}");
        let (status, answer) = call(&server, &alice, method, &path, body).await;
        assert!(
            (200..300).contains(&status),
            "alice (the owner): {method} {path} -> {status} {answer}"
        );
    }

    // A chat id or thread id naming her session never reaches it.
    let turn = json!({"id": "alice-chat", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    let (status, answer) = call(&server, &bob, "POST", "/v1/ai-sdk/chat", Some(turn)).await;
    assert_eq!(
        status, 404,
        "bob's chat turn into alice's session: {answer}"
    );
    let (status, _) = call(
        &server,
        &bob,
        "POST",
        &format!("/v1/ai-sdk/chat/{s}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    // The AI SDK's resume answers 204 for a chat with no stream: bob gets that for hers, as
    // for a chat that does not exist.
    let unknown = call(
        &server,
        &bob,
        "GET",
        "/v1/ai-sdk/chat/no-such-chat/stream",
        None,
    )
    .await
    .0;
    assert_eq!(
        call(
            &server,
            &bob,
            "GET",
            &format!("/v1/ai-sdk/chat/{s}/stream"),
            None
        )
        .await
        .0,
        unknown
    );

    // Lists show each user's own; an admin sees both and filters by user.
    let (status, _) = call(
        &server,
        &bob,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "bob's"})),
    )
    .await;
    assert_eq!(status, 201);
    let ids = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| i["user_id"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (_, list) = call(&server, &bob, "GET", "/v1/sessions", None).await;
    assert_eq!(ids(&list), vec!["bob"]);
    let (_, list) = call(&server, &bob, "GET", "/v1/sessions?user_id=alice", None).await;
    assert!(
        ids(&list).is_empty(),
        "a user cannot list another's: {list}"
    );
    let (_, list) = call(
        &server,
        &alice,
        "GET",
        "/v1/sessions?status=active,deleted",
        None,
    )
    .await;
    assert_eq!(
        ids(&list),
        vec!["alice", "alice"],
        "hers and the fork she made of it"
    );
    let (_, list) = call(
        &server,
        &admin,
        "GET",
        "/v1/sessions?status=active,deleted",
        None,
    )
    .await;
    assert_eq!(ids(&list).len(), 3, "the admin sees the tenant: {list}");
    let (_, list) = call(&server, &admin, "GET", "/v1/sessions?user_id=bob", None).await;
    assert_eq!(ids(&list), vec!["bob"]);
    let (status, _) = call(
        &server,
        &bob,
        "PUT",
        "/v1/threads/bob-thread/checkpoints/1",
        Some(checkpoint_body()),
    )
    .await;
    assert_eq!(status, 201);
    let (_, all) = call(&server, &alice, "GET", "/v1/checkpoints", None).await;
    assert!(
        all["items"]
            .as_array()
            .is_some_and(|items| items.iter().all(|i| i["thread_id"] != "bob-thread")),
        "alice's checkpoint list holds none of bob's: {all}"
    );
    let (_, all) = call(&server, &bob, "GET", "/v1/checkpoints", None).await;
    assert_eq!(
        all["items"].as_array().map(Vec::len),
        Some(1),
        "bob's own: {all}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_reaches_its_families_and_gets_forbidden_elsewhere() {
    let (server, admin) = start(jwt_settings(), &[]).await;
    let user = key(&server, "acme", "carol", AccessRole::User).await;
    let worker = key(&server, "acme", "w1", AccessRole::Worker).await;
    let claim =
        json!({"worker_id": "w1", "agents": [{"type": "greeter"}], "slots": 1, "wait_s": 0});

    // Worker: agents and claims; nothing of the sessions, keys or tokens.
    assert_eq!(
        call(&server, &worker, "GET", "/v1/agents", None).await.0,
        200
    );
    assert_eq!(
        call(&server, &worker, "GET", "/v1/limits", None).await.0,
        200
    );
    let (status, claimed) = call(
        &server,
        &worker,
        "POST",
        "/v1/workers/claim",
        Some(claim.clone()),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    // It says it stopped (offline at once); its next claim brings it back.
    assert_eq!(
        call(&server, &worker, "DELETE", "/v1/workers/w1", None)
            .await
            .0,
        204
    );
    for (method, path, body) in [
        ("GET", "/v1/sessions", None),
        ("POST", "/v1/sessions", Some(json!({}))),
        ("POST", "/v1/messages", Some(json!({"content": "hi"}))),
        ("GET", "/v1/checkpoints", None),
        ("POST", "/v1/tokens", Some(json!({"user_id": "x"}))),
        ("GET", "/v1/keys", None),
        (
            "POST",
            "/v1/ai-sdk/chat",
            Some(json!({"id": "c", "messages": []})),
        ),
    ] {
        let (status, answer) = call(&server, &worker, method, path, body).await;
        assert_eq!(status, 403, "worker: {method} {path} -> {answer}");
        assert_eq!(answer["error"]["code"], "forbidden");
    }

    // A queued run for the worker: it writes with its lease, and only with it.
    let (_, posted) = call(
        &server,
        &admin,
        "POST",
        "/v1/messages",
        Some(json!({"content": "hi", "agent": {"type": "greeter", "wait": true}})),
    )
    .await;
    let execution = posted["execution"]["id"]
        .as_str()
        .expect("execution")
        .to_string();
    let (_, claimed) = call(&server, &worker, "POST", "/v1/workers/claim", Some(claim)).await;
    let lease = claimed["items"][0]["lease"]
        .as_str()
        .expect("lease")
        .to_string();
    let step = server
        .client
        .post(server.url(&format!("/v1/executions/{execution}/steps")))
        .bearer_auth(&worker)
        .json(&json!({"model_output": "hello"}));
    assert_eq!(
        server.send(step.header("Stepwise-Lease", &lease)).await.0,
        201
    );
    let no_lease = server
        .client
        .post(server.url(&format!("/v1/executions/{execution}/steps")))
        .bearer_auth(&worker)
        .json(&json!({"model_output": "again"}));
    let (status, answer) = server.send(no_lease).await;
    assert_eq!(status, 403, "a worker without its lease: {answer}");
    let read = server
        .client
        .get(server.url(&format!("/v1/executions/{execution}/steps")))
        .bearer_auth(&worker)
        .header("Stepwise-Lease", &lease);
    assert_eq!(
        server.send(read).await.0,
        200,
        "the worker reads what it holds"
    );
    let session = posted["session_id"].as_str().expect("session");
    assert_eq!(
        call(
            &server,
            &worker,
            "GET",
            &format!("/v1/sessions/{session}"),
            None
        )
        .await
        .0,
        403
    );

    // User: its own sessions; not the workers' endpoints, keys, tokens or tenant-wide deletes.
    assert_eq!(call(&server, &user, "GET", "/v1/agents", None).await.0, 200);
    assert_eq!(
        call(&server, &user, "POST", "/v1/sessions", Some(json!({})))
            .await
            .0,
        201
    );
    for (method, path, body) in [
        (
            "POST",
            "/v1/workers/claim",
            Some(json!({"worker_id": "u", "agents": [{"type": "greeter"}], "wait_s": 0})),
        ),
        ("DELETE", "/v1/workers/u", None),
        ("POST", "/v1/tokens", Some(json!({"user_id": "carol"}))),
        (
            "POST",
            "/v1/keys",
            Some(json!({"user_id": "carol", "role": "admin"})),
        ),
        ("GET", "/v1/keys", None),
        (
            "POST",
            "/v1/checkpoints/delete-for-runs",
            Some(json!({"run_ids": ["r"]})),
        ),
    ] {
        let (status, answer) = call(&server, &user, method, path, body).await;
        assert_eq!(status, 403, "user: {method} {path} -> {answer}");
        assert_eq!(answer["error"]["code"], "forbidden");
    }
    let heartbeat = server
        .client
        .post(server.url(&format!("/v1/executions/{execution}/heartbeat")))
        .bearer_auth(&user)
        .header("Stepwise-Lease", &lease)
        .json(&json!({}));
    assert_eq!(
        server.send(heartbeat).await.0,
        403,
        "a user never heartbeats a worker's execution"
    );
    // A user's recorder renews the lease of the external execution it opened; another
    // user of the tenant does not see it.
    let (_, own) = call(&server, &user, "POST", "/v1/sessions", Some(json!({}))).await;
    let (status, opened) = call(
        &server,
        &user,
        "POST",
        &format!(
            "/v1/sessions/{}/executions",
            own["id"].as_str().expect("id")
        ),
        Some(json!({"agent_type": "external"})),
    )
    .await;
    assert_eq!(status, 201, "{opened}");
    let recorder_beat = (
        format!(
            "/v1/executions/{}/heartbeat",
            opened["id"].as_str().expect("id")
        ),
        json!({"lease": opened["lease"]}),
    );
    let (status, beat) = call(
        &server,
        &user,
        "POST",
        &recorder_beat.0,
        Some(recorder_beat.1.clone()),
    )
    .await;
    assert_eq!(status, 200, "the recorder's own heartbeat: {beat}");
    assert!(beat["lease_expires_at"].is_string(), "{beat}");
    let dave = key(&server, "acme", "dave", AccessRole::User).await;
    assert_eq!(
        call(
            &server,
            &dave,
            "POST",
            &recorder_beat.0,
            Some(recorder_beat.1)
        )
        .await
        .0,
        404,
        "another user's recorder"
    );
    // The admin's other user's session: not the user's.
    assert_eq!(
        call(
            &server,
            &user,
            "GET",
            &format!("/v1/sessions/{session}"),
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        call(
            &server,
            &admin,
            "GET",
            &format!("/v1/sessions/{session}"),
            None
        )
        .await
        .0,
        200
    );
    // Admin: keys and tokens.
    assert_eq!(call(&server, &admin, "GET", "/v1/keys", None).await.0, 200);
    assert_eq!(
        call(
            &server,
            &admin,
            "POST",
            "/v1/tokens",
            Some(json!({"user_id": "carol"}))
        )
        .await
        .0,
        201
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_over_http_are_scoped_to_the_tenant_and_a_deleted_one_is_refused() {
    let (server, admin) = start(JwtSettings::default(), &[]).await;
    let other_admin = key(&server, "globex", "g", AccessRole::Admin).await;
    let (status, made) = call(
        &server,
        &admin,
        "POST",
        "/v1/keys",
        Some(json!({"user_id": "dave", "role": "user", "name": "dave's laptop"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["role"], "user");
    assert_eq!(made["user_id"], "dave");
    let dave = made["key"].as_str().expect("secret").to_string();
    let id = made["id"].as_str().expect("id").to_string();
    let (_, list) = call(&server, &admin, "GET", "/v1/keys", None).await;
    let listed = list["items"].as_array().expect("items");
    assert!(
        listed
            .iter()
            .any(|k| k["id"] == id.as_str() && k["role"] == "user")
    );
    assert!(
        listed.iter().all(|k| k.get("key").is_none()),
        "a list shows no secret: {list}"
    );
    let (_, other) = call(&server, &other_admin, "GET", "/v1/keys", None).await;
    assert!(
        other["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|k| k["id"] != id.as_str()),
        "another tenant's admin does not see it"
    );
    for (body, field) in [
        (json!({"user_id": "", "role": "user"}), "user_id"),
        (json!({"user_id": "d", "role": "root"}), "role"),
    ] {
        let (status, answer) = call(&server, &admin, "POST", "/v1/keys", Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["field"], field);
    }
    assert_eq!(
        call(&server, &dave, "POST", "/v1/sessions", Some(json!({})))
            .await
            .0,
        201
    );
    let (status, _) = call(
        &server,
        &other_admin,
        "DELETE",
        &format!("/v1/keys/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 404, "another tenant cannot delete it");
    let (status, _) = call(&server, &admin, "DELETE", &format!("/v1/keys/{id}"), None).await;
    assert_eq!(status, 204);
    wait_for(|| async {
        (call(&server, &dave, "GET", "/v1/sessions", None).await.0 == 401).then_some(())
    })
    .await;
    let (status, _) = call(&server, &admin, "DELETE", &format!("/v1/keys/{id}"), None).await;
    assert_eq!(status, 404, "deleted once");
    server.stop().await;
}

/// An Ed25519 pair and a P-256 pair, with a JWKS file holding their public halves.
struct Keys {
    ed: Vec<u8>,
    ec: Vec<u8>,
    jwks: tempfile::NamedTempFile,
}

fn keys() -> Keys {
    let rng = ring::rand::SystemRandom::new();
    let ed = Ed25519KeyPair::generate_pkcs8(&rng)
        .expect("ed25519")
        .as_ref()
        .to_vec();
    let ed_pair = Ed25519KeyPair::from_pkcs8(&ed).expect("ed25519");
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let ec = EcdsaKeyPair::generate_pkcs8(alg, &rng)
        .expect("p256")
        .as_ref()
        .to_vec();
    let ec_pair = EcdsaKeyPair::from_pkcs8(alg, &ec, &rng).expect("p256");
    let point = ec_pair.public_key().as_ref();
    let jwks = json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "alg": "EdDSA", "use": "sig",
         "x": URL_SAFE_NO_PAD.encode(ed_pair.public_key().as_ref())},
        {"kty": "EC", "crv": "P-256", "kid": "ec-1", "alg": "ES256", "use": "sig",
         "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65])},
    ]});
    let jwks_file = tempfile::NamedTempFile::new().expect("jwks file");
    std::fs::write(jwks_file.path(), jwks.to_string()).expect("write jwks");
    Keys {
        ed,
        ec,
        jwks: jwks_file,
    }
}

fn signed(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).expect("sign")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apps_tokens_are_verified_and_every_bad_one_is_refused() {
    let k = keys();
    let jwt = JwtSettings {
        secret: Some(SECRET.into()),
        jwks: Some(k.jwks.path().display().to_string()),
        audience: Some("stepwise-api".into()),
        issuer: Some("https://id.example.com/".into()),
        tenant_claim: "org".into(),
        default_tenant: None,
    };
    let (server, _admin) = start(jwt, &[]).await;
    let ed = EncodingKey::from_ed_der(&k.ed);
    let ec = EncodingKey::from_ec_der(&k.ec);
    let good = || json!({"sub": "erin", "org": "acme", "aud": "stepwise-api", "iss": "https://id.example.com/", "exp": now() + 300, "iat": now()});
    let with = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut c = good();
        f(c.as_object_mut().expect("object"));
        c
    };

    // Good tokens of each kind reach the API as their user.
    let eddsa = signed(Algorithm::EdDSA, Some("ed-1"), &ed, &good());
    let es256 = signed(Algorithm::ES256, Some("ec-1"), &ec, &good());
    let hs = hs256(good());
    for token in [&eddsa, &es256, &hs] {
        let (status, made) = call(&server, token, "POST", "/v1/sessions", Some(json!({}))).await;
        assert_eq!(status, 201, "{made}");
        assert_eq!(made["user_id"], "erin");
        assert_eq!(made["tenant_id"], "acme");
    }
    let admin_token = hs256(with(&|c| {
        c.insert("stepwise_role".into(), json!("admin"));
    }));
    assert_eq!(
        call(&server, &admin_token, "GET", "/v1/keys", None).await.0,
        200,
        "stepwise_role admin"
    );

    let none_alg = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(good().to_string())
    );
    let ed_public = {
        let pair = Ed25519KeyPair::from_pkcs8(&k.ed).expect("pair");
        pair.public_key().as_ref().to_vec()
    };
    let mut forged = hs.clone();
    forged.pop();
    forged.push(if hs.ends_with('A') { 'B' } else { 'A' });
    let bad: Vec<(&str, String)> = vec![
        ("bad signature", forged),
        ("alg none", none_alg),
        (
            "HS256 signed with the JWKS public key",
            jsonwebtoken::encode(
                &{
                    let mut h = Header::new(Algorithm::HS256);
                    h.kid = Some("ed-1".into());
                    h
                },
                &good(),
                &EncodingKey::from_secret(&ed_public),
            )
            .expect("sign"),
        ),
        (
            "EdDSA under the ES256 key's kid",
            signed(Algorithm::EdDSA, Some("ec-1"), &ed, &good()),
        ),
        (
            "unknown kid",
            signed(Algorithm::EdDSA, Some("ed-9"), &ed, &good()),
        ),
        (
            "expired",
            hs256(with(&|c| {
                c.insert("exp".into(), json!(now() - 120));
            })),
        ),
        (
            "not yet valid",
            hs256(with(&|c| {
                c.insert("nbf".into(), json!(now() + 600));
            })),
        ),
        (
            "issued in the future",
            hs256(with(&|c| {
                c.insert("iat".into(), json!(now() + 600));
            })),
        ),
        (
            "wrong audience",
            hs256(with(&|c| {
                c.insert("aud".into(), json!("another-api"));
            })),
        ),
        (
            "wrong issuer",
            hs256(with(&|c| {
                c.insert("iss".into(), json!("https://evil.example.com/"));
            })),
        ),
        (
            "no audience",
            hs256(with(&|c| {
                c.remove("aud");
            })),
        ),
        (
            "an audience that is not a string",
            hs256(with(&|c| {
                c.insert("aud".into(), json!({"x": "stepwise-api"}));
            })),
        ),
        (
            "no issuer",
            hs256(with(&|c| {
                c.remove("iss");
            })),
        ),
        (
            "an issuer in a list",
            hs256(with(&|c| {
                c.insert("iss".into(), json!(["https://id.example.com/"]));
            })),
        ),
        (
            "nbf as a string",
            hs256(with(&|c| {
                c.insert("nbf".into(), json!((now() + 600).to_string()));
            })),
        ),
        (
            "nbf past any time",
            hs256(with(&|c| {
                c.insert("nbf".into(), json!(18_446_744_073_709_551_615_u64));
            })),
        ),
        (
            "iat as an object",
            hs256(with(&|c| {
                c.insert("iat".into(), json!({"a": 1}));
            })),
        ),
        (
            "no sub",
            hs256(with(&|c| {
                c.remove("sub");
            })),
        ),
        (
            "no exp",
            hs256(with(&|c| {
                c.remove("exp");
            })),
        ),
        (
            "no tenant and no default tenant",
            hs256(with(&|c| {
                c.remove("org");
            })),
        ),
        (
            "an unknown role",
            hs256(with(&|c| {
                c.insert("stepwise_role".into(), json!("root"));
            })),
        ),
        (
            "signed with another secret",
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &good(),
                &EncodingKey::from_secret(b"another-secret-of-at-least-32-bytes-long"),
            )
            .expect("sign"),
        ),
    ];
    for (why, token) in bad {
        let (status, answer) = call(&server, &token, "GET", "/v1/sessions", None).await;
        assert_eq!(status, 401, "{why}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized", "{why}");
    }
    // Within the leeway, a just-expired token still works; so do an `aud` list holding
    // this server's audience and an `nbf` just past.
    let lenient = hs256(with(&|c| {
        c.insert("exp".into(), json!(now() - 5));
    }));
    let listed = hs256(with(&|c| {
        c.insert("aud".into(), json!(["another-api", "stepwise-api"]));
        c.insert("nbf".into(), json!(now() - 1));
    }));
    for token in [&lenient, &listed] {
        assert_eq!(
            call(&server, token, "GET", "/v1/sessions", None).await.0,
            200
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minted_tokens_survive_a_signing_key_rotation_and_expire() {
    let (server, admin) = start(JwtSettings::default(), &[]).await;
    let before = mint(&server, &admin, "frank").await;
    assert_eq!(
        call(&server, &before, "POST", "/v1/sessions", Some(json!({})))
            .await
            .0,
        201
    );
    // A new signing key (as `stepwise keys rotate-signing-key` makes): old tokens stay valid.
    server
        .store
        .add_signing_key(&"r".repeat(64))
        .await
        .expect("rotate");
    assert_eq!(
        call(&server, &before, "GET", "/v1/sessions", None).await.0,
        200
    );
    let (status, answer) = call(
        &server,
        &admin,
        "POST",
        "/v1/tokens",
        Some(json!({"user_id": "frank", "ttl_s": 59})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "ttl_s");
    let (status, _) = call(
        &server,
        &admin,
        "POST",
        "/v1/tokens",
        Some(json!({"user_id": "frank", "ttl_s": 86_401})),
    )
    .await;
    assert_eq!(status, 400);
    let (status, minted) = call(
        &server,
        &admin,
        "POST",
        "/v1/tokens",
        Some(json!({"user_id": "frank"})),
    )
    .await;
    assert_eq!(status, 201);
    let expires = stepwise_core::Timestamp::parse(minted["expires_at"].as_str().unwrap_or(""))
        .expect("expires_at");
    let ttl = (expires.as_micros() / 1_000_000) - now() as i64;
    assert!(
        (3_500..=3_601).contains(&ttl),
        "default ttl is an hour: {ttl}"
    );
    // A minted token cannot name itself an admin: its claims are signed.
    let parts: Vec<&str> = before.split('.').collect();
    let mut payload: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("b64")).expect("json");
    payload["stepwise_role"] = json!("admin");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(payload.to_string()),
        parts[2]
    );
    assert_eq!(
        call(&server, &tampered, "GET", "/v1/keys", None).await.0,
        401
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_listed_origins_call_the_api_and_streams_take_an_access_token() {
    let (server, admin) = start(jwt_settings(), &["http://127.0.0.1:5173"]).await;
    let token = mint(&server, &admin, "gina").await;
    let preflight = |origin: &str| {
        server
            .client
            .request(reqwest::Method::OPTIONS, server.url("/v1/sessions"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization, content-type",
            )
    };
    let allowed = preflight("http://127.0.0.1:5173")
        .send()
        .await
        .expect("preflight");
    assert_eq!(allowed.status().as_u16(), 204);
    let headers = allowed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://127.0.0.1:5173"
    );
    let allow_headers = headers["access-control-allow-headers"]
        .to_str()
        .unwrap_or("");
    assert!(allow_headers.contains("authorization") && allow_headers.contains("last-event-id"));
    let refused = preflight("http://127.0.0.1:6666")
        .send()
        .await
        .expect("preflight");
    assert_eq!(refused.status().as_u16(), 403);
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    let response = server
        .client
        .post(server.url("/v1/sessions"))
        .header("Origin", "http://127.0.0.1:5173")
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 201);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://127.0.0.1:5173"
    );
    let session: Value = response.json().await.expect("session");
    let id = session["id"].as_str().expect("id");
    let other = server
        .client
        .get(server.url("/v1/agents"))
        .header("Origin", "http://127.0.0.1:6666")
        .bearer_auth(&token)
        .send()
        .await
        .expect("get");
    assert!(other.headers().get("access-control-allow-origin").is_none());

    // An EventSource cannot set headers: the stream takes ?access_token=.
    let stream = server
        .client
        .get(server.url(&format!("/v1/sessions/{id}/events?access_token={token}")))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status().as_u16(), 200);
    drop(stream);
    let other_user = mint(&server, &admin, "hank").await;
    let stream = server
        .client
        .get(server.url(&format!(
            "/v1/sessions/{id}/events?access_token={other_user}"
        )))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status().as_u16(), 404, "another user's stream");
    // Only streams take it: elsewhere it is not a credential.
    let plain = server
        .client
        .get(server.url(&format!("/v1/sessions/{id}?access_token={token}")))
        .send()
        .await
        .expect("get");
    assert_eq!(plain.status().as_u16(), 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_retention_is_its_admins_and_its_own() {
    let (server, admin) = start(jwt_settings(), &[]).await;
    let user = key(&server, "acme", "carol", AccessRole::User).await;
    let worker = key(&server, "acme", "w1", AccessRole::Worker).await;
    let globex = key(&server, "globex", "g", AccessRole::Admin).await;

    let (status, before) = call(&server, &admin, "GET", "/v1/retention", None).await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(
        before["completed_days"],
        json!(90),
        "the server's policy: {before}"
    );
    assert_eq!(before["server"]["mark_abandoned_days"], json!(30));
    assert_eq!(before["own"]["completed_days"], Value::Null);

    let (status, set) = call(
        &server,
        &admin,
        "PUT",
        "/v1/retention",
        Some(json!({"completed_days": 7, "mark_abandoned_days": 3})),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["completed_days"], json!(7));
    assert_eq!(set["mark_abandoned_days"], json!(3));
    assert_eq!(set["abandoned_days"], json!(30), "left out: the server's");
    let (_, read) = call(&server, &admin, "GET", "/v1/retention", None).await;
    assert_eq!(read, set, "stored");
    // Another tenant keeps the server's policy.
    let (status, theirs) = call(&server, &globex, "GET", "/v1/retention", None).await;
    assert_eq!(status, 200);
    assert_eq!(theirs["completed_days"], json!(90));

    // JSON Schema's integers include 7.0.
    let (status, whole) = call(
        &server,
        &admin,
        "PUT",
        "/v1/retention",
        Some(json!({"completed_days": 7.0, "mark_abandoned_days": 3})),
    )
    .await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole, set);
    for bad in [
        json!({"completed_days": 0}),
        json!({"completed_days": 7.5}),
        json!({"deleted_days": 40000}),
        json!({"days": 3}),
    ] {
        let (status, answer) =
            call(&server, &admin, "PUT", "/v1/retention", Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad} -> {answer}");
    }
    for (who, credential) in [("user", &user), ("worker", &worker)] {
        for (method, body) in [("GET", None), ("PUT", Some(json!({"completed_days": 1})))] {
            let (status, answer) = call(&server, credential, method, "/v1/retention", body).await;
            assert_eq!(status, 403, "{who}: {method} -> {answer}");
        }
    }
    // Every count left out: the server's policy again.
    let (status, cleared) = call(&server, &admin, "PUT", "/v1/retention", Some(json!({}))).await;
    assert_eq!(status, 200);
    assert_eq!(cleared["completed_days"], json!(90));
    assert_eq!(cleared["own"]["completed_days"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_filters_list_a_users_own_matching_sessions() {
    let (server, admin) = start(jwt_settings(), &[]).await;
    let alice = mint(&server, &admin, "alice").await;
    let bob = mint(&server, &admin, "bob").await;
    let mut made = Vec::new();
    for (who, metadata) in [
        (
            &alice,
            json!({"state": "generating", "skill_name": "billing"}),
        ),
        (&alice, json!({"state": "idle", "skill_name": "billing"})),
        (
            &bob,
            json!({"state": "generating", "skill_name": "billing"}),
        ),
    ] {
        let (status, created) = call(
            &server,
            who,
            "POST",
            "/v1/sessions",
            Some(json!({ "metadata": metadata })),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        made.push(created["id"].as_str().expect("id").to_string());
    }
    let listed = |who: &str, query: &str| {
        let (server, who, query) = (&server, who.to_string(), query.to_string());
        async move {
            let (status, page) =
                call(server, &who, "GET", &format!("/v1/sessions?{query}"), None).await;
            assert_eq!(status, 200, "{query}: {page}");
            page["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|s| s["id"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        }
    };
    // Alice sees her own match; Bob his own; the admin both.
    assert_eq!(
        listed(&alice, "metadata.state=generating").await,
        vec![made[0].clone()]
    );
    assert_eq!(
        listed(&bob, "metadata.state=generating").await,
        vec![made[2].clone()]
    );
    let mut both = listed(
        &admin,
        "metadata.state=generating&metadata.skill_name=billing",
    )
    .await;
    both.sort();
    let mut expected = vec![made[0].clone(), made[2].clone()];
    expected.sort();
    assert_eq!(both, expected);
    assert_eq!(listed(&alice, "metadata.skill_name=billing").await.len(), 2);
    assert!(listed(&alice, "metadata.state=done").await.is_empty());
    for bad in [
        "metadata.=x",
        "metadata.a%20b=x",
        &format!("metadata.k={}", "v".repeat(300)),
    ] {
        let (status, answer) =
            call(&server, &alice, "GET", &format!("/v1/sessions?{bad}"), None).await;
        assert_eq!(status, 400, "{bad}: {answer}");
    }
}
