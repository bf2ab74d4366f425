//! `stepwise sessions ...`: list, show, export, import and delete sessions in the database.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use stepwise_core::document::{DocumentLimits, parse_document};
use stepwise_core::{Session, SessionStatus, parse_id};
use stepwise_store::{PageRequest, SessionFilter, Store, Tenant, export_session};

use crate::table;

#[derive(Args, Debug, Clone)]
pub struct SessionsArgs {
    /// The tenant whose sessions to work on.
    #[arg(
        long,
        global = true,
        env = "STEPWISE_TENANT",
        default_value = "local",
        value_name = "TENANT"
    )]
    pub tenant: String,
    #[command(subcommand)]
    pub command: SessionsCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum SessionsCommand {
    /// Lists sessions, most recently updated first.
    List {
        /// Only sessions with these statuses (comma-separated: active, completed, error,
        /// abandoned, archived, closed, deleted) or `all`. Default: every status but `deleted`.
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// Only sessions related to this type of object (with --related-id).
        #[arg(long, value_name = "TYPE")]
        related_type: Option<String>,
        /// Only sessions related to this object id.
        #[arg(long, value_name = "ID")]
        related_id: Option<String>,
        /// At most this many sessions (default: all).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Print `{"items": [Session...], "next_cursor": ...}` as the HTTP API does.
        #[arg(long)]
        json: bool,
    },
    /// Shows one session and its executions.
    Show {
        /// The session's id or name.
        session: String,
        /// Print the Session as the HTTP API does.
        #[arg(long)]
        json: bool,
    },
    /// Writes a session as one JSON document (messages, executions, steps, snapshots).
    Export {
        /// The session's id or name.
        session: String,
        /// Write to this file instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Reads a session document (from `sessions export`) into a new session; prints its id.
    Import {
        /// The document to read; `-` reads standard input.
        file: PathBuf,
        /// The user the imported session belongs to.
        #[arg(
            long,
            env = "STEPWISE_USER",
            default_value = "local",
            value_name = "USER"
        )]
        user: String,
    },
    /// Soft-deletes a session: its status becomes `deleted` (the cleaner removes it later).
    Delete {
        /// The session's id or name.
        session: String,
    },
}

pub async fn run<S: Store>(store: &S, args: SessionsArgs) -> anyhow::Result<()> {
    let tenant = Tenant::new(args.tenant.clone()).context("--tenant must not be empty")?;
    match args.command {
        SessionsCommand::List {
            status,
            related_type,
            related_id,
            limit,
            json,
        } => {
            list(
                store,
                &tenant,
                status.as_deref(),
                related_type,
                related_id,
                limit,
                json,
            )
            .await
        }
        SessionsCommand::Show { session, json } => show(store, &tenant, &session, json).await,
        SessionsCommand::Export { session, out } => export(store, &tenant, &session, out).await,
        SessionsCommand::Import { file, user } => import(store, &tenant, &user, &file).await,
        SessionsCommand::Delete { session } => {
            let found = resolve(store, &tenant, &session).await?;
            if !store.delete_session(&tenant, found.id).await? {
                bail!("no session `{session}` in tenant `{tenant}`");
            }
            println!("deleted session {}", found.id);
            Ok(())
        }
    }
}

/// Finds a session by id, else by name.
pub async fn resolve<S: Store>(
    store: &S,
    tenant: &Tenant,
    id_or_name: &str,
) -> anyhow::Result<Session> {
    if let Some(id) = parse_id(id_or_name)
        && let Some(session) = store.get_session(tenant, id).await?
    {
        return Ok(session);
    }
    if let Some(session) = store.find_session_by_name(tenant, id_or_name).await? {
        return Ok(session);
    }
    bail!("no session `{id_or_name}` in tenant `{tenant}`")
}

fn parse_statuses(text: &str) -> anyhow::Result<Vec<SessionStatus>> {
    if text.trim() == "all" {
        return Ok(SessionStatus::ALL.to_vec());
    }
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            SessionStatus::parse(s).with_context(|| {
                let known: Vec<&str> = SessionStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown status `{s}`; use one of {}", known.join(", "))
            })
        })
        .collect()
}

async fn list<S: Store>(
    store: &S,
    tenant: &Tenant,
    status: Option<&str>,
    related_type: Option<String>,
    related_id: Option<String>,
    limit: Option<u32>,
    json: bool,
) -> anyhow::Result<()> {
    let statuses = status.map(parse_statuses).transpose()?;
    if statuses.as_ref().is_some_and(Vec::is_empty) {
        bail!("--status names no status");
    }
    if limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    let filter = SessionFilter {
        statuses,
        related_type,
        related_id,
        user_id: None,
        metadata: Vec::new(),
    };
    let mut items: Vec<Session> = Vec::new();
    let mut cursor = None;
    let next_cursor = loop {
        let remaining = limit
            .map(|l| l.saturating_sub(items.len() as u32))
            .unwrap_or(u32::MAX);
        let page = store
            .list_sessions(
                tenant,
                filter.clone(),
                PageRequest {
                    limit: remaining.min(stepwise_store::MAX_PAGE_LIMIT),
                    cursor,
                },
            )
            .await?;
        items.extend(page.items);
        match page.next_cursor {
            Some(next) if limit.is_none_or(|l| (items.len() as u32) < l) => cursor = Some(next),
            other => break other,
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "items": items, "next_cursor": next_cursor }))?
        );
        return Ok(());
    }
    if items.is_empty() {
        println!("no sessions in tenant `{tenant}`");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                table::or_dash(s.name.as_deref()),
                s.status.to_string(),
                s.message_count.to_string(),
                s.updated_at.to_string(),
                table::clip(s.title.as_deref().unwrap_or("-"), 40),
                table::clip(s.first_message.as_deref().unwrap_or("-"), 40),
            ]
        })
        .collect();
    table::print(
        &[
            "ID",
            "NAME",
            "STATUS",
            "MESSAGES",
            "UPDATED",
            "TITLE",
            "FIRST MESSAGE",
        ],
        &rows,
    );
    if next_cursor.is_some() {
        println!("(more sessions: raise --limit to see them)");
    }
    Ok(())
}

async fn show<S: Store>(
    store: &S,
    tenant: &Tenant,
    id_or_name: &str,
    json: bool,
) -> anyhow::Result<()> {
    let session = resolve(store, tenant, id_or_name).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&session)?);
        return Ok(());
    }
    let executions = store.list_executions(tenant, session.id).await?;
    let fields: Vec<Vec<String>> = vec![
        vec!["id".into(), session.id.to_string()],
        vec!["name".into(), table::or_dash(session.name.as_deref())],
        vec!["title".into(), table::or_dash(session.title.as_deref())],
        vec!["status".into(), session.status.to_string()],
        vec!["tenant".into(), session.tenant_id.clone()],
        vec!["user".into(), session.user_id.clone()],
        vec!["related".into(), related(&session)],
        vec!["messages".into(), session.message_count.to_string()],
        vec![
            "first message".into(),
            table::or_dash(session.first_message.as_deref()),
        ],
        vec!["executions".into(), executions.len().to_string()],
        vec![
            "last execution".into(),
            table::or_dash(session.last_execution_id),
        ],
        vec!["created".into(), session.created_at.to_string()],
        vec!["updated".into(), session.updated_at.to_string()],
    ];
    for row in &fields {
        println!("{:<15}{}", row[0], row[1]);
    }
    if !executions.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = executions
            .iter()
            .map(|e| {
                vec![
                    e.id.to_string(),
                    e.status.to_string(),
                    e.agent_type.clone(),
                    e.step_count.to_string(),
                    e.token_usage.total.to_string(),
                    e.created_at.to_string(),
                    table::clip(e.error_message.as_deref().unwrap_or(""), 50),
                ]
            })
            .collect();
        table::print(
            &[
                "EXECUTION",
                "STATUS",
                "AGENT",
                "STEPS",
                "TOKENS",
                "CREATED",
                "ERROR",
            ],
            &rows,
        );
    }
    Ok(())
}

fn related(session: &Session) -> String {
    match (&session.related_type, &session.related_id) {
        (Some(t), Some(i)) => format!("{t} {i}"),
        (Some(t), None) => t.clone(),
        (None, Some(i)) => i.clone(),
        (None, None) => "-".into(),
    }
}

async fn export<S: Store>(
    store: &S,
    tenant: &Tenant,
    id_or_name: &str,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let session = resolve(store, tenant, id_or_name).await?;
    let Some(document) = export_session(store, tenant, session.id).await? else {
        bail!("no session `{id_or_name}` in tenant `{tenant}`");
    };
    let mut text = serde_json::to_string_pretty(&document)?;
    text.push('\n');
    match out {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "exported session {} ({} messages, {} executions, {} steps) to {}",
                session.id,
                document.messages.len(),
                document.executions.len(),
                document.steps.len(),
                path.display()
            );
        }
        _ => print!("{text}"),
    }
    Ok(())
}

async fn import<S: Store>(
    store: &S,
    tenant: &Tenant,
    user: &str,
    file: &PathBuf,
) -> anyhow::Result<()> {
    if user.trim().is_empty() {
        bail!("--user must not be empty");
    }
    let bytes = if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
        bytes
    } else {
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    // The same checks as the HTTP import: sizes, nesting, names, references; nothing is
    // written when they refuse the document.
    let mut document = parse_document(&bytes, &DocumentLimits::default())
        .with_context(|| format!("{} is not a session document", file.display()))?;
    // Context URLs valid and stored canonical, reference fields within their limits.
    stepwise_server::check_document_context(
        &stepwise_server::ServerConfig::default(),
        &mut document,
    )
    .map_err(|e| match &e.field {
        Some(field) => anyhow::anyhow!("{} is refused: {field}: {}", file.display(), e.message),
        None => anyhow::anyhow!("{} is refused: {}", file.display(), e.message),
    })?;
    let session = store.import_document(tenant, user, document).await?;
    // The id alone on the last line, for scripts.
    println!("{}", session.id);
    Ok(())
}
