//! Choosing a backend from a `--datastore-endpoint` value, with the forms k3s accepts for the
//! backends Capstan has: nothing (SQLite under the data directory), `sqlite://PATH`, or a
//! comma-separated list of `http://HOST:PORT` etcd endpoints.

use std::path::{Path, PathBuf};

use crate::etcd::EtcdConfig;
use crate::sqlite::SqliteConfig;
use crate::{Result, Store, StoreError};

/// Where the datastore lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// The embedded SQLite database at this path.
    Sqlite(PathBuf),
    /// An etcd cluster reached at these client URLs.
    Etcd(Vec<String>),
}

impl Endpoint {
    /// The SQLite file used when no endpoint is given.
    pub fn default_sqlite_path(data_dir: &Path) -> PathBuf {
        data_dir.join("db").join("state.db")
    }

    /// Parses an endpoint; an empty one selects SQLite under `data_dir`.
    pub fn parse(endpoint: &str, data_dir: &Path) -> Result<Endpoint> {
        let endpoint = endpoint.trim();
        if endpoint.is_empty() {
            return Ok(Endpoint::Sqlite(Self::default_sqlite_path(data_dir)));
        }
        if let Some(rest) = endpoint.strip_prefix("sqlite://") {
            // k3s writes `sqlite:///path?options`; the options are SQLite tuning we set ourselves.
            let path = rest.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Ok(Endpoint::Sqlite(Self::default_sqlite_path(data_dir)));
            }
            return Ok(Endpoint::Sqlite(PathBuf::from(path)));
        }
        let urls: Vec<String> = endpoint
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        for url in &urls {
            if url.starts_with("https://") {
                return Err(StoreError::InvalidArgument(format!(
                    "datastore endpoint {url}: etcd over TLS is not supported yet; use http://"
                )));
            }
            if !url.starts_with("http://") {
                return Err(StoreError::InvalidArgument(format!(
                    "datastore endpoint {url:?} is neither sqlite://PATH nor an http:// etcd URL"
                )));
            }
        }
        Ok(Endpoint::Etcd(urls))
    }

    /// Opens the store this endpoint names.
    pub async fn open(&self) -> Result<Store> {
        match self {
            Endpoint::Sqlite(path) => Store::sqlite(SqliteConfig::new(path.clone())).await,
            Endpoint::Etcd(endpoints) => {
                Store::etcd(EtcdConfig {
                    endpoints: endpoints.clone(),
                    ..EtcdConfig::default()
                })
                .await
            }
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            Endpoint::Etcd(urls) => write!(f, "etcd {}", urls.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_as_k3s_writes_them() {
        let dir = Path::new("/var/lib/capstan");
        let check = |input: &str, expected: Endpoint| {
            assert_eq!(
                Endpoint::parse(input, dir).ok(),
                Some(expected),
                "{input:?}"
            );
        };
        check("", Endpoint::Sqlite("/var/lib/capstan/db/state.db".into()));
        check(
            "sqlite://",
            Endpoint::Sqlite("/var/lib/capstan/db/state.db".into()),
        );
        check(
            "sqlite:///tmp/x.db?_journal=WAL",
            Endpoint::Sqlite("/tmp/x.db".into()),
        );
        check(
            "http://127.0.0.1:2379, http://127.0.0.2:2379",
            Endpoint::Etcd(vec![
                "http://127.0.0.1:2379".into(),
                "http://127.0.0.2:2379".into(),
            ]),
        );
        for bad in ["https://127.0.0.1:2379", "mysql://x", "127.0.0.1:2379"] {
            assert!(
                matches!(
                    Endpoint::parse(bad, dir),
                    Err(StoreError::InvalidArgument(_))
                ),
                "{bad:?}"
            );
        }
    }
}
