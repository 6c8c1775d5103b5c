//! The commands sections 8 and 8b send, word by word, for a given key.

/// The owner every one of them uses (a canonical UUID, as clients send).
const OWNER: &str = "8d3e4f5a-1111-4222-8333-444455556666";

fn words(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

pub fn get(key: &str) -> Vec<String> {
    words(&["GET", key])
}

pub fn set(key: &str) -> Vec<String> {
    words(&["SET", key, "v"])
}

pub fn set_nx_px(key: &str) -> Vec<String> {
    words(&["SET", key, OWNER, "NX", "PX", "30000"])
}

pub fn del(key: &str) -> Vec<String> {
    words(&["DEL", key])
}

pub fn acquire(key: &str) -> Vec<String> {
    words(&["LOCK.ACQUIRE", key, OWNER, "30000"])
}

pub fn release(key: &str) -> Vec<String> {
    words(&["LOCK.RELEASE", key, OWNER])
}

pub fn evalsha_release(key: &str, sha: &str) -> Vec<String> {
    words(&["EVALSHA", sha, "1", key, OWNER])
}

pub fn delifeq(key: &str) -> Vec<String> {
    words(&["DELIFEQ", key, OWNER])
}
