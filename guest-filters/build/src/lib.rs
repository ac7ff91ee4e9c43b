//! What the build scripts that compile filter components share (the host's
//! built-ins and examples, `host/filters/build.rs`; the test-only components, the
//! test crate's `build.rs`): the components are compiled for
//! `wasm32-wasip2` with a nested cargo in its own target directory, so a
//! plain `cargo build` (or `cargo test`) is all a user types, and the
//! `wasm32-wasip2` target is added when the toolchain lacks it.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The components' target.
pub const TARGET: &str = "wasm32-wasip2";
/// The workspace profile the components are built with (`Cargo.toml`).
pub const PROFILE: &str = "guest";

/// What a build of components left, and where.
pub struct Built {
    /// The directory the `.wasm` files are in.
    pub dir: PathBuf,
    /// The workspace's target directory, where the build scripts publish
    /// components (`filters/`, `test-filters/`).
    pub target_root: PathBuf,
}

/// Tells cargo to rerun the calling build script when anything a
/// component is built from changes.
fn watch(workspace: &Path) {
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
}

/// Builds `packages` of the calling build script's workspace (the nearest
/// directory above its package whose `Cargo.toml` has a `[workspace]`) for
/// [`TARGET`] into `<target>/guest-build`, and has cargo rerun the script
/// when their sources change. Panics (failing the build script) with the
/// reason.
pub fn build(packages: &[&str]) -> Built {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .ancestors()
        .skip(1)
        .find(|dir| {
            fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|manifest| manifest.lines().any(|line| line.trim() == "[workspace]"))
        })
        .unwrap_or_else(|| {
            panic!(
                "no workspace Cargo.toml above {}: a package with components to build sits in the workspace",
                manifest_dir.display()
            )
        })
        .to_path_buf();
    let workspace = workspace.as_path();
    watch(workspace);
    ensure_target_installed();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_root = target_root(&out_dir, workspace);
    let guest_target = target_root.join("guest-build");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(workspace)
        .args([
            "build",
            "--target",
            TARGET,
            "--profile",
            PROFILE,
            "--target-dir",
        ])
        .arg(&guest_target);
    for package in packages {
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
    Built {
        dir: guest_target.join(TARGET).join(PROFILE),
        target_root,
    }
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
