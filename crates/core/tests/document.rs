//! The session document read from untrusted bytes: random valid documents round-trip
//! exactly; hostile ones are refused with a clear error and never a panic; an older
//! format (seed 004's session file) is upgraded.

#![allow(clippy::unwrap_used, clippy::type_complexity)]

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Value, json};
use stepwise_core::document::{
    DocumentError, DocumentLimits, FORMAT_VERSION, parse_document, validate_document,
};
use stepwise_core::{
    Execution, ExecutionStatus, Message, Role, Session, SessionDocument, SessionStatus, Snapshot,
    Step, StepError, StepKind, Timestamp, TokenUsage, ToolCall,
};
use uuid::Uuid;

const FIXTURE_V0: &str = include_str!("fixtures/session-v0-seed004.json");

fn limits() -> DocumentLimits {
    DocumentLimits::default()
}

// --- generators ------------------------------------------------------------------------

fn text() -> impl Strategy<Value = String> {
    // Any characters, control characters and quotes included.
    proptest::string::string_regex("(?s).{0,12}").unwrap_or_else(|e| panic!("{e}"))
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text())
}

fn time() -> impl Strategy<Value = Timestamp> {
    // 1970 to 2100.
    (0i64..4_102_444_800_000_000).prop_map(Timestamp)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        // Eighths are exact in binary, so they print and parse back to the same float.
        (-1000i32..1000).prop_map(|n| json!(f64::from(n) / 8.0)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn name() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(
        proptest::string::string_regex("[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}")
            .unwrap_or_else(|e| panic!("{e}"))
            .prop_filter("a valid name", |n| {
                stepwise_core::name::validate_name(n).is_ok()
            }),
    )
}

fn pick<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(all)
}

fn usage() -> impl Strategy<Value = TokenUsage> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(input, output, total)| TokenUsage {
        input: u64::from(input),
        output: u64::from(output),
        total,
    })
}

/// The shape of a document: how many of each record, and the random parts.
#[derive(Debug, Clone)]
struct Parts {
    base: u128,
    session: (
        Option<String>,
        Option<String>,
        SessionStatus,
        Value,
        Timestamp,
        Timestamp,
        u64,
    ),
    session_refs: (Option<String>, Option<String>, Option<String>),
    messages: Vec<(Role, String, Option<String>, Value, Timestamp, bool)>,
    executions: Vec<ExecParts>,
}

#[derive(Debug, Clone)]
struct ExecParts {
    status: ExecutionStatus,
    agent: String,
    values: (Value, Value, Value, Value),
    error: Option<String>,
    attempts: u32,
    usage: TokenUsage,
    times: (Option<Timestamp>, Option<Timestamp>, Timestamp, Timestamp),
    with_parent: bool,
    with_session: bool,
    steps: Vec<StepParts>,
    snapshots: Vec<(
        Option<String>,
        Option<String>,
        u32,
        bool,
        bool,
        Value,
        Timestamp,
    )>,
}

#[derive(Debug, Clone)]
struct StepParts {
    kind: StepKind,
    model_output: Option<String>,
    tool_calls: Vec<(String, String, Value)>,
    code: Option<String>,
    observations: Option<String>,
    error: Option<(String, String)>,
    output: Value,
    usage: TokenUsage,
    times: (Option<Timestamp>, Option<Timestamp>, Timestamp),
}

fn step_parts() -> impl Strategy<Value = StepParts> {
    (
        pick(StepKind::ALL),
        opt_text(),
        proptest::collection::vec((text(), text(), json_value()), 0..3),
        opt_text(),
        opt_text(),
        proptest::option::of((text(), text())),
        json_value(),
        usage(),
        (
            proptest::option::of(time()),
            proptest::option::of(time()),
            time(),
        ),
    )
        .prop_map(
            |(kind, model_output, tool_calls, code, observations, error, output, usage, times)| {
                StepParts {
                    kind,
                    model_output,
                    tool_calls,
                    code,
                    observations,
                    error,
                    output,
                    usage,
                    times,
                }
            },
        )
}

fn exec_parts() -> impl Strategy<Value = ExecParts> {
    (
        pick(ExecutionStatus::ALL),
        text(),
        (json_value(), json_value(), json_value(), json_value()),
        opt_text(),
        any::<u32>(),
        usage(),
        (
            proptest::option::of(time()),
            proptest::option::of(time()),
            time(),
            time(),
        ),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(step_parts(), 0..4),
        proptest::collection::vec(
            (
                opt_text(),
                opt_text(),
                any::<u32>(),
                any::<bool>(),
                any::<bool>(),
                json_value(),
                time(),
            ),
            0..3,
        ),
    )
        .prop_map(
            |(
                status,
                agent,
                values,
                error,
                attempts,
                usage,
                times,
                with_parent,
                with_session,
                steps,
                snapshots,
            )| ExecParts {
                status,
                agent,
                values,
                error,
                attempts,
                usage,
                times,
                with_parent,
                with_session,
                steps,
                snapshots,
            },
        )
}

fn parts() -> impl Strategy<Value = Parts> {
    (
        any::<u64>(),
        (
            name(),
            opt_text(),
            pick(SessionStatus::ALL),
            json_value(),
            time(),
            time(),
            any::<u64>(),
        ),
        (opt_text(), opt_text(), opt_text()),
        proptest::collection::vec(
            (
                pick(Role::ALL),
                text(),
                opt_text(),
                json_value(),
                time(),
                any::<bool>(),
            ),
            0..5,
        ),
        proptest::collection::vec(exec_parts(), 0..3),
    )
        .prop_map(
            |(base, session, session_refs, messages, executions)| Parts {
                base: u128::from(base) << 64,
                session,
                session_refs,
                messages,
                executions,
            },
        )
}

/// A consistent document from random parts: distinct ids, references inside it.
fn build(parts: Parts) -> SessionDocument {
    let mut next = parts.base;
    let mut id = || {
        next += 1;
        Uuid::from_u128(next)
    };
    let session_id = id();
    let (name, title, status, metadata, created_at, updated_at, message_count) = parts.session;
    let (related_type, related_id, initial_context_url) = parts.session_refs;
    let mut executions: Vec<Execution> = Vec::new();
    let mut steps = Vec::new();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    for e in parts.executions {
        let exec_id = id();
        let parent = if e.with_parent {
            executions.last().map(|p| p.id)
        } else {
            None
        };
        for (n, s) in e.steps.into_iter().enumerate() {
            steps.push(Step {
                id: id(),
                execution_id: exec_id,
                session_id: Some(session_id),
                step_number: n as u32 + 1,
                kind: s.kind,
                model_output: s.model_output,
                tool_calls: s
                    .tool_calls
                    .into_iter()
                    .map(|(id, name, arguments)| ToolCall {
                        id,
                        name,
                        arguments,
                    })
                    .collect(),
                code: s.code,
                observations: s.observations,
                error: s.error.map(|(kind, message)| StepError { kind, message }),
                output: s.output,
                token_usage: s.usage,
                started_at: s.times.0,
                ended_at: s.times.1,
                created_at: s.times.2,
            });
        }
        let mut last_snapshot = None;
        for (agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) in
            e.snapshots
        {
            let snap_id = id();
            snapshots.push(Snapshot {
                id: snap_id,
                execution_id: exec_id,
                parent_snapshot_id: last_snapshot,
                agent_id,
                agent_name,
                step_number,
                is_final,
                debug_mode,
                state,
                created_at,
            });
            last_snapshot = Some(snap_id);
        }
        let (agent_config, input, output, exec_metadata) = e.values;
        executions.push(Execution {
            id: exec_id,
            session_id: e.with_session.then_some(session_id),
            parent_execution_id: parent,
            tenant_id: "tenant".into(),
            user_id: "user".into(),
            agent_type: e.agent,
            agent_config,
            status: e.status,
            input,
            output,
            last_snapshot_id: last_snapshot,
            step_count: e.usage.input,
            token_usage: e.usage,
            metadata: exec_metadata,
            error_message: e.error,
            attempts: e.attempts,
            lease_expires_at: None,
            started_at: e.times.0,
            completed_at: e.times.1,
            created_at: e.times.2,
            updated_at: e.times.3,
        });
    }
    let messages = parts
        .messages
        .into_iter()
        .map(
            |(role, content, context_url, metadata, created_at, linked)| Message {
                id: id(),
                session_id,
                role,
                content,
                execution_id: if linked {
                    executions.first().map(|e| e.id)
                } else {
                    None
                },
                related_type: None,
                related_id: context_url.clone(),
                context_url,
                metadata,
                created_at,
            },
        )
        .collect();
    SessionDocument {
        format_version: FORMAT_VERSION,
        session: Session {
            id: session_id,
            tenant_id: "tenant".into(),
            user_id: "user".into(),
            name,
            title,
            status,
            related_type,
            related_id,
            initial_context_url,
            metadata,
            agent: None,
            last_execution_id: executions.last().map(|e| e.id),
            last_snapshot_id: snapshots.last().map(|s| s.id),
            message_count,
            first_message: None,
            created_at,
            updated_at,
        },
        messages,
        executions,
        steps,
        snapshots,
        thread: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_documents_round_trip_exactly(parts in parts()) {
        let doc = build(parts);
        let compact = serde_json::to_vec(&doc).unwrap_or_default();
        prop_assert_eq!(&parse_document(&compact, &limits()), &Ok(doc.clone()));
        let pretty = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        prop_assert_eq!(&parse_document(&pretty, &limits()), &Ok(doc));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_document(&bytes, &limits());
    }

    #[test]
    fn damaged_documents_never_panic(parts in parts(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = serde_json::to_vec(&build(parts)).unwrap_or_default();
        let at = cut.index(bytes.len().max(1));
        if at < bytes.len() {
            bytes[at] = byte;
        }
        let _ = parse_document(&bytes, &limits());
        bytes.truncate(at);
        let _ = parse_document(&bytes, &limits());
    }
}

// --- hostile documents ---------------------------------------------------------------

fn sample() -> SessionDocument {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut doc = build(
        parts()
            .new_tree(&mut runner)
            .unwrap_or_else(|e| panic!("{e}"))
            .current(),
    );
    doc.session.name = Some("sample".into());
    doc
}

fn to_value(doc: &SessionDocument) -> Value {
    serde_json::to_value(doc).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_value(value: &Value, limits: &DocumentLimits) -> Result<SessionDocument, DocumentError> {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|e| panic!("{e}"));
    parse_document(&bytes, limits)
}

#[test]
fn a_document_over_the_size_limit_is_refused_before_parsing() {
    let limits = DocumentLimits {
        max_bytes: 100,
        ..limits()
    };
    let err = parse_document(&[b' '; 101], &limits).unwrap_err();
    assert!(err.is_too_large(), "{err}");
    assert_eq!(
        err.to_string(),
        "the document is 101 bytes; the limit is 100 bytes"
    );
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    // Far deeper than any recursive parser's stack would survive.
    let depth = 1_000_000;
    let mut bytes = vec![b'['; depth];
    bytes.extend(std::iter::repeat_n(b']', depth));
    assert_eq!(
        parse_document(&bytes, &limits()),
        Err(DocumentError::TooDeep { max: 64 })
    );
    // Deep nesting hidden in a metadata value of an otherwise fine document.
    let mut value = to_value(&sample());
    let mut deep = json!("bottom");
    for _ in 0..70 {
        deep = json!({ "x": [deep] });
    }
    value["session"]["metadata"] = deep;
    assert!(matches!(
        parse_value(&value, &limits()),
        Err(DocumentError::TooDeep { .. })
    ));
    // Unbalanced openers inside strings do not count.
    let mut value = to_value(&sample());
    value["session"]["title"] = json!("[[[[{{{{".repeat(100));
    assert!(parse_value(&value, &limits()).is_ok());
}

#[test]
fn long_arrays_are_refused_at_their_limit() {
    let small = DocumentLimits {
        max_messages: 3,
        max_executions: 2,
        max_steps: 4,
        max_snapshots: 1,
        max_tool_calls_per_step: 2,
        ..limits()
    };
    let base = to_value(&sample());
    for (field, max) in [
        ("messages", 3),
        ("executions", 2),
        ("steps", 4),
        ("snapshots", 1),
    ] {
        let mut value = base.clone();
        value[field] = Value::Array(vec![json!({}); max + 1]);
        assert_eq!(
            parse_value(&value, &small),
            Err(DocumentError::TooMany {
                field: field.to_string(),
                max
            }),
            "{field}"
        );
        // At the limit the array itself is fine (its empty entries are not).
        value[field] = Value::Array(vec![json!({}); max]);
        assert!(
            !matches!(
                parse_value(&value, &small),
                Err(DocumentError::TooMany { .. })
            ),
            "{field} at its limit"
        );
    }
    let mut value = base.clone();
    value["executions"] = json!([to_value(&sample())["executions"][0].clone()]);
    let exec = value["executions"][0]["id"].clone();
    let call = json!({"id": "c", "name": "clock", "arguments": {}});
    value["steps"] = json!([{
        "id": Uuid::from_u128(7), "execution_id": exec, "session_id": null, "step_number": 1,
        "kind": "action", "model_output": null, "tool_calls": [call.clone(), call.clone(), call],
        "code": null, "observations": null, "error": null, "output": null,
        "token_usage": {"input": 0, "output": 0, "total": 0},
        "started_at": null, "ended_at": null, "created_at": "2026-01-01T00:00:00.000000Z"
    }]);
    value["snapshots"] = json!([]);
    if value["executions"].as_array().map(Vec::len) == Some(1) {
        assert_eq!(
            parse_value(&value, &small),
            Err(DocumentError::TooMany {
                field: "steps[].tool_calls".into(),
                max: 2
            })
        );
    }
}

#[test]
fn the_default_limits_are_the_documented_ones() {
    let l = DocumentLimits::default();
    assert_eq!(l.max_bytes, 64 * 1024 * 1024);
    assert_eq!(l.max_depth, 64);
    assert_eq!(
        (
            l.max_messages,
            l.max_steps,
            l.max_snapshots,
            l.max_executions
        ),
        (100_000, 100_000, 10_000, 10_000)
    );
    assert_eq!(l.max_tool_calls_per_step, 256);
}

#[test]
fn wrong_types_and_malformed_json_are_clear_errors() {
    for (bytes, expected) in [
        (&b""[..], "not valid JSON"),
        (b"{\"format_version\": 1,", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a session document"),
        (b"\"text\"", "not a session document"),
        (b"{\"format_version\": \"1\"}", "format_version"),
        (b"{\"format_version\": -1}", "format_version"),
        (b"{\"format_version\": 1.5}", "format_version"),
    ] {
        let err = parse_document(bytes, &limits()).unwrap_err();
        assert!(
            err.to_string().contains(expected),
            "{:?}: {err}",
            String::from_utf8_lossy(bytes)
        );
    }
    let mut value = to_value(&sample());
    value["session"]["message_count"] = json!("many");
    let err = parse_value(&value, &limits()).unwrap_err();
    assert!(matches!(err, DocumentError::Shape(_)), "{err}");
    assert!(err.to_string().contains("expected u64"), "{err}");

    let mut value = to_value(&sample());
    value["messages"] = json!([{"role": "robot"}]);
    let err = parse_value(&value, &limits()).unwrap_err();
    assert!(matches!(err, DocumentError::Shape(_)), "{err}");

    let mut value = to_value(&sample());
    value
        .as_object_mut()
        .map(|o| o.remove("steps"))
        .unwrap_or_default();
    let err = parse_value(&value, &limits()).unwrap_err();
    assert!(err.to_string().contains("missing field `steps`"), "{err}");
}

#[test]
fn names_that_break_the_rules_are_refused() {
    for bad in ["../x", "a/b", "index", "CON", "..", "", &"n".repeat(65)] {
        let mut value = to_value(&sample());
        value["session"]["name"] = json!(bad);
        let err = parse_value(&value, &limits()).unwrap_err();
        assert_eq!(err.field(), Some("session.name"), "{bad:?}: {err}");
    }
}

#[test]
fn json_that_is_not_a_session_document_is_refused() {
    for body in [
        json!({"hello": "world"}),
        json!({}),
        json!({"name": "x", "description": "no thread"}),
        json!({"thread": null}),
    ] {
        let err = parse_value(&body, &limits()).unwrap_err();
        assert_eq!(err.field(), Some("format_version"), "{body}: {err}");
        assert!(err.to_string().contains("not a session document"), "{err}");
    }
    let err = parse_value(&json!({"thread": []}), &limits()).unwrap_err();
    assert_eq!(err.field(), Some("thread"), "{err}");
}

#[test]
fn a_newer_format_version_is_refused() {
    let mut value = to_value(&sample());
    value["format_version"] = json!(FORMAT_VERSION + 1);
    let err = parse_value(&value, &limits()).unwrap_err();
    assert_eq!(
        err,
        DocumentError::NewerVersion {
            found: u64::from(FORMAT_VERSION) + 1,
            supported: FORMAT_VERSION
        }
    );
    assert!(err.to_string().contains("upgrade Stepwise"));
}

#[test]
fn records_must_belong_to_the_document() {
    let doc = sample();
    let foreign = Uuid::from_u128(u128::MAX);
    let mut checks: Vec<(SessionDocument, &str)> = Vec::new();
    if !doc.messages.is_empty() {
        let mut d = doc.clone();
        d.messages[0].session_id = foreign;
        checks.push((d, "messages[0].session_id"));
    }
    if !doc.steps.is_empty() {
        let mut d = doc.clone();
        d.steps[0].execution_id = foreign;
        checks.push((d, "steps[0].execution_id"));
        let mut d = doc.clone();
        d.steps[0].step_number = 0;
        checks.push((d, "steps[0].step_number"));
        let mut d = doc.clone();
        let copy = Step {
            id: Uuid::from_u128(u128::MAX - 1),
            ..d.steps[0].clone()
        };
        d.steps.push(copy);
        checks.push((d, "steps[]"));
    }
    if !doc.snapshots.is_empty() {
        let mut d = doc.clone();
        d.snapshots[0].execution_id = foreign;
        checks.push((d, "snapshots[0].execution_id"));
    }
    if doc.messages.len() >= 2 {
        let mut d = doc.clone();
        d.messages[1].id = d.messages[0].id;
        checks.push((d, "messages[1].id"));
    }
    assert!(!checks.is_empty(), "the sample has records to break");
    for (d, field) in checks {
        let err = validate_document(&d, &limits()).unwrap_err();
        let got = err.field().unwrap_or_default();
        if field == "steps[]" {
            assert!(got.ends_with(".step_number"), "{got}: {err}");
        } else {
            assert_eq!(got, field, "{err}");
        }
    }
}

#[test]
fn a_seed_004_session_file_is_upgraded() {
    let doc = parse_document(FIXTURE_V0.as_bytes(), &limits())
        .unwrap_or_else(|e| panic!("the frozen format-0 file is read: {e}"));
    assert_eq!(doc.format_version, FORMAT_VERSION);
    assert_eq!(doc.session.name.as_deref(), Some("session-1"));
    assert_eq!(
        doc.session.title.as_deref(),
        Some("User-provided description")
    );
    assert_eq!(doc.session.status, SessionStatus::Active);
    assert_eq!(
        doc.session.created_at,
        Timestamp::parse("2025-01-15T10:30:00Z").unwrap_or_default()
    );
    assert_eq!(
        doc.session.updated_at,
        Timestamp::parse("2025-01-15T10:45:00Z").unwrap_or_default()
    );
    assert_eq!(doc.session.message_count, 4);
    assert_eq!(
        doc.session.metadata["thread_metadata"],
        json!({"fallback": true, "version": "1.0"})
    );
    let messages: Vec<(Role, &str)> = doc
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        messages,
        vec![
            (Role::User, "Hello, I need help with my taxes"),
            (Role::Assistant, "Sure.\nWhat do you need?"),
            (Role::Info, "calculator: 42"),
            (Role::User, "Add 2 and 40"),
        ]
    );
    assert!(
        doc.messages
            .windows(2)
            .all(|w| w[0].created_at < w[1].created_at),
        "the old order is kept"
    );
    assert!(doc.messages.iter().all(|m| m.session_id == doc.session.id));
    assert!(doc.executions.is_empty() && doc.steps.is_empty() && doc.snapshots.is_empty());
    // The upgraded document is an ordinary current one.
    let again = serde_json::to_vec(&doc).unwrap_or_default();
    assert_eq!(parse_document(&again, &limits()), Ok(doc));
    // A format-0 file with a name breaking the rules is refused like any other.
    let bad = FIXTURE_V0.replace("\"session-1\"", "\"../../etc/passwd\"");
    let err = parse_document(bad.as_bytes(), &limits()).unwrap_err();
    assert_eq!(err.field(), Some("session.name"));
}

#[test]
fn times_that_cannot_be_written_back_are_refused_or_kept_in_range() {
    // Found by fuzzing. A time whose UTC form is past year 9999 used to parse, and its
    // export (a five-digit year) could not be imported again.
    let late = FIXTURE_V0.replace("\"2025-01-15T10:45:00\"", "\"9999-12-31T23:59:59-01:00\"");
    let err = parse_document(late.as_bytes(), &limits()).unwrap_err();
    assert_eq!(err.field(), Some("updated_at"), "{err}");
    // A format-0 file started at the last writable time: its messages, one microsecond
    // apart, stay at that time rather than fall off the end.
    let last = FIXTURE_V0
        .replace("\"2025-01-15T10:30:00\"", "\"9999-12-31T23:59:59.999998\"")
        .replace("\"2025-01-15T10:45:00\"", "null");
    let doc = parse_document(last.as_bytes(), &limits())
        .unwrap_or_else(|e| panic!("a file at the end of time is read: {e}"));
    assert_eq!(doc.messages.len(), 4);
    assert!(doc.messages.iter().all(|m| m.created_at <= Timestamp::MAX));
    let again = serde_json::to_vec(&doc).unwrap_or_default();
    assert_eq!(parse_document(&again, &limits()), Ok(doc));
}
