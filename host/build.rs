//! Compiles the built-in filter components (`guest-filters/*`) for
//! `wasm32-wasip2` with a nested cargo and its own target directory, so the
//! host embeds them and `cargo build` is all a user types. The `.wasm` files
//! are also copied to `target/filters/`, where an operator can pick them up
//! as a starting point for the filters directory.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, file stem of the built component, embedded as a built-in).
/// Examples are built and published but not embedded.
const GUESTS: &[(&str, &str, bool)] = &[
    (
        "chainsieve-bv-pending-transactions",
        "chainsieve_bv_pending_transactions",
        true,
    ),
    (
        "chainsieve-bv-mined-transactions",
        "chainsieve_bv_mined_transactions",
        true,
    ),
    (
        "chainsieve-new-pending-transactions-filter",
        "chainsieve_new_pending_transactions_filter",
        true,
    ),
    (
        "chainsieve-new-heads-filter",
        "chainsieve_new_heads_filter",
        true,
    ),
    ("chainsieve-logs-filter", "chainsieve_logs_filter", true),
    (
        "chainsieve-example-erc20-transfers",
        "chainsieve_example_erc20_transfers",
        false,
    ),
];

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "guest";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ sits in the workspace root")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // Cargo.toml holds the `guest` profile the components are built with.
    for watched in [
        "guest-filters",
        "examples",
        "wit",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }

    let target_root = target_root(&out_dir, &workspace);
    let guest_target = target_root.join("guest-build");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&workspace)
        .args([
            "build",
            "--target",
            TARGET,
            "--profile",
            PROFILE,
            "--target-dir",
        ])
        .arg(&guest_target);
    for (package, _, _) in GUESTS {
        build.args(["-p", package]);
    }
    // The outer build's flags and wrappers (clippy, coverage, host rustflags)
    // are not meant for the guests.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        build.env_remove(var);
    }
    let status = build
        .status()
        .expect("running cargo to build the filter components");
    assert!(
        status.success(),
        "building the filter components failed; is the {TARGET} target installed? (rust-toolchain.toml asks rustup for it)"
    );

    let built = guest_target.join(TARGET).join(PROFILE);
    let published = target_root.join("filters");
    fs::create_dir_all(&published).expect("creating target/filters");
    let mut registry = String::from(
        "/// The built-in components: (file name, bytes).\npub const BUILTIN: &[(&str, &[u8])] = &[\n",
    );
    for (_, stem, embed) in GUESTS {
        let file = format!("{stem}.wasm");
        let from = built.join(&file);
        fs::copy(&from, published.join(&file)).unwrap_or_else(|e| panic!("publishing {file}: {e}"));
        if *embed {
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

/// The workspace's target directory: `OUT_DIR` is
/// `<target>/<profile>/build/<pkg>/out` (or with a target triple before the
/// profile), so walk up to the directory that holds `CACHEDIR.TAG`.
fn target_root(out_dir: &Path, workspace: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace.join("target"))
}
