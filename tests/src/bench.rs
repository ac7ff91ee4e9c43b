//! What the bench binaries (`tests/benches/`) share: chainsieve in a child
//! process (the bench binary itself, `--serve …`), so its CPU time and
//! memory are its own, not the clients'; the machine a figure was measured
//! on; and how figures print (quantiles, a median and its spread).

use std::time::Duration;

use anyhow::Context;
use chainsieve_config::Config;
use chainsieve_model::SourceState;
use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::TIMEOUT;

// The options every bench binary takes beside its own (a plain comment:
// clap would take a doc comment for the binaries' description).
#[derive(clap::Args, Debug)]
pub struct Common {
    /// Runs; with more than one, a summary gives each figure's median and
    /// spread (min–max).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Internal: serve chainsieve reading this node, or these
    /// (comma-separated): the child of a run.
    #[arg(long, hide = true)]
    pub serve: Option<String>,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    pub bench: bool,
}

/// Prints the machine, then makes `runs` runs (at least one), printing
/// each as it ends; returns them, for a summary.
pub async fn each_run<R, F, Fut>(
    runs: usize,
    mut run: F,
    print: impl Fn(&R),
) -> anyhow::Result<Vec<R>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
{
    println!("machine: {}", machine());
    let count = runs.max(1);
    let mut made = Vec::with_capacity(count);
    for number in 1..=count {
        println!("run {number} of {count}");
        let done = run().await?;
        print(&done);
        made.push(done);
    }
    Ok(made)
}

/// Starts this binary as a chainsieve server (`--serve` and `args`, which
/// the binary reads and hands to [`serve_child`]); returns the child
/// (killed on drop) and its WebSocket URL once it is ready.
pub async fn start_child(args: &[&str]) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(std::env::current_exe().context("this binary")?)
        .arg("--serve")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the chainsieve child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let url = tokio::time::timeout(TIMEOUT, async {
        BufReader::new(stdout).lines().next_line().await
    })
    .await
    .context("chainsieve did not start in time")??
    .context("chainsieve exited before serving")?;
    Ok((child, url))
}

/// The child: serves `config` (one chain, `eth`, key `load`) on loopback,
/// prints its WebSocket URL once every chain is live and synced, and
/// serves until stdin closes (the parent exited or dropped it).
pub async fn serve_child(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let state = chainsieve::spawn(listener, config, shutdown.clone()).await?;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !state
        .chains
        .values()
        .all(|chain| chain.source_status() == SourceState::Live && chain.is_synced())
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the source did not come live and synced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serve_until_stdin_closes(&format!("ws://{addr}/eth/v1/load")).await;
    shutdown.cancel();
    Ok(())
}

/// A child's last step: prints the URL it serves (what [`start_child`]
/// waits for) and returns once stdin closes (the parent exited or dropped
/// it).
pub async fn serve_until_stdin_closes(url: &str) {
    println!("{url}");
    let _ = tokio::io::stdin().read_to_end(&mut Vec::new()).await;
}

/// The CPU model and the cores this machine offers, for the figures.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}

/// `p50, p99, p999` of a histogram of microseconds, in milliseconds.
pub fn quantiles(h: &Histogram<u64>) -> String {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms ({} samples)",
        ms(0.5),
        ms(0.99),
        ms(0.999),
        h.len()
    )
}

/// `median (min–max)` of some figures, or `—` for none.
pub fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let Some((first, last)) = values.first().zip(values.last()) else {
        return "—".into();
    };
    let median = if values.len() % 2 == 1 {
        values[values.len() / 2]
    } else {
        (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
    };
    let digits = |v: f64| if v.abs() >= 100.0 { 0 } else { 2 };
    format!(
        "{median:.d$} ({first:.f$}–{last:.l$})",
        d = digits(median),
        f = digits(*first),
        l = digits(*last)
    )
}

/// Ten thousand clients need more descriptors than the usual soft limit;
/// children (anvil, chainsieve) inherit the raised one.
pub fn raise_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_the_range() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), "2.00 (1.00–3.00)");
        assert_eq!(spread(vec![100.0, 300.0]), "200 (100–300)");
        assert_eq!(spread(Vec::new()), "—");
    }
}
