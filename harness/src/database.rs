//! Throwaway database servers for the fenced-write tests: PostgreSQL and MariaDB started by
//! `scripts/testdb.sh` (the one launcher every client's tests use) in a directory under the system
//! temporary directory, on a free loopback port, stopped by PID when the value is dropped (a
//! value kept in a `static` is never dropped: the launcher's watcher stops it by PID once the
//! test process has exited).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::workspace;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Which database server to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

impl Kind {
    fn script_name(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::MariaDb => "mariadb",
        }
    }
}

/// A running database server, stopped (by the PID the launcher printed) on drop.
pub struct Database {
    pub kind: Kind,
    pub pid: i32,
    pub port: u16,
    pub user: String,
    pub database: String,
    /// `postgresql://...` or `mysql://...`.
    pub url: String,
    dir: PathBuf,
}

impl Database {
    pub fn start(kind: Kind) -> Database {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "redislock-db-{}-{}-{n}",
            kind.script_name(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(workspace().join("scripts/testdb.sh"))
            .arg("start")
            .arg(kind.script_name())
            .arg(&dir)
            .arg(std::process::id().to_string())
            .output()
            .expect("run scripts/testdb.sh");
        if !out.status.success() {
            stop(&dir); // whatever the failed start left: a server, a directory
            panic!(
                "scripts/testdb.sh start {}: {}",
                kind.script_name(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let fields: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let field = |k: &str| fields.get(k).cloned().unwrap_or_default();
        Database {
            kind,
            pid: field("PID").parse().expect("PID from testdb.sh"),
            port: field("PORT").parse().expect("PORT from testdb.sh"),
            user: field("USER"),
            database: field("DATABASE"),
            url: field("URL"),
            dir,
        }
    }

    /// The server's command-line client (`psql` / `mariadb`) connected to its database, reading
    /// SQL from stdin and stopping at the first error.
    pub fn shell(&self) -> Command {
        self.shell_on(&self.database)
    }

    /// The command-line client connected to `database` on this server.
    pub fn shell_on(&self, database: &str) -> Command {
        let port = self.port.to_string();
        match self.kind {
            Kind::Postgres => {
                let mut c = Command::new("psql");
                // Notices ("already exists, skipping") are not failures.
                c.env("PGOPTIONS", "-c client_min_messages=warning");
                c.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
                    .arg(&port)
                    .args(["-U", &self.user, "-d", database]);
                c
            }
            Kind::MariaDb => {
                let mut c = Command::new("mariadb");
                c.args(["--no-defaults", "-h", "127.0.0.1", "-P"])
                    .arg(&port)
                    .args(["-u", &self.user, database]);
                c
            }
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        stop(&self.dir);
    }
}

/// Stops the server started in `dir` by its PID and removes `dir`.
fn stop(dir: &std::path::Path) {
    let _ = Command::new(workspace().join("scripts/testdb.sh"))
        .arg("stop")
        .arg(dir)
        .status();
}
