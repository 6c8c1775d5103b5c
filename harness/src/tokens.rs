//! Tokens: their epochs, the epoch a server stored, tokens far ahead of the clock.

use crate::server::Server;

/// The epoch of a token (its high bits: see `src/core/fencing.rs`).
pub fn epoch_of(token: i64) -> i64 {
    token >> 32
}

/// The fencing epoch stored in a server's epoch file (0 if there is none).
pub fn stored_epoch(server: &Server) -> i64 {
    std::fs::read_to_string(server.dir.join("dump.rdb.lock-epoch"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Microseconds since the epoch (the scale tokens live on).
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A token far ahead of any clock-derived one, so only persisted state can explain later tokens.
pub fn future_token() -> i64 {
    now_us() + 10_000_000_000_000
}

/// One span of a history for [`check_epochs`]: a restart epoch of a lock server, or the grants
/// of one master of a deployment. Its lowest and highest token, each with a note for the
/// failure message (who had it, when).
pub struct Span {
    pub name: String,
    pub lowest: (i64, String),
    pub highest: (i64, String),
}

/// Tokens never go backwards from one span to the next (`spans` in the order they came): each
/// span's lowest token is above the highest of the span before it, and so (a span's lowest
/// being at most its highest) above every token of every span before it. `across` says what
/// separates two spans, for the message.
pub fn check_epochs(across: &str, spans: &[Span]) {
    let note = |(token, note): &(i64, String)| {
        if note.is_empty() {
            token.to_string()
        } else {
            format!("{token} ({note})")
        }
    };
    for pair in spans.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        assert!(
            new.lowest.0 > old.highest.0,
            "tokens went backwards across {across}: the lowest token of {} is {}, not above the \
             highest of {}, before it: {}",
            new.name,
            note(&new.lowest),
            old.name,
            note(&old.highest)
        );
    }
}
