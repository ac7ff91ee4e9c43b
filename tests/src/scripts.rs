//! Real client libraries as scripts: `tests/js/*.mjs` run with Node.js
//! (ethers, viem from `tests/js/node_modules`), `tests/py/*.py` with the
//! test venv's Python (web3.py); the README's test command installs both.
//! A script prints a JSON report as its last line.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// The longest a client script may run.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

fn js_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js");
    assert!(
        dir.join("node_modules/ethers").exists(),
        "tests/js/node_modules is missing: run the README's test command (scripts/test.sh), which installs it"
    );
    dir
}

fn python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/.venv/bin/python");
    assert!(
        python.exists(),
        "tests/py/.venv is missing: run the README's test command (scripts/test.sh), which installs it"
    );
    python
}

/// Runs `script` with `args` and returns the JSON report it prints last;
/// panics (with its stderr) if it fails or outlasts [`SCRIPT_TIMEOUT`].
pub async fn run_script(script: &str, args: &[&str]) -> Value {
    run_file(&script_path(script), args).await
}

/// Where `script` is: `tests/py/` for `.py`, `tests/js/` otherwise.
fn script_path(script: &str) -> PathBuf {
    if script.ends_with(".py") {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("py")
            .join(script)
    } else {
        js_dir().join(script)
    }
}

/// What runs the script at `path`: the test venv's Python for `.py`,
/// Node.js otherwise.
fn interpreter(path: &std::path::Path) -> PathBuf {
    if path.extension().is_some_and(|e| e == "py") {
        python()
    } else {
        PathBuf::from("node")
    }
}

/// [`run_script`] of a script anywhere (one a test wrote): `.py` with the
/// test venv's Python, anything else with Node.js.
pub async fn run_file(path: &std::path::Path, args: &[&str]) -> Value {
    let script = path.display().to_string();
    let mut command = tokio::process::Command::new(interpreter(path));
    command.arg(path);
    let run = command.args(args).kill_on_drop(true).output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, run)
        .await
        .expect("the client finished")
        .expect("the script runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().expect("a report line")).expect("JSON report")
}

/// A script the test talks to while it runs: lines on its stdin, JSON
/// lines on its stdout. Killed when dropped. A `.rs` "script" is one of
/// the Rust applications (`crate::applications`), a task of this process
/// speaking the same lines.
pub struct Conversation {
    peer: Peer,
    script: String,
}

enum Peer {
    Process {
        // Boxed: a process's parts are ten times a task's.
        child: Box<tokio::process::Child>,
        stdin: tokio::process::ChildStdin,
        lines: Box<tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>>,
    },
    Task {
        task: tokio::task::JoinHandle<()>,
        to: tokio::sync::mpsc::UnboundedSender<String>,
        from: tokio::sync::mpsc::UnboundedReceiver<String>,
    },
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Peer::Task { task, .. } = self {
            task.abort();
        }
    }
}

impl Conversation {
    /// Starts `script` (as [`run_script`] finds it) with `args`; its stderr
    /// goes to the test's.
    pub fn start(script: &str, args: &[&str]) -> Self {
        if let Some(name) = script.strip_suffix(".rs") {
            let (to, commands) = tokio::sync::mpsc::unbounded_channel();
            let (say, from) = tokio::sync::mpsc::unbounded_channel();
            let task = crate::applications::start(name, args, (commands, say));
            return Self {
                peer: Peer::Task { task, to, from },
                script: script.to_string(),
            };
        }
        Self::start_file(&script_path(script), args)
    }

    /// [`Conversation::start`] of a script anywhere (one a test wrote).
    pub fn start_file(path: &std::path::Path, args: &[&str]) -> Self {
        let mut command = tokio::process::Command::new(interpreter(path));
        command.arg(path);
        Self::spawn(command, path, args)
    }

    /// [`Conversation::start`] of a program (a built example).
    pub fn start_program(path: &std::path::Path, args: &[&str]) -> Self {
        Self::spawn(tokio::process::Command::new(path), path, args)
    }

    fn spawn(mut command: tokio::process::Command, path: &std::path::Path, args: &[&str]) -> Self {
        use std::process::Stdio;
        use tokio::io::AsyncBufReadExt;
        let script = path.display().to_string();
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("{script} starts: {error}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            peer: Peer::Process {
                child: Box::new(child),
                stdin,
                lines: Box::new(tokio::io::BufReader::new(stdout).lines()),
            },
            script,
        }
    }

    /// The next line it prints, within [`SCRIPT_TIMEOUT`].
    pub async fn next_text(&mut self) -> String {
        let line = match &mut self.peer {
            Peer::Process { lines, .. } => tokio::time::timeout(SCRIPT_TIMEOUT, lines.next_line())
                .await
                .map(|line| line.expect("its stdout")),
            Peer::Task { from, .. } => tokio::time::timeout(SCRIPT_TIMEOUT, from.recv()).await,
        };
        line.unwrap_or_else(|_| panic!("{} printed a line in time", self.script))
            .unwrap_or_else(|| panic!("{} ended early: see its stderr above", self.script))
    }

    /// The next line it prints, as JSON, within [`SCRIPT_TIMEOUT`].
    pub async fn next(&mut self) -> Value {
        let line = self.next_text().await;
        serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("{}: a JSON line: {line}", self.script))
    }

    /// Its process id, when it is a process that has not exited.
    pub fn pid(&self) -> Option<u32> {
        match &self.peer {
            Peer::Process { child, .. } => child.id(),
            Peer::Task { .. } => None,
        }
    }

    /// Writes `line` to its stdin.
    pub async fn say(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        match &mut self.peer {
            Peer::Process { stdin, .. } => stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .expect("its stdin"),
            Peer::Task { to, .. } => to.send(line.to_string()).expect("it reads its lines"),
        }
    }

    /// Its last line, once it has exited successfully.
    pub async fn report(mut self) -> Value {
        let report = self.next().await;
        match &mut self.peer {
            Peer::Process { child, .. } => {
                let status = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait())
                    .await
                    .expect("the script exits")
                    .expect("its status");
                assert!(status.success(), "{} failed: {status}", self.script);
            }
            Peer::Task { task, .. } => {
                tokio::time::timeout(SCRIPT_TIMEOUT, task)
                    .await
                    .expect("the application ends")
                    .unwrap_or_else(|error| panic!("{} failed: {error}", self.script));
            }
        }
        report
    }
}
