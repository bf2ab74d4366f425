//! `stepwise chat` end to end: the real binary through a real pseudo-terminal (tmux), in a
//! pipe on the local database, and in a pipe against a running `stepwise serve`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(90);
const BIN: &str = env!("CARGO_BIN_EXE_stepwise");

/// Settings of the developer's environment that must not leak into a test.
const CLEARED: &[&str] = &[
    "STEPWISE_DATABASE_URL",
    "STEPWISE_CONFIG",
    "STEPWISE_TENANT",
    "STEPWISE_LISTEN",
    "STEPWISE_SERVER",
    "STEPWISE_API_KEY",
    "STEPWISE_LLM_BASE_URL",
    "STEPWISE_LLM_MODEL",
    "STEPWISE_LLM_API_KEY",
];

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn db(&self) -> String {
        format!("sqlite://{}", self.path().join("chat.db").display())
    }

    fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command.current_dir(self.path());
        for var in CLEARED {
            command.env_remove(var);
        }
        command
            .env("STEPWISE_DATA_DIR", self.path().join("data"))
            .env("STEPWISE_DEMO_STEP_MS", "20")
            .env("STEPWISE_LOG", "warn");
        command
    }

    /// Runs `stepwise ARGS` with `input` on a pipe as its standard input.
    fn piped(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stepwise");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        wait_output(child)
    }

    fn export(&self, session: &str) -> Value {
        let out = self
            .command()
            .args(["--database", &self.db(), "sessions", "export", session])
            .output()
            .expect("run export");
        assert!(
            out.status.success(),
            "export {session}: {}",
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the export is JSON")
    }
}

/// Waits for a child with a deadline (a hung chat fails the test instead of hanging it).
fn wait_output(mut child: Child) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "stepwise chat did not exit:\nstdout: {}\nstderr: {}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).collect()
}

/// The tool names of every step in an exported session document.
fn tools_called(document: &Value) -> Vec<String> {
    document["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .flat_map(|step| step["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|call| call["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_pipe_drives_the_chat_on_the_local_database() {
    let sandbox = Sandbox::new();
    let out = sandbox.piped(
        &["--database", &sandbox.db(), "chat"],
        "2+3\n/list\nask me\nblue\n/bogus\n/quit\n",
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let printed = lines(&stdout);
    assert!(
        printed.contains(&"5"),
        "the answer is printed:\n{stdout}\n{stderr}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("step 1 · calculator → 5")),
        "the step is shown as one line:\n{stdout}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("* ") && l.contains("chat-") && l.contains("active")),
        "/list marks the default session it created:\n{stdout}"
    );
    assert!(
        printed.contains(&"? What should I use?") && printed.contains(&"You said: blue"),
        "a paused run asks, and the next line answers it:\n{stdout}"
    );
    assert!(
        stderr.contains("unknown command /bogus") && stderr.contains("/help"),
        "an unknown command gets a helpful message: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The unknown command is reported in the exit status, for scripts.
    assert_eq!(out.status.code(), Some(1), "{stderr}");

    let out = sandbox.piped(&["--database", &sandbox.db(), "chat"], "2+3\n/quit\n");
    assert!(
        out.status.success(),
        "a clean script exits 0: {}",
        text(&out.stderr)
    );
    assert!(lines(&text(&out.stdout)).contains(&"5"));
}

struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(sandbox: &Sandbox) -> Serve {
        Serve::listening(sandbox, &["127.0.0.1:0"])
    }

    /// `serve --listen L` for each of `listens`; `url` is the first one printed.
    fn listening(sandbox: &Sandbox, listens: &[&str]) -> Serve {
        let mut child = sandbox
            .command()
            .args(["--database", &sandbox.db(), "serve"])
            .args(listens.iter().flat_map(|l| ["--listen", l]))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start stepwise serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("serve printed its address")
                .expect("a line");
            if let Some(url) = line.strip_prefix("Stepwise listening on ") {
                break url.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Serve { child, url }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_chat_reaches_a_server_over_its_unix_socket() {
    let sandbox = Sandbox::new();
    let socket = sandbox.path().join("stepwise.sock");
    let unix = format!("unix:{}", socket.display());
    let serve = Serve::listening(&sandbox, &[&unix, "127.0.0.1:0"]);
    assert_eq!(serve.url, unix);
    let out = sandbox.piped(
        &["chat", "--server", &unix, "--session", "over-a-socket"],
        "2+3\n/quit\n",
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert!(lines(&stdout).contains(&"5"), "{stdout}");
    drop(serve);
    let exported = sandbox.export("over-a-socket");
    assert!(exported.to_string().contains("2+3"), "{exported}");
    // A server that stopped no longer answers there: the chat says where it looked.
    let out = sandbox.piped(&["chat", "--server", &unix], "hello\n");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&unix), "{}", text(&out.stderr));
}

#[test]
fn a_pipe_drives_the_chat_against_a_running_server() {
    let sandbox = Sandbox::new();
    let serve = Serve::start(&sandbox);
    let out = sandbox.piped(
        &["chat", "--server", &serve.url, "--session", "remote"],
        "2+3\n/history\n/quit\n",
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    let printed = lines(&stdout);
    assert!(printed.contains(&"5"), "{stdout}");
    assert!(
        printed.contains(&"you: 2+3") && printed.contains(&"agent: 5"),
        "{stdout}"
    );

    // A message for an agent type no worker ever announced (a typo): refused with the reason,
    // and the chat says so and fails.
    let out = sandbox.piped(
        &["chat", "--server", &serve.url, "--agent", "ghost-worker"],
        "hello\n",
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("unknown_agent") && stderr.contains("'ghost-worker'"),
        "{stderr}"
    );

    // A message for an agent type a worker announced but none runs now: at the end of the
    // input the chat says it stays queued and exits, instead of waiting for a worker forever.
    announce_then_stop(&serve.url, "gone-worker");
    let out = sandbox.piped(
        &["chat", "--server", &serve.url, "--agent", "gone-worker"],
        "hello\n",
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("still queued") && stderr.contains("gone-worker"),
        "{stderr}"
    );

    // A server that is not there is one clear line and a failure status.
    drop(serve);
    let out = sandbox.piped(&["chat", "--server", "http://127.0.0.1:9"], "2+3\n");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot reach the Stepwise server") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// A tmux server of the test's own (private socket), killed when the test ends.
struct Tmux {
    socket: String,
    target: String,
}

impl Tmux {
    fn start(name: &str, command: &str) -> Tmux {
        let found = Command::new("tmux").arg("-V").output();
        assert!(
            found.as_ref().is_ok_and(|o| o.status.success()),
            "tmux is needed for the pseudo-terminal test of `stepwise chat` (.ci/run installs it: apt-get install tmux)"
        );
        let tmux = Tmux {
            socket: format!("stepwise-chat-test-{}-{name}", std::process::id()),
            target: "chat".into(),
        };
        // The pane stays after the chat exits, so its exit status can be read.
        tmux.run(&[
            "start-server",
            ";",
            "set-option",
            "-wg",
            "remain-on-exit",
            "on",
            ";",
            "new-session",
            "-d",
            "-s",
            &tmux.target,
            "-x",
            "200",
            "-y",
            "50",
            command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Waits for the chat to end (the shell around it prints its exit status).
    fn wait_exit(&self, what: &str) -> String {
        let screen = self.wait_for(&format!("{what} to end the chat"), |s| s.contains(EXITED));
        let at = screen.rfind(EXITED).unwrap_or(0) + EXITED.len();
        screen[at..].lines().next().unwrap_or("").trim().to_string()
    }

    /// Types a line and presses Enter.
    fn type_line(&self, line: &str) {
        self.run(&["send-keys", "-t", &self.target, "-l", line]);
        self.run(&["send-keys", "-t", &self.target, "Enter"]);
    }

    /// The whole pane, scrollback included.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", &self.target])
    }

    /// Polls the pane until `ready` holds, or fails with what the screen showed.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the chat shows its `prompt` for the `count`-th time, as the last line.
    fn wait_prompt(&self, prompt: &str, count: usize) -> String {
        let marker = format!("{prompt}>");
        self.wait_for(&format!("prompt {marker} #{count}"), |screen| {
            let lines: Vec<&str> = screen.lines().map(str::trim).collect();
            let last = lines.iter().rev().find(|l| !l.is_empty());
            lines.iter().filter(|l| l.starts_with(&marker)).count() >= count
                && last == Some(&marker.as_str())
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// What the shell around the chat prints when it ends, before the exit status.
const EXITED: &str = "chat exited with status ";

/// A shell command line running the chat on the sandbox's database in a terminal. The
/// shell catches SIGINT (so Ctrl-C reaches the chat alone, whatever the shell) and prints
/// the chat's exit status; the pane stays after the shell exits.
fn chat_command_line(sandbox: &Sandbox, args: &str) -> String {
    let unset: String = CLEARED.iter().map(|v| format!("-u {v} ")).collect();
    format!(
        "cd {dir} && trap : INT; env {unset}STEPWISE_DATA_DIR={data} STEPWISE_DEMO_STEP_MS=20 \
         STEPWISE_LOG=warn {bin} --database {db} chat {args}; echo \"{EXITED}$?\"",
        dir = sh_path(sandbox.path()),
        data = sh_path(&sandbox.path().join("data")),
        bin = sh_quote(BIN),
        db = sh_quote(&sandbox.db()),
    )
}

fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn sh_path(path: &Path) -> String {
    sh_quote(&path.display().to_string())
}

#[test]
fn a_terminal_chat_switches_sessions_without_carrying_memory_over() {
    let sandbox = Sandbox::new();
    let command = chat_command_line(&sandbox, "--session alpha");
    let tmux = Tmux::start("switch", &command);

    let screen = tmux.wait_prompt("alpha", 1);
    assert!(screen.contains("new session alpha"), "{screen}");

    tmux.type_line("2+3");
    let screen = tmux.wait_prompt("alpha", 2);
    assert!(
        lines(&screen).contains(&"5"),
        "alpha answers 2+3:\n{screen}"
    );
    assert!(
        screen.contains("step 1 · calculator → 5"),
        "the step shows live as one line:\n{screen}"
    );

    tmux.type_line("/new beta");
    let screen = tmux.wait_prompt("beta", 1);
    assert!(screen.contains("new session beta"), "{screen}");
    tmux.type_line("time");
    let screen = tmux.wait_prompt("beta", 2);
    assert!(
        screen.contains("step 1 · clock →"),
        "beta reads the clock:\n{screen}"
    );

    tmux.type_line("/switch alpha");
    let screen = tmux.wait_prompt("alpha", 3);
    assert!(
        screen.contains("switched to alpha: 2 message(s)"),
        "{screen}"
    );

    tmux.type_line("/history");
    let screen = tmux.wait_prompt("alpha", 4);
    let at = screen
        .rfind("history of alpha")
        .unwrap_or_else(|| panic!("/history printed its header:\n{screen}"));
    let history: Vec<&str> = lines(&screen[at..])
        .into_iter()
        .take_while(|l| !l.starts_with("alpha>"))
        .collect();
    assert_eq!(
        history,
        vec!["history of alpha (2 message(s)):", "you: 2+3", "agent: 5"],
        "alpha's history only:\n{screen}"
    );

    // Ctrl-C once cancels the running execution; the chat stays.
    tmux.type_line("steps: 1000");
    tmux.wait_for("the long run's second step", |s| {
        s.contains("step 2 · calculator → 2")
    });
    tmux.run(&["send-keys", "-t", &tmux.target, "C-c"]);
    let screen = tmux.wait_prompt("alpha", 5);
    assert!(
        lines(&screen).contains(&"cancelled"),
        "Ctrl-C cancels the run:\n{screen}"
    );

    tmux.type_line("/quit");
    let ended = tmux.wait_exit("/quit");
    assert_eq!(ended, "0", "/quit exits 0:\n{}", tmux.screen());
    drop(tmux);

    // The agent memory of alpha holds its own steps and none of beta's.
    let alpha = sandbox.export("alpha");
    let alpha_tools = tools_called(&alpha);
    assert!(
        alpha_tools.contains(&"calculator".to_string()),
        "{alpha_tools:?}"
    );
    assert!(
        !alpha_tools.contains(&"clock".to_string()),
        "no step of beta in alpha: {alpha_tools:?}"
    );
    let beta_tools = tools_called(&sandbox.export("beta"));
    assert_eq!(beta_tools, vec!["clock".to_string()]);
}

#[test]
fn ctrl_c_twice_quits_a_running_terminal_chat() {
    let sandbox = Sandbox::new();
    let command = chat_command_line(&sandbox, "--session long");
    let tmux = Tmux::start("ctrl-c", &command);
    tmux.wait_prompt("long", 1);
    tmux.type_line("steps: 1000");
    tmux.wait_for("the run's second step", |s| {
        s.contains("step 2 · calculator → 2")
    });
    // Signals sent together may merge into one: the second follows the first's answer.
    tmux.run(&["send-keys", "-t", &tmux.target, "C-c"]);
    tmux.wait_for("the first Ctrl-C to cancel", |s| {
        s.contains("cancelling...")
    });
    tmux.run(&["send-keys", "-t", &tmux.target, "C-c"]);
    let ended = tmux.wait_exit("two Ctrl-C");
    assert_eq!(ended, "0", "{}", tmux.screen());
    drop(tmux);
    // The run did not go on after the chat left: it was cancelled, or went back to the
    // queue at a step boundary (to resume with the next chat or server).
    let document = sandbox.export("long");
    let status = document["executions"][0]["status"].as_str().unwrap_or("");
    assert!(
        ["cancelled", "pending"].contains(&status),
        "the run is {status}"
    );
}

/// A worker of `agent` calls once (a claim that takes nothing), then stops cleanly: the type
/// is known, and no worker of it is online.
fn announce_then_stop(url: &str, agent: &str) {
    worker_call(url, agent, true);
}

/// A worker `gone` announces `agent` (a claim that takes nothing) and, with `stop`, says it
/// stopped (`DELETE /v1/workers/gone`).
fn worker_call(url: &str, agent: &str, stop: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let claimed = http
            .post(format!("{url}/v1/workers/claim"))
            .json(
                &serde_json::json!({"worker_id": "gone", "slots": 0, "wait_s": 0,
                "agents": [{"type": agent}]}),
            )
            .send()
            .await
            .expect("claim");
        assert_eq!(claimed.status(), 200);
        if stop {
            let stopped = http
                .delete(format!("{url}/v1/workers/gone"))
                .send()
                .await
                .expect("stop");
            assert_eq!(stopped.status(), 204);
        }
    });
}

/// A worker process's agent, in a thread: claims one execution of `agent` from the
/// server, posts a step and completes it with "Hello, <the message>".
fn greeter_worker(url: &str, agent: &'static str) -> std::thread::JoinHandle<String> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let http = reqwest::Client::new();
            let deadline = Instant::now() + DEADLINE;
            let claim = loop {
                assert!(Instant::now() < deadline, "no execution for the worker");
                let answer: Value = http
                    .post(format!("{url}/v1/workers/claim"))
                    .json(
                        &serde_json::json!({"worker_id": "chat-test", "slots": 1, "wait_s": 5,
                        "agents": [{"type": agent, "description": "Says hello"}]}),
                    )
                    .send()
                    .await
                    .expect("claim")
                    .json()
                    .await
                    .expect("claim body");
                if let Some(claim) = answer["items"].get(0) {
                    break claim.clone();
                }
            };
            let id = claim["execution"]["id"].as_str().expect("id").to_string();
            let lease = claim["lease"].as_str().expect("lease").to_string();
            let input = claim["input_text"].as_str().unwrap_or_default().to_string();
            let post = |path: &str, body: Value| {
                http.post(format!("{url}/v1/executions/{id}/{path}"))
                    .header("Stepwise-Lease", &lease)
                    .json(&body)
                    .send()
            };
            let step = post(
                "steps",
                serde_json::json!({"model_output": "Greeting", "observations": "said hello"}),
            )
            .await
            .expect("step");
            assert_eq!(step.status(), 201);
            let answer = format!("Hello, {input}");
            let done = post(
                "complete",
                serde_json::json!({"output": answer, "final_message": answer}),
            )
            .await
            .expect("complete");
            assert_eq!(done.status(), 200);
            claim["execution"]["agent_type"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    })
}

#[test]
fn the_chat_talks_to_a_workers_agent() {
    let sandbox = Sandbox::new();
    let serve = Serve::start(&sandbox);
    // Its type announced first, as a worker started before the chat has.
    worker_call(&serve.url, "greeter", true);
    let worker = greeter_worker(&serve.url, "greeter");
    let out = sandbox.piped(
        &[
            "chat",
            "--server",
            &serve.url,
            "--agent",
            "greeter",
            "--session",
            "hi",
        ],
        "Ada\n/agents\n/quit\n",
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert_eq!(worker.join().expect("worker"), "greeter");
    let printed = lines(&stdout);
    assert!(printed.contains(&"Hello, Ada"), "{stdout}");
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("* greeter (1 worker online)")),
        "{stdout}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.trim_start().starts_with("demo (built-in)")),
        "{stdout}"
    );
}
