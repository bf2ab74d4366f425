//! The README and `docs/` say true things about the binary: every `stepwise` flag they name
//! exists, every `serve` flag and its environment variable is documented in
//! `docs/configuration.md`, every `STEPWISE_*` variable they name is read somewhere in the
//! code, and every relative link points at a file (and heading) that exists.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README and every page of `docs/`, with their paths relative to the repository.
fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_string(), read(&root().join("README.md")))];
    let mut docs: Vec<_> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for path in docs {
        let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        pages.push((name, read(&path)));
    }
    pages.push((
        "ARCHITECTURE.md".to_string(),
        read(&root().join("ARCHITECTURE.md")),
    ));
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path:?}: {e}"))
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stepwise"))
        .args(args)
        .arg("--help")
        .output()
        .expect("stepwise runs");
    assert!(out.status.success(), "stepwise {args:?} --help failed");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next()
                && name != "help"
                && line.starts_with("  ")
                && !line.starts_with("   ")
            {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// `--long` flags in a text.
fn flags(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 2 < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-');
        if boundary && bytes[i] == b'-' && bytes[i + 1] == b'-' && bytes[i + 2].is_ascii_lowercase()
        {
            let mut j = i + 2;
            while j < bytes.len() && (bytes[j].is_ascii_lowercase() || bytes[j] == b'-') {
                j += 1;
            }
            found.insert(text[i..j].trim_end_matches('-').to_string());
            i = j;
        } else {
            i += 1;
        }
    }
    found
}

/// Every help text of the binary, depth first, with the command path that printed it.
fn all_help() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        for sub in subcommands(&text) {
            let mut next = path.clone();
            next.push(sub);
            todo.push(next);
        }
        out.push((path, text));
    }
    out
}

/// The pieces of a page that are commands: backtick spans and the lines of code blocks.
fn command_pieces(page: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut fence = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            pieces.push(line.split(" #").next().unwrap_or("").to_string());
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            pieces.push(span.to_string());
        }
    }
    pieces
}

const SUBCOMMANDS: [&str; 8] = [
    "serve", "chat", "migrate", "sessions", "keys", "cleanup", "bench", "--",
];

/// The part of a command piece that is arguments of `stepwise` (after the word `stepwise`,
/// or the whole piece when it starts with one of its subcommands or with a flag).
fn stepwise_arguments(piece: &str) -> Option<&str> {
    let piece = piece.trim();
    if let Some(at) = piece.find("stepwise ") {
        let before = &piece[..at];
        // `-p stepwise` names the cargo package; the arguments come after `--`.
        if before.trim_end().ends_with("-p") {
            return piece[at..].split_once(" -- ").map(|(_, rest)| rest);
        }
        let rest = &piece[at + "stepwise ".len()..];
        let first = rest.split_whitespace().next().unwrap_or("");
        let command = SUBCOMMANDS.contains(&first) || first.starts_with("--");
        if command && (before.is_empty() || before.ends_with(' ') || before.ends_with('/')) {
            return Some(rest);
        }
        return None;
    }
    let first = piece.split_whitespace().next()?;
    if SUBCOMMANDS.contains(&first) || first.starts_with("--") {
        return Some(piece);
    }
    None
}

#[test]
fn every_stepwise_flag_the_docs_name_exists() {
    let known: BTreeSet<String> = all_help()
        .iter()
        .flat_map(|(_, text)| flags(text))
        .collect();
    assert!(known.contains("--listen") && known.contains("--database"));
    let mut unknown = Vec::new();
    for (name, page) in pages() {
        for piece in command_pieces(&page) {
            let Some(arguments) = stepwise_arguments(&piece) else {
                continue;
            };
            // A pipe or a second command ends the stepwise part.
            let arguments = arguments.split(['|', '&', ';']).next().unwrap_or("");
            for flag in flags(arguments) {
                if !known.contains(&flag) && flag != "--help" {
                    unknown.push(format!("{name}: {flag} in `{}`", piece.trim()));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags the docs name that no stepwise command has:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn every_serve_flag_and_its_environment_variable_is_documented() {
    let configuration = read(&root().join("docs/configuration.md"));
    let serve = help(&["serve"]);
    let mut missing = Vec::new();
    for flag in flags(&serve) {
        if flag != "--help" && !configuration.contains(&flag) {
            missing.push(flag);
        }
    }
    for variable in variables(&serve) {
        if !configuration.contains(&variable) {
            missing.push(variable);
        }
    }
    assert!(
        missing.is_empty(),
        "`stepwise serve` settings docs/configuration.md does not mention: {missing:?}"
    );
}

/// `STEPWISE_*` names in a text.
fn variables(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("STEPWISE_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if name.len() > "STEPWISE_".len() {
            found.insert(name.to_string());
        }
        rest = &tail[end..];
    }
    found
}

/// Every file under `dir` with one of the extensions, recursively, skipping build output.
fn sources(dir: &Path, extensions: &[&str], into: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | "node_modules" | ".venv" | "__pycache__"
            ) {
                sources(&path, extensions, into);
            }
        } else if path
            .extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
        {
            into.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

#[test]
fn every_environment_variable_the_docs_name_is_read_by_the_code() {
    let mut code = String::new();
    sources(&root().join("crates"), &["rs"], &mut code);
    sources(&root().join("clients/python"), &["py", "sh"], &mut code);
    sources(&root().join("tests"), &["sh", "py", "js", "mjs"], &mut code);
    sources(&root().join(".ci"), &["sh"], &mut code);
    code.push_str(&read(&root().join(".ci/run")));
    let known = variables(&code);
    let mut unknown = Vec::new();
    for (name, page) in pages() {
        for variable in variables(&page) {
            // The LLM settings are read by prefix (`STEPWISE_LLM_` + the key).
            if !known.contains(&variable) && !variable.starts_with("STEPWISE_LLM_") {
                unknown.push(format!("{name}: {variable}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "environment variables the docs name that no code reads:\n{}",
        unknown.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut found = BTreeSet::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    for (name, page) in pages() {
        let base = root().join(&name);
        let dir = base
            .parent()
            .expect("a page is in a directory")
            .to_path_buf();
        let mut rest = page.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            let target = &tail[..end];
            rest = &tail[end..];
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target, None),
            };
            let path = if file.is_empty() {
                base.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
                continue;
            }
            if let Some(fragment) = fragment
                && path.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&path)).contains(fragment)
            {
                broken.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_flag_reader_finds_long_flags_only() {
    let found = flags("stepwise serve --listen ADDR -p x --max-sse-per-session N, a--b");
    assert_eq!(
        found,
        BTreeSet::from(["--listen".to_string(), "--max-sse-per-session".to_string()])
    );
    assert_eq!(
        stepwise_arguments("cargo run --release -p stepwise -- serve --listen X"),
        Some("serve --listen X")
    );
    assert_eq!(stepwise_arguments("pip install ./clients/python"), None);
}
