//! The book (`docs/src`) and the README stay true to the code and to
//! themselves:
//! - the configuration page lists every key the config types read, each
//!   once, with the default the code has, and no key the code lacks;
//! - every relative link resolves to a file, and every anchor to a heading
//!   of the page it names;
//! - `SUMMARY.md` lists every page of the book;
//! - every code comment that cites the book ("docs/src/x.md, Section")
//!   names a section that exists;
//! - every source file the book names (`host/tests/integration/docs.rs`,
//!   `model/verify.rs`) exists.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use chainsieve::Config;
use chainsieve_config::{ChainConfig, PlanConfig};
use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the workspace root")
        .to_path_buf()
}

fn book() -> PathBuf {
    root().join("docs/src")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The leaves of a serialized config as dotted keys with their values;
/// `chains` and `plans` are maps of tables, written `chains.<name>.key`.
fn leaves(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(&path, value, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.clone());
        }
    }
}

/// Every key of the config with its default: `Config::default()` with its
/// chains replaced by one chain of defaults, and one plan of defaults.
fn config_keys() -> BTreeMap<String, Value> {
    let mut config = serde_json::to_value(Config::default()).expect("the config serializes");
    let chain = serde_json::to_value(ChainConfig::default()).expect("a chain serializes");
    config["chains"] = serde_json::json!({ "<name>": chain });
    let plan = serde_json::to_value(PlanConfig::default()).expect("a plan serializes");
    config["plans"] = serde_json::json!({ "<name>": plan });
    let mut keys = BTreeMap::new();
    leaves("", &config, &mut keys);
    keys
}

/// The rows of the configuration page's key tables: (key, default cell).
fn documented_keys(page: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in page.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') {
            in_table = false;
            continue;
        }
        if cells.first() == Some(&"key") && cells.get(1) == Some(&"default") {
            in_table = true;
            continue;
        }
        if !in_table
            || cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let key = cells[0].trim_matches('`').to_string();
        rows.push((key, cells.get(1).copied().unwrap_or_default().to_string()));
    }
    rows
}

/// A default cell's value: a TOML literal in backticks, or `unset` (null).
fn documented_default(cell: &str) -> Result<Value, String> {
    if cell.starts_with("unset") {
        return Ok(Value::Null);
    }
    let literal = cell
        .strip_prefix('`')
        .and_then(|rest| rest.split_once('`'))
        .map(|(literal, _)| literal)
        .ok_or_else(|| format!("{cell:?} is neither `a TOML value` nor unset"))?;
    let table: toml::Table =
        toml::from_str(&format!("v = {literal}")).map_err(|e| format!("{literal:?}: {e}"))?;
    serde_json::to_value(&table["v"]).map_err(|e| e.to_string())
}

#[test]
fn the_configuration_page_lists_every_key_with_its_default() {
    let page = read(&book().join("configuration.md"));
    let code = config_keys();
    assert!(code.contains_key("limits.outbound_queue"), "{code:?}");
    let rows = documented_keys(&page);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (key, cell) in &rows {
        if !seen.insert(key.clone()) {
            problems.push(format!("{key}: listed twice"));
        }
        match code.get(key) {
            None => problems.push(format!("{key}: documented, but the config has no such key")),
            Some(default) => match documented_default(cell) {
                Ok(documented) if &documented == default => {}
                Ok(documented) => problems.push(format!(
                    "{key}: documented default {documented}, the code's is {default}"
                )),
                Err(error) => problems.push(format!("{key}: default cell {error}")),
            },
        }
    }
    for key in code.keys().filter(|key| !seen.contains(*key)) {
        problems.push(format!(
            "{key}: a config key missing from docs/src/configuration.md"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What a markdown file links to and which anchors it offers.
struct Page {
    links: Vec<String>,
    anchors: BTreeSet<String>,
    /// Headings and bold paragraph labels, as written (code comments
    /// cite sections by these names).
    sections: BTreeSet<String>,
    /// Inline code spans, as written (the book names source files in
    /// them).
    code: Vec<String>,
}

/// GitHub's and mdBook's anchor of a heading: lowercase, spaces to '-',
/// anything but letters, digits, '-' and '_' dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn page(text: &str) -> Page {
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut sections = BTreeSet::new();
    let mut heading: Option<String> = None;
    let mut bold: Option<String> = None;
    let mut code = Vec::new();
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.to_string()),
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Start(Tag::Strong) => bold = Some(String::new()),
            Event::Code(t) => {
                code.push(t.to_string());
                for open in [&mut heading, &mut bold].into_iter().flatten() {
                    open.push_str(&t);
                }
            }
            Event::Text(t) => {
                for open in [&mut heading, &mut bold].into_iter().flatten() {
                    open.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(text) = heading.take() {
                    let mut id = anchor(&text);
                    // Repeated headings get -1, -2, … as on GitHub and in mdBook.
                    let base = id.clone();
                    let mut n = 0;
                    while anchors.contains(&id) {
                        n += 1;
                        id = format!("{base}-{n}");
                    }
                    anchors.insert(id);
                    sections.insert(text.trim().to_string());
                }
            }
            Event::End(TagEnd::Strong) => {
                if let Some(text) = bold.take() {
                    // A paragraph label ("**Reach.**") is cited without its
                    // stop.
                    sections.insert(text.trim().trim_end_matches(['.', ':']).to_string());
                }
            }
            _ => {}
        }
    }
    Page {
        links,
        anchors,
        sections,
        code,
    }
}

/// A source file's path as the book names it, if `span` is one: a
/// relative path of two parts or more ending in a source extension.
/// A bare file name (`mod.rs`) reads in its paragraph's context and is
/// not one.
fn source_path(span: &str) -> Option<&str> {
    let (_, extension) = span.rsplit_once('.')?;
    let named = span.contains('/')
        && !span.starts_with(['/', '~', '.'])
        && matches!(extension, "rs" | "wit" | "toml" | "sh" | "py" | "js" | "md")
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'));
    named.then_some(span)
}

/// Where a path the book names is: from the workspace's root
/// (`host/build.rs`), in the server crate's `host/src` (`rpc/methods.rs`),
/// or in the `src` of a crate under `host/` (`model/verify.rs`, which is
/// `host/model/src/verify.rs`).
fn located(path: &str) -> Option<PathBuf> {
    let mut places = vec![root().join(path), root().join("host/src").join(path)];
    if let Some((krate, rest)) = path.split_once('/') {
        places.push(root().join("host").join(krate).join("src").join(rest));
    }
    places.into_iter().find(|place| place.is_file())
}

/// The README and every page of the book.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut pages: Vec<PathBuf> = fs::read_dir(book())
        .expect("docs/src")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let pages: BTreeMap<PathBuf, Page> = documents()
        .into_iter()
        .map(|path| {
            let parsed = page(&read(&path));
            (path, parsed)
        })
        .collect();
    let mut checked = 0;
    let mut broken = Vec::new();
    for (path, page) in &pages {
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match link.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().expect("a directory").join(file)
            };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{}: {link}: no such file", path.display()));
                continue;
            };
            let Some(fragment) = fragment else { continue };
            match pages.get(&target) {
                Some(linked) if linked.anchors.contains(fragment) => {}
                Some(_) => broken.push(format!("{}: {link}: no such heading", path.display())),
                None => broken.push(format!(
                    "{}: {link}: an anchor into a file that is not a page",
                    path.display()
                )),
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_source_file_the_book_names_exists() {
    let mut named = 0;
    let mut missing = Vec::new();
    for path in documents() {
        for span in page(&read(&path)).code {
            let Some(source) = source_path(&span) else {
                continue;
            };
            named += 1;
            if located(source).is_none() {
                missing.push(format!("{}: `{source}`: no such file", path.display()));
            }
        }
    }
    assert!(named > 100, "only {named} source files named");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn source_paths_are_told_from_other_code() {
    assert_eq!(source_path("model/verify.rs"), Some("model/verify.rs"));
    assert_eq!(source_path("docs/book.toml"), Some("docs/book.toml"));
    for other in [
        "mod.rs",
        "target/filters/a.wasm",
        "/etc/x.toml",
        "~/.cargo/config.toml",
        "a b/c.rs",
        "[log] data_dir",
    ] {
        assert_eq!(source_path(other), None, "{other}");
    }
    assert!(located("host/filters/build.rs").is_some());
    assert!(located("app.rs").is_some());
    assert!(located("rpc/methods.rs").is_some());
    assert!(located("model/verify.rs").is_some());
    assert!(located("model/nothing.rs").is_none());
}

#[test]
fn the_summary_lists_every_page() {
    let summary = page(&read(&book().join("SUMMARY.md")));
    let listed: BTreeSet<String> = summary.links.iter().cloned().collect();
    let pages: BTreeSet<String> = documents()
        .iter()
        .filter(|path| path.starts_with(book()))
        .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
        .filter(|name| name != "SUMMARY.md")
        .collect();
    assert_eq!(listed, pages);
}

/// Source files whose comments may cite the book.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if !matches!(name, "target" | "node_modules" | ".venv" | ".git") {
                sources(&path, out);
            }
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "wit" | "toml" | "sh")
        ) {
            out.push(path);
        }
    }
}

/// The citations "docs/src/<page>, <Section>" in `text`, comment lines
/// joined so a citation may wrap.
fn citations(text: &str) -> Vec<(String, String)> {
    let joined: String = text
        .lines()
        .map(|line| {
            line.trim()
                .trim_start_matches("//!")
                .trim_start_matches("///")
                .trim_start_matches("//")
                .trim_start_matches('#')
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut found = Vec::new();
    let mut rest = joined.as_str();
    while let Some(at) = rest.find("docs/src/") {
        rest = &rest[at + "docs/src/".len()..];
        let Some((file, after)) = rest.split_once(".md") else {
            break;
        };
        let Some(cited) = after.strip_prefix(", ") else {
            continue;
        };
        // A section name ends at a bracket, a semicolon, a colon, a comma,
        // a quote, or a full stop before a space or the end.
        // Brackets inside the name ("Why this shape (measured)") are kept.
        let mut end = cited.len();
        let mut depth = 0;
        for (i, c) in cited.char_indices() {
            let stop = match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth > 0 => {
                    depth -= 1;
                    false
                }
                ')' | ';' | ':' | ',' | '"' | '`' => true,
                '.' => cited[i + 1..].starts_with(' ') || i + 1 == cited.len(),
                _ => false,
            };
            if stop {
                end = i;
                break;
            }
        }
        found.push((
            format!("{file}.md"),
            cited[..end].trim().trim_end_matches('.').to_string(),
        ));
    }
    found
}

#[test]
fn code_comments_cite_sections_that_exist() {
    let mut files = Vec::new();
    for dir in [
        "host",
        "guest-filters",
        "tests",
        "examples",
        "wit",
        "scripts",
    ] {
        sources(&root().join(dir), &mut files);
    }
    let mut pages: BTreeMap<String, Page> = BTreeMap::new();
    let mut cited = 0;
    let mut broken = Vec::new();
    // This file's own examples are not citations.
    files.retain(|file| !file.ends_with("host/tests/integration/docs.rs"));
    for file in &files {
        let text = read(file);
        // Spelled in parts, so this file does not find itself.
        if text.contains(concat!("docs/", "architecture.md"))
            || text.contains(concat!("README", ", "))
        {
            broken.push(format!(
                "{}: cites docs/architecture.md or the README; cite the book (docs/src/<page>.md, <Section>)",
                file.display()
            ));
        }
        for (page_name, section) in citations(&text) {
            cited += 1;
            let path = book().join(&page_name);
            if !path.exists() {
                broken.push(format!(
                    "{}: cites {page_name}, no such page",
                    file.display()
                ));
                continue;
            }
            let page = pages
                .entry(page_name.clone())
                .or_insert_with(|| page(&read(&path)));
            if !page.sections.contains(&section) {
                broken.push(format!(
                    "{}: cites \"{page_name}, {section}\", no such section",
                    file.display()
                ));
            }
        }
    }
    assert!(cited > 20, "only {cited} citations found");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn citations_are_read_across_wrapped_comment_lines() {
    let text = "/// as the pipeline does (docs/src/architecture.md, Filter\n/// contract v0.2). Then\n// docs/src/api.md, Wire shapes: geth's.\n// (docs/src/architecture.md, Why this shape (measured)) and";
    assert_eq!(
        citations(text),
        vec![
            ("architecture.md".into(), "Filter contract v0.2".into()),
            ("api.md".into(), "Wire shapes".into()),
            ("architecture.md".into(), "Why this shape (measured)".into()),
        ]
    );
    assert_eq!(anchor("Filter contract v0.2"), "filter-contract-v02");
    assert_eq!(anchor("`token_price`"), "token_price");
}
