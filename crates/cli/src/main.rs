//! The `stepwise` binary: the server, session tools, API keys, retention, migrations and the
//! storage benchmark. Reads like the architecture: settings → database → command.

// Tests may unwrap: a failure there is the assertion.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod agents;
mod chat;
mod cleanup;
mod config;
mod keys;
mod serve;
mod sessions;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use stepwise_bench::commands as bench;
use stepwise_cli_support::db::DatabaseUrl;
use stepwise_cli_support::with_store;
use stepwise_cli_support::{db, table};
use stepwise_store::prelude::*;

const AFTER_HELP: &str = "\
Settings come from flags, then environment variables, then a stepwise.toml in the working
directory (or the file STEPWISE_CONFIG names), whose keys are the flags' long names
(`database = \"sqlite://stepwise.db\"`, `listen = \"127.0.0.1:7777\"`, `completed_days = 90`).";

#[derive(Parser, Debug)]
#[command(name = "stepwise", version, about = "Stepwise: durable sessions for AI agents", after_help = AFTER_HELP)]
struct Cli {
    /// The database: `sqlite://PATH` (a bare path is SQLite too), `postgres://...` or
    /// `files://DIR`. Default: `stepwise.db` in the data directory.
    #[arg(long, global = true, env = "STEPWISE_DATABASE_URL", value_name = "URL")]
    database: Option<String>,
    /// Where the default database lives. Default: $XDG_DATA_HOME/stepwise, else
    /// ~/.local/share/stepwise.
    #[arg(long, global = true, env = "STEPWISE_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Log lines on stderr: `text`, or `json` (one object a line, with the request id of
    /// the HTTP request a line belongs to).
    #[arg(
        long,
        global = true,
        env = "STEPWISE_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    log_format: LogFormat,
    /// When a SQLite write is acknowledged: `full` (default) syncs each group commit to
    /// disk first, so an acknowledged write survives a power cut; `process` leaves the
    /// sync to the OS, so it survives a crash of the process but not of the machine.
    /// PostgreSQL always acknowledges after its own fsync. `bench steps` runs both
    /// unless one is given.
    #[arg(
        long,
        global = true,
        env = "STEPWISE_DURABILITY",
        value_enum,
        value_name = "LEVEL"
    )]
    durability: Option<db::DurabilityArg>,
    /// SQLite: past this size (MiB) the WAL is checkpointed and truncated by the writer;
    /// after ten seconds without writes it is truncated to zero.
    #[arg(
        long,
        global = true,
        env = "STEPWISE_WAL_LIMIT_MB",
        default_value_t = db::DEFAULT_WAL_LIMIT_MB,
        value_name = "MIB"
    )]
    wal_limit_mb: u64,
    /// Bytes (MiB) of decoded agent memory and messages of recently read sessions kept in
    /// memory (least recently used go first; 0 turns the cache off).
    #[arg(
        long,
        global = true,
        env = "STEPWISE_SESSION_CACHE_MB",
        default_value_t = 64,
        value_name = "MIB"
    )]
    session_cache_mb: u64,
    /// PostgreSQL: how long to keep trying to connect (with backoff, logging each try)
    /// before giving up. Default: 60 for `serve`, 0 (one try) for other commands.
    #[arg(
        long,
        global = true,
        env = "STEPWISE_DB_WAIT_SECS",
        value_name = "SECS"
    )]
    db_wait_secs: Option<u64>,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs the HTTP server (API, event streams, web UI) and the execution workers.
    Serve(Box<serve::ServeArgs>),
    /// Applies the database's schema migrations and exits.
    Migrate,
    /// Lists, shows, exports, imports and deletes sessions.
    Sessions(sessions::SessionsArgs),
    /// A terminal chat with named sessions, on a running server (--server) or in-process.
    Chat(chat::ChatArgs),
    /// Creates, lists and revokes API keys.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Runs one retention pass: marks idle sessions abandoned, deletes expired ones.
    Cleanup(cleanup::CleanupArgs),
    /// Benchmarks: the storage workload (bench/workload.md), HTTP intake, fan-out, the idle
    /// cost, retention and the queue at depth; JSON on stdout, progress on stderr.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let (config_path, named) = config::config_path();
    let settings = config::read_settings(&config_path, named)?;
    let command = config::apply_settings(Cli::command(), &settings)?;
    let matches = command.get_matches();
    // The benchmark never touches the user's database unless one is named on its command line.
    let database_on_command_line = database_source(&matches) == Some(ValueSource::CommandLine);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());

    let is_serve = matches!(cli.command, Command::Serve(_));
    init_tracing(if is_serve { "info" } else { "warn" }, cli.log_format);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(dispatch(cli, database_on_command_line))
}

/// Where the `--database` value came from, looking through the subcommands it propagates to.
fn database_source(matches: &clap::ArgMatches) -> Option<ValueSource> {
    let mut current = matches;
    let mut source = current.value_source("database");
    while let Some((_, sub)) = current.subcommand() {
        if let Some(found) = sub.value_source("database") {
            source = Some(match (source, found) {
                (Some(ValueSource::CommandLine), _) => ValueSource::CommandLine,
                (_, found) => found,
            });
        }
        current = sub;
    }
    source
}

fn init_tracing(default_level: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("STEPWISE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only for a terminal: a log sent to a file or a pipe is plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        // One JSON object a line: the event's fields at the top level, and the fields of
        // the span it happened in (an HTTP request's `request_id`) under "span".
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

async fn dispatch(cli: Cli, database_on_command_line: bool) -> anyhow::Result<()> {
    if let Command::Bench(args) = cli.command {
        let database = if database_on_command_line {
            cli.database.as_deref()
        } else {
            None
        };
        let levels = match cli.durability {
            Some(level) => vec![level.into()],
            None => vec![
                stepwise_store_sqlite::Durability::Full,
                stepwise_store_sqlite::Durability::Process,
            ],
        };
        return bench::run(args, database, &levels).await;
    }
    // A chat with a server needs no database of its own.
    if let Command::Chat(args) = &cli.command
        && args.server.as_deref().is_some_and(|s| !s.trim().is_empty())
    {
        return chat::run_remote(args.clone()).await;
    }
    let url = DatabaseUrl::resolve(cli.database.as_deref(), cli.data_dir.as_deref())?;
    let is_serve = matches!(cli.command, Command::Serve(_));
    // One server per SQLite file: a second one would run executions and events that the
    // first one's subscribers never see. Held until the process exits.
    let _serve_lock = match (&url, is_serve) {
        (DatabaseUrl::Sqlite(path), true) => Some(db::lock_for_serve(path)?),
        _ => None,
    };
    let options = db::OpenOptions {
        durability: cli.durability.map(Into::into).unwrap_or_default(),
        wal_limit_bytes: cli.wal_limit_mb.max(1).saturating_mul(1024 * 1024),
        session_cache_bytes: usize::try_from(cli.session_cache_mb.saturating_mul(1024 * 1024))
            .unwrap_or(usize::MAX),
        wait: std::time::Duration::from_secs(cli.db_wait_secs.unwrap_or(if is_serve {
            db::DEFAULT_SERVE_DB_WAIT_SECS
        } else {
            0
        })),
    };
    let opened = db::open(&url, &options)
        .await
        .with_context(|| format!("database {url}"))?;
    match cli.command {
        Command::Serve(args) => with_store!(opened, |store| serve::run(store, *args)),
        Command::Migrate => {
            let applied = opened.applied_migrations();
            with_store!(opened, |store| async move {
                store.ping().await?;
                if applied.is_empty() {
                    println!("{url}: the schema was already up to date; nothing to apply");
                } else {
                    println!("{url}: applied {} migration(s):", applied.len());
                    for migration in &applied {
                        println!("  {migration}");
                    }
                }
                Ok(())
            })
        }
        Command::Sessions(args) => with_store!(opened, |store| sessions::run(&store, args)),
        Command::Chat(args) => with_store!(opened, |store| chat::run_local(store, args)),
        Command::Keys { command } => with_store!(opened, |store| keys::run(&store, command)),
        Command::Cleanup(args) => with_store!(opened, |store| cleanup::run(&store, args)),
        Command::Bench(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_file_values_are_defaults_below_flags() {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("database".to_string(), "sqlite://from-file.db".to_string());
        settings.insert("completed_days".to_string(), "7".to_string());
        let command = config::apply_settings(Cli::command(), &settings).unwrap();
        let matches = command
            .clone()
            .try_get_matches_from(["stepwise", "cleanup"])
            .unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.database.as_deref(), Some("sqlite://from-file.db"));
        let Command::Cleanup(args) = cli.command else {
            panic!("cleanup")
        };
        assert_eq!(args.retention.completed_days, 7);

        let matches = command
            .try_get_matches_from(["stepwise", "cleanup", "--database", "x.db"])
            .unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.database.as_deref(), Some("x.db"));
    }

    /// Settings-file keys are the flags' long names (docs/configuration.md): each argument's
    /// id is its long name with `_` for `-`.
    #[test]
    fn every_setting_is_named_as_its_flag() {
        fn check(command: &clap::Command, path: &str) {
            for arg in command.get_arguments() {
                if let Some(long) = arg.get_long() {
                    assert_eq!(
                        arg.get_id().as_str(),
                        long.replace('-', "_"),
                        "{path} --{long}: its settings key would differ from the flag"
                    );
                }
            }
            for sub in command.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&Cli::command(), "stepwise");
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("cors_origin".to_string(), "https://app.example".to_string());
        let command = config::apply_settings(Cli::command(), &settings).unwrap();
        let matches = command.try_get_matches_from(["stepwise", "serve"]).unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        assert_eq!(args.end_users.cors_origins, ["https://app.example"]);
    }

    #[test]
    fn unknown_settings_are_rejected() {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("databse".to_string(), "x".to_string());
        assert!(config::apply_settings(Cli::command(), &settings).is_err());
    }
}
