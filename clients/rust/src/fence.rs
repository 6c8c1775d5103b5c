//! Fenced writes to a database on [sqlx](https://docs.rs/sqlx) (feature `sqlx-postgres`,
//! `sqlx-mysql` or `sqlx-sqlite`): the recipe of [docs/fencing.md](../../docs/fencing.md).
//!
//! A hold's token protects a read-modify-write only if the *read* registers it too. `begin`
//! opens a transaction and runs the fence statement first: it stores the hold's token in the
//! fence table's row for the resource (the lock's key unless named) unless a larger token is
//! there, and keeps that row locked until the transaction ends. So two holders' transactions
//! on one resource run one after the other, and a stale holder (paused past its lease while a
//! newer one came in) gets [`Error::Stale`] before it reads anything. Then read, decide and
//! write in the transaction as usual, and `commit()` it; dropped without a commit, sqlx rolls it
//! back.
//!
//! ```no_run
//! # #[cfg(feature = "sqlx-postgres")]
//! # async fn sell(locker: redis_lock_client::Locker, pool: sqlx::PgPool) -> Result<(), redis_lock_client::Error> {
//! use redis_lock_client::fence;
//! let guard = locker.lock("{sku:9}:lock").wait_forever().acquire().await?.expect("granted");
//! let mut tx = fence::begin(&pool, &guard).await?; // Error::Stale: a newer holder has been in
//! let qty: i32 = sqlx::query_scalar("SELECT qty FROM stock WHERE sku = $1")
//!     .bind("sku9")
//!     .fetch_one(&mut *tx)
//!     .await?;
//! sqlx::query("UPDATE stock SET qty = $1 WHERE sku = $2")
//!     .bind(qty - 1)
//!     .bind("sku9")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! The helper does not check the hold's lease (the database decides, by the tokens it has
//! seen) and retries nothing: a deadlock, a lock wait timeout or a serialization failure comes
//! back as [`Error::Database`], with the transaction rolled back.

mod dialect;

use std::borrow::Cow;

use sqlx::{Pool, Transaction};

use crate::{Error, LockGuard};
use dialect::sealed::Dialect as _;
pub use dialect::Dialect;
use dialect::Raised;

/// The fence table's name unless one is given.
pub const DEFAULT_TABLE: &str = "lock_fences";

/// Open a transaction on `pool` and fence it with `guard`'s token under the name `guard.key()`
/// in `lock_fences` ([`Fence`] names others): the transaction's first statement. A larger
/// stored token rolls the transaction back and returns [`Error::Stale`]. Commit the transaction
/// with `tx.commit().await`; dropped, it rolls back.
pub async fn begin<DB: Dialect>(
    pool: &Pool<DB>,
    guard: &LockGuard,
) -> Result<Transaction<'static, DB>, Error> {
    Fence::new(guard).begin(pool).await
}

/// Only the fence statement, in a transaction the caller (or a framework) began and will end:
/// `fence(&mut *tx, &guard)`, before any read of the transaction. [`Error::Stale`] leaves the
/// transaction open: roll it back (or drop it). On SQLite begin it with
/// `conn.begin_with("BEGIN IMMEDIATE")`, or let the fence (a write) take the write lock as the
/// first statement of a deferred one.
pub async fn fence<C>(tx: &mut C, guard: &LockGuard) -> Result<(), Error>
where
    C: sqlx::Connection,
    C::Database: Dialect,
{
    Fence::new(guard).fence(tx).await
}

/// `CREATE TABLE IF NOT EXISTS lock_fences` with the DDL of docs/fencing.md for the pool's
/// database; [`Table::create`] for another name. The helpers never create it themselves.
pub async fn create_table<DB: Dialect>(pool: &Pool<DB>) -> Result<(), Error> {
    Table::default().create(pool).await
}

/// A fence table's name: an SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`), optionally qualified by
/// a schema (`app.lock_fences`). It goes into the SQL as written, so it is checked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Table(Cow<'static, str>);

impl Table {
    /// `name` if it is an identifier, optionally schema-qualified; else `Error::Database` with
    /// `sqlx::Error::InvalidArgument`.
    pub fn new(name: impl Into<String>) -> Result<Table, Error> {
        let name = name.into();
        let mut parts = name.split('.');
        let valid = parts.next().is_some_and(identifier)
            && parts.next().is_none_or(identifier)
            && parts.next().is_none();
        if valid {
            Ok(Table(Cow::Owned(name)))
        } else {
            Err(invalid(format!(
                "fence table {name:?} is not an SQL identifier ([A-Za-z_][A-Za-z0-9_]*, \
                 optionally schema.table)"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `CREATE TABLE IF NOT EXISTS` this table, with the DDL of the pool's database.
    pub async fn create<DB: Dialect>(&self, pool: &Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        DB::execute(&mut conn, &DB::FLAVOR.create(self.as_str())).await?;
        Ok(())
    }
}

impl Default for Table {
    /// `lock_fences`.
    fn default() -> Self {
        Table(Cow::Borrowed(DEFAULT_TABLE))
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn identifier(word: &str) -> bool {
    let mut chars = word.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn invalid(message: String) -> Error {
    Error::Database(sqlx::Error::InvalidArgument(message))
}

/// The fence of a hold, with options: `Fence::new(&guard).name("sku-9").table(t).begin(&pool)`.
#[derive(Clone, Debug)]
pub struct Fence {
    name: String,
    token: u64,
    table: Table,
}

impl Fence {
    /// `guard`'s token, fenced under the name `guard.key()` in `lock_fences`.
    pub fn new(guard: &LockGuard) -> Self {
        Fence {
            name: guard.key().to_string(),
            token: guard.token(),
            table: Table::default(),
        }
    }

    /// The fence's name (the resource it guards; default: the lock's key).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The fence table (default `lock_fences`).
    pub fn table(mut self, table: Table) -> Self {
        self.table = table;
        self
    }

    /// [`begin`] with these options.
    pub async fn begin<DB: Dialect>(
        &self,
        pool: &Pool<DB>,
    ) -> Result<Transaction<'static, DB>, Error> {
        let token = self.token()?;
        let mut tx = match DB::FLAVOR.begin() {
            Some(statement) => pool.begin_with(statement).await?,
            None => pool.begin().await?,
        };
        let raised = DB::raise(&mut tx, self.table.as_str(), &self.name, token).await;
        match raised {
            Ok(Raised::Ours) => Ok(tx),
            Ok(Raised::Newer(stored)) => {
                // The stale error is the answer; a failed rollback leaves the rollback to drop.
                let _ = tx.rollback().await;
                Err(self.stale(stored, "rolled back"))
            }
            Err(e) => {
                let _ = tx.rollback().await;
                Err(e.into())
            }
        }
    }

    /// [`fence()`] with these options.
    pub async fn fence<C>(&self, tx: &mut C) -> Result<(), Error>
    where
        C: sqlx::Connection,
        C::Database: Dialect,
    {
        let token = self.token()?;
        let raised = <C::Database>::raise(tx, self.table.as_str(), &self.name, token).await?;
        match raised {
            Raised::Ours => Ok(()),
            Raised::Newer(stored) => Err(self.stale(stored, "roll the transaction back")),
        }
    }

    fn token(&self) -> Result<i64, Error> {
        i64::try_from(self.token)
            .map_err(|_| invalid(format!("token {} does not fit a bigint", self.token)))
    }

    fn stale(&self, stored: Option<i64>, then: &str) -> Error {
        let holds = match stored {
            Some(t) => format!("token {t}, newer than"),
            None => "a token newer than".to_string(),
        };
        Error::Stale(format!(
            "STALE the fence {:?} in {} holds {holds} this hold's token {}: a newer holder has \
             been in; {then}",
            self.name, self.table, self.token
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers_optionally_qualified() {
        for good in ["lock_fences", "_f", "F1", "app.lock_fences", "a_1.b_2"] {
            assert_eq!(
                Table::new(good).map(|t| t.to_string()).ok(),
                Some(good.into())
            );
        }
        for bad in [
            "",
            "1fences",
            "lock-fences",
            "lock fences",
            "a.b.c",
            "a.",
            ".a",
            "a..b",
            "fences;DROP TABLE x",
            "\"fences\"",
            "fencés",
            "f\n",
        ] {
            match Table::new(bad) {
                Err(Error::Database(sqlx::Error::InvalidArgument(m))) => {
                    assert!(m.contains("not an SQL identifier"), "{m}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(Table::default().as_str(), "lock_fences");
    }

    #[test]
    fn the_sql_per_dialect_is_the_documented_sql() {
        use dialect::Flavor::*;
        assert_eq!(
            Postgres.raise("lock_fences"),
            "INSERT INTO lock_fences (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE \
             SET token = EXCLUDED.token WHERE lock_fences.token <= EXCLUDED.token"
        );
        assert_eq!(
            Sqlite.raise("app.f"),
            "INSERT INTO app.f (name, token) VALUES (?, ?) ON CONFLICT (name) DO UPDATE \
             SET token = excluded.token WHERE app.f.token <= excluded.token"
        );
        assert_eq!(
            MySql.raise("lock_fences"),
            "INSERT INTO lock_fences (name, token) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
        );
        assert_eq!(
            MySql.read_back("lock_fences").as_deref(),
            Some("SELECT token FROM lock_fences WHERE name = ? FOR UPDATE")
        );
        assert_eq!(Postgres.read_back("lock_fences"), None);
        assert_eq!(Sqlite.read_back("lock_fences"), None);
        assert_eq!(Sqlite.begin(), Some("BEGIN IMMEDIATE"));
        assert_eq!((Postgres.begin(), MySql.begin()), (None, None));
        assert_eq!(
            Postgres.create("lock_fences"),
            "CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL)"
        );
        assert_eq!(
            MySql.create("lock_fences"),
            "CREATE TABLE IF NOT EXISTS lock_fences (name VARBINARY(255) PRIMARY KEY, \
             token BIGINT NOT NULL) ENGINE = InnoDB"
        );
        assert_eq!(
            Sqlite.create("lock_fences"),
            "CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)"
        );
    }

    /// The dialect is the driver's database type.
    #[test]
    fn each_driver_has_its_dialect() {
        #[cfg(feature = "sqlx-postgres")]
        assert_eq!(<sqlx::Postgres>::FLAVOR, dialect::Flavor::Postgres);
        #[cfg(feature = "sqlx-mysql")]
        assert_eq!(<sqlx::MySql>::FLAVOR, dialect::Flavor::MySql);
        #[cfg(feature = "sqlx-sqlite")]
        assert_eq!(<sqlx::Sqlite>::FLAVOR, dialect::Flavor::Sqlite);
    }

    #[test]
    fn the_stale_error_names_the_fence_and_the_token() {
        let fence = Fence {
            name: "{sku:9}:lock".into(),
            token: 42,
            table: Table::default(),
        };
        let Error::Stale(m) = fence.stale(Some(43), "rolled back") else {
            panic!()
        };
        assert!(
            m.contains("\"{sku:9}:lock\"") && m.contains("lock_fences"),
            "{m}"
        );
        assert!(
            m.contains("token 43, newer than this hold's token 42"),
            "{m}"
        );
        let Error::Stale(m) = fence.stale(None, "rolled back") else {
            panic!()
        };
        assert!(m.contains("a token newer than this hold's token 42"), "{m}");
        let big = Fence {
            token: u64::MAX,
            ..fence
        };
        assert!(matches!(
            big.token(),
            Err(Error::Database(sqlx::Error::InvalidArgument(_)))
        ));
    }
}
