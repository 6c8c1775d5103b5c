//! Every SQL snippet in the README and the docs runs here against a real database: a block
//! fenced ```` ```sql ```` on PostgreSQL (psql), ```` ```sql mariadb ```` on MariaDB and
//! ```` ```sql sqlite ```` on SQLite (the sqlite3 shell). The blocks of one page run in order in
//! a database of their own, which holds the tables the snippets name (`stock` with sku `sku9`
//! and 100 in stock, `settings`, `lock_fences`). A parameter written `:name` is replaced by a
//! fixed literal (`:token` by a fencing token, `:sku` by `'sku9'`, ...); a parameter the test
//! does not know fails it, so a snippet cannot drift into something that was never run.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use redis_lock_harness::database::{Database, Kind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Postgres,
    MariaDb,
    Sqlite,
}

/// The parameters a snippet may use, and the literal each stands for.
const PARAMETERS: &[(&str, &str)] = &[
    ("name", "'{sku9}:lock'"),
    ("token", "1795950867669407"),
    ("sku", "'sku9'"),
    ("qty", "99"),
    ("value", "'on'"),
];

/// The tables the snippets read and write, per dialect, created before a page's blocks run.
fn fixture(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => {
            "CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL, fence bigint NOT NULL);
             INSERT INTO stock VALUES ('sku9', 100, 0);
             CREATE TABLE settings (name text PRIMARY KEY, value text, fence bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL);"
        }
        Dialect::MariaDb => {
            "CREATE TABLE stock (sku varchar(64) PRIMARY KEY, qty int NOT NULL,
                                 fence bigint NOT NULL) ENGINE = InnoDB;
             INSERT INTO stock VALUES ('sku9', 100, 0);
             CREATE TABLE IF NOT EXISTS lock_fences (name VARBINARY(255) PRIMARY KEY,
                                                     token BIGINT NOT NULL) ENGINE = InnoDB;"
        }
        Dialect::Sqlite => {
            "CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL, fence INTEGER NOT NULL);
             INSERT INTO stock VALUES ('sku9', 100, 0);
             CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL);"
        }
    }
}

/// The SQL blocks of a markdown text, with their dialect and first line number. Blocks may be
/// indented (inside a list item).
fn sql_blocks(text: &str) -> Vec<(Dialect, usize, String)> {
    let mut found = Vec::new();
    let mut current: Option<(Dialect, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match (&mut current, trimmed.strip_prefix("```")) {
            (None, Some(info)) => {
                let mut words = info.split_whitespace();
                let dialect = match (words.next(), words.next()) {
                    (Some("sql"), None) => Some(Dialect::Postgres),
                    (Some("sql"), Some("mariadb")) => Some(Dialect::MariaDb),
                    (Some("sql"), Some("sqlite")) => Some(Dialect::Sqlite),
                    (Some("sql"), Some(other)) => {
                        panic!("line {}: unknown SQL dialect {other}", i + 1)
                    }
                    _ => None,
                };
                current = dialect.map(|d| (d, i + 1, String::new()));
            }
            (Some(_), Some("")) => found.extend(current.take()),
            (Some((_, _, sql)), _) => {
                sql.push_str(trimmed);
                sql.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

/// `sql` with each `:parameter` replaced by its literal (PostgreSQL's `::` casts left alone).
fn bind(sql: &str) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find(':') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let ident: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let cast = out.ends_with(':') || after.starts_with(':');
        if cast || ident.is_empty() || !ident.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push(':');
            rest = after;
            continue;
        }
        let literal = PARAMETERS
            .iter()
            .find(|(name, _)| *name == ident)
            .map(|(_, literal)| *literal)
            .ok_or_else(|| format!("unknown parameter :{ident}"))?;
        out.push_str(literal);
        rest = &after[ident.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Runs `sql` through `command`'s stdin; the shell's output on failure.
fn run_shell(mut command: Command, sql: &str) -> Result<(), String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start {command:?}: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(sql.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    match out.status.success() && out.stderr.is_empty() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// The servers the snippets run on, started on first use.
struct Databases {
    postgres: Option<Database>,
    mariadb: Option<Database>,
    sqlite_dir: std::path::PathBuf,
}

impl Databases {
    fn server(&mut self, kind: Kind) -> &Database {
        let slot = match kind {
            Kind::Postgres => &mut self.postgres,
            Kind::MariaDb => &mut self.mariadb,
        };
        slot.get_or_insert_with(|| Database::start(kind))
    }

    /// A shell on database `db` of `dialect`.
    fn shell(&mut self, dialect: Dialect, db: &str) -> Command {
        match dialect {
            Dialect::Postgres => self.server(Kind::Postgres).shell_on(db),
            Dialect::MariaDb => self.server(Kind::MariaDb).shell_on(db),
            Dialect::Sqlite => {
                let mut c = Command::new("sqlite3");
                c.args(["-bail", "-batch"])
                    .arg(self.sqlite_dir.join(format!("{db}.sqlite")));
                c
            }
        }
    }

    /// Creates database `db` of `dialect` with the fixture's tables.
    fn create(&mut self, dialect: Dialect, db: &str) {
        let create = format!("CREATE DATABASE {db};");
        match dialect {
            Dialect::Postgres => run_shell(self.server(Kind::Postgres).shell(), &create),
            Dialect::MariaDb => run_shell(self.server(Kind::MariaDb).shell(), &create),
            Dialect::Sqlite => Ok(()),
        }
        .expect("create a database");
        run_shell(self.shell(dialect, db), fixture(dialect)).expect("the snippets' tables");
    }
}

#[test]
fn every_sql_snippet_in_the_docs_runs() {
    let mut databases = Databases {
        postgres: None,
        mariadb: None,
        sqlite_dir: redis_lock_harness::fresh_dir("docs-sql"),
    };
    let mut ran = Vec::new();
    for (n, page) in super::docs::pages().iter().enumerate() {
        let text = std::fs::read_to_string(page).expect("read a page");
        let name = page_name(page);
        for dialect in [Dialect::Postgres, Dialect::MariaDb, Dialect::Sqlite] {
            let blocks: Vec<_> = sql_blocks(&text)
                .into_iter()
                .filter(|(d, _, _)| *d == dialect)
                .collect();
            if blocks.is_empty() {
                continue;
            }
            let db = format!("page{n}");
            databases.create(dialect, &db);
            for (_, line, sql) in blocks {
                let shell = databases.shell(dialect, &db);
                let bound = bind(&sql).unwrap_or_else(|e| panic!("{name}:{line}: {e}"));
                run_shell(shell, &bound)
                    .unwrap_or_else(|e| panic!("{name}:{line} ({dialect:?}) fails:\n{bound}\n{e}"));
                ran.push((name.clone(), dialect));
            }
        }
    }
    for dialect in [Dialect::Postgres, Dialect::MariaDb, Dialect::Sqlite] {
        assert!(
            ran.iter()
                .any(|(page, d)| page == "docs/fencing.md" && *d == dialect),
            "docs/fencing.md's {dialect:?} snippets ran"
        );
    }
}

fn page_name(page: &Path) -> String {
    page.strip_prefix(redis_lock_harness::workspace())
        .unwrap_or(page)
        .display()
        .to_string()
}

#[test]
fn parameters_are_bound_and_casts_left_alone() {
    assert_eq!(
        bind("SELECT :token::bigint WHERE sku = :sku -- x: y").as_deref(),
        Ok("SELECT 1795950867669407::bigint WHERE sku = 'sku9' -- x: y")
    );
    assert!(bind("SELECT :nobody").is_err());
}
