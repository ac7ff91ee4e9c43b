//! The book's request examples as data, and the rule an answer is held
//! to: what `tests/tests/e2e/book_examples.rs` runs against a real server.
//!
//! An example is a fenced block of the README or of `docs/src/*.md` that
//! holds requests, in one of the forms the book writes them:
//! - `→ request` and `← answer` lines (one WebSocket connection per block);
//! - a `$ websocat URL` session: the lines typed (requests) and the lines
//!   shown (answers and notifications), told apart by their content;
//! - `curl` command lines, with what they print shown after them (the lines
//!   after `$ curl` in a console block, `# {…}` comment lines in a shell
//!   block, or a JSON block right after the command's block);
//! - a JSON block of requests (sent over the page's last WebSocket URL).
//!
//! An answer as shown is a pattern: `…` stands for what is left out (in a
//! string, any text there; as an object's member, any further members; as an
//! array's element, any further elements; as a value, anything). Everything
//! else must be as shown, but for a value the page uses again in a request
//! or shows twice (a subscription id, a cursor, a key's id): that is the
//! reader's own value, bound the first time it is seen, the same wherever
//! it is shown after, and put in the requests that name it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde_json::Value;

/// What the book leaves out.
pub const ELIDED: &str = "…";

/// One step of an example, in the order written.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `$ websocat URL`: a new connection, which the requests after it use.
    Connect(String),
    /// A request as written.
    Send(String),
    /// An answer or a notification as shown.
    Expect(String),
    /// A shell command run as written (`curl …`), and what it prints as
    /// shown, if the book shows it.
    Command { line: String, shown: Option<String> },
    /// A shell assignment (`T="…"`) later commands of the block see.
    Assign(String),
    /// `cargo run …`: the server starts here (it is started on first use
    /// otherwise).
    Start,
    /// `anvil OPTIONS &`: the config's node starts here, with these options
    /// (a plain `anvil` on first use otherwise).
    Node(Vec<String>),
}

/// A block holding requests.
#[derive(Clone, Debug)]
pub struct Example {
    pub page: PathBuf,
    pub line: usize,
    /// The config file the server runs with (`--config X.toml` in the block
    /// or in the paragraph before it), named by a TOML block of the page or
    /// of the README; the devnet's defaults otherwise.
    pub config: Option<String>,
    pub steps: Vec<Step>,
}

/// A page's examples and the TOML blocks it names (`this \`x.toml\``).
#[derive(Debug, Default)]
pub struct Page {
    pub examples: Vec<Example>,
    pub configs: BTreeMap<String, String>,
    /// Lines of blocks that hold a request (`"jsonrpc"`, `curl `) in no
    /// form this module reads: an example that would go unchecked.
    pub unread: Vec<usize>,
}

/// Reads the examples of the markdown `text` of `page`.
pub fn examples(page: &Path, text: &str) -> Page {
    let mut out = Page::default();
    // Code spans of the paragraph before the current block.
    let mut spans: Vec<String> = Vec::new();
    let mut in_paragraph = false;
    // Whether nothing came between the last block and this one.
    let mut adjacent = false;
    let mut block: Option<(String, usize, String)> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(_)) => {}
            Event::Start(_) if block.is_none() => adjacent = false,
            _ => {}
        }
        match event {
            Event::Start(Tag::Paragraph) => {
                in_paragraph = true;
                spans.clear();
            }
            Event::End(TagEnd::Paragraph) => in_paragraph = false,
            Event::Code(code) if in_paragraph => spans.push(code.to_string()),
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let line = text[..range.start].lines().count() + 1;
                block = Some((info.to_string(), line, String::new()));
            }
            Event::Text(body) => {
                if let Some((_, _, text)) = block.as_mut() {
                    text.push_str(&body);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                let Some((info, line, body)) = block.take() else {
                    continue;
                };
                let language = info.split_whitespace().next().unwrap_or_default();
                let named = body.lines().chain(spans.iter().map(String::as_str));
                let config = named.filter_map(config_named).next_back();
                if language == "toml" {
                    if let Some(name) = spans.iter().find(|s| s.ends_with(".toml")) {
                        out.configs.insert(name.clone(), body);
                    }
                } else if language == "json" {
                    let at = Example {
                        page: page.to_path_buf(),
                        line,
                        config,
                        steps: Vec::new(),
                    };
                    json_block(&mut out, at, &body, adjacent);
                } else {
                    let steps = steps(language, &body);
                    if steps.is_empty() && holds_a_request(&body) {
                        out.unread.push(line);
                    }
                    if !steps.is_empty() {
                        out.examples.push(Example {
                            page: page.to_path_buf(),
                            line,
                            config,
                            steps,
                        });
                    }
                }
                spans.clear();
                adjacent = true;
            }
            _ => {}
        }
    }
    out
}

/// `X.toml` of `… --config X.toml …`.
fn config_named(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("--config ")?;
    let name = rest.split_whitespace().next()?;
    name.ends_with(".toml").then(|| name.to_string())
}

/// A JSON block: requests to send (`example` with its steps to come), or,
/// right after (`adjacent` to) the block of a request, its answer.
fn json_block(out: &mut Page, mut example: Example, body: &str, adjacent: bool) {
    let Ok(values) = patterns(body) else {
        if holds_a_request(body) {
            out.unread.push(example.line);
        }
        return;
    };
    let requests = values.iter().filter(|(_, value)| is_request(value)).count();
    if requests > 0 && requests == values.len() {
        example.steps = values
            .into_iter()
            .map(|(text, _)| Step::Send(text))
            .collect();
        out.examples.push(example);
        return;
    }
    if requests > 0 {
        out.unread.push(example.line);
        return;
    }
    let [(_, answer)] = values.as_slice() else {
        return;
    };
    if !adjacent || answer.get("jsonrpc").is_none() {
        return;
    }
    let Some(last) = out.examples.last_mut() else {
        return;
    };
    let text = body.trim().to_string();
    match last.steps.last_mut() {
        Some(Step::Command {
            shown: shown @ None,
            ..
        }) => *shown = Some(text),
        Some(Step::Send(_)) => last.steps.push(Step::Expect(text)),
        _ => {}
    }
}

/// Whether a block's text holds a request of some form.
fn holds_a_request(body: &str) -> bool {
    body.contains("\"jsonrpc\"") || body.contains("curl ")
}

/// A JSON-RPC request (not a response, not a notification).
pub fn is_request(value: &Value) -> bool {
    let method = value.get("method").and_then(Value::as_str);
    method.is_some_and(|m| m != "eth_subscription")
        && value.get("result").is_none()
        && value.get("error").is_none()
}

/// The steps of a block in `language` (`text`, `console`, `sh`, …).
fn steps(language: &str, body: &str) -> Vec<Step> {
    let shell = matches!(language, "sh" | "bash" | "shell");
    let mut steps: Vec<Step> = Vec::new();
    // After `$ websocat`: the lines that follow are typed or shown.
    let mut session = false;
    let mut lines = body.lines();
    while let Some(first) = lines.next() {
        let mut line = first.to_string();
        while line.ends_with('\\') {
            line.pop();
            line.push_str(lines.next().unwrap_or_default().trim_start());
        }
        let line = line.trim_end();
        if let Some(request) = line.strip_prefix("→ ") {
            steps.push(Step::Send(request.to_string()));
            continue;
        }
        if let Some(answer) = line.strip_prefix("← ") {
            steps.push(Step::Expect(answer.to_string()));
            continue;
        }
        let command = line
            .strip_prefix("$ ")
            .or_else(|| shell.then_some(line))
            .map(str::trim);
        match command {
            Some(c) if c.starts_with("websocat ") => {
                let url = c.split_whitespace().nth(1).unwrap_or_default();
                steps.push(Step::Connect(url.to_string()));
                session = true;
            }
            Some(c) if c.starts_with("curl ") => {
                steps.push(Step::Command {
                    line: c.to_string(),
                    shown: None,
                });
                session = false;
            }
            Some(c) if c.starts_with("cargo run") && c.contains("--config") => {
                steps.push(Step::Start);
                session = false;
            }
            Some(c) if c == "anvil" || c.starts_with("anvil ") => {
                let options = c.split_whitespace().skip(1).filter(|word| *word != "&");
                steps.push(Step::Node(options.map(str::to_string).collect()));
                session = false;
            }
            Some(c) if is_assignment(c) => steps.push(Step::Assign(c.to_string())),
            Some(c) if shell && c.starts_with('#') => {
                let text = c.trim_start_matches('#').trim();
                if let Some(Step::Command { shown, .. }) = steps.last_mut() {
                    match shown {
                        Some(so_far) => {
                            so_far.push(' ');
                            so_far.push_str(text);
                        }
                        None if text.starts_with('{') => *shown = Some(text.to_string()),
                        None => {}
                    }
                }
            }
            Some(_) => session = false,
            None if session && line.starts_with('{') => {
                let typed = pattern(line).is_ok_and(|v| is_request(&v));
                steps.push(if typed {
                    Step::Send(line.to_string())
                } else {
                    Step::Expect(line.to_string())
                });
            }
            None if !line.is_empty() => {
                if let Some(Step::Command { shown, .. }) = steps.last_mut() {
                    let so_far = shown.get_or_insert_with(String::new);
                    so_far.push_str(line);
                }
            }
            None => {}
        }
    }
    steps
}

/// `NAME=value …`, a shell assignment.
fn is_assignment(command: &str) -> bool {
    command.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// The JSON values of `text`, each as its text (`…` written as JSON) and as
/// a pattern (see [`pattern`]).
pub fn patterns(text: &str) -> Result<Vec<(String, Value)>, String> {
    let marked = marked(text);
    let mut values = serde_json::Deserializer::from_str(&marked).into_iter::<Value>();
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(value) = values.next() {
        let value = value.map_err(|e| format!("{text}: {e}"))?;
        let end = values.byte_offset();
        out.push((marked[start..end].trim().to_string(), value));
        start = end;
    }
    Ok(out)
}

/// One JSON value written with `…` for what is left out, as a value in
/// which an elided member is the key `…`, an elided element or value the
/// string `…`.
pub fn pattern(text: &str) -> Result<Value, String> {
    serde_json::from_str(&marked(text)).map_err(|e| format!("{text}: {e}"))
}

/// `text` with every `…` outside a string written as JSON.
fn marked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    // The open brackets, and whether an object's next token is a value.
    let mut open: Vec<char> = Vec::new();
    let mut value_next = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                open.push(c);
                value_next = false;
            }
            '}' | ']' => {
                open.pop();
            }
            ':' => value_next = true,
            ',' => value_next = false,
            '…' => {
                out.push_str(if open.last() == Some(&'{') && !value_next {
                    "\"…\":null"
                } else {
                    "\"…\""
                });
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// Values the server makes at random, which a reader's run gives otherwise
/// than the book: subscription and webhook ids (`0x` and 32 hex digits, a
/// length no hash or address has), API key ids (`key_` and 12). Each such
/// literal, once seen, stands for the value the run gave, the same wherever
/// the page shows it after; requests naming it get the run's value. Every
/// other value (the devnet's hashes, cursors, prices) is held as shown.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    bound: BTreeMap<String, String>,
}

impl Bindings {
    /// Whether `literal` is a value the server makes at random.
    pub fn is_random(literal: &str) -> bool {
        let hex = |digits: &str, count: usize| {
            digits.len() == count && digits.bytes().all(|b| b.is_ascii_hexdigit())
        };
        literal.strip_prefix("0x").is_some_and(|d| hex(d, 32))
            || literal.strip_prefix("key_").is_some_and(|d| hex(d, 12))
    }

    /// `request` as sent: every bound literal replaced by its value, and
    /// every random-looking literal not seen yet bound to itself (what a
    /// reader typed is what later answers must show).
    pub fn apply(&mut self, request: &str) -> String {
        let words = request.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for word in words.filter(|w| Self::is_random(w)) {
            self.bound
                .entry(word.to_string())
                .or_insert_with(|| word.to_string());
        }
        let mut out = request.to_string();
        for (shown, actual) in &self.bound {
            out = out.replace(shown.as_str(), actual);
        }
        out
    }
}

/// Whether `actual` is what `shown` (a [`pattern`]) shows, binding the
/// page's reusable literals; the error says where they part.
pub fn check(shown: &Value, actual: &Value, bindings: &mut Bindings) -> Result<(), String> {
    matches(shown, actual, bindings, "")
}

fn matches(shown: &Value, actual: &Value, bindings: &mut Bindings, at: &str) -> Result<(), String> {
    let differ = || Err(format!("at {at:?}: shown {shown}, got {actual}"));
    match (shown, actual) {
        (Value::String(s), _) if s == ELIDED => Ok(()),
        (Value::String(s), Value::String(a)) if s.contains(ELIDED) => {
            if elided_string(s, a) {
                Ok(())
            } else {
                differ()
            }
        }
        (Value::String(s), Value::String(a)) if Bindings::is_random(s) => {
            match bindings.bound.get(s) {
                Some(bound) if bound == a => Ok(()),
                None if Bindings::is_random(a) => {
                    bindings.bound.insert(s.clone(), a.clone());
                    Ok(())
                }
                _ => differ(),
            }
        }
        (Value::String(s), Value::String(a)) if s == a => Ok(()),
        (Value::Object(s), Value::Object(a)) => {
            let open = s.contains_key(ELIDED);
            for (key, value) in s.iter().filter(|(k, _)| *k != ELIDED) {
                let Some(got) = a.get(key) else {
                    return Err(format!("at {at:?}: no member {key:?} in {actual}"));
                };
                matches(value, got, bindings, &format!("{at}.{key}"))?;
            }
            match a.keys().find(|k| !s.contains_key(*k)) {
                Some(extra) if !open => Err(format!(
                    "at {at:?}: member {extra:?} is not shown (write … for members left out)"
                )),
                _ => Ok(()),
            }
        }
        (Value::Array(s), Value::Array(a)) => {
            if elements(s, a, bindings, at) {
                Ok(())
            } else {
                differ()
            }
        }
        _ if shown == actual => Ok(()),
        _ => differ(),
    }
}

/// Whether `actual` holds the parts of `shown` around its `…`s, in order,
/// the first at its start and the last at its end.
fn elided_string(shown: &str, actual: &str) -> bool {
    let parts: Vec<&str> = shown.split(ELIDED).collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    let Some(mut rest) = actual
        .strip_prefix(first)
        .and_then(|rest| rest.strip_suffix(last))
    else {
        return false;
    };
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the elements `actual` are those `shown`, where an element `…`
/// stands for any number of elements.
fn elements(shown: &[Value], actual: &[Value], bindings: &mut Bindings, at: &str) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((Value::String(s), rest)) if s == ELIDED => (0..=actual.len()).any(|skip| {
            let mut trial = bindings.clone();
            let fits = elements(rest, &actual[skip..], &mut trial, at);
            if fits {
                *bindings = trial;
            }
            fits
        }),
        Some((first, rest)) => {
            let Some((got, others)) = actual.split_first() else {
                return false;
            };
            let mut trial = bindings.clone();
            let fits = matches(first, got, &mut trial, &format!("{at}[]")).is_ok()
                && elements(rest, others, &mut trial, at);
            if fits {
                *bindings = trial;
            }
            fits
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_ellipsis_is_read_where_it_stands() {
        let shown = pattern(r#"{"a":"0x…","b":{…},"c":[1,…],…,"d":…}"#).expect("a pattern");
        assert_eq!(
            shown,
            json!({"a": "0x…", "b": {"…": null}, "c": [1, "…"], "…": null, "d": "…"})
        );
    }

    #[test]
    fn a_pattern_holds_what_it_shows_and_no_more() {
        let mut none = Bindings::default();
        let shown = pattern(r#"{"hash":"0xdb…1b","n":"0x1",…}"#).expect("a pattern");
        let good = json!({"hash": "0xdb3b1b", "n": "0x1", "other": 5});
        assert_eq!(check(&shown, &good, &mut none), Ok(()));
        let bad = json!({"hash": "0xdc3b1b", "n": "0x1"});
        assert!(check(&shown, &bad, &mut none).is_err());
        let closed = pattern(r#"{"n":"0x1"}"#).expect("a pattern");
        let more = json!({"n": "0x1", "m": 2});
        assert!(
            check(&closed, &more, &mut none)
                .expect_err("a member not shown")
                .contains("\"m\"")
        );
        let list = pattern(r#"[1,…,4]"#).expect("a pattern");
        assert_eq!(check(&list, &json!([1, 2, 3, 4]), &mut none), Ok(()));
        assert!(check(&list, &json!([1, 2, 3]), &mut none).is_err());
        assert!(check(&json!(["a"]), &json!(["a", "b"]), &mut none).is_err());
    }

    #[test]
    fn a_random_value_is_the_runs_own_and_the_same_wherever_shown() {
        let mut bindings = Bindings::default();
        let id = "0x4a7d1e6f0b9c28d35e61f07a2b8c4d19";
        let run = "0x99a7d1e6f0b9c28d35e61f07a2b8c4d1";
        let shown = json!({"result": id});
        assert_eq!(
            check(&shown, &json!({"result": run}), &mut bindings),
            Ok(())
        );
        // Bound: the same id later must be the same value.
        let other = "0x11a7d1e6f0b9c28d35e61f07a2b8c4d1";
        assert!(check(&shown, &json!({"result": other}), &mut bindings).is_err());
        assert_eq!(
            bindings.apply(&format!(r#"["{id}"]"#)),
            format!(r#"["{run}"]"#)
        );
        // What a reader typed first stands for itself.
        let typed = "0x5b8e0f7a9c1d2e3f5b8e0f7a9c1d2e3f";
        bindings.apply(&format!(r#"["{typed}"]"#));
        let echoed = json!({"subscription": typed});
        assert!(check(&echoed, &json!({"subscription": run}), &mut bindings).is_err());
        // A value the devnet gives the same every run is held as shown:
        // hashes, addresses, cursors.
        let hash = json!("0xa662f7a246b48d78445e1ca26ab9868e2a9a7692f20b7f9fac46abbcc29eefda");
        let another = json!("0xb662f7a246b48d78445e1ca26ab9868e2a9a7692f20b7f9fac46abbcc29eefda");
        assert!(check(&hash, &another, &mut bindings).is_err());
        assert!(
            check(
                &json!("eth:1506@301:0:641c"),
                &json!("eth:1507@301:0:641c"),
                &mut bindings
            )
            .is_err()
        );
    }

    #[test]
    fn an_elided_string_holds_its_ends_whatever_the_text() {
        let mut none = Bindings::default();
        assert_eq!(check(&json!("a…b"), &json!("a–b"), &mut none), Ok(()));
        assert!(check(&json!("a…b"), &json!("aé"), &mut none).is_err());
        // The ends may not overlap.
        assert!(check(&json!("ab…ba"), &json!("aba"), &mut none).is_err());
        assert_eq!(
            check(&json!("0x…c…f"), &json!("0xabcdef"), &mut none),
            Ok(())
        );
        assert!(check(&json!("0x…e…c"), &json!("0xabcdef"), &mut none).is_err());
    }

    #[test]
    fn the_forms_of_the_book_are_read() {
        let text = r#"
```text
→ {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}
← {"jsonrpc":"2.0","id":1,"result":"0x1"}
```

With this `node.toml`:

```toml
[auth]
keys = ["k1"]
```

```console
$ anvil --block-time 1 &
$ cargo run --release -- --config node.toml &
$ websocat ws://127.0.0.1:8080/eth/v1/k1
{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}
{"jsonrpc":"2.0","id":1,"result":"0x…"}
$ curl -s localhost:8080/eth/v1/k1 -d '{}'
{"jsonrpc":"2.0","id":1,"result":"0x1"}
```

```sh
T="Authorization: Bearer $ADMIN_TOKEN"
curl -s -H "$T" \
  localhost:8080/admin/keys
# {"keys":[
#  …]}
```

```json
{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}
```
"#;
        let page = examples(Path::new("page.md"), text);
        assert_eq!(page.configs.keys().collect::<Vec<_>>(), ["node.toml"]);
        let steps: Vec<_> = page.examples.iter().map(|e| e.steps.clone()).collect();
        assert_eq!(page.examples[1].config.as_deref(), Some("node.toml"));
        assert_eq!(page.examples[0].line, 2);
        assert_eq!(
            steps,
            vec![
                vec![
                    Step::Send(r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#.into()),
                    Step::Expect(r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#.into()),
                ],
                vec![
                    Step::Node(vec!["--block-time".into(), "1".into()]),
                    Step::Start,
                    Step::Connect("ws://127.0.0.1:8080/eth/v1/k1".into()),
                    Step::Send(
                        r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#
                            .into()
                    ),
                    Step::Expect(r#"{"jsonrpc":"2.0","id":1,"result":"0x…"}"#.into()),
                    Step::Command {
                        line: "curl -s localhost:8080/eth/v1/k1 -d '{}'".into(),
                        shown: Some(r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#.into()),
                    },
                ],
                vec![
                    Step::Assign(r#"T="Authorization: Bearer $ADMIN_TOKEN""#.into()),
                    Step::Command {
                        line: r#"curl -s -H "$T" localhost:8080/admin/keys"#.into(),
                        shown: Some(r#"{"keys":[ …]}"#.into()),
                    },
                ],
                vec![Step::Send(
                    r#"{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}"#
                        .into()
                )],
            ]
        );
    }
}
