//! Compiles the components only tests use (`chainsieve-guest-build`): the
//! built-ins' rules built for contract 0.1, held to the same answers as
//! the 0.2 built-ins, and the evil guests that prove the limits. They go
//! to `target/test-filters/` (never where an operator copies filters
//! from), named to the crate by `CHAINSIEVE_TEST_FILTERS_DIR`; a plain
//! `cargo build` or `cargo run` of the server never builds them.

use std::fs;

use chainsieve_guest_build as guests;

/// (package, file stem of the built component).
const GUESTS: &[(&str, &str)] = &[
    (
        "chainsieve-bv-pending-transactions",
        "chainsieve_bv_pending_transactions",
    ),
    (
        "chainsieve-bv-mined-transactions",
        "chainsieve_bv_mined_transactions",
    ),
    (
        "chainsieve-new-pending-transactions-filter",
        "chainsieve_new_pending_transactions_filter",
    ),
    ("chainsieve-new-heads-filter", "chainsieve_new_heads_filter"),
    ("chainsieve-logs-filter", "chainsieve_logs_filter"),
    ("chainsieve-evil-filter", "chainsieve_evil_filter"),
    ("chainsieve-evil-filter-0-2", "chainsieve_evil_filter_0_2"),
];

fn main() {
    let packages: Vec<&str> = GUESTS.iter().map(|(package, _)| *package).collect();
    let built = guests::build(&packages);
    let test_only = built.target_root.join("test-filters");
    fs::create_dir_all(&test_only)
        .unwrap_or_else(|e| panic!("creating {}: {e}", test_only.display()));
    for (_, stem) in GUESTS {
        let file = format!("{stem}.wasm");
        fs::copy(built.dir.join(&file), test_only.join(&file))
            .unwrap_or_else(|e| panic!("copying {file}: {e}"));
    }
    println!(
        "cargo:rustc-env=CHAINSIEVE_TEST_FILTERS_DIR={}",
        test_only.display()
    );
}
