//! The fencing epoch of this server (see `core::fencing`): started when it becomes master and
//! whenever the one in use runs low, stored in its epoch file before the epoch's first token,
//! then replicated and logged as `LOCK.EPOCH`, so replicas know it before any grant in it.
//!
//! The epoch file is `<dbfilename>.lock-epoch` in the server's `dir` (its working directory),
//! next to the RDB: one decimal number, replaced atomically (written, fsynced, renamed, the
//! directory fsynced).

use std::io::{self, Write};
use std::path::PathBuf;

use redis_module::{Context, RedisValue};

use crate::core::error::LockError;
use crate::core::fencing;
use crate::ffi::{clock, server};

/// Make sure tokens can be issued: start an epoch unless one with room is in use.
pub fn ensure(ctx: &Context) -> Result<(), LockError> {
    if fencing::ready() {
        return Ok(());
    }
    start(ctx)
}

/// Start an epoch now if this server is a master that has none (at start-up, after a
/// promotion), so that its replicas learn it before the first grant. Errors are logged; the
/// first grant tries again.
pub fn start_if_master(ctx: &Context) {
    if server::is_master(ctx) && fencing::epoch() == 0 {
        let _ = start(ctx);
    }
}

/// Start the next epoch: stored durably first, then in use, then replicated.
fn start(ctx: &Context) -> Result<(), LockError> {
    let path = file_path(ctx);
    let stored = read(&path).map_err(|err| not_stored(ctx, &path, "read", &err))?;
    let epoch = fencing::next_epoch(stored, clock::wall_us()).ok_or(LockError::TokensExhausted)?;
    write(&path, epoch).map_err(|err| not_stored(ctx, &path, "write", &err))?;
    fencing::enter(epoch);
    server::replicate_epoch(ctx, epoch);
    persistence_settings_changed(ctx);
    fencing::replicated(fencing::first_of(epoch));
    ctx.log_notice(&format!(
        "redis-lock: fencing epoch {epoch} started (stored in {}); its tokens are above {}",
        path.display(),
        fencing::first_of(epoch)
    ));
    Ok(())
}

/// The server's persistence settings may have changed (read before an epoch's first grant, and
/// again at each `CONFIG SET` of them): whether grants may replicate as their commands.
pub fn persistence_settings_changed(ctx: &Context) {
    fencing::set_aof_base_knows_last(server::aof_base_is_rdb(ctx));
}

fn not_stored(ctx: &Context, path: &std::path::Path, what: &str, err: &io::Error) -> LockError {
    ctx.log_warning(&format!(
        "redis-lock: cannot {what} the epoch file {}: {err}; no lock is granted until it can",
        path.display()
    ));
    LockError::EpochNotStored
}

/// `<dbfilename>.lock-epoch`, relative to the server's working directory (its `dir`).
fn file_path(ctx: &Context) -> PathBuf {
    let name = ctx.create_string("dbfilename");
    let get = ctx.create_string("GET");
    let dbfilename = match ctx.call("CONFIG", &[&get, &name]) {
        Ok(RedisValue::Array(pair)) => match pair.get(1) {
            Some(RedisValue::SimpleString(s) | RedisValue::BulkString(s)) => s.clone(),
            Some(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let base = if dbfilename.is_empty() {
        "dump.rdb"
    } else {
        &dbfilename
    };
    PathBuf::from(format!("{base}.lock-epoch"))
}

/// The stored epoch (0 when there is no file yet).
fn read(path: &std::path::Path) -> io::Result<u64> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not an epoch: {text:?}"),
            )
        }),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(err) => Err(err),
    }
}

/// Replace the file with `epoch`, durably, before anything is issued in it.
fn write(path: &std::path::Path, epoch: u64) -> io::Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut file = std::fs::File::create(&tmp)?;
    writeln!(file, "{epoch}")?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    std::fs::File::open(dir.unwrap_or(std::path::Path::new(".")))?.sync_all()
}
