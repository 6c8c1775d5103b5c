//! The RDB room: DUMP payloads read, forged field by field and re-sealed (`crc64`, `reseal`,
//! `lock_payload`), for the tests of restore, upgrades and tokens from persisted state.

use crate::client::{acquire, ok, release, run};
use crate::{Connection, Value};

/// CRC-64/Jones as DUMP payloads use it (reflected, poly 0xad93d23594c935a9).
pub fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95AC_9329_AC4B_C9B5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Re-seal a DUMP payload whose body was edited: recompute the trailing CRC.
pub fn reseal(mut payload: Vec<u8>) -> Vec<u8> {
    let body = payload.len() - 8;
    let crc = crc64(&payload[..body]);
    payload[body..].copy_from_slice(&crc.to_le_bytes());
    payload
}

pub fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    match ok(con, &["DUMP", key]) {
        Value::BulkString(b) => {
            let body = b.len() - 8;
            assert_eq!(
                crc64(&b[..body]).to_le_bytes(),
                b[body..],
                "crc64 helper agrees with the server"
            );
            b
        }
        other => panic!("DUMP gave {other:?}"),
    }
}

/// A field of a module value in a DUMP payload.
pub enum RdbField<'a> {
    Uint(u64),
    Str(&'a [u8]),
}

/// Redis's length encoding (`rdbSaveLen`).
fn rdb_len(out: &mut Vec<u8>, n: u64) {
    match n {
        0..64 => out.push(n as u8),
        64..16384 => out.extend_from_slice(&(0x4000 | n as u16).to_be_bytes()),
        16384..=0xffff_ffff => {
            out.push(0x80);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0x81);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// A DUMP payload of a lock value written field by field at encoding `version` (what that
/// version of the module would have written), with the type and RDB version of `template` (a
/// DUMP of a lock on this server).
pub fn lock_payload(template: &[u8], version: u64, fields: &[RdbField]) -> Vec<u8> {
    const OPCODE_UINT: u8 = 2;
    const OPCODE_STRING: u8 = 5;
    assert_eq!(template[1], 0x81, "64-bit module id encoding");
    let mut id = u64::from_be_bytes(template[2..10].try_into().unwrap());
    id = (id & !0x3ff) | version;
    let mut out = vec![template[0], 0x81];
    out.extend_from_slice(&id.to_be_bytes());
    for field in fields {
        match field {
            RdbField::Uint(v) => {
                out.push(OPCODE_UINT);
                rdb_len(&mut out, *v);
            }
            RdbField::Str(b) => {
                out.push(OPCODE_STRING);
                rdb_len(&mut out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
    out.push(0); // EOF
    out.extend_from_slice(&template[template.len() - 10..]); // RDB version, CRC
    reseal(out)
}

/// Put a lock on `key` whose token is `token` (possibly far ahead of the clock), by editing a
/// DUMP payload: the server's only way in for such a token is loading it.
pub fn restore_lock_with_token(con: &mut Connection, key: &str, token: i64) {
    let tmp = format!("{key}:tmp-for-dump");
    let real = acquire(con, &tmp, "forged", 600_000).expect("tmp lock");
    let payload = dump(con, &tmp);
    release(con, &tmp, "forged");
    let needle = real.to_be_bytes();
    let at = payload
        .windows(8)
        .position(|w| w == needle)
        .expect("the token is in the payload");
    let mut edited = payload.clone();
    edited[at..at + 8].copy_from_slice(&token.to_be_bytes());
    let edited = reseal(edited);
    let r = run(
        con,
        &[b"RESTORE", key.as_bytes(), b"0", &edited, b"REPLACE"],
    );
    assert_eq!(r, Ok(Value::Okay), "restore the forged lock");
}
