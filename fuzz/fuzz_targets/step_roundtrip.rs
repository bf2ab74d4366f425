//! Any step an agent can report, encoded as the store writes it (plain or zstd-compressed,
//! at an arbitrary threshold) and decoded again, must come back equal.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Number, Value};
use stepwise_core::codec::{decode_step, encode_step};
use stepwise_core::{StepBody, StepError, Timestamp, TokenUsage, ToolCall};

/// The times `Timestamp` reads and writes: years 0000 to 9999, UTC, in microseconds.
const MIN_MICROS: i64 = -62_167_219_200_000_000;
const MAX_MICROS: i64 = 253_402_300_799_999_999;
/// Request bodies are parsed with serde_json's nesting limit (128); stay well inside it.
const MAX_DEPTH: usize = 32;

#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn into_value(self, depth: usize) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(b),
            Json::Int(n) => Value::from(n),
            Json::UInt(n) => Value::from(n),
            Json::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s),
            _ if depth >= MAX_DEPTH => Value::Null,
            Json::Array(items) => {
                Value::Array(items.into_iter().map(|v| v.into_value(depth + 1)).collect())
            }
            Json::Object(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value(depth + 1)))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    model_output: Option<String>,
    tool_calls: Vec<(String, String, Json)>,
    code: Option<String>,
    observations: Option<String>,
    error: Option<(String, String)>,
    output: Json,
    usage: (u64, u64, u64),
    started_at: Option<i64>,
    ended_at: Option<i64>,
    threshold: u16,
}

fn time(micros: i64) -> Timestamp {
    let span = i128::from(MAX_MICROS) - i128::from(MIN_MICROS) + 1;
    let offset = (i128::from(micros) - i128::from(MIN_MICROS)).rem_euclid(span);
    Timestamp(i64::try_from(i128::from(MIN_MICROS) + offset).unwrap_or(0))
}

fuzz_target!(|input: Input| {
    let body = StepBody {
        model_output: input.model_output,
        tool_calls: input
            .tool_calls
            .into_iter()
            .map(|(id, name, arguments)| ToolCall {
                id,
                name,
                arguments: arguments.into_value(1),
            })
            .collect(),
        code: input.code,
        observations: input.observations,
        error: input
            .error
            .map(|(kind, message)| StepError { kind, message }),
        output: input.output.into_value(1),
        token_usage: TokenUsage {
            input: input.usage.0,
            output: input.usage.1,
            total: input.usage.2,
        },
        started_at: input.started_at.map(time),
        ended_at: input.ended_at.map(time),
    };
    let bytes = encode_step(&body, usize::from(input.threshold));
    assert_eq!(decode_step(&bytes), Ok(body));
});
