//! The server's house, held to the book (docs/src/architecture.md, Crates):
//! its crates depend on each other as the book draws them, each crate's
//! doc says what it may use, and no import cycle runs between the source
//! files of any of them.
//!
//! Data flows one way (docs/src/architecture.md, Layering): a file may use the
//! files below it, and a parent module may use its own children, but two
//! files that reach each other, directly or through others, can no longer be
//! read, tested or moved apart. This test parses each crate's `src/` with `syn`, draws an
//! edge from each file to every file whose items it names (following `use`
//! re-exports to the file that defines the item), and reports each strongly
//! connected component of more than one file with the names that tie it.
//!
//! Not counted: test code (`#[cfg(test)]` items), `src/main.rs` and `src/bin/`
//! (binaries are separate crates), and a tangle inside one module's own
//! files: a cycle whose files are all one (non-root) module and its
//! descendants, such as a `mod.rs` that calls its child and a child that
//! names its parent's types, is how a module is built. Any cycle that
//! reaches outside such a subtree counts, including one that runs through
//! a parent using its own child. Doc comments and string literals are not
//! code, so links in them do not count.
//!
//! Modules are held to the same rule as files: under each module, its
//! child modules (each with all of its descendants' files) must not reach
//! each other in a loop, even when no two files do (`rpc/a.rs` using
//! `chain/b.rs` while `chain/c.rs` uses `rpc/d.rs` ties `rpc` and `chain`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use syn::buffer::{Cursor, TokenBuffer};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, ForeignItem, Item, Meta, UseTree};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the workspace root")
        .to_path_buf()
}

/// The server's crates: `host/` itself and each crate under it, by
/// package name, with their manifest's directory.
fn server_crates() -> BTreeMap<String, PathBuf> {
    let host = root().join("host");
    let mut dirs = vec![host.clone()];
    for entry in fs::read_dir(&host).expect("host/") {
        let dir = entry.expect("an entry").path();
        if dir.join("Cargo.toml").is_file() {
            dirs.push(dir);
        }
    }
    dirs.into_iter()
        .map(|dir| (manifest(&dir).0, dir))
        .collect()
}

/// A crate's package name and the workspace crates it depends on (its
/// `[dependencies]`, not its dev- or build-dependencies).
fn manifest(dir: &Path) -> (String, BTreeSet<String>) {
    let path = dir.join("Cargo.toml");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manifest: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = manifest["package"]["name"]
        .as_str()
        .expect("a package name")
        .to_string();
    let deps = manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .map(|deps| {
            deps.keys()
                .filter(|dep| dep.starts_with("chainsieve"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    (name, deps)
}

/// The crate graph as docs/src/architecture.md (Crates) draws it: each
/// line `crate -> dep, dep` (names without `chainsieve-`), `none` for
/// none, in the first `text` block of the section.
fn drawn_graph(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section = page
        .split_once("\n### Crates\n")
        .expect("architecture.md has a Crates section")
        .1;
    let block = section
        .split_once("```text\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("the Crates section draws its graph in a text block")
        .0;
    let full = |name: &str| match name.trim() {
        "chainsieve" => "chainsieve".to_string(),
        name => format!("chainsieve-{name}"),
    };
    block
        .lines()
        .map(|line| {
            let (from, to) = line
                .split_once("->")
                .unwrap_or_else(|| panic!("not `a -> b`: {line}"));
            let to = match to.trim() {
                "none" => BTreeSet::new(),
                list => list.split(',').map(full).collect(),
            };
            (full(from), to)
        })
        .collect()
}

#[test]
fn the_crates_depend_on_each_other_as_the_book_draws_it() {
    let page =
        fs::read_to_string(root().join("docs/src/architecture.md")).expect("architecture.md");
    let drawn = drawn_graph(&page);
    let crates = server_crates();
    assert!(crates.len() > 10, "found only {crates:?}");
    let actual: BTreeMap<String, BTreeSet<String>> =
        crates.values().map(|dir| manifest(dir)).collect();
    assert_eq!(
        actual, drawn,
        "left: the crates' [dependencies]; right: the graph of docs/src/architecture.md, Crates"
    );
}

/// Each crate's doc says what it may use (docs/src/architecture.md,
/// Crates): the crates its manifest names, no more and no fewer.
#[test]
fn each_crate_says_what_it_may_use() {
    for (name, dir) in server_crates() {
        if name == "chainsieve" {
            continue;
        }
        let lib = dir.join("src/lib.rs");
        let text = fs::read_to_string(&lib).expect("lib.rs");
        let doc: String = text
            .lines()
            .take_while(|line| line.starts_with("//!"))
            .map(|line| line.trim_start_matches("//!").trim())
            .collect::<Vec<_>>()
            .join(" ");
        let said = doc
            .split_once("May use (docs/src/architecture.md, Crates): ")
            .unwrap_or_else(|| panic!("{}: its doc says not what it may use", lib.display()))
            .1;
        let said = said.split_once('.').map_or(said, |(list, _)| list);
        let named: BTreeSet<String> = said
            .split(", ")
            .filter_map(|item| {
                item.trim()
                    .strip_prefix("[`")?
                    .strip_suffix("`]")
                    .map(|n| n.replace('_', "-"))
            })
            .collect();
        assert_eq!(
            named,
            manifest(&dir).1,
            "{}: what its doc says it may use",
            lib.display()
        );
    }
}

/// Every crate's own `src/`.
#[test]
fn no_import_cycles_between_source_files() {
    let mut failures = String::new();
    for dir in server_crates().values() {
        let src = dir.join("src");
        let graph = dependencies(&src);
        let tangles: Vec<Vec<String>> = strongly_connected(&graph)
            .into_iter()
            .map(|cycle| cycle.files)
            .collect();
        println!(
            "{}: {} files, {} edges between files; inside single modules: {tangles:?}",
            src.display(),
            graph.files.len(),
            graph.edges.len()
        );
        let found = reported(&graph);
        if !found.is_empty() {
            failures.push_str(&report(&src, &found));
        }
        let tied = module_cycles(&graph);
        if !tied.is_empty() {
            failures.push_str(&report_modules(&src, &tied));
        }
    }
    // Guards against passing vacuously (wrong directory, nothing parsed).
    let host = dependencies(&root().join("host/src"));
    assert!(
        host.files.len() > 1 && !host.edges.is_empty(),
        "expected several files and some edges under host/src, found {} files and {} edges",
        host.files.len(),
        host.edges.len()
    );
    assert!(failures.is_empty(), "{failures}");
}

// The tests below run the checker on small crates written to a temporary
// directory, so that it is shown to fail when it should, and only then.

#[test]
fn two_files_that_use_each_other_are_a_cycle() {
    let dir = tree(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B(crate::a::A);"),
    ]);
    let src = dir.path().join("src");
    let found = cycles(&src);
    assert_eq!(
        found,
        vec![Cycle {
            files: vec!["a.rs".into(), "b.rs".into()],
            edges: vec![edge("a.rs", "b.rs", &["B"]), edge("b.rs", "a.rs", &["A"])],
        }]
    );
    let text = report(&src, &found);
    assert!(text.contains("cycle 1: src/a.rs, src/b.rs\n"), "{text}");
    assert!(
        text.contains("shortest loop: src/a.rs -> src/b.rs -> src/a.rs\n"),
        "{text}"
    );
    assert!(text.contains("src/a.rs -> src/b.rs: B\n"), "{text}");
    assert!(text.contains("src/b.rs -> src/a.rs: A\n"), "{text}");
}

#[test]
fn parent_using_children_and_child_using_sibling_or_parent_is_no_cycle() {
    let dir = tree(&[
        (
            "lib.rs",
            "pub mod http; pub mod rpc; pub use rpc::RpcError;",
        ),
        (
            "rpc/mod.rs",
            "mod error; pub mod methods; pub use error::RpcError; \
             pub struct Limits; pub fn run() { methods::process(); }",
        ),
        ("rpc/error.rs", "pub struct RpcError;"),
        (
            "rpc/methods.rs",
            "use super::{error::RpcError, Limits}; \
             pub fn process() -> Result<Limits, RpcError> { Ok(Limits) }",
        ),
        (
            "http/mod.rs",
            "use crate::rpc::{self, methods::process}; \
             pub fn serve() -> crate::RpcError { process(); rpc::run(); todo!() }",
        ),
    ]);
    let graph = dependencies(&dir.path().join("src"));
    assert_eq!(
        graph.edges,
        vec![
            edge("http/mod.rs", "rpc/error.rs", &["RpcError"]),
            edge("http/mod.rs", "rpc/methods.rs", &["process"]),
            edge("http/mod.rs", "rpc/mod.rs", &["run"]),
            edge("lib.rs", "rpc/error.rs", &["RpcError"]),
            edge("rpc/methods.rs", "rpc/error.rs", &["RpcError"]),
            edge("rpc/methods.rs", "rpc/mod.rs", &["Limits"]),
            edge("rpc/mod.rs", "rpc/error.rs", &["RpcError"]),
            edge("rpc/mod.rs", "rpc/methods.rs", &["process"]),
        ]
    );
    // rpc/mod.rs and its child use each other: a module's own tangle.
    assert_eq!(strongly_connected(&graph).len(), 1);
    assert_eq!(reported(&graph), vec![]);
}

/// A cycle that leaves a module's subtree counts, even where one of its
/// steps is a parent using its own child.
#[test]
fn a_cycle_through_a_parent_and_another_module_is_found() {
    let dir = tree(&[
        ("lib.rs", "mod chain; mod rpc;"),
        (
            "chain/mod.rs",
            "mod pipeline; pub struct Chain; pub fn start() { pipeline::run() }",
        ),
        ("chain/pipeline.rs", "pub fn run() { crate::rpc::answer() }"),
        (
            "rpc.rs",
            "pub fn answer() -> Option<crate::chain::Chain> { None }",
        ),
    ]);
    let found = cycles(&dir.path().join("src"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].files,
        ["chain/mod.rs", "chain/pipeline.rs", "rpc.rs"]
    );
}

/// Two modules whose files reach each other only through different files
/// are still a cycle of modules, though no two files form one.
#[test]
fn a_cycle_between_modules_without_one_between_files_is_found() {
    let dir = tree(&[
        ("lib.rs", "mod chain; mod rpc;"),
        ("chain/mod.rs", "mod pipeline; mod reload;"),
        (
            "chain/pipeline.rs",
            "pub fn run() { crate::rpc::methods::answer() }",
        ),
        ("chain/reload.rs", "pub struct Reload;"),
        ("rpc/mod.rs", "pub mod methods; mod subscribe;"),
        ("rpc/methods.rs", "pub fn answer() {}"),
        (
            "rpc/subscribe.rs",
            "pub fn open(_: crate::chain::reload::Reload) {}",
        ),
    ]);
    let src = dir.path().join("src");
    assert!(cycles(&src).is_empty(), "no file cycle: {:?}", cycles(&src));
    let found = cycles_between_modules(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["chain", "rpc"]);
    assert_eq!(
        found[0].edges,
        vec![
            edge("chain", "rpc", &["answer"]),
            edge("rpc", "chain", &["Reload"])
        ]
    );
    let text = report_modules(&src, &found);
    assert!(
        text.contains("shortest loop: chain -> rpc -> chain\n"),
        "{text}"
    );
}

/// Nested modules are checked under their parent; a parent's own file
/// using its children and the children naming the parent are no cycle.
#[test]
fn modules_are_checked_under_each_parent() {
    let dir = tree(&[
        ("lib.rs", "mod http;"),
        (
            "http/mod.rs",
            "mod a; mod b; pub struct State; fn go() { a::f(); b::g(); }",
        ),
        ("http/a/mod.rs", "mod x; pub fn f() {}"),
        (
            "http/a/x.rs",
            "pub fn h(_: super::super::State) { crate::http::b::g() }",
        ),
        (
            "http/b.rs",
            "pub fn g() {} pub fn k() { crate::http::a::f() }",
        ),
    ]);
    let found = cycles_between_modules(&dir.path().join("src"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["http::a", "http::b"]);
    let fine = tree(&[
        ("lib.rs", "mod http;"),
        (
            "http/mod.rs",
            "mod a; mod b; pub struct State; fn go() { a::f(); b::g(); }",
        ),
        ("http/a.rs", "pub fn f(_: super::State) { super::b::g() }"),
        (
            "http/b.rs",
            "pub fn g() -> crate::http::State { crate::http::State }",
        ),
    ]);
    let none = cycles_between_modules(&fine.path().join("src"));
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn test_code_does_not_count() {
    let files = |b: &'static str| {
        tree(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            ("b.rs", b),
        ])
    };
    let tested = files("pub struct B; #[cfg(test)] mod tests { use crate::a::A; }");
    assert_eq!(cycles(&tested.path().join("src")), vec![]);
    // The same inline module without cfg(test) is code like any other.
    let untested = files("pub struct B; mod tests { use crate::a::A; }");
    let found = cycles(&untested.path().join("src"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["a.rs", "b.rs"]);
}

#[test]
fn cycles_through_re_exports_macros_and_super_are_found() {
    let dir = tree(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        // `crate::b::Thing` is defined in b/inner.rs, not in b/mod.rs.
        ("a/mod.rs", "use crate::b::Thing; pub struct A; mod x;"),
        (
            "a/x.rs",
            "pub fn f() { println!(\"{}\", super::super::c::C); }",
        ),
        ("b/mod.rs", "mod inner; pub use inner::*;"),
        ("b/inner.rs", "pub struct Thing(crate::a::A);"),
        ("c.rs", "pub const C: u8 = 0; fn g() { crate::a::x::f() }"),
    ]);
    let found = cycles(&dir.path().join("src"));
    assert_eq!(
        found,
        vec![
            Cycle {
                files: vec!["a/mod.rs".into(), "b/inner.rs".into()],
                edges: vec![
                    edge("a/mod.rs", "b/inner.rs", &["Thing"]),
                    edge("b/inner.rs", "a/mod.rs", &["A"]),
                ],
            },
            Cycle {
                files: vec!["a/x.rs".into(), "c.rs".into()],
                edges: vec![
                    edge("a/x.rs", "c.rs", &["C"]),
                    edge("c.rs", "a/x.rs", &["f"])
                ],
            },
        ]
    );
}

/// What a file refers to in another file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edge {
    /// Paths relative to the source directory, `/`-separated.
    from: String,
    to: String,
    /// The items of `to` that `from` names, sorted (`*` for a glob import).
    names: Vec<String>,
}

/// A set of files that reach each other, and the edges among them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cycle {
    files: Vec<String>,
    edges: Vec<Edge>,
}

/// The files of a crate (with their modules) and the edges between them,
/// sorted.
struct Graph {
    files: Vec<String>,
    modules: BTreeMap<String, ModPath>,
    edges: Vec<Edge>,
}

/// The import cycles between the `.rs` files under `src`.
fn cycles(src: &Path) -> Vec<Cycle> {
    reported(&dependencies(src))
}

/// The strongly connected components that are cycles to report: all but
/// those inside one non-root module's own subtree.
fn reported(graph: &Graph) -> Vec<Cycle> {
    let module = |file: &String| &graph.modules[file];
    strongly_connected(graph)
        .into_iter()
        .filter(|cycle| {
            let within_one_module = cycle.files.iter().any(|root| {
                !module(root).is_empty()
                    && cycle
                        .files
                        .iter()
                        .all(|file| module(file).starts_with(module(root)))
            });
            !within_one_module
        })
        .collect()
}

/// The import cycles between sibling modules of the crate under `src`.
fn cycles_between_modules(src: &Path) -> Vec<Cycle> {
    module_cycles(&dependencies(src))
}

/// Cycles between modules: under each module (the crate root included),
/// its children are the nodes, each standing for all of its descendants'
/// files, and a file's edge to a file under another child is an edge
/// between the two children. The parent's own file is no node: a parent
/// using its children, and children naming their parent's items, is how a
/// module is built. Nodes are named by module path (`rpc::methods`).
fn module_cycles(graph: &Graph) -> Vec<Cycle> {
    let parents: BTreeSet<&[String]> = graph
        .modules
        .values()
        .flat_map(|module| (0..module.len()).map(|depth| &module[..depth]))
        .collect();
    let mut found = Vec::new();
    for parent in parents {
        // The child of `parent` that holds `file`, if it is below `parent`.
        let child_of = |file: &String| {
            let module = &graph.modules[file];
            (module.len() > parent.len() && module.starts_with(parent))
                .then(|| module[..=parent.len()].join("::"))
        };
        let mut between: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for edge in &graph.edges {
            if let (Some(from), Some(to)) = (child_of(&edge.from), child_of(&edge.to))
                && from != to
            {
                between
                    .entry((from, to))
                    .or_default()
                    .extend(edge.names.iter().cloned());
            }
        }
        let children: BTreeSet<String> = graph.files.iter().filter_map(child_of).collect();
        let siblings = Graph {
            files: children.into_iter().collect(),
            modules: BTreeMap::new(),
            edges: edge_list(between),
        };
        found.extend(strongly_connected(&siblings));
    }
    found
}

/// The edges of a map from (from, to) to the names that tie them, sorted.
fn edge_list(edges: BTreeMap<(String, String), BTreeSet<String>>) -> Vec<Edge> {
    edges
        .into_iter()
        .map(|((from, to), names)| Edge {
            from,
            to,
            names: names.into_iter().collect(),
        })
        .collect()
}

/// A message that names every module of every cycle and what ties them.
fn report_modules(src: &Path, cycles: &[Cycle]) -> String {
    let mut text = format!(
        "{} import cycle(s) between modules under {}. Data flows one way \
         (docs/src/architecture.md, Layering): move what the modules share below \
         both, or pass it in from above.\n",
        cycles.len(),
        src.display()
    );
    write_cycles(&mut text, cycles, |module| module.to_string());
    text
}

/// A message that names every file of every cycle and what ties them.
fn report(src: &Path, cycles: &[Cycle]) -> String {
    // A crate of the workspace by its path (`host/model/src`), any other
    // by its directory's name.
    let dir = src.strip_prefix(root()).map_or_else(
        |_| {
            src.file_name().map_or_else(
                || src.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            )
        },
        |relative| relative.display().to_string(),
    );
    let mut text = format!(
        "{} import cycle(s) between source files. Data flows one way \
         (docs/src/architecture.md, Layering): move what the files share below \
         all of them, or pass it in from above.\n",
        cycles.len()
    );
    write_cycles(&mut text, cycles, |file| format!("{dir}/{file}"));
    text
}

/// Each cycle's members, its shortest loop and the edges that tie it,
/// each member as `name` writes it.
fn write_cycles(text: &mut String, cycles: &[Cycle], name: impl Fn(&str) -> String) {
    let names = |members: &[String]| members.iter().map(|m| name(m)).collect::<Vec<_>>();
    for (i, cycle) in cycles.iter().enumerate() {
        let _ = writeln!(
            text,
            "\ncycle {}: {}",
            i + 1,
            names(&cycle.files).join(", ")
        );
        let shortest = names(&shortest_loop(cycle)).join(" -> ");
        let _ = writeln!(text, "  shortest loop: {shortest}");
        for edge in &cycle.edges {
            let _ = writeln!(
                text,
                "  {} -> {}: {}",
                name(&edge.from),
                name(&edge.to),
                edge.names.join(", ")
            );
        }
    }
}

/// The shortest chain of edges in `cycle` that leads from a file back to
/// itself (first file and last are the same): often the one edge to cut.
fn shortest_loop(cycle: &Cycle) -> Vec<String> {
    let mut best: Vec<String> = Vec::new();
    for start in &cycle.files {
        // Breadth-first from `start`; `came_from` holds each file's predecessor.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.as_str()]);
        'search: while let Some(file) = queue.pop_front() {
            for edge in cycle.edges.iter().filter(|e| e.from == file) {
                if edge.to == *start {
                    let mut path = vec![start.clone()];
                    let mut at = file;
                    while at != start {
                        path.push(at.to_string());
                        at = came_from[at];
                    }
                    path.push(start.clone());
                    path.reverse();
                    if best.is_empty() || path.len() < best.len() {
                        best = path;
                    }
                    break 'search;
                }
                if !came_from.contains_key(edge.to.as_str()) {
                    came_from.insert(&edge.to, file);
                    queue.push_back(&edge.to);
                }
            }
        }
    }
    best
}

/// A module path: `[]` is the crate root, `["rpc", "methods"]` is `crate::rpc::methods`.
type ModPath = Vec<String>;

/// What one module (a file, or an inline `mod x { … }` in it) declares.
#[derive(Default)]
struct Scope {
    /// The file the module is written in.
    file: String,
    /// Child modules, from files or inline.
    mods: BTreeSet<String>,
    /// Other items defined here (types, functions, constants, macros…).
    items: BTreeSet<String>,
    /// Names brought in by module-level `use`, and the path as written.
    imports: BTreeMap<String, Vec<String>>,
    /// Paths of `use …::*`, as written.
    globs: Vec<Vec<String>>,
    /// Names brought in by `use` inside function bodies, for paths written here.
    locals: BTreeMap<String, Vec<String>>,
}

/// A path written in a module, to resolve.
struct Reference {
    file: String,
    module: ModPath,
    path: Vec<String>,
    glob: bool,
}

/// Where a path leads.
enum Resolved {
    /// A module itself (naming a module uses nothing in it yet).
    Module(ModPath),
    /// An item in a module: defined there, or not found there (such as one
    /// made by a macro) and so taken to be there.
    Item(ModPath, String),
    /// Another crate, the prelude, a local variable, a generic parameter…
    Outside,
}

/// Import chains longer than this are treated as outside the crate (they
/// only occur with import loops, which do not compile).
const MAX_DEPTH: usize = 12;

struct Crate {
    /// File path (relative to src) → its module path.
    files: BTreeMap<String, ModPath>,
    scopes: BTreeMap<ModPath, Scope>,
}

/// Parses every `.rs` file under `src` and draws the edges between them.
fn dependencies(src: &Path) -> Graph {
    let mut paths = Vec::new();
    rust_files(src, "", &mut paths);
    let mut parsed = Vec::new();
    for rel in paths {
        let path = src.join(&rel);
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()));
        let module = module_of(&rel);
        parsed.push((rel, module, ast));
    }

    let mut krate = Crate {
        files: BTreeMap::new(),
        scopes: BTreeMap::new(),
    };
    let mut test_only = Vec::new();
    for (rel, module, ast) in &parsed {
        declare(&mut krate.scopes, rel, module, &ast.items, &mut test_only);
    }
    // Files behind `#[cfg(test)] mod x;` are test code too.
    let is_test_file = |module: &ModPath| test_only.iter().any(|t: &ModPath| module.starts_with(t));
    krate.scopes.retain(|module, _| !is_test_file(module));

    let mut references = Vec::new();
    for (rel, module, ast) in &parsed {
        if is_test_file(module) {
            continue;
        }
        krate.files.insert(rel.clone(), module.clone());
        let mut collector = Collector {
            file: rel,
            module: module.clone(),
            references: Vec::new(),
            locals: Vec::new(),
        };
        collector.visit_file(ast);
        references.append(&mut collector.references);
        for (module, name, path) in collector.locals {
            if let Some(scope) = krate.scopes.get_mut(&module) {
                scope.locals.insert(name, path);
            }
        }
    }

    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for reference in &references {
        let (target, name) = match krate.resolve(&reference.module, &reference.path, 0) {
            Resolved::Item(module, name) => (module, name),
            Resolved::Module(module) if reference.glob => (module, "*".to_string()),
            Resolved::Module(_) | Resolved::Outside => continue,
        };
        let Some(to) = krate.file_of(&target) else {
            continue;
        };
        if reference.file == to {
            continue;
        }
        edges
            .entry((reference.file.clone(), to))
            .or_default()
            .insert(name);
    }
    Graph {
        files: krate.files.keys().cloned().collect(),
        modules: krate.files,
        edges: edge_list(edges),
    }
}

/// Appends the `.rs` files under `dir` to `out`, relative and sorted; skips
/// the binaries (`main.rs`, `bin/`) at the top.
fn rust_files(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut names: Vec<_> = entries
        .map(|entry| entry.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())))
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            )
        })
        .collect();
    names.sort();
    for (name, path) in names {
        let rel_path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if path.is_dir() {
            if rel_path != "bin" {
                rust_files(&path, &rel_path, out);
            }
        } else if name.ends_with(".rs") && rel_path != "main.rs" {
            out.push(rel_path);
        }
    }
}

/// `lib.rs` → `[]`, `a/mod.rs` → `[a]`, `a/b.rs` → `[a, b]`.
fn module_of(rel: &str) -> ModPath {
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    let last = parts.pop().unwrap_or_default();
    if last != "mod.rs" && !(parts.is_empty() && last == "lib.rs") {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// Records what `items` (the body of `module`, written in `file`) declare.
fn declare(
    scopes: &mut BTreeMap<ModPath, Scope>,
    file: &str,
    module: &ModPath,
    items: &[Item],
    test_only: &mut Vec<ModPath>,
) {
    let scope = scopes.entry(module.clone()).or_insert_with(|| Scope {
        file: file.to_string(),
        ..Scope::default()
    });
    let mut inline = Vec::new();
    for item in items {
        if is_test(attrs(item)) {
            if let Item::Mod(m) = item {
                test_only.push(child(module, &m.ident.to_string()));
            }
            continue;
        }
        let name = match item {
            Item::Mod(m) => {
                scope.mods.insert(m.ident.to_string());
                if let Some((_, body)) = &m.content {
                    inline.push((child(module, &m.ident.to_string()), body));
                }
                continue;
            }
            Item::Use(u) => {
                if u.leading_colon.is_none() {
                    for leaf in flatten(&u.tree) {
                        match leaf.binding {
                            _ if leaf.glob => scope.globs.push(leaf.path),
                            Some(binding) => {
                                scope.imports.insert(binding, leaf.path);
                            }
                            None => {}
                        }
                    }
                }
                continue;
            }
            Item::ForeignMod(f) => {
                for foreign in &f.items {
                    match foreign {
                        ForeignItem::Fn(f) => scope.items.insert(f.sig.ident.to_string()),
                        ForeignItem::Static(s) => scope.items.insert(s.ident.to_string()),
                        ForeignItem::Type(t) => scope.items.insert(t.ident.to_string()),
                        _ => false,
                    };
                }
                continue;
            }
            Item::Const(i) => &i.ident,
            Item::Enum(i) => &i.ident,
            Item::ExternCrate(i) => i.rename.as_ref().map_or(&i.ident, |(_, rename)| rename),
            Item::Fn(i) => &i.sig.ident,
            Item::Macro(i) => match &i.ident {
                Some(ident) => ident,
                None => continue,
            },
            Item::Static(i) => &i.ident,
            Item::Struct(i) => &i.ident,
            Item::Trait(i) => &i.ident,
            Item::TraitAlias(i) => &i.ident,
            Item::Type(i) => &i.ident,
            Item::Union(i) => &i.ident,
            _ => continue,
        };
        scope.items.insert(name.to_string());
    }
    for (module, body) in inline {
        declare(scopes, file, &module, body, test_only);
    }
}

fn child(module: &[String], name: &str) -> ModPath {
    let mut path = module.to_vec();
    path.push(name.to_string());
    path
}

/// One name (or glob) brought in by a `use` tree.
struct UseLeaf {
    path: Vec<String>,
    binding: Option<String>,
    glob: bool,
}

/// `use a::{b, c::d as e, f::*, self}` → `a::b` (b), `a::c::d` (e), `a::f::*`, `a` (a).
fn flatten(tree: &UseTree) -> Vec<UseLeaf> {
    fn walk(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
        let leaf = |prefix: &[String], ident: &syn::Ident| {
            let mut path = prefix.to_vec();
            if ident != "self" {
                path.push(ident.to_string());
            }
            path
        };
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            UseTree::Name(n) => {
                let path = leaf(prefix, &n.ident);
                let binding = path.last().cloned();
                out.push(UseLeaf {
                    path,
                    binding,
                    glob: false,
                });
            }
            UseTree::Rename(r) => {
                let binding = (r.rename != "_").then(|| r.rename.to_string());
                out.push(UseLeaf {
                    path: leaf(prefix, &r.ident),
                    binding,
                    glob: false,
                });
            }
            UseTree::Glob(_) => out.push(UseLeaf {
                path: prefix.clone(),
                binding: None,
                glob: true,
            }),
            UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut Vec::new(), &mut out);
    out
}

impl Crate {
    /// The file a module is written in (an inline module is in its file).
    fn file_of(&self, module: &[String]) -> Option<String> {
        let mut module = module.to_vec();
        loop {
            if let Some(scope) = self.scopes.get(&module) {
                return Some(scope.file.clone());
            }
            module.pop()?;
        }
    }

    /// Resolves `path`, written in module `at`, to what it names.
    fn resolve(&self, at: &[String], path: &[String], depth: usize) -> Resolved {
        if depth > MAX_DEPTH {
            return Resolved::Outside;
        }
        let Some(first) = path.first() else {
            return Resolved::Module(at.to_vec());
        };
        let (mut module, rest, bare) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..], false),
            "self" | "super" => {
                let mut module = at.to_vec();
                let mut i = 0;
                while let Some(segment) = path.get(i) {
                    match segment.as_str() {
                        "self" => {}
                        "super" => {
                            module.pop();
                        }
                        _ => break,
                    }
                    i += 1;
                }
                (module, &path[i..], false)
            }
            // A bare first segment names something in scope here, or else
            // is outside the crate (edition 2018 paths).
            _ => (at.to_vec(), path, true),
        };
        for (i, segment) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            match self.lookup(&module, segment, bare && i == 0, last, depth) {
                Some(Resolved::Module(next)) => module = next,
                Some(found) => return found,
                None if bare && i == 0 => return Resolved::Outside,
                None => return Resolved::Item(module, segment.clone()),
            }
        }
        Resolved::Module(module)
    }

    /// What `name` is in `module`, if the module declares or imports it.
    fn lookup(
        &self,
        module: &[String],
        name: &str,
        with_locals: bool,
        last: bool,
        depth: usize,
    ) -> Option<Resolved> {
        let scope = self.scopes.get(module)?;
        // A function and a module may share a name; at the end of a path,
        // count the item (the conservative choice).
        if scope.items.contains(name) && (last || !scope.mods.contains(name)) {
            return Some(Resolved::Item(module.to_vec(), name.to_string()));
        }
        if scope.mods.contains(name) {
            return Some(Resolved::Module(child(module, name)));
        }
        let imported = scope
            .imports
            .get(name)
            .or_else(|| with_locals.then(|| scope.locals.get(name)).flatten());
        if let Some(path) = imported {
            return Some(self.resolve(module, path, depth + 1));
        }
        for glob in &scope.globs {
            if let Resolved::Module(target) = self.resolve(module, glob, depth + 1)
                && target != module
                && let Some(found) = self.lookup(&target, name, false, last, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }
}

/// Collects every path written in one file, outside test code.
struct Collector<'a> {
    file: &'a str,
    /// The module being visited: the file's, or an inline one in it.
    module: ModPath,
    references: Vec<Reference>,
    /// `use` inside function bodies: (module, name, path as written).
    locals: Vec<(ModPath, String, Vec<String>)>,
}

impl Collector<'_> {
    fn add(&mut self, path: Vec<String>, glob: bool) {
        self.references.push(Reference {
            file: self.file.to_string(),
            module: self.module.clone(),
            path,
            glob,
        });
    }

    /// Paths in a macro's tokens (`format!("{}", crate::a::f())`): every
    /// `a::b…` of two or more segments. Single names are imports, seen already.
    fn scan(&mut self, mut cursor: Cursor) {
        while !cursor.eof() {
            if let Some((inside, _, _, next)) = cursor.any_group() {
                self.scan(inside);
                cursor = next;
            } else if let Some((ident, mut next)) = cursor.ident() {
                let mut path = vec![ident.to_string()];
                while let Some((ident, after)) = path_separator(next).and_then(|c| c.ident()) {
                    path.push(ident.to_string());
                    next = after;
                }
                if path.len() > 1 {
                    self.add(path, false);
                }
                cursor = next;
            } else if let Some((_, next)) = cursor.token_tree() {
                cursor = next;
            } else {
                break;
            }
        }
    }
}

/// The cursor after a `::` at `cursor`, if there is one.
fn path_separator(cursor: Cursor) -> Option<Cursor> {
    let (first, next) = cursor.punct()?;
    let (second, after) = next.punct()?;
    (first.as_char() == ':' && second.as_char() == ':').then_some(after)
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_test(attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if let Some((_, items)) = &item.content {
            self.module.push(item.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        for leaf in flatten(&item.tree) {
            if let Some(binding) = &leaf.binding {
                self.locals
                    .push((self.module.clone(), binding.clone(), leaf.path.clone()));
            }
            self.add(leaf.path, leaf.glob);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.add(
                path.segments.iter().map(|s| s.ident.to_string()).collect(),
                false,
            );
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let tokens = TokenBuffer::new2(mac.tokens.clone());
        self.scan(tokens.begin());
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_test(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !is_test(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_test(&local.attrs) {
            visit::visit_local(self, local);
        }
    }
}

fn attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// `#[cfg(test)]` or `#[cfg(all(test, …))]`: compiled only for tests.
fn is_test(attrs: &[Attribute]) -> bool {
    fn test_only(meta: &Meta) -> bool {
        match meta {
            Meta::Path(path) => path.is_ident("test"),
            Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(Punctuated::<Meta, syn::Token![,]>::parse_terminated)
                .is_ok_and(|metas| metas.iter().any(test_only)),
            _ => false,
        }
    }
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .filter_map(|attr| attr.parse_args::<Meta>().ok())
        .any(|meta| test_only(&meta))
}

/// Tarjan's strongly connected components of more than one file, each with
/// its files and inner edges sorted, in order of their first file.
fn strongly_connected(graph: &Graph) -> Vec<Cycle> {
    struct Tarjan<'g> {
        next: BTreeMap<&'g str, Vec<&'g str>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<Vec<&'g str>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, node: &'g str) {
            let index = self.index.len();
            self.index.insert(node, index);
            self.low.insert(node, index);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.next.get(node).cloned().unwrap_or_default() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }

    let mut tarjan = Tarjan {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for edge in &graph.edges {
        tarjan.next.entry(&edge.from).or_default().push(&edge.to);
    }
    for file in &graph.files {
        if !tarjan.index.contains_key(file.as_str()) {
            tarjan.visit(file);
        }
    }
    let mut cycles: Vec<Cycle> = tarjan
        .components
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let members: BTreeSet<&str> = component.into_iter().collect();
            Cycle {
                files: members.iter().map(|f| f.to_string()).collect(),
                edges: graph
                    .edges
                    .iter()
                    .filter(|e| {
                        members.contains(e.from.as_str()) && members.contains(e.to.as_str())
                    })
                    .cloned()
                    .collect(),
            }
        })
        .collect();
    cycles.sort_by(|a, b| a.files.cmp(&b.files));
    cycles
}

/// Writes `files` (path relative to `src/`, contents) into a new temporary
/// directory's `src/`.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory for a synthetic crate");
    for (rel, text) in files {
        let path = dir.path().join("src").join(rel);
        let parent = path
            .parent()
            .expect("a file under src/ has a parent directory");
        fs::create_dir_all(parent).expect("create a synthetic module directory");
        fs::write(&path, text).expect("write a synthetic source file");
    }
    dir
}

fn edge(from: &str, to: &str, names: &[&str]) -> Edge {
    Edge {
        from: from.to_string(),
        to: to.to_string(),
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}
