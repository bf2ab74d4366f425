//! The step corpus of the workload: gzipped JSON lines, each a step (thought, tool call,
//! observation, tokens), found beside the checkout or in the repository.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::{StepBody, TokenUsage, ToolCall};

use super::{PROJECT_CORPUS, SHARED_CORPUS};

#[derive(Deserialize)]
pub(super) struct CorpusLine {
    thought: String,
    tool_call: CorpusToolCall,
    observation: String,
    tokens: CorpusTokens,
}

#[derive(Deserialize)]
struct CorpusToolCall {
    id: String,
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct CorpusTokens {
    prompt: u64,
    completion: u64,
    total: u64,
}

pub(super) struct Corpus {
    pub(super) path: PathBuf,
    pub(super) bodies: Vec<StepBody>,
    pub(super) line_bytes: usize,
}

impl Corpus {
    /// The body for 1-based line `line`, wrapping for corpora shorter than the workload.
    pub(super) fn line(&self, line: usize) -> &StepBody {
        let index = (line - 1) % self.bodies.len();
        &self.bodies[index]
    }
}

/// A corpus line as a Stepwise action step.
pub(super) fn step_body(line: CorpusLine) -> StepBody {
    StepBody {
        model_output: Some(line.thought),
        tool_calls: vec![ToolCall {
            id: line.tool_call.id,
            name: line.tool_call.name,
            arguments: line.tool_call.arguments,
        }],
        observations: Some(line.observation),
        token_usage: TokenUsage {
            input: line.tokens.prompt,
            output: line.tokens.completion,
            total: line.tokens.total,
        },
        ..StepBody::default()
    }
}

pub(super) fn find_corpus(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("the step corpus {} does not exist", path.display());
        }
        return Ok(path.to_path_buf());
    }
    let mut tried = vec![PathBuf::from(SHARED_CORPUS)];
    if let Some(env) = std::env::var_os("STEPWISE_BENCH_STEPS").filter(|v| !v.is_empty()) {
        tried.push(PathBuf::from(env));
    }
    tried.push(PathBuf::from(PROJECT_CORPUS));
    // From a build in the repository (target/<profile>/stepwise), its root's copy.
    if let Ok(exe) = std::env::current_exe() {
        for ancestor in exe.ancestors().skip(1).take(4) {
            tried.push(ancestor.join(PROJECT_CORPUS));
        }
    }
    for path in &tried {
        if path.is_file() {
            return Ok(path.clone());
        }
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "no step corpus found (tried {}); pass --steps FILE",
        list.join(", ")
    )
}

pub(super) fn load_corpus(path: &Path) -> anyhow::Result<Corpus> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = BufReader::new(flate2::read::GzDecoder::new(file));
    let mut bodies = Vec::new();
    let mut line_bytes = 0;
    for (index, line) in reader.lines().enumerate() {
        let line = line.with_context(|| {
            format!(
                "{}: cannot read line {} (is it gzipped JSON lines?)",
                path.display(),
                index + 1
            )
        })?;
        if line.trim().is_empty() {
            continue;
        }
        line_bytes += line.len();
        let parsed: CorpusLine = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}: line {} is not a corpus step",
                path.display(),
                index + 1
            )
        })?;
        bodies.push(step_body(parsed));
    }
    if bodies.is_empty() {
        bail!("the step corpus {} is empty", path.display());
    }
    Ok(Corpus {
        path: path.to_path_buf(),
        bodies,
        line_bytes,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn corpus_lines_become_action_steps() {
        let line: CorpusLine = serde_json::from_str(
            r#"{"step":1,"thought":"t","tool_call":{"id":"c1","name":"search","arguments":{"q":"x"}},"observation":"o","tokens":{"prompt":3,"completion":2,"total":5}}"#,
        )
        .unwrap();
        let body = step_body(line);
        assert_eq!(body.model_output.as_deref(), Some("t"));
        assert_eq!(body.tool_calls[0].name, "search");
        assert_eq!(body.tool_calls[0].arguments, json!({"q": "x"}));
        assert_eq!(body.observations.as_deref(), Some("o"));
        assert_eq!(
            body.token_usage,
            TokenUsage {
                input: 3,
                output: 2,
                total: 5
            }
        );
    }
}
