//! Redis Cluster's key slot (CRC16/XMODEM of the key, or of its `{hash tag}`, mod 16384), so
//! `LOCK.GUARD` can check that a guarded command's keys live in the lock's slot.

/// The number of slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis computes it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of a key that decides its slot: the text between the first `{` and the next `}`
/// when that is not empty, otherwise the whole key.
pub fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// The cluster slot of `key`.
pub fn of(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_cluster_keyslot() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(of(b"foo"), 12182);
        assert_eq!(of(b"bar"), 5061);
        assert_eq!(of(b"{user1000}.following"), of(b"user1000"));
        assert_eq!(of(b"{sku:9}:lock"), of(b"{sku:9}:stock"));
        assert_eq!(
            hashed_part(b"foo{}{bar}"),
            b"foo{}{bar}",
            "an empty tag hashes the whole key"
        );
        assert_eq!(hashed_part(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed_part(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hashed_part(b"{"), b"{");
        assert_eq!(of(b""), 0);
    }
}
