#!/usr/bin/env bash
# Runs every test chainsieve has, on a fresh machine with only the Rust
# toolchain: installs what the tests need, then checks formatting, lints and
# the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# rust-toolchain.toml pins the compiler and asks for the wasm32-wasip2
# target; `rustup show` installs both if missing.
rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
rustup target add wasm32-wasip2 >/dev/null

# What the tests need beside Rust, installed by a function run beside the
# build below: it mostly waits on the network and the disk, the build on
# the two cores (docs/src/benchmarks.md, The test command).
install_test_tools() {
    # Real JavaScript clients (ethers, viem), anvil (the upstream node of the
    # real-node tests) and solc (the price tests' contracts), from npm.
    if ! command -v node >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq nodejs npm
    fi
    npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
    # The resuming JavaScript client (clients/js): built, packed and installed
    # into the tests' node_modules from its tarball, as an application installs
    # it (tests/tests/e2e/resuming_clients.rs).
    npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
    npm run --prefix clients/js --silent build
    # Its own tests, against scripted servers (clients/js/test).
    npm test --prefix clients/js --silent
    mkdir -p target/clients
    tarball="$(npm pack ./clients/js --pack-destination target/clients --silent)"
    npm install --prefix tests/js --no-save --no-audit --no-fund --loglevel=error \
        "./target/clients/$tarball"

    # Prometheus' own checker (`promtool check metrics`) for the /metrics
    # page, from Debian's prometheus package.
    if ! command -v promtool >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus
    fi

    # curl, which runs the book's command-line examples as a reader would
    # (tests/tests/e2e/book_examples.rs).
    if ! command -v curl >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends curl
    fi

    # Debian's Chromium, where the JavaScript package runs in a browser page
    # (tests/js/browser_clients.mjs, driven by playwright-core from npm).
    if ! command -v chromium >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium
    fi

    # web3.py for the Python client test and nats-server (the bus tests), in a
    # venv of its own.
    if [ ! -x tests/py/.venv/bin/python ]; then
        python3 -m venv tests/py/.venv || {
            apt-get update -qq && apt-get install -y -qq python3-venv && python3 -m venv tests/py/.venv
        }
    fi
    tests/py/.venv/bin/pip install -q --disable-pip-version-check -r tests/py/requirements.txt
    # The resuming Python client (clients/py): its unit tests, then built as a
    # wheel and installed into the venv from it, as an application installs it
    # (tests/tests/e2e/resuming_clients.rs).
    tests/py/.venv/bin/python -m unittest discover -q -s clients/py/tests -t clients/py
    tests/py/.venv/bin/pip wheel -q --disable-pip-version-check --no-deps -w target/clients ./clients/py
    tests/py/.venv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps \
        target/clients/chainsieve_client-0.1.0-py3-none-any.whl
}

cargo fmt --all -- --check

mkdir -p target
install_test_tools > target/test-tools.log 2>&1 &
installing=$!
# A failed build leaves no installer behind.
trap 'kill "$installing" 2>/dev/null || true' EXIT

# One build for the lints and the tests: the workspace's crates are compiled
# by clippy's driver (scripts/clippy-rustc), which lints them as
# `cargo clippy --workspace --all-targets -- -D warnings` does while it
# builds them, so every dependency is built once instead of checked for
# clippy and built again for the tests. `--all-targets` lints the benches
# too; building them is all they need here.
export CHAINSIEVE_CLIPPY_DRIVER="$(rustup which clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/clippy-rustc"
cargo test --workspace --all-targets --no-run
installed=0
wait "$installing" || installed=$?
cat target/test-tools.log
if [ "$installed" -ne 0 ]; then
    echo "installing the tests' tools failed (target/test-tools.log, above)" >&2
    exit 1
fi
# A `#[tokio::test]` runs its whole future on the test thread's stack,
# and debug builds' futures are large: 8 MiB for each, not Rust's 2.
export RUST_MIN_STACK=8388608
# Three tests at a time on the two cores: the end-to-end tests mostly wait
# on sockets, nodes and NATS, and two left the cores idle a third of the
# time (docs/src/benchmarks.md, The test command).
export RUST_TEST_THREADS=3
cargo test --workspace
