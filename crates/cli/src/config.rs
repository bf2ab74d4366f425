//! Settings: flags, then environment, then `stepwise.toml`, then built-in defaults.
//!
//! clap already ranks a flag above its environment variable above its default value, so the
//! file's values are installed as the defaults of the matching arguments before parsing.
//! That keeps one list of settings (the clap definitions) and lets every subcommand,
//! including `serve`, read the file without knowing about it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Command;

/// The settings file read from the working directory unless `STEPWISE_CONFIG` names another.
pub const CONFIG_FILE: &str = "stepwise.toml";

/// Where the settings file is, and whether it was named explicitly (then it must exist).
pub fn config_path() -> (PathBuf, bool) {
    match std::env::var_os("STEPWISE_CONFIG") {
        Some(path) if !path.is_empty() => (PathBuf::from(path), true),
        _ => (PathBuf::from(CONFIG_FILE), false),
    }
}

/// Sections of the settings file that other parts read themselves (the LLM agent's
/// `[llm]` and `[mcp]`); they are not command-line settings.
pub const SECTIONS_READ_ELSEWHERE: &[&str] = &["llm", "mcp"];

/// Reads the settings file into `argument id -> value`. Other tables only group settings
/// (`[cleanup] completed_days = 90` is `completed_days`), and `-` in keys reads as `_`, so
/// keys can be written like the flags.
pub fn read_settings(path: &Path, must_exist: bool) -> anyhow::Result<BTreeMap<String, String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
            return Ok(BTreeMap::new());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let table: toml::Table = table
        .into_iter()
        .filter(|(key, _)| !SECTIONS_READ_ELSEWHERE.contains(&key.as_str()))
        .collect();
    let mut settings = BTreeMap::new();
    flatten(&table, &mut settings).with_context(|| format!("in {}", path.display()))?;
    Ok(settings)
}

/// Keys read under another name: what an earlier version took (`cors_origins`, before the
/// keys were exactly the flags' long names).
const FORMER_KEYS: &[(&str, &str)] = &[("cors_origins", "cors_origin")];

fn flatten(table: &toml::Table, out: &mut BTreeMap<String, String>) -> anyhow::Result<()> {
    for (key, value) in table {
        let id = key.replace('-', "_");
        let id = match FORMER_KEYS.iter().find(|(former, _)| *former == id) {
            Some((_, now)) => (*now).to_string(),
            None => id,
        };
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Datetime(d) => d.to_string(),
            toml::Value::Table(inner) => {
                flatten(inner, out)?;
                continue;
            }
            toml::Value::Array(_) => bail!("setting `{id}`: lists are not supported"),
        };
        out.insert(id, text);
    }
    Ok(())
}

/// Installs the file's values as argument defaults throughout the command tree. A key that
/// names no argument anywhere is an error, so a typo does not pass silently.
pub fn apply_settings(
    mut command: Command,
    settings: &BTreeMap<String, String>,
) -> anyhow::Result<Command> {
    let known = all_arg_ids(&command);
    let unknown: Vec<&str> = settings
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(&k.to_string()))
        .collect();
    if !unknown.is_empty() {
        let mut settable: Vec<String> = known
            .into_iter()
            .filter(|k| !NOT_SETTINGS.contains(&k.as_str()))
            .collect();
        settable.sort();
        settable.dedup();
        bail!(
            "unknown setting{} {} in the settings file; known settings: {}",
            if unknown.len() == 1 { "" } else { "s" },
            unknown
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            settable.join(", ")
        );
    }
    for (id, value) in settings {
        command = set_default(command, id, value);
    }
    Ok(command)
}

/// Argument ids that are not settings (switches, positionals that name things).
const NOT_SETTINGS: &[&str] = &[
    "help", "version", "json", "dry_run", "session", "file", "out", "id", "name",
];

fn all_arg_ids(command: &Command) -> Vec<String> {
    let mut ids: Vec<String> = command
        .get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| a.get_id().to_string())
        .filter(|id| !NOT_SETTINGS.contains(&id.as_str()))
        .collect();
    for sub in command.get_subcommands() {
        ids.extend(all_arg_ids(sub));
    }
    ids
}

fn set_default(command: Command, id: &str, value: &str) -> Command {
    let has_arg = command
        .get_arguments()
        .any(|a| a.get_id() == id && !a.is_required_set());
    let mut command = if has_arg {
        let value = value.to_string();
        command.mut_arg(id, move |arg| arg.default_value(value))
    } else {
        command
    };
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |sub| set_default(sub, id, value));
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_group_settings_and_llm_sections_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stepwise.toml");
        let text = "database = \"sqlite://x.db\"\n[cleanup]\ncompleted-days = 7\n\
                    [llm]\nmodel = \"m\"\n[mcp]\nservers = [{ name = \"fs\" }]\n";
        std::fs::write(&path, text).unwrap();
        let settings = read_settings(&path, true).unwrap();
        assert_eq!(
            settings.get("database").map(String::as_str),
            Some("sqlite://x.db")
        );
        assert_eq!(
            settings.get("completed_days").map(String::as_str),
            Some("7")
        );
        assert_eq!(
            settings.len(),
            2,
            "the LLM's sections are left to it: {settings:?}"
        );
    }

    #[test]
    fn a_former_key_reads_as_the_flags_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stepwise.toml");
        std::fs::write(&path, "cors-origins = \"https://a.example\"\n").unwrap();
        let settings = read_settings(&path, true).unwrap();
        assert_eq!(
            settings.get("cors_origin").map(String::as_str),
            Some("https://a.example")
        );
    }

    #[test]
    fn a_missing_file_is_no_settings_unless_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.toml");
        assert!(read_settings(&path, false).unwrap().is_empty());
        assert!(read_settings(&path, true).is_err());
    }
}
