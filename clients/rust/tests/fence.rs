//! `redis_lock_client::fence` against real databases (docs/fencing.md): PostgreSQL and MariaDB
//! started by `scripts/testdb.sh` through the harness (once per test process, stopped when it
//! exits), SQLite in a file of each test; the locks on a real server with the module, one per
//! test. Each scenario is written once, generic over the database (`Db`), and `suite!` runs it on
//! each database whose feature is on.
//!
//! The inventory soak's workers are processes: this test binary run again as `soak_worker`.

#![cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]

use std::future::Future;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_lock_client::fence::{self, Dialect, Fence, Table};
use redis_lock_client::{Error, LockBuilder, LockGuard, Locker};
use redis_lock_harness::Server;
use sqlx::Pool;
#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-mysql"))]
use {
    redis_lock_harness::database::{Database, Kind},
    std::sync::OnceLock,
};

/// The short fixed lease of the schedules (watchdog off), and the soak's lease (watchdog on).
const LEASE: Duration = Duration::from_millis(300);
const SKU: &str = "sku9";

/// A value bound to a statement.
#[derive(Clone, Copy, Debug)]
enum Arg<'a> {
    Int(i64),
    Text(&'a str),
}

/// What the scenarios need of a database besides the fence: where it is, and statements with
/// `?` placeholders (rewritten for PostgreSQL by `sql`).
trait Db: Dialect {
    const LABEL: &'static str;
    /// The schema that qualifies a table name.
    const SCHEMA: &'static str;
    /// Counts sessions waiting for a lock on a fence row (None: SQLite waits in its busy handler).
    const WAITING: Option<&'static str>;

    /// The database of a test: a server shared by the process's tests, or a new SQLite file.
    fn place() -> String;
    fn open(place: &str, connections: u32) -> impl Future<Output = Pool<Self>> + Send;
    fn exec(
        conn: &mut Self::Connection,
        sql: &str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
    fn int(
        conn: &mut Self::Connection,
        sql: &str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send;
    /// A deadlock, a lock wait timeout, a serialization failure or a busy database: roll back
    /// and run the transaction again.
    fn retryable(e: &sqlx::Error) -> bool;
    fn sql(template: &str) -> String {
        template.to_string()
    }
    /// Remove what `place` made for the test, if anything.
    fn clean(_place: &str) {}
}

/// `exec` and `int` of a `Db`: the same code on each driver's types.
macro_rules! statements {
    () => {
        async fn exec(
            conn: &mut Self::Connection,
            sql: &str,
            args: &[Arg<'_>],
        ) -> Result<u64, sqlx::Error> {
            let sql = Self::sql(sql);
            let mut query = sqlx::query(&sql);
            for arg in args {
                query = match *arg {
                    Arg::Int(i) => query.bind(i),
                    Arg::Text(s) => query.bind(s),
                };
            }
            Ok(query.execute(conn).await?.rows_affected())
        }

        async fn int(
            conn: &mut Self::Connection,
            sql: &str,
            args: &[Arg<'_>],
        ) -> Result<i64, sqlx::Error> {
            let sql = Self::sql(sql);
            let mut query = sqlx::query_scalar(&sql);
            for arg in args {
                query = match *arg {
                    Arg::Int(i) => query.bind(i),
                    Arg::Text(s) => query.bind(s),
                };
            }
            query.fetch_one(conn).await
        }
    };
}

#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-sqlite"))]
fn database_code(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

/// The process's server of `kind`, started by the first test that needs it.
#[cfg(any(feature = "sqlx-postgres", feature = "sqlx-mysql"))]
fn server(cell: &'static OnceLock<Database>, kind: Kind) -> String {
    tokio::task::block_in_place(|| cell.get_or_init(|| Database::start(kind)).url.clone())
}

#[cfg(feature = "sqlx-postgres")]
impl Db for sqlx::Postgres {
    const LABEL: &'static str = "postgres";
    const SCHEMA: &'static str = "public";
    const WAITING: Option<&'static str> = Some(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND query LIKE '%lock_fences%'",
    );

    fn place() -> String {
        static SERVER: OnceLock<Database> = OnceLock::new();
        server(&SERVER, Kind::Postgres)
    }

    async fn open(place: &str, connections: u32) -> Pool<Self> {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(connections)
            .connect(place)
            .await
            .expect("connect to PostgreSQL")
    }

    statements!();

    fn retryable(e: &sqlx::Error) -> bool {
        matches!(
            database_code(e).as_deref(),
            Some("40001" | "40P01" | "55P03")
        )
    }

    fn sql(template: &str) -> String {
        let mut n = 0;
        let mut sql = String::new();
        for c in template.chars() {
            if c == '?' {
                n += 1;
                sql.push_str(&format!("${n}"));
            } else {
                sql.push(c);
            }
        }
        sql
    }
}

#[cfg(feature = "sqlx-mysql")]
impl Db for sqlx::MySql {
    const LABEL: &'static str = "mariadb";
    const SCHEMA: &'static str = "test";
    const WAITING: Option<&'static str> = Some(
        "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' \
         AND trx_query LIKE '%lock_fences%'",
    );

    fn place() -> String {
        static SERVER: OnceLock<Database> = OnceLock::new();
        server(&SERVER, Kind::MariaDb)
    }

    async fn open(place: &str, connections: u32) -> Pool<Self> {
        sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(connections)
            .connect(place)
            .await
            .expect("connect to MariaDB")
    }

    statements!();

    fn retryable(e: &sqlx::Error) -> bool {
        // 1213: deadlock, 1205: lock wait timeout.
        e.as_database_error()
            .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .is_some_and(|m| matches!(m.number(), 1213 | 1205))
    }
}

#[cfg(feature = "sqlx-sqlite")]
impl Db for sqlx::Sqlite {
    const LABEL: &'static str = "sqlite";
    const SCHEMA: &'static str = "main";
    const WAITING: Option<&'static str> = None;

    fn place() -> String {
        let dir = redis_lock_harness::fresh_dir("sqlite");
        dir.join("test.db").to_string_lossy().into_owned()
    }

    async fn open(place: &str, connections: u32) -> Pool<Self> {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(place)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(20));
        sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await
            .expect("open the SQLite file")
    }

    fn clean(place: &str) {
        if let Some(dir) = std::path::Path::new(place).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    statements!();

    fn retryable(e: &sqlx::Error) -> bool {
        // SQLITE_BUSY and SQLITE_LOCKED, with their extended codes.
        database_code(e)
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6))
    }
}

/// The stock of one sku and its sales, in tables of one test.
#[derive(Clone)]
struct Shop {
    stock: String,
    sales: String,
}

impl Shop {
    fn new(tag: &str) -> Self {
        Shop {
            stock: format!("stock_{tag}"),
            sales: format!("sales_{tag}"),
        }
    }

    async fn read<S: Db>(&self, conn: &mut S::Connection) -> Result<i64, sqlx::Error> {
        let sql = format!("SELECT qty FROM {} WHERE sku = ?", self.stock);
        S::int(conn, &sql, &[Arg::Text(SKU)]).await
    }

    /// Write `qty` (a value read before: the read-modify-write) and record a sale.
    async fn sell<S: Db>(
        &self,
        conn: &mut S::Connection,
        qty: i64,
        who: &str,
        token: u64,
    ) -> Result<(), sqlx::Error> {
        let update = format!("UPDATE {} SET qty = ? WHERE sku = ?", self.stock);
        S::exec(conn, &update, &[Arg::Int(qty), Arg::Text(SKU)]).await?;
        self.record::<S>(conn, who, token).await
    }

    async fn record<S: Db>(
        &self,
        conn: &mut S::Connection,
        who: &str,
        token: u64,
    ) -> Result<(), sqlx::Error> {
        let insert = format!("INSERT INTO {} (worker, token) VALUES (?, ?)", self.sales);
        S::exec(conn, &insert, &[Arg::Text(who), Arg::Int(int(token))]).await?;
        Ok(())
    }
}

fn int(token: u64) -> i64 {
    i64::try_from(token).expect("a token below 2^63")
}

/// One test's world: a server with the module, a locker on it, the database and the shop.
struct Ctx<S: Db> {
    server: Server,
    locker: Locker,
    place: String,
    pool: Pool<S>,
    shop: Shop,
    key: String,
}

impl<S: Db> Drop for Ctx<S> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            S::clean(&self.place);
        }
    }
}

impl<S: Db> Ctx<S> {
    /// 100 in stock, no sales, the fence table there.
    async fn new(tag: &str) -> Self {
        let server = Server::start();
        let locker = Locker::new(
            redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap(),
        );
        let place = S::place();
        let pool = S::open(&place, 8).await;
        {
            // Two tests creating one table at once can collide in PostgreSQL's catalog.
            static CREATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
            let _one = CREATE.lock().await;
            fence::create_table(&pool).await.unwrap();
        }
        let shop = Shop::new(tag);
        let mut conn = pool.acquire().await.unwrap();
        for sql in [
            format!("DROP TABLE IF EXISTS {}", shop.stock),
            format!("DROP TABLE IF EXISTS {}", shop.sales),
            format!(
                "CREATE TABLE {} (sku VARCHAR(64) PRIMARY KEY, qty BIGINT NOT NULL, \
                 fence BIGINT NOT NULL)",
                shop.stock
            ),
            format!(
                "CREATE TABLE {} (worker VARCHAR(64) NOT NULL, token BIGINT NOT NULL)",
                shop.sales
            ),
        ] {
            S::exec(&mut conn, &sql, &[]).await.unwrap();
        }
        let insert = format!(
            "INSERT INTO {} (sku, qty, fence) VALUES (?, 100, 0)",
            shop.stock
        );
        S::exec(&mut conn, &insert, &[Arg::Text(SKU)])
            .await
            .unwrap();
        Ctx {
            server,
            locker,
            place,
            pool,
            shop,
            key: format!("{{{tag}}}:lock"),
        }
    }

    fn lock(&self) -> LockBuilder {
        self.locker.lock(&self.key)
    }

    /// A hold on a short fixed lease (watchdog off).
    async fn short_hold(&self) -> LockGuard {
        let guard = self.lock().ttl(LEASE).watchdog(false).acquire().await;
        guard.unwrap().expect("granted")
    }

    /// The next hold: granted when the current one's lease ends.
    async fn next_hold(&self) -> LockGuard {
        let guard = self
            .lock()
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(10))
            .acquire()
            .await;
        guard.unwrap().expect("granted when the lease before ended")
    }

    /// The stock left and the sales recorded.
    async fn totals(&self) -> (i64, i64) {
        let mut conn = self.pool.acquire().await.unwrap();
        let qty = self.shop.read::<S>(&mut conn).await.unwrap();
        let sql = format!("SELECT COUNT(*) FROM {}", self.shop.sales);
        (qty, S::int(&mut conn, &sql, &[]).await.unwrap())
    }

    /// The token stored for fence `name` in `table`.
    async fn stored(&self, table: &str, name: &str) -> i64 {
        let mut conn = self.pool.acquire().await.unwrap();
        let sql = format!("SELECT token FROM {table} WHERE name = ?");
        S::int(&mut conn, &sql, &[Arg::Text(name)]).await.unwrap()
    }

    /// Until a session waits for a fence row's lock (at most 5 s; SQLite: a pause). Whether it
    /// did changes nothing in what the tests assert.
    async fn a_waiter(&self) {
        let Some(sql) = S::WAITING else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        };
        let mut conn = self.pool.acquire().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while S::int(&mut conn, sql, &[]).await.unwrap() < 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Issue 30's schedule through the helper: B (the newer holder) has fenced and read; A (whose
/// lease ended) enters the helper and waits for B's row lock, then finds B's token: stale,
/// before its body runs. One unit sold.
async fn the_schedule_sells_one<S: Db>() {
    let ctx = Ctx::<S>::new("schedule").await;
    let a = ctx.short_hold().await;
    let b = ctx.next_hold().await;
    let (ta, tb) = (a.token(), b.token());
    assert!(tb > ta);
    let mut tx = fence::begin(&ctx.pool, &b).await.unwrap();
    assert_eq!(ctx.shop.read::<S>(&mut tx).await.unwrap(), 100);
    let body_ran = Arc::new(AtomicBool::new(false));
    let late = tokio::spawn({
        let (pool, shop, body_ran) = (ctx.pool.clone(), ctx.shop.clone(), body_ran.clone());
        async move {
            let mut tx = fence::begin(&pool, &a).await?;
            body_ran.store(true, Ordering::SeqCst);
            let qty = shop.read::<S>(&mut tx).await?;
            shop.sell::<S>(&mut tx, qty - 1, "A", ta).await?;
            tx.commit().await?;
            Ok::<_, Error>(())
        }
    });
    ctx.a_waiter().await;
    ctx.shop.sell::<S>(&mut tx, 99, "B", tb).await.unwrap();
    tx.commit().await.unwrap();
    match late.await.unwrap() {
        Err(Error::Stale(m)) => {
            assert!(m.contains(&ctx.key) && m.contains(&ta.to_string()), "{m}")
        }
        other => panic!("A's transaction: {other:?}"),
    }
    assert!(!body_ran.load(Ordering::SeqCst), "A's body never ran");
    assert_eq!(ctx.totals().await, (99, 1), "one unit sold");
    assert_eq!(ctx.stored("lock_fences", &ctx.key).await, int(tb));
    assert!(b.release().await.unwrap());
}

/// The same schedule with the recipe docs/fencing.md says not to copy (the token in the write,
/// reads outside any fence): both writes pass their token check and two units are sold from
/// 100 with 99 left. The test shows the old recipe bites.
async fn the_old_recipe_loses_an_update<S: Db>() {
    let ctx = Ctx::<S>::new("oldrecipe").await;
    let write = format!(
        "UPDATE {} SET qty = ?, fence = ? WHERE sku = ? AND fence <= ?",
        ctx.shop.stock
    );
    let mut conn_a = ctx.pool.acquire().await.unwrap();
    let mut conn_b = ctx.pool.acquire().await.unwrap();
    let a = ctx.short_hold().await;
    let read_a = ctx.shop.read::<S>(&mut conn_a).await.unwrap();
    let b = ctx.next_hold().await; // A "pauses": its lease ends, B is granted
    let (ta, tb) = (int(a.token()), int(b.token()));
    assert!(tb > ta);
    let read_b = ctx.shop.read::<S>(&mut conn_b).await.unwrap();
    let args = |read: i64, t: i64| [Arg::Int(read - 1), Arg::Int(t), Arg::Text(SKU), Arg::Int(t)];
    let wrote_a = S::exec(&mut conn_a, &write, &args(read_a, ta))
        .await
        .unwrap();
    ctx.shop
        .record::<S>(&mut conn_a, "A", a.token())
        .await
        .unwrap();
    let wrote_b = S::exec(&mut conn_b, &write, &args(read_b, tb))
        .await
        .unwrap();
    ctx.shop
        .record::<S>(&mut conn_b, "B", b.token())
        .await
        .unwrap();
    assert_eq!((read_a, read_b), (100, 100));
    assert_eq!((wrote_a, wrote_b), (1, 1), "both token checks passed");
    assert_eq!(ctx.totals().await, (99, 2), "100 in stock, 101 sold");
}

/// A paused inside its transaction (after its fence, past its lease): B, granted meanwhile,
/// waits in the helper for A's row lock; A's write commits, then B reads it and writes after
/// it. Two units sold, 98 left, nobody stale.
async fn a_holder_paused_inside_its_transaction<S: Db>() {
    let ctx = Ctx::<S>::new("pausedinside").await;
    let a = ctx.short_hold().await;
    let mut tx = fence::begin(&ctx.pool, &a).await.unwrap();
    assert_eq!(ctx.shop.read::<S>(&mut tx).await.unwrap(), 100);
    let b = ctx.next_hold().await; // A stays in its body past its lease
    assert!(b.token() > a.token());
    let next = tokio::spawn({
        let (pool, shop) = (ctx.pool.clone(), ctx.shop.clone());
        async move {
            let mut tx = fence::begin(&pool, &b).await?;
            let qty = shop.read::<S>(&mut tx).await?;
            shop.sell::<S>(&mut tx, qty - 1, "B", b.token()).await?;
            tx.commit().await?;
            Ok::<_, Error>((qty, b))
        }
    });
    ctx.a_waiter().await;
    ctx.shop
        .sell::<S>(&mut tx, 99, "A", a.token())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let (read_b, b) = next.await.unwrap().expect("B is not stale");
    assert_eq!(read_b, 99, "B read A's write");
    assert_eq!(ctx.totals().await, (98, 2));
    assert_eq!(ctx.stored("lock_fences", &ctx.key).await, int(b.token()));
    assert!(b.release().await.unwrap());
}

/// The options and the other entry points: a named fence in a named (schema-qualified) table,
/// created twice; one hold's token for several transactions; `begin` on a connection; `fence`
/// in a transaction the caller began; a dropped transaction rolled back; and, once a newer
/// hold has fenced, `Error::Stale` from each with nothing written.
async fn the_options_and_entry_points<S: Db>() {
    let ctx = Ctx::<S>::new("options").await;
    let table = Table::new(format!("{}.fences_options", S::SCHEMA)).unwrap();
    table.create(&ctx.pool).await.unwrap();
    table.create(&ctx.pool).await.unwrap();
    let g = ctx.short_hold().await;
    let named = Fence::new(&g).name("sku-9").table(table.clone());
    for _ in 0..2 {
        named
            .begin(&ctx.pool)
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
    }
    assert_eq!(ctx.stored(table.as_str(), "sku-9").await, int(g.token()));
    let mut conn = ctx.pool.acquire().await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    fence::fence(&mut *tx, &g).await.unwrap();
    tx.commit().await.unwrap();
    drop(conn);
    assert_eq!(ctx.stored("lock_fences", &ctx.key).await, int(g.token()));
    let mut tx = ctx.pool.begin().await.unwrap();
    fence::fence(&mut *tx, &g).await.unwrap();
    fence::fence(&mut *tx, &g).await.unwrap();
    ctx.shop
        .sell::<S>(&mut tx, 99, "g", g.token())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    {
        let mut tx = fence::begin(&ctx.pool, &g).await.unwrap();
        ctx.shop
            .sell::<S>(&mut tx, 0, "g", g.token())
            .await
            .unwrap();
        // dropped without commit: rolled back
    }
    assert_eq!(ctx.totals().await, (99, 1));

    let newer = ctx.next_hold().await; // granted when g's lease ends
    fence::begin(&ctx.pool, &newer)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let stale = |r: Result<(), Error>| match r {
        Err(Error::Stale(m)) => assert!(m.contains(&g.token().to_string()), "{m}"),
        other => panic!("not stale: {other:?}"),
    };
    stale(fence::begin(&ctx.pool, &g).await.map(drop));
    stale(Fence::new(&g).begin(&ctx.pool).await.map(drop));
    let mut tx = ctx.pool.begin().await.unwrap();
    stale(fence::fence(&mut *tx, &g).await);
    tx.rollback().await.unwrap();
    assert_eq!(
        ctx.stored("lock_fences", &ctx.key).await,
        int(newer.token())
    );
    // The named fence has not seen the newer hold: the old token is still its largest.
    named
        .begin(&ctx.pool)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert!(newer.release().await.unwrap());
}

/// The database decides, not the lease: a hold whose lease ended fences fine while no newer
/// hold has fenced (here one was granted by the server, but has not written).
async fn a_lost_hold_is_not_refused_by_the_helper<S: Db>() {
    let ctx = Ctx::<S>::new("lost").await;
    let g = ctx.short_hold().await;
    tokio::time::sleep(LEASE * 2).await;
    let newer = ctx.lock().acquire().await.unwrap();
    let newer = newer.expect("the lease ended: granted at once");
    assert!(newer.token() > g.token());
    let mut tx = fence::begin(&ctx.pool, &g).await.unwrap();
    ctx.shop
        .sell::<S>(&mut tx, 99, "g", g.token())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ctx.totals().await, (99, 1));
    assert!(newer.release().await.unwrap());
}

/// The helper's cost per write (`--ignored`, prints): a read-modify-write transaction begun by
/// `fence::begin` against the same begun by `pool.begin()`, alternating, on one connection.
async fn the_cost_per_write<S: Db>() {
    const ROUNDS: u32 = 300;
    let ctx = Ctx::<S>::new("cost").await;
    let g = ctx.lock().acquire().await.unwrap().expect("granted");
    let pool = S::open(&ctx.place, 1).await;
    let (mut plain, mut fenced) = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS * 2 {
        let started = Instant::now();
        let mut tx = if round % 2 == 0 {
            pool.begin().await.unwrap()
        } else {
            fence::begin(&pool, &g).await.unwrap()
        };
        let qty = ctx.shop.read::<S>(&mut tx).await.unwrap();
        let update = format!("UPDATE {} SET qty = ? WHERE sku = ?", ctx.shop.stock);
        S::exec(&mut tx, &update, &[Arg::Int(qty), Arg::Text(SKU)])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let took = started.elapsed();
        if round % 2 == 0 {
            plain += took;
        } else {
            fenced += took;
        }
    }
    eprintln!(
        "{}: plain {:.0} µs, fenced {:.0} µs per transaction ({ROUNDS} each)",
        S::LABEL,
        plain.as_secs_f64() * 1e6 / f64::from(ROUNDS),
        fenced.as_secs_f64() * 1e6 / f64::from(ROUNDS),
    );
    assert!(g.release().await.unwrap());
}

// ---- The inventory soak --------------------------------------------------------------------

const SOAK_WORKERS: usize = 4;
/// Workers that SIGSTOP themselves after their read on this sale (inside the transaction).
const SELF_STOPPERS: usize = 2;
const SELF_STOP_AT: u32 = 3;
const RANDOM_STOPS: usize = 6;

/// Worker processes sell 100 units, one per hold through the helper (read, stop at 0,
/// decrement, record the sale, commit), while holders are SIGSTOPped past their lease: inside
/// their transaction by themselves, at random moments by the test; the test resumes any worker
/// stopped for 2 leases. Sold + left = 100, nothing oversold, every worker exits cleanly, and
/// the sales the workers report are the rows.
async fn the_inventory_soak<S: Db>() {
    let started = Instant::now();
    let ctx = Ctx::<S>::new("soak").await;
    let mut workers = Workers(Vec::new());
    for i in 0..SOAK_WORKERS {
        let stop_at = if i < SELF_STOPPERS { SELF_STOP_AT } else { 0 };
        let child = Command::new(redis_lock_harness::this_test_binary())
            .args(["soak_worker", "--exact", "--nocapture", "--test-threads=1"])
            .env("FENCE_SOAK_DB", S::LABEL)
            .env("FENCE_SOAK_PLACE", &ctx.place)
            .env("FENCE_SOAK_REDIS", ctx.server.port.to_string())
            .env("FENCE_SOAK_KEY", &ctx.key)
            .env("FENCE_SOAK_WORKER", format!("w{i}"))
            .env("FENCE_SOAK_STOP_AT", stop_at.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a worker");
        workers.0.push(child);
    }
    let (statuses, stops) = tokio::task::block_in_place(|| workers.supervise());
    let mut reported = 0;
    let mut lines = Vec::new();
    for (child, status) in workers.0.iter_mut().zip(&statuses) {
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout.read_to_string(&mut out).unwrap();
        }
        assert!(status.success(), "a worker failed ({status}):\n{out}");
        // libtest prints "test soak_worker ... " before the worker's line.
        let line = out
            .lines()
            .find_map(|l| l.split_once("SOAK ").map(|(_, report)| report))
            .unwrap_or_else(|| panic!("no report:\n{out}"));
        reported += line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("sold="))
            .and_then(|n| n.parse::<i64>().ok())
            .expect("sold=");
        lines.push(line.to_string());
    }
    let (left, rows) = ctx.totals().await;
    eprintln!(
        "{} soak: {lines:?}, {stops} stops, {left} left, {rows} sold, {:.1} s",
        S::LABEL,
        started.elapsed().as_secs_f64()
    );
    assert!(left >= 0, "oversold: {left}");
    assert_eq!(rows + left, 100, "sold + left");
    assert_eq!(reported, rows, "the sales the workers report are the rows");
}

/// The worker processes, killed (by PID) if the test ends before they do.
struct Workers(Vec<Child>);

impl Workers {
    /// Until every worker exits (60 s at most): SIGSTOP a running worker now and then, SIGCONT
    /// any stopped for 2 leases. Their exit statuses, and how many stops the test saw.
    fn supervise(&mut self) -> (Vec<std::process::ExitStatus>, usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut rng = Rng::new();
        let mut statuses = vec![None; self.0.len()];
        let mut stopped_since: Vec<Option<Instant>> = vec![None; self.0.len()];
        let (mut stops, mut random_stops) = (0, 0);
        let mut next_stop = Instant::now() + rng.millis(100, 400);
        while statuses.iter().any(Option::is_none) {
            let now = Instant::now();
            assert!(now < deadline, "the soak did not end within 60 s");
            for (i, child) in self.0.iter_mut().enumerate() {
                if statuses[i].is_some() {
                    continue;
                }
                if let Some(status) = child.try_wait().unwrap() {
                    statuses[i] = Some(status);
                    continue;
                }
                let pid = child.id() as i32;
                if state(pid) == Some('T') {
                    let since = *stopped_since[i].get_or_insert_with(|| {
                        stops += 1;
                        now
                    });
                    if now - since >= LEASE * 2 {
                        redis_lock_harness::signal_pid(pid, libc::SIGCONT);
                    }
                } else {
                    stopped_since[i] = None;
                }
            }
            if now >= next_stop && random_stops < RANDOM_STOPS {
                let running: Vec<i32> = (0..self.0.len())
                    .filter(|&i| statuses[i].is_none() && stopped_since[i].is_none())
                    .map(|i| self.0[i].id() as i32)
                    .collect();
                if !running.is_empty() {
                    redis_lock_harness::signal_pid(rng.pick(&running), libc::SIGSTOP);
                    random_stops += 1;
                }
                next_stop = now + rng.millis(150, 450);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (statuses.into_iter().flatten().collect(), stops)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A process's state letter from /proc (`T`: stopped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// xorshift, seeded from the clock (the seed is printed, to run a failure again).
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("soak seed {seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low))
    }

    fn pick(&mut self, items: &[i32]) -> i32 {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// One worker of `the_inventory_soak` (this binary run again with `FENCE_SOAK_DB` set; a
/// no-op in a plain test run).
#[test]
fn soak_worker() {
    let Ok(db) = std::env::var("FENCE_SOAK_DB") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sold, stale, retried) = runtime.block_on(async {
        match db.as_str() {
            #[cfg(feature = "sqlx-postgres")]
            "postgres" => work::<sqlx::Postgres>().await,
            #[cfg(feature = "sqlx-mysql")]
            "mariadb" => work::<sqlx::MySql>().await,
            #[cfg(feature = "sqlx-sqlite")]
            "sqlite" => work::<sqlx::Sqlite>().await,
            other => panic!("no database {other}"),
        }
    });
    println!("SOAK sold={sold} stale={stale} retried={retried}");
}

/// Sell until the stock is gone: (sold, stale, transactions run again).
async fn work<S: Db>() -> (i64, i64, i64) {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let name = env("FENCE_SOAK_WORKER");
    let stop_at: u32 = env("FENCE_SOAK_STOP_AT").parse().unwrap();
    let pool = S::open(&env("FENCE_SOAK_PLACE"), 2).await;
    let redis = format!("redis://127.0.0.1:{}/", env("FENCE_SOAK_REDIS"));
    let locker = Locker::new(redis::Client::open(redis).unwrap());
    let key = env("FENCE_SOAK_KEY");
    let shop = Shop::new("soak");
    let (mut sold, mut stale, mut retried, mut reads) = (0, 0, 0, 0);
    loop {
        let hold = locker
            .lock(&key)
            .ttl(LEASE)
            .wait(Duration::from_secs(30))
            .acquire()
            .await;
        let Some(guard) = hold.unwrap_or_else(|e| panic!("{name}: {e}")) else {
            continue;
        };
        let outcome = loop {
            match sell_one::<S>(&pool, &guard, &shop, &name, &mut reads, stop_at).await {
                Err(Error::Database(e)) if S::retryable(&e) && retried < 1000 => {
                    retried += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                other => break other,
            }
        };
        let _ = guard.release().await; // false when the lease ran out: the fence decided
        match outcome {
            Ok(true) => sold += 1,
            Ok(false) => return (sold, stale, retried),
            Err(Error::Stale(_)) => stale += 1,
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

/// One sale in a fenced transaction: false when nothing is left.
async fn sell_one<S: Db>(
    pool: &Pool<S>,
    guard: &LockGuard,
    shop: &Shop,
    name: &str,
    reads: &mut u32,
    stop_at: u32,
) -> Result<bool, Error> {
    let mut tx = fence::begin(pool, guard).await?;
    let qty = shop.read::<S>(&mut tx).await?;
    if qty <= 0 {
        return Ok(false);
    }
    *reads += 1;
    if *reads == stop_at {
        // Paused inside the transaction, holding the fence row, until the test resumes it.
        // SAFETY: raise only sends a signal to this process.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
    shop.sell::<S>(&mut tx, qty - 1, name, guard.token())
        .await?;
    tx.commit().await?;
    Ok(true)
}

// ---- Each scenario on each database --------------------------------------------------------

macro_rules! suite {
    ($module:ident, $feature:literal, $db:ty) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_schedule_through_the_helper_sells_one() {
                the_schedule_sells_one::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_old_recipe_sells_two() {
                the_old_recipe_loses_an_update::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_holder_paused_inside_its_transaction_is_waited_for() {
                a_holder_paused_inside_its_transaction::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn options_and_entry_points() {
                the_options_and_entry_points::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_lost_hold_is_judged_by_the_database() {
                a_lost_hold_is_not_refused_by_the_helper::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "a measurement: prints the helper's cost per write"]
            async fn cost_per_write() {
                the_cost_per_write::<$db>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_inventory_soak_sells_exactly_100() {
                the_inventory_soak::<$db>().await
            }
        }
    };
}

suite!(postgres, "sqlx-postgres", sqlx::Postgres);
suite!(mariadb, "sqlx-mysql", sqlx::MySql);
suite!(sqlite, "sqlx-sqlite", sqlx::Sqlite);

/// On a concrete database (PostgreSQL), the helpers' futures can be spawned (Send, no
/// borrowed lifetimes left), with each connection sqlx hands out: a transaction of the pool's
/// (`&mut *tx`) and one begun on a connection of its own.
#[cfg(feature = "sqlx-postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_futures_can_be_spawned() {
    let ctx = Ctx::<sqlx::Postgres>::new("spawned").await;
    let g = ctx.lock().acquire().await.unwrap().expect("granted");
    let (pool, place) = (ctx.pool.clone(), ctx.place.clone());
    let g = tokio::spawn(async move {
        fence::create_table(&pool).await?;
        let table = Table::new("fences_spawned")?;
        table.create(&pool).await?;
        let mut tx = fence::begin(&pool, &g).await?;
        fence::fence(&mut *tx, &g).await?;
        Fence::new(&g).table(table).fence(&mut *tx).await?;
        tx.commit().await?;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&place).await?;
        let mut tx = sqlx::Connection::begin(&mut conn).await?;
        fence::fence(&mut *tx, &g).await?;
        tx.commit().await?;
        Ok::<_, Error>(g)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ctx.stored("fences_spawned", &ctx.key).await, int(g.token()));
    assert!(g.release().await.unwrap());
}
