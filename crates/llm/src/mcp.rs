//! MCP tools over stdio: a small client of the Model Context Protocol's JSON-RPC 2.0
//! (newline-delimited messages on the child's stdin/stdout): `initialize`,
//! `notifications/initialized`, `tools/list` (with paging) and `tools/call`. The server's
//! own requests get an answer (`ping`) or "method not found"; its notifications are
//! ignored. Each listed tool becomes a [`Tool`] of the engine's [`ToolSet`]; a failing or
//! timed-out call is a tool error, which the agent sees as the call's result.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stepwise_engine::tools::{SUBAGENT, USER_INPUT};
use stepwise_engine::{BoxFuture, Tool, ToolError, ToolSet, ToolSpec};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;

use crate::config::McpServerConfig;

pub const PROTOCOL_VERSION: &str = "2025-06-18";
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error("cannot start the MCP server '{server}': {message}")]
    Start { server: String, message: String },
    #[error("the MCP server '{0}' is not running (it exited)")]
    Closed(String),
    #[error("the MCP server '{server}' did not answer {method} within {} s", .timeout.as_secs_f64())]
    Timeout {
        server: String,
        method: String,
        timeout: Duration,
    },
    #[error("the MCP server '{server}' answered {method} with an error: {message}")]
    Rpc {
        server: String,
        method: String,
        message: String,
    },
    #[error("{0}")]
    ToolFailed(String),
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>;

/// A running MCP server. The child process is killed when the last handle is dropped.
pub struct McpClient {
    name: String,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    timeout: Duration,
    _child: Mutex<Child>,
}

/// A tool an MCP server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

impl McpClient {
    /// Starts the server and performs the `initialize` handshake.
    pub async fn start(config: &McpServerConfig) -> Result<Arc<McpClient>, McpError> {
        let start_error = |message: String| McpError::Start {
            server: config.name.clone(),
            message,
        };
        let mut command = Command::new(&config.command);
        command
            .args(&config.args)
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &config.cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .spawn()
            .map_err(|e| start_error(format!("{}: {e}", config.command)))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(start_error("no stdio pipes".into()));
        };
        if let Some(stderr) = child.stderr.take() {
            let server = config.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(mcp_server = %server, "{line}");
                }
            });
        }
        let client = Arc::new(McpClient {
            name: config.name.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Arc::new(Mutex::new(HashMap::new())),
            next_id: AtomicU64::new(1),
            closed: Arc::new(AtomicBool::new(false)),
            timeout: Duration::from_secs(config.timeout_secs.max(1)),
            _child: Mutex::new(child),
        });
        tokio::spawn(read_loop(
            config.name.clone(),
            stdout,
            Arc::downgrade(&client),
            client.pending.clone(),
            client.closed.clone(),
        ));
        client
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "stepwise", "version": env!("CARGO_PKG_VERSION")}
                }),
                START_TIMEOUT,
            )
            .await?;
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every tool the server lists (all pages).
    pub async fn list_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = self.request("tools/list", params, self.timeout).await?;
            for tool in result
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let mut schema = tool
                    .get("inputSchema")
                    .cloned()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                if let Some(map) = schema.as_object_mut() {
                    map.entry("type").or_insert_with(|| json!("object"));
                }
                tools.push(McpToolInfo {
                    name: name.to_string(),
                    description: tool
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    input_schema: schema,
                });
            }
            cursor = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    /// Calls a tool; its text content is the result, `isError` makes it a failure.
    pub async fn call_tool(&self, name: &str, arguments: &Value) -> Result<String, McpError> {
        let arguments = match arguments {
            Value::Object(_) => arguments.clone(),
            Value::Null => json!({}),
            other => {
                return Err(McpError::ToolFailed(format!(
                    "the arguments must be a JSON object, not {other}"
                )));
            }
        };
        let result = self
            .request(
                "tools/call",
                json!({"name": name, "arguments": arguments}),
                self.timeout,
            )
            .await?;
        let text = result_text(&result);
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(McpError::ToolFailed(if text.is_empty() {
                format!("the tool {name} failed")
            } else {
                text
            }));
        }
        Ok(text)
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(McpError::Closed(self.name.clone()));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let sent = self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        if let Err(e) = sent {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        let answer = tokio::time::timeout(timeout, rx).await;
        lock(&self.pending).remove(&id);
        match answer {
            Err(_) => Err(McpError::Timeout {
                server: self.name.clone(),
                method: method.to_string(),
                timeout,
            }),
            Ok(Err(_)) => Err(McpError::Closed(self.name.clone())),
            Ok(Ok(Err(message))) => Err(McpError::Rpc {
                server: self.name.clone(),
                method: method.to_string(),
                message,
            }),
            Ok(Ok(Ok(result))) => Ok(result),
        }
    }

    async fn send(&self, message: &Value) -> Result<(), McpError> {
        let mut line = message.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().await;
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await;
        written.map_err(|_| {
            self.closed.store(true, Ordering::SeqCst);
            McpError::Closed(self.name.clone())
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the server's messages until it exits; answers go to their waiting requests.
async fn read_loop(
    server: String,
    stdout: tokio::process::ChildStdout,
    client: std::sync::Weak<McpClient>,
    pending: Arc<Pending>,
    closed: Arc<AtomicBool>,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            tracing::debug!(mcp_server = %server, line, "not a JSON-RPC message; ignored");
            continue;
        };
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned().filter(|id| !id.is_null());
        match (method, id) {
            // A request from the server.
            (Some(method), Some(id)) => {
                let reply = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id,
                           "error": {"code": -32601, "message": format!("method not found: {method}")}})
                };
                if let Some(client) = client.upgrade() {
                    let _ = client.send(&reply).await;
                }
            }
            (Some(_), None) => {}
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { continue };
                let answer = match message.get("error") {
                    Some(error) => Err(error
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| error.to_string())),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                if let Some(tx) = lock(&pending).remove(&id) {
                    let _ = tx.send(answer);
                }
            }
            (None, None) => {}
        }
    }
    closed.store(true, Ordering::SeqCst);
    // Waiting requests fail now rather than at their timeout.
    lock(&pending).clear();
    tracing::warn!(mcp_server = %server, "the MCP server exited");
}

/// A call result's content as text: text parts joined by newlines, other parts named;
/// `structuredContent` when there is no content.
fn result_text(result: &Value) -> String {
    let parts: Vec<String> = result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|part| match part.get("type").and_then(Value::as_str) {
            Some("text") => part
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            Some("resource") => part
                .get("resource")
                .and_then(|r| r.get("text").or_else(|| r.get("uri")))
                .and_then(Value::as_str)
                .unwrap_or("[resource]")
                .to_string(),
            Some(other) => format!("[{other} content]"),
            None => part.to_string(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        return structured.to_string();
    }
    parts.join("\n")
}

/// One MCP tool in the engine's tool set.
pub struct McpTool {
    client: Arc<McpClient>,
    remote_name: String,
    spec: ToolSpec,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(&'a self, arguments: &'a Value) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            self.client
                .call_tool(&self.remote_name, arguments)
                .await
                .map_err(|e| ToolError::new(e.to_string()))
        })
    }
}

/// Starts the configured MCP servers and adds their tools to `tools`. A server that
/// cannot start or list its tools is logged and left out. A tool whose name is taken is
/// named `SERVER__TOOL`. Keep the returned clients: dropping them stops the servers.
pub async fn start_servers(
    configs: &[McpServerConfig],
    tools: &mut ToolSet,
) -> (Vec<Arc<McpClient>>, Vec<McpError>) {
    let mut clients = Vec::new();
    let mut errors = Vec::new();
    for config in configs {
        let client = match McpClient::start(config).await {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "MCP server left out");
                errors.push(e);
                continue;
            }
        };
        let listed = match client.list_tools().await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::error!(error = %e, "MCP server left out");
                errors.push(e);
                continue;
            }
        };
        for info in listed {
            let taken =
                |name: &str| tools.get(name).is_some() || name == USER_INPUT || name == SUBAGENT;
            let exposed = if taken(&info.name) {
                format!("{}__{}", config.name, info.name)
            } else {
                info.name.clone()
            };
            if taken(&exposed) {
                tracing::warn!(tool = %exposed, "an MCP tool of this name is already registered; left out");
                continue;
            }
            tracing::info!(mcp_server = %config.name, tool = %exposed, "MCP tool registered");
            tools.register(McpTool {
                client: client.clone(),
                remote_name: info.name,
                spec: ToolSpec {
                    name: exposed,
                    description: info.description,
                    parameters: info.input_schema,
                },
            });
        }
        clients.push(client);
    }
    (clients, errors)
}
