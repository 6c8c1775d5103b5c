//! Owners the server generates for `LOCK.ACQUIRE key * ttl`: random UUIDs (version 4).

use redis_module::raw;

/// A fresh hyphenated UUID, from the server's own random source (no panic path: if the API
/// were missing, the bytes would stay zero and the UUID would still be well-formed).
pub fn generate() -> String {
    let mut bytes = [0u8; 16];
    // SAFETY: GetRandomBytes fills exactly `len` bytes of the buffer it is given.
    unsafe {
        if let Some(fill) = raw::RedisModule_GetRandomBytes {
            fill(bytes.as_mut_ptr(), bytes.len());
        }
    }
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}
