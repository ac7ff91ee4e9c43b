//! Compiles the filter components (`guest-filters/*`, the examples) for
//! `wasm32-wasip2` with a nested cargo and its own target directory, so the
//! host embeds the built-ins and `cargo build` is all a user types. Built-ins
//! and examples are also copied to `target/filters/`, where an operator can
//! pick them up as a starting point for the filters directory; test-only
//! components go to `target/test-filters/`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where a built component goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Embedded in the binary as a built-in, and published.
    BuiltIn,
    /// Published in `target/filters/` only (examples).
    Example,
    /// In `target/test-filters/` only: never where an operator would copy
    /// filters from.
    TestOnly,
}

/// (package, file stem of the built component, what it is for). The
/// built-ins are the contract 0.2 builds (their subscriptions' reach lets
/// the host skip most of each batch; README, Benchmarks); the 0.1 builds
/// of the same rules are tested beside them.
const GUESTS: &[(&str, &str, Use)] = &[
    (
        "chainsieve-bv-pending-transactions",
        "chainsieve_bv_pending_transactions",
        Use::TestOnly,
    ),
    (
        "chainsieve-bv-mined-transactions",
        "chainsieve_bv_mined_transactions",
        Use::TestOnly,
    ),
    (
        "chainsieve-new-pending-transactions-filter",
        "chainsieve_new_pending_transactions_filter",
        Use::TestOnly,
    ),
    (
        "chainsieve-new-heads-filter",
        "chainsieve_new_heads_filter",
        Use::TestOnly,
    ),
    (
        "chainsieve-logs-filter",
        "chainsieve_logs_filter",
        Use::TestOnly,
    ),
    (
        "chainsieve-example-erc20-transfers",
        "chainsieve_example_erc20_transfers",
        Use::Example,
    ),
    (
        "chainsieve-example-erc20-transfers-decoded",
        "chainsieve_example_erc20_transfers_decoded",
        Use::Example,
    ),
    (
        "chainsieve-evil-filter",
        "chainsieve_evil_filter",
        Use::TestOnly,
    ),
    (
        "chainsieve-evil-filter-0-2",
        "chainsieve_evil_filter_0_2",
        Use::TestOnly,
    ),
    (
        "chainsieve-bv-pending-transactions-0-2",
        "chainsieve_bv_pending_transactions_0_2",
        Use::BuiltIn,
    ),
    (
        "chainsieve-bv-mined-transactions-0-2",
        "chainsieve_bv_mined_transactions_0_2",
        Use::BuiltIn,
    ),
    (
        "chainsieve-logs-filter-0-2",
        "chainsieve_logs_filter_0_2",
        Use::BuiltIn,
    ),
    (
        "chainsieve-new-heads-filter-0-2",
        "chainsieve_new_heads_filter_0_2",
        Use::BuiltIn,
    ),
    (
        "chainsieve-new-pending-transactions-filter-0-2",
        "chainsieve_new_pending_transactions_filter_0_2",
        Use::BuiltIn,
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

    ensure_target_installed();

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
        "building the filter components for {TARGET} failed (see the nested cargo's errors above)"
    );

    let built = guest_target.join(TARGET).join(PROFILE);
    let published = target_root.join("filters");
    let test_only = target_root.join("test-filters");
    for dir in [&published, &test_only] {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    }
    let mut registry = String::from(
        "/// The built-in components: (file name, bytes).\npub const BUILTIN: &[(&str, &[u8])] = &[\n",
    );
    for (_, stem, usage) in GUESTS {
        let file = format!("{stem}.wasm");
        let from = built.join(&file);
        let to = match usage {
            Use::TestOnly => &test_only,
            Use::BuiltIn | Use::Example => &published,
        };
        fs::copy(&from, to.join(&file)).unwrap_or_else(|e| panic!("publishing {file}: {e}"));
        if *usage == Use::BuiltIn {
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

/// Makes sure the compiler has the standard library for [`TARGET`].
///
/// `rust-toolchain.toml` lists the target, but rustup adds it only when it
/// installs the toolchain itself: on a machine that already has the pinned
/// toolchain (or with `RUSTUP_AUTO_INSTALL=0`) the target is missing and the
/// guest build would fail with "can't find crate for `core`". So the build
/// adds it with rustup, to the toolchain whose compiler runs this build (the
/// one whose sysroot lacks it), and says so. A compiler rustup does not
/// manage gets an error saying what to install.
fn ensure_target_installed() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .unwrap_or_else(|| panic!("`{rustc} --print sysroot` failed"));
    let installed = || {
        sysroot
            .join("lib/rustlib")
            .join(TARGET)
            .join("lib")
            .is_dir()
    };
    if installed() {
        return;
    }
    // rustup keeps each toolchain in `<RUSTUP_HOME>/toolchains/<name>`.
    let toolchain = sysroot
        .parent()
        .filter(|parent| parent.file_name().is_some_and(|name| name == "toolchains"))
        .and_then(|_| sysroot.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| {
            panic!(
                "the {TARGET} target is missing from {} (the sysroot of {rustc}, not a rustup toolchain); install the target for that compiler",
                sysroot.display()
            )
        });
    println!(
        "cargo:warning=the {TARGET} target (for the filter components) is missing; adding it with `rustup target add --toolchain {toolchain} {TARGET}`"
    );
    let added = Command::new("rustup")
        .args(["target", "add", "--toolchain", &toolchain, TARGET])
        .status();
    match added {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "`rustup target add --toolchain {toolchain} {TARGET}` failed ({status}); the filter components need that target"
        ),
        Err(e) => panic!(
            "the {TARGET} target is missing and rustup could not be run ({e}); install the target for {rustc} by hand"
        ),
    }
    assert!(
        installed(),
        "rustup added {TARGET} to {toolchain}, but {} still lacks it",
        sysroot.display()
    );
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
