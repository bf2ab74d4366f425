//! How JSON documents are stored: every document carries a schema `version`, payloads over
//! a threshold are compressed (LZ4 up to [`LARGE_PAYLOAD_BYTES`], zstd above), and older
//! versions are upgraded on read. Decoding never panics: undecodable bytes are a
//! [`DecodeError`] that callers count and skip.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{StepBody, StepError, TokenUsage, ToolCall};
use crate::time::Timestamp;

/// The current version of a stored step payload.
pub const STEP_VERSION: u32 = 2;
/// The current version of a stored snapshot payload.
pub const SNAPSHOT_VERSION: u32 = 1;
/// Payloads larger than this many bytes are compressed unless configured otherwise.
pub const DEFAULT_COMPRESS_THRESHOLD: usize = 1024;
/// A compressed payload may not inflate beyond this (a zstd bomb is corruption, not data).
pub const MAX_INFLATED_BYTES: usize = 64 * 1024 * 1024;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Marks an LZ4 block: these four bytes, the inflated length (u32, little endian), the
/// block. 0xFF never starts UTF-8, so no JSON document begins this way.
const LZ4_MAGIC: [u8; 4] = [0xFF, b'L', b'Z', b'4'];
/// Payloads over this size are compressed with zstd, smaller ones with LZ4.
///
/// A typical agent step is ~2 KB of JSON. zstd (level 1) kept 54% of its bytes but took
/// ~127,000 instructions to compress, more than the rest of a save together, and ~7,000 to
/// inflate; LZ4 keeps about 80% for a third of that (half to inflate), and a step still
/// fits two to a 4 KB SQLite page. Large tool outputs and snapshots, where the bytes
/// matter more, still get zstd's ratio.
pub const LARGE_PAYLOAD_BYTES: usize = 16 * 1024;
/// Level 1: the fastest standard level; on large payloads it compresses nearly as well as
/// level 3 at a fraction of the CPU.
const COMPRESSION_LEVEL: i32 = 1;

// zstd contexts are costly to create (tens of microseconds each): keep one per thread.
thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("compressed payload is damaged: {0}")]
    Compression(String),
    #[error("payload is not valid JSON: {0}")]
    Json(String),
    #[error("payload has schema version {found}, newer than this build understands ({supported})")]
    FutureVersion { found: u64, supported: u32 },
    #[error("payload has no usable schema version")]
    MissingVersion,
}

/// Compresses `json` when it is longer than `threshold`: with LZ4 up to
/// [`LARGE_PAYLOAD_BYTES`], with zstd above. Stays plain when compressing does not shrink it.
pub fn pack(json: Vec<u8>, threshold: usize) -> Vec<u8> {
    if json.len() <= threshold {
        return json;
    }
    let packed = if json.len() <= LARGE_PAYLOAD_BYTES {
        pack_lz4(&json)
    } else {
        COMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = zstd::bulk::Compressor::new(COMPRESSION_LEVEL).ok();
            }
            slot.as_mut().and_then(|c| c.compress(&json).ok())
        })
    };
    match packed {
        Some(packed) if packed.len() < json.len() => packed,
        _ => json,
    }
}

fn pack_lz4(json: &[u8]) -> Option<Vec<u8>> {
    let len = u32::try_from(json.len()).ok()?;
    let header = LZ4_MAGIC.len() + 4;
    let mut out = vec![0; header + lz4_flex::block::get_maximum_output_size(json.len())];
    out[..4].copy_from_slice(&LZ4_MAGIC);
    out[4..header].copy_from_slice(&len.to_le_bytes());
    let written = lz4_flex::block::compress_into(json, &mut out[header..]).ok()?;
    out.truncate(header + written);
    Some(out)
}

fn unpack_lz4(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let damaged = |why: String| DecodeError::Compression(why);
    let len = bytes
        .get(4..8)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| damaged("the LZ4 header is cut short".into()))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > MAX_INFLATED_BYTES {
        return Err(damaged(format!(
            "declares {len} bytes, over the {MAX_INFLATED_BYTES} byte limit"
        )));
    }
    // An LZ4 block inflates at most ~255 times: a larger claim is damage, not data (and
    // must not cost an allocation of that size).
    if len > bytes.len().saturating_mul(255) {
        return Err(damaged(format!(
            "declares {len} bytes from a {} byte block",
            bytes.len()
        )));
    }
    let mut out = vec![0; len];
    let written = lz4_flex::block::decompress_into(&bytes[8..], &mut out)
        .map_err(|e| damaged(e.to_string()))?;
    if written != len {
        return Err(damaged(format!(
            "inflates to {written} bytes, not the {len} it declares"
        )));
    }
    Ok(out)
}

/// The JSON bytes of a stored payload, inflating it when compressed.
pub fn unpack(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, DecodeError> {
    if bytes.starts_with(&LZ4_MAGIC) {
        unpack_lz4(bytes).map(std::borrow::Cow::Owned)
    } else if bytes.starts_with(&ZSTD_MAGIC) {
        let size = zstd::zstd_safe::get_frame_content_size(bytes)
            .ok()
            .flatten()
            .map_or(MAX_INFLATED_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            });
        if size > MAX_INFLATED_BYTES {
            return Err(DecodeError::Compression(format!(
                "declares {size} bytes, over the {MAX_INFLATED_BYTES} byte limit"
            )));
        }
        DECOMPRESSOR
            .with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    *slot = Some(zstd::bulk::Decompressor::new()?);
                }
                match slot.as_mut() {
                    Some(d) => d.decompress(bytes, size.max(1)),
                    None => Err(std::io::Error::other("no decompressor")),
                }
            })
            .map(std::borrow::Cow::Owned)
            .map_err(|e| DecodeError::Compression(e.to_string()))
    } else {
        Ok(std::borrow::Cow::Borrowed(bytes))
    }
}

/// A step payload as stored, current version.
#[derive(Serialize, Deserialize)]
struct StepDoc {
    version: u32,
    #[serde(default)]
    model_output: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    observations: Option<String>,
    #[serde(default)]
    error: Option<StepError>,
    #[serde(default)]
    output: Value,
    #[serde(default)]
    token_usage: TokenUsage,
    #[serde(default)]
    started_at: Option<Timestamp>,
    #[serde(default)]
    ended_at: Option<Timestamp>,
}

/// Version 1 of the step payload, as written by the first (pre-release) format, which
/// followed the seeds' memory layout: one tool call, a string error, OpenAI token names.
/// Frozen: only ever read, and upgraded to the current version.
#[derive(Deserialize)]
struct StepDocV1 {
    #[serde(default)]
    thought: Option<String>,
    #[serde(default)]
    tool_call: Option<ToolCall>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    observation: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    final_answer: Value,
    #[serde(default)]
    tokens: Option<TokensV1>,
    #[serde(default)]
    duration_ms: Option<f64>,
    #[serde(default)]
    started_at: Option<Timestamp>,
}

#[derive(Deserialize)]
struct TokensV1 {
    #[serde(default)]
    prompt: u64,
    #[serde(default)]
    completion: u64,
}

impl From<StepDocV1> for StepBody {
    fn from(v1: StepDocV1) -> Self {
        // An end past the last writable time (a nonsense duration) is left out: it could
        // not be written back.
        let ended_at = match (v1.started_at, v1.duration_ms) {
            (Some(start), Some(ms)) if ms.is_finite() && ms >= 0.0 => {
                Some(Timestamp(start.0.saturating_add((ms * 1000.0) as i64)))
                    .filter(|end| *end <= Timestamp::MAX)
            }
            _ => None,
        };
        StepBody {
            model_output: v1.thought,
            tool_calls: v1.tool_call.into_iter().collect(),
            code: v1.code,
            observations: v1.observation,
            error: v1.error.map(|message| StepError {
                kind: "error".into(),
                message,
            }),
            output: v1.final_answer,
            token_usage: v1
                .tokens
                .map(|t| TokenUsage::new(t.prompt, t.completion))
                .unwrap_or_default(),
            started_at: v1.started_at,
            ended_at,
        }
    }
}

/// Encodes a step body as a current-version payload (compressed over `threshold`).
pub fn encode_step(body: &StepBody, threshold: usize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        version: u32,
        model_output: &'a Option<String>,
        tool_calls: &'a [ToolCall],
        code: &'a Option<String>,
        observations: &'a Option<String>,
        error: &'a Option<StepError>,
        output: &'a Value,
        token_usage: &'a TokenUsage,
        started_at: &'a Option<Timestamp>,
        ended_at: &'a Option<Timestamp>,
    }
    let out = Out {
        version: STEP_VERSION,
        model_output: &body.model_output,
        tool_calls: &body.tool_calls,
        code: &body.code,
        observations: &body.observations,
        error: &body.error,
        output: &body.output,
        token_usage: &body.token_usage,
        started_at: &body.started_at,
        ended_at: &body.ended_at,
    };
    // Serializing plain data to a Vec cannot fail.
    pack(serde_json::to_vec(&out).unwrap_or_default(), threshold)
}

/// Decodes a stored step payload of any known version.
pub fn decode_step(bytes: &[u8]) -> Result<StepBody, DecodeError> {
    let json = unpack(bytes)?;
    // The fast path: a current document decodes straight into its typed form.
    if let Ok(doc) = serde_json::from_slice::<StepDoc>(&json)
        && doc.version == STEP_VERSION
    {
        return Ok(StepBody {
            model_output: doc.model_output,
            tool_calls: doc.tool_calls,
            code: doc.code,
            observations: doc.observations,
            error: doc.error,
            output: doc.output,
            token_usage: doc.token_usage,
            started_at: doc.started_at,
            ended_at: doc.ended_at,
        });
    }
    match document_version(&json)? {
        1 => serde_json::from_slice::<StepDocV1>(&json)
            .map(StepBody::from)
            .map_err(|e| DecodeError::Json(e.to_string())),
        v if v > u64::from(STEP_VERSION) => Err(DecodeError::FutureVersion {
            found: v,
            supported: STEP_VERSION,
        }),
        // The current version that failed typed decoding: report why.
        _ => serde_json::from_slice::<StepDoc>(&json)
            .map(|_| StepBody::default())
            .map_err(|e| DecodeError::Json(e.to_string())),
    }
}

/// Encodes a JSON value (a snapshot's state, an execution's documents) with its version.
pub fn encode_value(value: &Value, threshold: usize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        version: u32,
        value: &'a Value,
    }
    let out = Out {
        version: SNAPSHOT_VERSION,
        value,
    };
    pack(serde_json::to_vec(&out).unwrap_or_default(), threshold)
}

pub fn decode_value(bytes: &[u8]) -> Result<Value, DecodeError> {
    #[derive(Deserialize)]
    struct In {
        version: u64,
        #[serde(default)]
        value: Value,
    }
    let json = unpack(bytes)?;
    let doc: In = serde_json::from_slice(&json).map_err(|e| DecodeError::Json(e.to_string()))?;
    if doc.version > u64::from(SNAPSHOT_VERSION) {
        return Err(DecodeError::FutureVersion {
            found: doc.version,
            supported: SNAPSHOT_VERSION,
        });
    }
    Ok(doc.value)
}

fn document_version(json: &[u8]) -> Result<u64, DecodeError> {
    #[derive(Deserialize)]
    struct Probe {
        version: Option<Value>,
    }
    let probe: Probe =
        serde_json::from_slice(json).map_err(|e| DecodeError::Json(e.to_string()))?;
    probe
        .version
        .and_then(|v| v.as_u64())
        .ok_or(DecodeError::MissingVersion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> StepBody {
        StepBody {
            model_output: Some("I should add the numbers. ".repeat(40)),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "calculator".into(),
                arguments: json!({"expression": "2+3"}),
            }],
            observations: Some("5".into()),
            token_usage: TokenUsage::new(10, 5),
            ..StepBody::default()
        }
    }

    #[test]
    fn large_payloads_are_compressed_and_round_trip() {
        let body = sample();
        let bytes = encode_step(&body, 1024);
        assert!(
            bytes.starts_with(&LZ4_MAGIC),
            "a >1 KiB payload is compressed with LZ4"
        );
        assert!(bytes.len() < encode_step(&body, usize::MAX).len());
        assert_eq!(decode_step(&bytes), Ok(body.clone()));
        let large = StepBody {
            observations: Some("the observation goes on. ".repeat(2000)),
            ..body.clone()
        };
        let large_bytes = encode_step(&large, 1024);
        assert!(
            large_bytes.starts_with(&ZSTD_MAGIC),
            "a payload over LARGE_PAYLOAD_BYTES is compressed with zstd"
        );
        assert!(decode_step(&large_bytes) == Ok(large));
        let plain = encode_step(&body, usize::MAX);
        assert_eq!(plain.first(), Some(&b'{'));
        assert_eq!(decode_step(&plain), Ok(body));
    }

    #[test]
    fn small_zstd_payloads_of_earlier_versions_still_decode() {
        // Before LZ4, every payload over 1 KB was zstd-compressed.
        let body = sample();
        let json = encode_step(&body, usize::MAX);
        let old = zstd::bulk::compress(&json, 1).expect("zstd");
        assert!(old.starts_with(&ZSTD_MAGIC));
        assert_eq!(decode_step(&old), Ok(body));
    }

    #[test]
    fn version_one_fixture_is_upgraded_on_read() {
        let fixture = include_bytes!("../tests/fixtures/step-v1.json");
        let body = decode_step(fixture).expect("the frozen v1 fixture decodes");
        assert_eq!(
            body.model_output.as_deref(),
            Some("I need the sum of the two numbers.")
        );
        assert_eq!(body.tool_calls.len(), 1);
        assert_eq!(body.tool_calls[0].name, "calculator");
        assert_eq!(body.tool_calls[0].arguments, json!({"expression": "19+23"}));
        assert_eq!(body.observations.as_deref(), Some("42"));
        assert_eq!(body.error, None);
        assert_eq!(
            body.token_usage,
            TokenUsage {
                input: 120,
                output: 30,
                total: 150
            }
        );
        let start = body.started_at.expect("start kept");
        assert_eq!(body.ended_at, Some(Timestamp(start.0 + 1_500_000)));
        // Re-encoding writes the current version.
        let again = encode_step(&body, usize::MAX);
        let text = String::from_utf8(again).unwrap_or_default();
        assert!(text.starts_with("{\"version\":2,"));
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        assert!(matches!(
            decode_step(b"{not json"),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            decode_step(b"{\"model_output\":\"x\"}"),
            Err(DecodeError::MissingVersion)
        ));
        assert_eq!(
            decode_step(b"{\"version\":99}"),
            Err(DecodeError::FutureVersion {
                found: 99,
                supported: STEP_VERSION
            })
        );
        let mut packed = encode_step(&sample(), 16);
        let len = packed.len();
        packed.truncate(len / 2);
        assert!(matches!(
            decode_step(&packed),
            Err(DecodeError::Compression(_))
        ));
        assert!(decode_value(&[0x28, 0xB5, 0x2F, 0xFD, 0xFF]).is_err());
        // LZ4: a cut header, a length the block cannot hold, a length it does not have.
        assert!(decode_value(&[0xFF, b'L', b'Z', b'4', 1]).is_err());
        assert!(decode_value(&[0xFF, b'L', b'Z', b'4', 0xFF, 0xFF, 0xFF, 0x0F, 0x10]).is_err());
        let mut lying = pack(
            b"{\"version\":1,\"x\":\""
                .iter()
                .chain(&[b'a'; 2000])
                .chain(b"\"}")
                .copied()
                .collect(),
            16,
        );
        assert!(lying.starts_with(&LZ4_MAGIC));
        lying[4] = lying[4].wrapping_add(1);
        assert!(matches!(
            decode_value(&lying),
            Err(DecodeError::Compression(_))
        ));
    }

    #[test]
    fn version_one_nonsense_numbers_upgrade_without_panic_or_drift() {
        // Found by fuzzing: token counts that overflowed on adding (a panic in a debug
        // build), and a duration whose end could not be written back.
        let body = decode_step(
            br#"{"version":1,"tokens":{"prompt":18446744073709551615,"completion":1},
                "started_at":"2025-11-07T10:30:00Z","duration_ms":1e300}"#,
        )
        .expect("decodes");
        assert_eq!(
            body.token_usage,
            TokenUsage {
                input: u64::MAX,
                output: 1,
                total: u64::MAX
            }
        );
        assert!(body.started_at.is_some());
        assert_eq!(body.ended_at, None);
        assert_eq!(decode_step(&encode_step(&body, 0)), Ok(body));
    }

    #[test]
    fn floats_read_back_exactly_as_written() {
        // Found by fuzzing: serde_json's default float parser may land one unit in the last
        // place away from the shortest representation it writes.
        let x = -1.476_050_732_079_934_3e-163_f64;
        let body = StepBody {
            output: json!(x),
            ..StepBody::default()
        };
        let back = decode_step(&encode_step(&body, usize::MAX)).expect("decodes");
        assert_eq!(back.output.as_f64().map(f64::to_bits), Some(x.to_bits()));
        assert_eq!(decode_value(&encode_value(&json!([x]), 0)), Ok(json!([x])));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_step(&bytes);
            let _ = decode_value(&bytes);
        }

        #[test]
        fn step_bodies_round_trip(thought in ".{0,3000}", obs in proptest::option::of(".{0,100}"), i in 0u64..1_000_000) {
            let body = StepBody {
                model_output: Some(thought),
                observations: obs,
                token_usage: TokenUsage::new(i, i / 2),
                ..StepBody::default()
            };
            proptest::prop_assert_eq!(decode_step(&encode_step(&body, 1024)), Ok(body));
        }
    }
}
