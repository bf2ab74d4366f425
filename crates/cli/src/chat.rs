//! `stepwise chat`: a terminal chat over the HTTP API of api.md. Against `--server URL`,
//! or, with no server given, in-process: the same engine and HTTP app `stepwise serve`
//! runs, bound to a loopback port inside this process, so both modes share one client.
//!
//! Lines come from a plain reader thread, so a pipe drives it as well as a terminal. On a
//! terminal, a spinner shows the running step; in a pipe, output is plain lines and each
//! execution finishes before the next line is read.

mod api;
pub(crate) use stepwise_cli_support::sse;

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use stepwise_engine::EngineConfig;
use stepwise_server::NodeSettings;
use stepwise_store::{Store, Tenant};
use tokio::sync::mpsc;

use self::api::{Api, EventData, Posted, Session};

/// Two Ctrl-C within this long quit.
const DOUBLE_CTRL_C: Duration = Duration::from_secs(2);
/// Messages `/switch` shows of the session it restores.
const RECENT_MESSAGES: usize = 10;
/// Times a broken event stream is reopened (from the last event seen) before giving up.
const STREAM_RETRIES: u32 = 5;
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(clap::Args, Debug, Clone)]
pub struct ChatArgs {
    /// A running Stepwise server (`http://HOST:PORT`, or `unix:PATH` for its Unix socket).
    /// Without it, the chat runs the engine in-process on the local database.
    #[arg(long, env = "STEPWISE_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// Start in this session (by name or id); created when no session has this name.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// The API key sent as `Authorization: Bearer` (servers with keys need one).
    #[arg(
        long,
        env = "STEPWISE_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// Talk to this agent: a built-in one (`demo`) or a worker's (`/agents` lists them).
    /// New sessions get it as their default agent, and every message names it.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
}

const HELP: &str = "\
Type a message to send it to the agent of the current session. Commands:
  /new [NAME]      start a new session (a name is made up when none is given)
  /switch NAME     continue another session (by name or id), with its history and memory
  /list            the sessions; * marks the current one
  /agents          the agents you can talk to (built-in ones and workers'); * marks the chat's
  /agent NAME      talk to another agent from now on (a built-in one or a worker's)
  /history         this session's messages, oldest first
  /export [FILE]   write this session's document to FILE (default NAME.json; - prints it)
  /delete NAME     delete a session
  /help            this help
  /quit            leave (also Ctrl-D); Ctrl-C cancels a running agent, twice quits";

/// Against a running server.
pub async fn run_remote(args: ChatArgs) -> anyhow::Result<()> {
    let server = args.server.clone().unwrap_or_default();
    let api = Api::new(&server, args.api_key.clone())?;
    run_client(api, args).await
}

/// In-process: the engine, its workers and the HTTP app on a loopback port of this process.
pub async fn run_local<S: Store>(store: S, args: ChatArgs) -> anyhow::Result<()> {
    let agents = crate::agents::install(&store).await?;
    let settings = NodeSettings {
        engine: EngineConfig {
            workers: 2,
            default_agent: agents.default_agent,
            ..EngineConfig::default()
        },
        tools: agents.tools,
        ..NodeSettings::new(agents.registry)
    };
    // Metered like `serve`'s store: the binary then holds one copy of the server per backend.
    let node =
        stepwise_protocols::start_node(settings, stepwise_server::Metered::new(store.clone()))
            .await
            .context("cannot start the in-process server")?;
    let (key, temporary_key) = match api_key(&store, &args).await {
        Ok(key) => key,
        Err(e) => {
            node.shutdown(Duration::from_secs(5)).await;
            return Err(e);
        }
    };

    let result = match Api::new(&node.base_url(), key) {
        Ok(api) => run_client(api, args).await,
        Err(e) => Err(e),
    };

    if let Some(id) = temporary_key
        && let Err(e) = store.revoke_api_key(id).await
    {
        eprintln!("warning: could not revoke the chat's temporary API key {id}: {e}");
    }
    // An execution still running goes back to the queue at a step boundary; the next
    // `stepwise chat` or `stepwise serve` on this database finishes it.
    node.shutdown(Duration::from_secs(5)).await;
    drop(agents.llm);
    result
}

/// The key the in-process chat sends, and the id of the one it made. A database with API
/// keys wants one on every request: unless one is given, this process makes a key of its
/// own for tenant `local` (and revokes it when it leaves).
async fn api_key<S: Store>(
    store: &S,
    args: &ChatArgs,
) -> anyhow::Result<(Option<String>, Option<stepwise_core::Id>)> {
    if let Some(key) = args.api_key.clone().filter(|k| !k.trim().is_empty()) {
        return Ok((Some(key), None));
    }
    if store.count_active_api_keys().await? == 0 {
        return Ok((None, None));
    }
    let secret = stepwise_core::apikey::generate_api_key()
        .map_err(|e| anyhow::anyhow!("cannot get random bytes from the OS: {e}"))?;
    let tenant =
        Tenant::new(stepwise_server::LOCAL_TENANT.to_string()).context("the local tenant")?;
    let record = store
        .create_api_key(
            &tenant,
            stepwise_server::LOCAL_USER,
            stepwise_store::AccessRole::Admin,
            Some("stepwise chat (temporary)".into()),
            &stepwise_core::apikey::hash_api_key(&secret),
        )
        .await?;
    Ok((Some(secret), Some(record.id)))
}

enum Input {
    Line(String),
    End,
}

/// What the loop does next.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

/// How an execution the chat followed ended.
enum Outcome {
    Finished,
    Paused,
    Quit,
}

struct Chat {
    api: Api,
    /// The agent every message names (`--agent`, `/agent`); `None`: the session's default.
    agent: Option<String>,
    tty: bool,
    current: Option<Session>,
    /// The last event id seen per session, so a stream opens where the last one stopped.
    last_event: HashMap<String, i64>,
    /// The current session's execution waits for an answer.
    paused: bool,
    lines: mpsc::UnboundedReceiver<Input>,
    /// Set once the input has ended (piped input read to its end).
    input_ended: Arc<AtomicBool>,
    interrupts: mpsc::UnboundedReceiver<()>,
    failed: bool,
}

/// After the end of piped input, how long a message's execution may stay queued (no worker
/// runs its agent, or the queue is long) before the chat leaves it queued and exits.
const QUEUED_AFTER_END: Duration = Duration::from_secs(10);

async fn run_client(api: Api, args: ChatArgs) -> anyhow::Result<()> {
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    // Reachable, and the key (if any) accepted, before anything else.
    api.sessions().await?;

    let (line_tx, lines) = mpsc::unbounded_channel();
    let input_ended = Arc::new(AtomicBool::new(false));
    let ended = input_ended.clone();
    // A plain thread (not the runtime's blocking pool): quitting never waits for a read.
    std::thread::Builder::new()
        .name("chat-input".into())
        .spawn(move || {
            read_lines(&line_tx);
            ended.store(true, Ordering::SeqCst);
        })
        .context("cannot start the input reader")?;
    let (interrupt_tx, interrupts) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if interrupt_tx.send(()).is_err() {
                break;
            }
        }
    });

    let mut chat = Chat {
        api,
        agent: None,
        tty,
        current: None,
        last_event: HashMap::new(),
        paused: false,
        lines,
        input_ended,
        interrupts,
        failed: false,
    };
    if tty {
        println!(
            "Stepwise chat on {} — /help lists the commands, /quit leaves.",
            chat.api.base()
        );
    }
    if let Some(agent) = args.agent.as_deref() {
        chat.use_agent(agent).await?;
    }
    if let Some(name) = args.session.as_deref() {
        chat.open(name)
            .await
            .with_context(|| format!("cannot open session `{name}`"))?;
    }
    chat.run().await;
    if tty {
        println!("bye");
    }
    if chat.failed && !tty {
        anyhow::bail!("some commands failed (see above)");
    }
    Ok(())
}

fn read_lines(tx: &mpsc::UnboundedSender<Input>) {
    let stdin = std::io::stdin();
    let mut stdin = stdin.lock();
    loop {
        let mut bytes = Vec::new();
        match stdin.read_until(b'\n', &mut bytes) {
            Ok(0) | Err(_) => {
                let _ = tx.send(Input::End);
                return;
            }
            Ok(_) => {
                let line = String::from_utf8_lossy(&bytes).into_owned();
                if tx.send(Input::Line(line)).is_err() {
                    return;
                }
            }
        }
    }
}

impl Chat {
    async fn run(&mut self) {
        loop {
            self.prompt();
            let input = tokio::select! {
                input = self.lines.recv() => input.unwrap_or(Input::End),
                _ = self.interrupts.recv() => {
                    // Ctrl-C while idle quits.
                    if self.tty {
                        println!();
                    }
                    return;
                }
            };
            let line = match input {
                Input::Line(line) => line,
                Input::End => {
                    if self.tty {
                        println!();
                    }
                    return;
                }
            };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let flow = if line.starts_with('/') {
                self.command(line).await
            } else {
                self.say(line).await
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => return,
                Err(e) => {
                    self.failed = true;
                    eprintln!("error: {e:#}");
                }
            }
        }
    }

    fn prompt(&self) {
        if !self.tty {
            return;
        }
        let label = match (&self.current, self.paused) {
            (_, true) => "answer".to_string(),
            (Some(session), false) => session.label().to_string(),
            (None, false) => "stepwise".to_string(),
        };
        print!("\x1b[1m{label}>\x1b[0m ");
        let _ = std::io::stdout().flush();
    }

    async fn command(&mut self, line: &str) -> anyhow::Result<Flow> {
        let (command, rest) = match line.split_once(char::is_whitespace) {
            Some((command, rest)) => (command, rest.trim()),
            None => (line, ""),
        };
        let arg = (!rest.is_empty()).then_some(rest);
        match command {
            "/quit" | "/exit" | "/q" => return Ok(Flow::Quit),
            "/help" | "/?" => println!("{HELP}"),
            "/new" => self.new_session(arg).await?,
            "/switch" => match arg {
                Some(name) => self.switch(name).await?,
                None => anyhow::bail!("/switch needs a session name: /switch NAME (see /list)"),
            },
            "/list" => self.list().await?,
            "/agents" => self.list_agents().await?,
            "/agent" => match arg {
                Some(name) => self.use_agent(name).await?,
                None => anyhow::bail!("/agent needs an agent type: /agent NAME (see /agents)"),
            },
            "/history" => self.history().await?,
            "/export" => self.export(arg).await?,
            "/delete" => match arg {
                Some(name) => self.delete(name).await?,
                None => anyhow::bail!("/delete needs a session name: /delete NAME"),
            },
            other => anyhow::bail!("unknown command {other}; /help lists the commands"),
        }
        Ok(Flow::Continue)
    }

    /// `/agents`: the agent types, with whether a worker runs each now.
    async fn list_agents(&mut self) -> anyhow::Result<()> {
        for agent in self.api.agents().await? {
            let mark = if self.agent.as_deref() == Some(agent.agent_type.as_str()) {
                "*"
            } else {
                " "
            };
            let description = if agent.description.is_empty() {
                String::new()
            } else {
                format!(" — {}", agent.description)
            };
            println!(
                "{mark} {} ({}){description}",
                agent.agent_type,
                agent.availability()
            );
        }
        Ok(())
    }

    /// `--agent NAME` and `/agent NAME`: the agent this chat's messages name from now on.
    async fn use_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let agents = self.api.agents().await?;
        match agents.iter().find(|a| a.agent_type == name) {
            Some(agent) if agent.builtin || agent.workers_online.unwrap_or(0) > 0 => {
                println!("talking to {name} ({})", agent.availability());
            }
            Some(agent) => println!(
                "talking to {name}: {}; messages wait until one connects",
                agent.availability()
            ),
            None => {
                let known = agents.iter().map(|a| a.agent_type.clone()).collect();
                let closest = stepwise_engine::UnknownAgent::new(name, known).closest;
                let hint = if closest.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean {}?)", closest.join(" or "))
                };
                println!(
                    "talking to {name}: no worker of it was seen in the last day{hint}, so the server refuses messages to it (unknown_agent) until one connects (/agents lists the others)"
                )
            }
        }
        self.agent = Some(name.to_string());
        Ok(())
    }

    /// `--session NAME`: that session if it exists, else a new one with that name.
    async fn open(&mut self, name: &str) -> anyhow::Result<()> {
        match self.api.find_session(name).await? {
            Some(_) => self.switch(name).await,
            None => self.new_session(Some(name)).await,
        }
    }

    fn select(&mut self, session: Session) {
        self.current = Some(session);
        self.paused = false;
    }

    async fn new_session(&mut self, name: Option<&str>) -> anyhow::Result<()> {
        let sessions = self.api.sessions().await?;
        let taken = |n: &str| sessions.iter().any(|s| s.name.as_deref() == Some(n));
        let name = match name {
            Some(name) if taken(name) => {
                anyhow::bail!(
                    "a session named `{name}` exists already; /switch {name} continues it"
                )
            }
            Some(name) => name.to_string(),
            None => {
                let stamp: String = stepwise_core::Timestamp::now()
                    .to_string()
                    .chars()
                    .filter(char::is_ascii_digit)
                    .take(14)
                    .collect();
                let base = format!("chat-{stamp}");
                let mut name = base.clone();
                let mut n = 2;
                while taken(&name) {
                    name = format!("{base}-{n}");
                    n += 1;
                }
                name
            }
        };
        let session = self
            .api
            .create_session(&name, self.agent.as_deref())
            .await?;
        println!("new session {}", session.label());
        self.select(session);
        Ok(())
    }

    async fn switch(&mut self, name: &str) -> anyhow::Result<()> {
        let Some(session) = self.api.find_session(name).await? else {
            anyhow::bail!("no session `{name}` (see /list; /new {name} creates it)");
        };
        // Nothing of the previous session comes along: the session is read afresh.
        let messages = self.api.conversation(&session.id).await?;
        let memory = self.api.memory(&session.id).await?;
        let paused = match &session.last_execution_id {
            Some(id) => self.api.execution(id).await?.status == "paused",
            None => false,
        };
        println!(
            "switched to {}: {} message(s), agent memory: {} step(s) restored ({})",
            session.label(),
            messages.len(),
            memory.steps.len(),
            memory.restored
        );
        let skip = messages.len().saturating_sub(RECENT_MESSAGES);
        if skip > 0 {
            println!("  ... {skip} earlier message(s): /history shows them all");
        }
        for message in &messages[skip..] {
            self.print_message(&message.role, &message.content);
        }
        self.select(session);
        self.paused = paused;
        if paused {
            println!("(the agent is waiting for your answer to its question above)");
        }
        Ok(())
    }

    fn print_message(&self, role: &str, content: &str) {
        let who = match role {
            "user" => "you",
            "assistant" => "agent",
            other => other,
        };
        let mut lines = content.lines();
        let first = lines.next().unwrap_or("");
        if self.tty {
            println!("  \x1b[1m{who}:\x1b[0m {first}");
        } else {
            println!("  {who}: {first}");
        }
        for line in lines {
            println!("    {line}");
        }
    }

    async fn list(&mut self) -> anyhow::Result<()> {
        let sessions = self.api.sessions().await?;
        if sessions.is_empty() {
            println!("no sessions yet: type a message or /new NAME");
            return Ok(());
        }
        let current = self.current.as_ref().map(|s| s.id.clone());
        let rows: Vec<Vec<String>> = sessions
            .iter()
            .map(|s| {
                let mark = if Some(&s.id) == current.as_ref() {
                    "*"
                } else {
                    " "
                };
                vec![
                    mark.to_string(),
                    s.label().to_string(),
                    s.status.clone(),
                    s.message_count.to_string(),
                    short_time(&s.updated_at),
                ]
            })
            .collect();
        crate::table::print(&["", "NAME", "STATUS", "MESSAGES", "UPDATED"], &rows);
        Ok(())
    }

    fn current(&self) -> anyhow::Result<Session> {
        self.current
            .clone()
            .context("no session selected: /new NAME starts one, /switch NAME picks one")
    }

    async fn history(&mut self) -> anyhow::Result<()> {
        let session = self.current()?;
        let messages = self.api.conversation(&session.id).await?;
        println!(
            "history of {} ({} message(s)):",
            session.label(),
            messages.len()
        );
        for message in &messages {
            self.print_message(&message.role, &message.content);
        }
        Ok(())
    }

    async fn export(&mut self, file: Option<&str>) -> anyhow::Result<()> {
        let session = self.current()?;
        let document = self.api.export(&session.id).await?;
        let mut text = serde_json::to_string_pretty(&document)?;
        text.push('\n');
        if file == Some("-") {
            print!("{text}");
            return Ok(());
        }
        let path = file
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}.json", session.label()));
        std::fs::write(&path, text).with_context(|| format!("cannot write {path}"))?;
        let count = |key: &str| document[key].as_array().map_or(0, Vec::len);
        println!(
            "exported {} to {path} ({} messages, {} executions, {} steps)",
            session.label(),
            count("messages"),
            count("executions"),
            count("steps")
        );
        Ok(())
    }

    async fn delete(&mut self, name: &str) -> anyhow::Result<()> {
        let Some(session) = self.api.find_session(name).await? else {
            anyhow::bail!("no session `{name}` (see /list)");
        };
        self.api.delete_session(&session.id).await?;
        if self.current.as_ref().is_some_and(|c| c.id == session.id) {
            self.current = None;
            self.paused = false;
        }
        println!("deleted session {}", session.label());
        Ok(())
    }

    /// Sends a line to the current session (a new one when none is selected) and follows
    /// the execution it starts, queues or resumes until it ends or pauses.
    async fn say(&mut self, text: &str) -> anyhow::Result<Flow> {
        if self.current.is_none() {
            self.new_session(None).await?;
        }
        let session = self.current()?;
        let posted = self
            .api
            .send_message(&session.id, text, self.agent.as_deref())
            .await?;
        self.paused = false;
        match self.follow(&session, &posted).await? {
            Outcome::Finished => Ok(Flow::Continue),
            Outcome::Paused => {
                self.paused = true;
                Ok(Flow::Continue)
            }
            Outcome::Quit => Ok(Flow::Quit),
        }
    }

    async fn follow(&mut self, session: &Session, posted: &Posted) -> anyhow::Result<Outcome> {
        let execution_id = posted.execution.id.clone();
        let mut stream = self
            .api
            .events(&session.id, self.last_event_of(&session.id))
            .await?;
        let mut live = LiveView::new(self.tty);
        // Events of earlier runs replay first: this run's start after our message.
        let mut started = false;
        let mut last_interrupt: Option<Instant> = None;
        let mut retries = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        // Piped input: whether this execution started, and since when the input has ended
        // while it had not.
        let mut running = false;
        let mut queued_since_end: Option<Instant> = None;
        let mut queued_check = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                next = stream.next() => {
                    let event = match next {
                        Ok(Some(event)) => event,
                        broken => {
                            retries += 1;
                            if retries > STREAM_RETRIES {
                                live.clear();
                                let why = match broken {
                                    Err(e) => format!("{e:#}"),
                                    _ => "the server closed the event stream".to_string(),
                                };
                                anyhow::bail!("lost the execution's events: {why}");
                            }
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(retries))).await;
                            stream = self.api.events(&session.id, self.last_event_of(&session.id)).await?;
                            continue;
                        }
                    };
                    retries = 0;
                    if let Ok(id) = event.id.trim().parse::<i64>() {
                        self.last_event.insert(session.id.clone(), id);
                    }
                    let Ok(data) = serde_json::from_str::<EventData>(&event.data) else {
                        continue;
                    };
                    if !started {
                        started = data.message_id.as_deref() == Some(posted.message.id.as_str());
                        continue;
                    }
                    if data.execution_id.as_deref() != Some(execution_id.as_str()) {
                        continue;
                    }
                    running |= data.event_type == "execution.started";
                    if let Some(outcome) = live.event(&data) {
                        return Ok(outcome);
                    }
                }
                _ = tick.tick(), if self.tty => live.spin(),
                _ = queued_check.tick(), if !self.tty && !running => {
                    if !self.input_ended.load(Ordering::SeqCst) {
                        continue;
                    }
                    let since = *queued_since_end.get_or_insert_with(Instant::now);
                    if since.elapsed() >= QUEUED_AFTER_END {
                        live.clear();
                        eprintln!(
                            "stepwise chat: the input has ended and execution {execution_id} is still queued ({}); it stays queued",
                            match self.agent.as_deref() {
                                Some(agent) => format!("does a worker run agent `{agent}`? see GET /v1/agents"),
                                None => "no runner has taken it yet".to_string(),
                            }
                        );
                        return Ok(Outcome::Quit);
                    }
                }
                Some(()) = self.interrupts.recv() => {
                    if last_interrupt.is_some_and(|at| at.elapsed() < DOUBLE_CTRL_C) {
                        live.clear();
                        return Ok(Outcome::Quit);
                    }
                    last_interrupt = Some(Instant::now());
                    live.line("cancelling... (Ctrl-C again to quit)");
                    match self.api.cancel(&execution_id).await {
                        Ok(_) => {}
                        Err(e) => live.line(&format!("error: {e:#}")),
                    }
                }
            }
        }
    }

    fn last_event_of(&self, session_id: &str) -> i64 {
        self.last_event.get(session_id).copied().unwrap_or(0)
    }
}

/// What one step showed so far.
#[derive(Default)]
struct StepLine {
    tool: Option<String>,
    observation: Option<String>,
    summary: Option<String>,
}

/// The running execution on screen: one line per finished step, a spinner line (on a
/// terminal) for the step in progress, then the answer.
struct LiveView {
    tty: bool,
    status: String,
    frame: usize,
    drawn: bool,
    steps: HashMap<u64, StepLine>,
    /// A finished step without a tool, printed once its summary arrives.
    pending: Option<(u64, bool)>,
}

impl LiveView {
    fn new(tty: bool) -> Self {
        LiveView {
            tty,
            status: "waiting for the agent".into(),
            frame: 0,
            drawn: false,
            steps: HashMap::new(),
            pending: None,
        }
    }

    fn spin(&mut self) {
        self.frame = (self.frame + 1) % SPINNER.len();
        let status = clip(&self.status, 100);
        print!("\r\x1b[2K\x1b[36m{}\x1b[0m {status}", SPINNER[self.frame]);
        let _ = std::io::stdout().flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        // On a terminal, also wipes a `^C` the terminal echoed.
        if self.drawn || self.tty {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
            self.drawn = false;
        }
    }

    fn line(&mut self, text: &str) {
        self.clear();
        println!("{text}");
    }

    fn step(&mut self, number: u64) -> &mut StepLine {
        self.steps.entry(number).or_default()
    }

    /// Prints a finished step as one line.
    fn print_step(&mut self, n: u64, failed: bool) {
        let step = self.steps.remove(&n).unwrap_or_default();
        let detail = match (step.tool, step.observation) {
            (Some(tool), Some(observation)) => format!("{tool} → {}", clip(&observation, 80)),
            (Some(tool), None) => tool,
            (None, _) => step
                .summary
                .unwrap_or_else(|| if failed { "failed" } else { "done" }.to_string()),
        };
        let text = format!("  step {n} · {detail}");
        if self.tty {
            self.line(&format!("\x1b[2m{text}\x1b[0m"));
        } else {
            self.line(&text);
        }
    }

    /// Takes one event of the execution; `Some` when the execution ended or paused.
    fn event(&mut self, data: &EventData) -> Option<Outcome> {
        let number = data.metadata["step_number"].as_u64();
        let tool = data.metadata["tool"].as_str().map(str::to_string);
        // A step waiting for its summary is printed without it once anything else comes.
        let is_summary = data.event_type == "message.created"
            && data.metadata["role"].as_str() == Some("info")
            && data.content.starts_with("Step ");
        if data.event_type != "message.delta"
            && !is_summary
            && let Some((n, failed)) = self.pending.take()
        {
            self.print_step(n, failed);
        }
        match data.event_type.as_str() {
            "execution.queued" => self.status = "queued behind another run".into(),
            "execution.started" => self.status = "thinking".into(),
            "step.started" => {
                if let Some(n) = number {
                    self.status = format!("step {n}");
                }
            }
            "tool.called" => {
                if let (Some(n), Some(tool)) = (number, tool) {
                    self.status = format!("step {n} · calling {tool}");
                    self.step(n).tool = Some(tool);
                }
            }
            "tool.completed" => {
                if let Some(n) = number {
                    // "calculator returned 5" → "5"; "calculator failed: x" → "failed: x".
                    let observation = match &tool {
                        Some(tool) => data
                            .content
                            .strip_prefix(&format!("{tool} returned "))
                            .or_else(|| data.content.strip_prefix(&format!("{tool} ")))
                            .unwrap_or(&data.content),
                        None => &data.content,
                    };
                    self.step(n).observation = Some(observation.to_string());
                }
            }
            "message.created" => {
                // The engine's one-line summary of a step: "Step N: called calculator".
                if data.metadata["role"].as_str() == Some("info")
                    && let Some(rest) = data.content.strip_prefix("Step ")
                    && let Some((n, summary)) = rest.split_once(": ")
                    && let Ok(n) = n.parse::<u64>()
                {
                    self.step(n).summary = Some(summary.to_string());
                    if let Some((pending, failed)) = self.pending
                        && pending == n
                    {
                        self.pending = None;
                        self.print_step(n, failed);
                    }
                }
            }
            "message.delta" => {
                let text = format!("{}{}", self.status, data.content);
                let tail: String = text
                    .chars()
                    .rev()
                    .take(120)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                self.status = tail;
            }
            "step.completed" => {
                if let Some(n) = number {
                    let failed = data.content.contains("failed");
                    let step = self.steps.entry(n).or_default();
                    if tool.is_some() {
                        step.tool = tool;
                    }
                    // A step without a tool waits for its summary ("final answer").
                    if step.tool.is_some() || step.summary.is_some() {
                        self.print_step(n, failed);
                    } else {
                        self.pending = Some((n, failed));
                    }
                    self.status = format!("step {} · thinking", n + 1);
                }
            }
            "execution.paused" => {
                let question = data.metadata["question"]
                    .as_str()
                    .unwrap_or(&data.content)
                    .to_string();
                self.line(&format!("? {question}"));
                if self.tty {
                    println!("(type your answer)");
                }
                return Some(Outcome::Paused);
            }
            "execution.completed" => {
                self.clear();
                println!("{}", data.content);
                return Some(Outcome::Finished);
            }
            "execution.failed" => {
                self.line(&format!("the agent failed: {}", data.content));
                return Some(Outcome::Finished);
            }
            "execution.cancelled" => {
                self.line("cancelled");
                return Some(Outcome::Finished);
            }
            _ => {}
        }
        None
    }
}

/// On one line, at most `max` characters.
fn clip(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let one_line = one_line.trim();
    if one_line.chars().count() <= max {
        return one_line.to_string();
    }
    let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// `2026-01-06T12:34:56.123456Z` → `2026-01-06 12:34:56`.
fn short_time(rfc3339: &str) -> String {
    let trimmed: String = rfc3339.chars().take(19).collect();
    trimmed.replace('T', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_and_short_time() {
        assert_eq!(clip("a\nb", 10), "a b");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(
            short_time("2026-01-06T12:34:56.123456Z"),
            "2026-01-06 12:34:56"
        );
    }
}
