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
    let path = if script.ends_with(".py") {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("py")
            .join(script)
    } else {
        js_dir().join(script)
    };
    run_file(&path, args).await
}

/// [`run_script`] of a script anywhere (one a test wrote): `.py` with the
/// test venv's Python, anything else with Node.js.
pub async fn run_file(path: &std::path::Path, args: &[&str]) -> Value {
    let script = path.display().to_string();
    let interpreter = if script.ends_with(".py") {
        python()
    } else {
        PathBuf::from("node")
    };
    let mut command = tokio::process::Command::new(interpreter);
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
