//! Settings of the `tool-calling` agent: `[llm]` and `[mcp.servers.NAME]` in
//! `stepwise.toml`, then `STEPWISE_LLM_BASE_URL`, `STEPWISE_LLM_MODEL` and
//! `STEPWISE_LLM_API_KEY` over them, then per execution the agent's `config` object
//! (model, temperature, max_tokens, stream, max_steps, planning_interval, system_prompt,
//! context_tokens; never the URL or the key, which stay the operator's).
//!
//! ```toml
//! [llm]
//! base_url = "http://localhost:11434/v1"
//! model = "qwen2.5:7b"
//! max_steps = 20
//!
//! [mcp.servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::client::ClientSettings;

pub const BASE_URL_ENV: &str = "STEPWISE_LLM_BASE_URL";
pub const MODEL_ENV: &str = "STEPWISE_LLM_MODEL";
pub const API_KEY_ENV: &str = "STEPWISE_LLM_API_KEY";

pub const DEFAULT_MAX_STEPS: u32 = 20;
pub const DEFAULT_CONTEXT_TOKENS: u64 = 32_768;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// How the agent talks to its model and how far it goes.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// Empty: the server's first listed model.
    pub model: String,
    pub temperature: Option<f64>,
    /// The most tokens one answer may have (also kept free in the context window).
    pub max_tokens: Option<u64>,
    pub stream: bool,
    /// Model turns (action steps) before the execution fails.
    pub max_steps: u32,
    /// A planning step every N action steps; `None` is no planning.
    pub planning_interval: Option<u32>,
    pub system_prompt: Option<String>,
    /// Whether the page a message came from (its execution's `input.context`) goes into the
    /// system prompt, and how: `None` leaves it out; `Some("")` is the default wording;
    /// another text is a template with `{context_url}`, `{related_type}`, `{related_id}` and
    /// `{metadata}` (JSON) in it. `agent.config.context_prompt`: a string, or `false` for off.
    pub context_prompt: Option<String>,
    /// The model's context window in tokens (estimated at 4 characters a token).
    pub context_tokens: u64,
    /// A longer tool result is cut to this many characters when sent to the model.
    pub max_observation_chars: usize,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            model: String::new(),
            temperature: None,
            max_tokens: None,
            stream: true,
            max_steps: DEFAULT_MAX_STEPS,
            planning_interval: None,
            system_prompt: None,
            context_prompt: Some(String::new()),
            context_tokens: DEFAULT_CONTEXT_TOKENS,
            max_observation_chars: 20_000,
        }
    }
}

impl AgentSettings {
    /// These settings with an execution's `agent.config` over them. Unknown keys are
    /// left for others (`debug`); a known key of the wrong type is an error.
    pub fn with_overrides(&self, config: &Value) -> Result<AgentSettings, ConfigError> {
        let mut settings = self.clone();
        let Some(map) = config.as_object() else {
            return Ok(settings);
        };
        let bad = |key: &str, what: &str| ConfigError(format!("agent.config.{key} must be {what}"));
        let positive = |key: &str| -> Result<Option<u64>, ConfigError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| bad(key, "a positive integer")),
            }
        };
        if let Some(model) = map.get("model").filter(|v| !v.is_null()) {
            settings.model = model
                .as_str()
                .ok_or_else(|| bad("model", "a string"))?
                .to_string();
        }
        if let Some(t) = map.get("temperature").filter(|v| !v.is_null()) {
            let t = t
                .as_f64()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| bad("temperature", "a number from 0 to 2"))?;
            settings.temperature = Some(t);
        }
        if let Some(stream) = map.get("stream").filter(|v| !v.is_null()) {
            settings.stream = stream
                .as_bool()
                .ok_or_else(|| bad("stream", "true or false"))?;
        }
        if let Some(prompt) = map.get("system_prompt").filter(|v| !v.is_null()) {
            settings.system_prompt = Some(
                prompt
                    .as_str()
                    .ok_or_else(|| bad("system_prompt", "a string"))?
                    .to_string(),
            );
        }
        match map.get("context_prompt") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(false)) => settings.context_prompt = None,
            Some(Value::Bool(true)) => settings.context_prompt = Some(String::new()),
            Some(Value::String(template)) => settings.context_prompt = Some(template.clone()),
            Some(_) => return Err(bad("context_prompt", "a string or false")),
        }
        if let Some(n) = positive("max_tokens")? {
            settings.max_tokens = Some(n);
        }
        if let Some(n) = positive("max_steps")? {
            settings.max_steps = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(n) = positive("context_tokens")? {
            settings.context_tokens = n;
        }
        match map.get("planning_interval") {
            Some(Value::Null) => settings.planning_interval = None,
            Some(Value::Number(n)) if n.as_u64() == Some(0) => settings.planning_interval = None,
            Some(_) => {
                settings.planning_interval =
                    positive("planning_interval")?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            }
            None => {}
        }
        Ok(settings)
    }
}

/// An MCP server run as a child process speaking JSON-RPC over stdio.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    #[serde(skip)]
    pub name: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// How long one tool call may take.
    #[serde(default = "default_mcp_timeout")]
    pub timeout_secs: u64,
}

fn default_mcp_timeout() -> u64 {
    60
}

/// Everything the LLM side reads at start.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmSettings {
    pub client: ClientSettings,
    pub agent: AgentSettings,
    pub mcp_servers: Vec<McpServerConfig>,
}

impl LlmSettings {
    /// Whether a model server is configured (then `tool-calling` is served).
    pub fn is_configured(&self) -> bool {
        !self.client.base_url.trim().is_empty()
    }

    /// Reads `[llm]` and `[mcp]` of the settings file (absent file: no settings) and the
    /// environment over them.
    pub fn load(path: &Path) -> Result<LlmSettings, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(ConfigError(format!("cannot read {}: {e}", path.display()))),
        };
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self::from_toml(&text, env).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// Parses the settings file's text; `env` looks up environment variables.
    pub fn from_toml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<LlmSettings, ConfigError> {
        let file: FileSettings =
            toml::from_str(text).map_err(|e| ConfigError(format!("invalid settings: {e}")))?;
        let llm = file.llm.unwrap_or_default();
        let mut client = ClientSettings::default();
        let mut agent = AgentSettings::default();

        client.base_url = env(BASE_URL_ENV).or(llm.base_url).unwrap_or_default();
        agent.model = env(MODEL_ENV).or(llm.model).unwrap_or_default();
        client.api_key = env(API_KEY_ENV)
            .or_else(|| llm.api_key_env.as_deref().and_then(&env))
            .or(llm.api_key);
        let secs = |s: Option<f64>, default: Duration| -> Result<Duration, ConfigError> {
            match s {
                None => Ok(default),
                Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
                Some(_) => Err(ConfigError("timeouts must be positive seconds".into())),
            }
        };
        client.connect_timeout = secs(llm.connect_timeout_secs, client.connect_timeout)?;
        client.first_token_timeout =
            secs(llm.first_token_timeout_secs, client.first_token_timeout)?;
        client.total_timeout = secs(llm.total_timeout_secs, client.total_timeout)?;
        if let Some(n) = llm.max_retries {
            client.max_retries = n;
        }
        agent.temperature = llm.temperature;
        agent.max_tokens = llm.max_tokens;
        if let Some(stream) = llm.stream {
            agent.stream = stream;
        }
        if let Some(n) = llm.max_steps {
            if n == 0 {
                return Err(ConfigError("llm.max_steps must be at least 1".into()));
            }
            agent.max_steps = n;
        }
        agent.planning_interval = llm.planning_interval.filter(|n| *n > 0);
        agent.system_prompt = llm.system_prompt;
        if let Some(n) = llm.context_tokens {
            agent.context_tokens = n.max(256);
        }
        if let Some(n) = llm.max_observation_chars {
            agent.max_observation_chars = n.max(100);
        }

        let mut mcp_servers = Vec::new();
        for (name, mut server) in file.mcp.map(|m| m.servers).unwrap_or_default() {
            if server.command.trim().is_empty() {
                return Err(ConfigError(format!("mcp.servers.{name}.command is empty")));
            }
            server.name = name;
            mcp_servers.push(server);
        }
        Ok(LlmSettings {
            client,
            agent,
            mcp_servers,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
struct FileSettings {
    llm: Option<FileLlm>,
    mcp: Option<FileMcp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLlm {
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    /// The name of an environment variable holding the key (keeps it out of the file).
    api_key_env: Option<String>,
    temperature: Option<f64>,
    max_tokens: Option<u64>,
    stream: Option<bool>,
    max_steps: Option<u32>,
    planning_interval: Option<u32>,
    system_prompt: Option<String>,
    context_tokens: Option<u64>,
    max_observation_chars: Option<usize>,
    connect_timeout_secs: Option<f64>,
    first_token_timeout_secs: Option<f64>,
    total_timeout_secs: Option<f64>,
    max_retries: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMcp {
    #[serde(default)]
    servers: BTreeMap<String, McpServerConfig>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_then_environment() {
        let text = r#"
            database = "sqlite://x.db"
            [llm]
            base_url = "http://localhost:11434/v1"
            model = "from-file"
            max_steps = 7
            api_key_env = "MY_KEY"
            [mcp.servers.files]
            command = "python3"
            args = ["server.py"]
        "#;
        let settings = LlmSettings::from_toml(text, |name| match name {
            MODEL_ENV => Some("from-env".into()),
            "MY_KEY" => Some("secret".into()),
            _ => None,
        })
        .unwrap();
        assert!(settings.is_configured());
        assert_eq!(settings.agent.model, "from-env");
        assert_eq!(settings.agent.max_steps, 7);
        assert_eq!(settings.client.api_key.as_deref(), Some("secret"));
        assert_eq!(settings.mcp_servers[0].name, "files");
        assert_eq!(settings.mcp_servers[0].timeout_secs, 60);

        let typo = LlmSettings::from_toml("[llm]\nbase_ur = \"x\"\n", |_| None);
        assert!(typo.unwrap_err().0.contains("base_ur"));
        assert!(
            !LlmSettings::from_toml("", |_| None)
                .unwrap()
                .is_configured()
        );
    }

    #[test]
    fn execution_overrides_are_checked() {
        let base = AgentSettings::default();
        let set = base
            .with_overrides(
                &json!({"model": "m", "max_steps": 3, "planning_interval": 2, "debug": true}),
            )
            .unwrap();
        assert_eq!((set.model.as_str(), set.max_steps), ("m", 3));
        assert_eq!(set.planning_interval, Some(2));
        let error = base
            .with_overrides(&json!({"max_steps": "many"}))
            .unwrap_err();
        assert_eq!(error.0, "agent.config.max_steps must be a positive integer");
        assert!(base.with_overrides(&json!({"temperature": 9})).is_err());
        assert_eq!(base.with_overrides(&Value::Null).unwrap(), base);
    }
}
