//! The embedded database (redb) a server of role `all` keeps its
//! webhooks, keys, usage and uploaded filters in: one file each under
//! `data_dir`, or in memory without one.

use std::path::Path;

use anyhow::Context as _;
use redb::Database;

/// Opens (or creates) `dir/file`, or a database in memory without `dir`;
/// `what` names it in errors ("the keys database").
pub fn open(dir: Option<&Path>, file: &str, what: &str) -> anyhow::Result<Database> {
    match dir {
        Some(dir) => {
            let path = dir.join(file);
            Database::create(&path).with_context(|| format!("opening {what} {}", path.display()))
        }
        None => Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .with_context(|| format!("creating {what} in memory")),
    }
}
