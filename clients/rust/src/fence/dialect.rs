//! The fence's SQL per database, as docs/fencing.md gives it (written once, in `Flavor`), and the
//! `Dialect` trait that runs it on each sqlx driver (written once, in the `dialect!` macro).

use std::future::Future;

/// A database whose transactions can be fenced: `sqlx::Postgres` (feature `sqlx-postgres`),
/// `sqlx::MySql` (MySQL and MariaDB with InnoDB, feature `sqlx-mysql`) and `sqlx::Sqlite`
/// (feature `sqlx-sqlite`). The dialect is the driver's type: a pool or connection of another
/// database (or `sqlx::Any`) does not compile.
pub trait Dialect: sqlx::Database + sealed::Dialect {}

/// The SQL of one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Postgres,
    MySql,
    Sqlite,
}

/// What the fence statement found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raised {
    /// The fence holds this token now: the transaction goes on.
    Ours,
    /// A larger token is stored (`Some` where the database said which).
    Newer(Option<i64>),
}

impl Flavor {
    /// The statement that begins a fenced transaction, where the driver's `BEGIN` is not it:
    /// SQLite takes the write lock at once, so a reader never holds a snapshot it cannot upgrade.
    pub fn begin(self) -> Option<&'static str> {
        match self {
            Flavor::Sqlite => Some("BEGIN IMMEDIATE"),
            Flavor::Postgres | Flavor::MySql => None,
        }
    }

    /// The fence statement (binds: name, token): store the token unless a larger one is stored.
    /// On PostgreSQL and SQLite, one row affected means ours; on MySQL, read the token back.
    pub fn raise(self, table: &str) -> String {
        match self {
            Flavor::Postgres => format!(
                "INSERT INTO {table} (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE \
                 SET token = EXCLUDED.token WHERE {table}.token <= EXCLUDED.token"
            ),
            Flavor::Sqlite => format!(
                "INSERT INTO {table} (name, token) VALUES (?, ?) ON CONFLICT (name) DO UPDATE \
                 SET token = excluded.token WHERE {table}.token <= excluded.token"
            ),
            Flavor::MySql => format!(
                "INSERT INTO {table} (name, token) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
            ),
        }
    }

    /// MySQL's second statement (binds: name): the stored token, under the row lock the first
    /// took. Its affected-row counts cannot tell "newer" from "this token already".
    pub fn read_back(self, table: &str) -> Option<String> {
        match self {
            Flavor::MySql => Some(format!(
                "SELECT token FROM {table} WHERE name = ? FOR UPDATE"
            )),
            Flavor::Postgres | Flavor::Sqlite => None,
        }
    }

    /// The fence table's DDL.
    pub fn create(self, table: &str) -> String {
        match self {
            Flavor::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, token bigint NOT NULL)"
            ),
            Flavor::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {table} (name VARBINARY(255) PRIMARY KEY, \
                 token BIGINT NOT NULL) ENGINE = InnoDB"
            ),
            Flavor::Sqlite => format!(
                "CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, token INTEGER NOT NULL)"
            ),
        }
    }
}

pub(crate) mod sealed {
    use super::{Flavor, Future, Raised};

    /// What `Dialect` runs, hidden from callers (they cannot implement it or call it).
    pub trait Dialect: sqlx::Database {
        const FLAVOR: Flavor;

        /// The fence statement(s) of `FLAVOR` on `conn`, inside the transaction.
        fn raise(
            conn: &mut Self::Connection,
            table: &str,
            name: &str,
            token: i64,
        ) -> impl Future<Output = Result<Raised, sqlx::Error>> + Send;

        /// A statement without binds or rows (the DDL).
        fn execute(
            conn: &mut Self::Connection,
            sql: &str,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    }
}

/// `Dialect` for one sqlx database: the same code on each driver's concrete types.
macro_rules! dialect {
    ($feature:literal, $db:ty, $flavor:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Dialect for $db {
            const FLAVOR: Flavor = $flavor;

            async fn raise(
                conn: &mut <$db as sqlx::Database>::Connection,
                table: &str,
                name: &str,
                token: i64,
            ) -> Result<Raised, sqlx::Error> {
                let done = sqlx::query(&Self::FLAVOR.raise(table))
                    .bind(name)
                    .bind(token)
                    .execute(&mut *conn)
                    .await?;
                let Some(read_back) = Self::FLAVOR.read_back(table) else {
                    return Ok(match done.rows_affected() {
                        0 => Raised::Newer(None),
                        _ => Raised::Ours,
                    });
                };
                let stored: i64 = sqlx::query_scalar(&read_back)
                    .bind(name)
                    .fetch_one(&mut *conn)
                    .await?;
                match stored.cmp(&token) {
                    std::cmp::Ordering::Equal => Ok(Raised::Ours),
                    std::cmp::Ordering::Greater => Ok(Raised::Newer(Some(stored))),
                    // GREATEST cannot store less than ours: the table is not a fence table.
                    std::cmp::Ordering::Less => Err(sqlx::Error::Protocol(format!(
                        "{table} holds {stored} for {name:?} after raising it to {token}: \
                         not a fence table (docs/fencing.md)"
                    ))),
                }
            }

            async fn execute(
                conn: &mut <$db as sqlx::Database>::Connection,
                sql: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(sql).execute(conn).await.map(drop)
            }
        }

        #[cfg(feature = $feature)]
        impl Dialect for $db {}
    };
}

dialect!("sqlx-postgres", sqlx::Postgres, Flavor::Postgres);
dialect!("sqlx-mysql", sqlx::MySql, Flavor::MySql);
dialect!("sqlx-sqlite", sqlx::Sqlite, Flavor::Sqlite);
