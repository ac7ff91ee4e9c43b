//! Compiles the built-in filter components and the examples
//! (`guest-filters/*-0.2`, `*-0.3`, `examples/`) for `wasm32-wasip2`
//! (`chainsieve-guest-build`), so the host embeds the built-ins and
//! `cargo build` is all a user types. Both are also copied to
//! `target/filters/`, where an operator can pick them up as a starting
//! point for the filters directory. Components only tests use are built
//! by the test crate (`tests/build.rs`), never here.

use std::env;
use std::fs;
use std::path::PathBuf;

use chainsieve_guest_build as guests;

/// (package, file stem of the built component, embedded as a built-in).
/// The built-ins are the contract 0.2 builds (their subscriptions' reach
/// lets the host skip most of each batch; docs/src/benchmarks.md, The
/// filter matrix), and 0.3 for the transaction topics (`transactionReceipts`
/// among them) and `logs`, whose subscriptions may name watchlists (the 0.2 builds of those are
/// published for the benchmark); the examples are published only.
const GUESTS: &[(&str, &str, bool)] = &[
    (
        "chainsieve-example-erc20-transfers",
        "chainsieve_example_erc20_transfers",
        false,
    ),
    (
        "chainsieve-example-erc20-transfers-decoded",
        "chainsieve_example_erc20_transfers_decoded",
        false,
    ),
    (
        "chainsieve-bv-pending-transactions-0-2",
        "chainsieve_bv_pending_transactions_0_2",
        false,
    ),
    (
        "chainsieve-bv-mined-transactions-0-2",
        "chainsieve_bv_mined_transactions_0_2",
        false,
    ),
    (
        "chainsieve-bv-pending-transactions-0-3",
        "chainsieve_bv_pending_transactions_0_3",
        true,
    ),
    (
        "chainsieve-bv-mined-transactions-0-3",
        "chainsieve_bv_mined_transactions_0_3",
        true,
    ),
    (
        "chainsieve-transaction-receipts-0-3",
        "chainsieve_transaction_receipts_0_3",
        true,
    ),
    (
        "chainsieve-transaction-lifecycle-0-3",
        "chainsieve_transaction_lifecycle_0_3",
        true,
    ),
    (
        "chainsieve-logs-filter-0-2",
        "chainsieve_logs_filter_0_2",
        false,
    ),
    (
        "chainsieve-logs-filter-0-3",
        "chainsieve_logs_filter_0_3",
        true,
    ),
    (
        "chainsieve-new-heads-filter-0-2",
        "chainsieve_new_heads_filter_0_2",
        true,
    ),
    (
        "chainsieve-new-pending-transactions-filter-0-2",
        "chainsieve_new_pending_transactions_filter_0_2",
        true,
    ),
];

fn main() {
    let packages: Vec<&str> = GUESTS.iter().map(|(package, _, _)| *package).collect();
    let built = guests::build(&packages);
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let published = built.target_root.join("filters");
    fs::create_dir_all(&published)
        .unwrap_or_else(|e| panic!("creating {}: {e}", published.display()));
    let mut registry = String::from(
        "/// The built-in components: (file name, bytes).\npub const BUILTIN: &[(&str, &[u8])] = &[\n",
    );
    for (_, stem, built_in) in GUESTS {
        let file = format!("{stem}.wasm");
        let from = built.dir.join(&file);
        fs::copy(&from, published.join(&file)).unwrap_or_else(|e| panic!("publishing {file}: {e}"));
        if *built_in {
            fs::copy(&from, out_dir.join(&file))
                .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            registry.push_str(&format!(
                "    ({file:?}, include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{file}\"))),\n"
            ));
        }
    }
    registry.push_str("];\n");
    println!(
        "cargo:rustc-env=CHAINSIEVE_BUILT_FILTERS_DIR={}",
        published.display()
    );
    fs::write(out_dir.join("builtin_filters.rs"), registry).expect("writing builtin_filters.rs");
}
