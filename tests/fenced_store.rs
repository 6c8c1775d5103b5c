//! The shipped fenced-store script (lua/fenced_store.lua): its contract, call by call.

use redis_lock_harness::store::FENCED_STORE as SCRIPT;
use redis_lock_harness::*;

fn call(c: &mut Connection, words: &[&str]) -> Result<Value, String> {
    let mut args = vec!["EVAL", SCRIPT, "1", "stock"];
    args.extend_from_slice(words);
    cmd(c, &args)
}

#[test]
fn newest_token_wins_reads_and_writes() {
    let s = Server::start();
    let mut c = s.con();
    assert_eq!(call(&mut c, &["GET", "100"]), Ok(Value::Nil), "unset value");
    assert_eq!(call(&mut c, &["SET", "100", "7"]), Ok(Value::Int(1)));
    assert_eq!(
        call(&mut c, &["GET", "100"]),
        Ok(Value::BulkString(b"7".to_vec())),
        "same token again"
    );
    assert_eq!(
        call(&mut c, &["GET", "200"]),
        Ok(Value::BulkString(b"7".to_vec())),
        "a newer reader registers"
    );
    let err = call(&mut c, &["SET", "100", "8"]).unwrap_err();
    assert_eq!(
        err, "STALE token 100 is older than 200",
        "the older holder can no longer write"
    );
    assert!(
        call(&mut c, &["GET", "150"])
            .unwrap_err()
            .starts_with("STALE"),
        "nor read for update"
    );
    assert_eq!(call(&mut c, &["SET", "200", "9"]), Ok(Value::Int(1)));
    assert_eq!(
        ok(&mut c, &["HGET", "stock", "value"]),
        Value::BulkString(b"9".to_vec())
    );
    // Tokens of the size redis-lock issues compare exactly.
    assert_eq!(
        call(&mut c, &["SET", "1795954694826001", "10"]),
        Ok(Value::Int(1))
    );
    assert!(call(&mut c, &["SET", "1795954694826000", "11"])
        .unwrap_err()
        .starts_with("STALE"));
}

#[test]
fn bad_calls_are_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.con();
    call(&mut c, &["SET", "5", "1"]).unwrap();
    for (words, expected) in [
        (
            vec!["PUT", "6", "1"],
            "ERR unknown operation, use GET or SET",
        ),
        (
            vec!["GET", "abc"],
            "ERR token must be a positive integer below 2^53",
        ),
        (
            vec!["GET", "0"],
            "ERR token must be a positive integer below 2^53",
        ),
        (
            vec!["GET", "1.5"],
            "ERR token must be a positive integer below 2^53",
        ),
        (
            vec!["GET", "9007199254740993"],
            "ERR token must be a positive integer below 2^53",
        ),
        (vec!["SET", "6"], "ERR SET needs a value"),
    ] {
        assert_eq!(call(&mut c, &words).unwrap_err(), expected, "{words:?}");
    }
    assert_eq!(
        ok(&mut c, &["HGET", "stock", "token"]),
        Value::BulkString(b"5".to_vec())
    );
    assert_eq!(
        ok(&mut c, &["HGET", "stock", "value"]),
        Value::BulkString(b"1".to_vec())
    );
}
