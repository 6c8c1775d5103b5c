//! The module's version, as operators see it: `MODULE LIST` shows `MODULE_VERSION` (Redis's
//! convention, major * 10000 + minor * 100 + patch) and `INFO lock` shows `VERSION`.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `VERSION` as `MODULE LIST` shows it: 0.1.0 is 100, 1.2.3 is 10203.
pub const MODULE_VERSION: i32 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_version_is_the_crate_version() {
        let parts: Vec<i32> = VERSION.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(
            MODULE_VERSION,
            parts[0] * 10_000 + parts[1] * 100 + parts[2]
        );
    }
}
