//! The integration tests on real servers, one module per concern, linked as one test binary
//! (`cargo test --test integration`). The fault suite (`tests/faults/`) and the randomized
//! suite (`tests/fuzz/`) are binaries of their own: `make test-faults` runs them.

mod acl;
mod binary;
mod cluster;
mod command_docs;
mod commands;
mod config;
mod docs;
mod docs_sql;
mod epochs;
mod errors;
mod events;
mod fenced_store;
mod filter;
mod foreign;
mod grant_replay;
mod guard;
mod introspection;
mod layers;
mod leases;
mod memory;
mod metrics;
mod panics;
mod pause;
mod persistence;
mod prometheus;
mod replication;
mod restore;
mod semaphore;
mod session;
mod sets;
mod shared;
mod upgrade;
mod waiting;
mod watch;

/// With `autotests = false`, a file under `tests/` that is not named above would never run.
#[test]
fn every_test_file_is_a_module_here() {
    let dir = redis_lock_harness::workspace().join("tests");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read tests/main.rs");
    for entry in std::fs::read_dir(&dir).expect("read tests/") {
        let path = entry.expect("entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let own_binary = ["main", "fuzz"].contains(&name) || path.is_dir();
        if path.extension().is_some_and(|e| e == "rs") && !own_binary {
            assert!(
                main.contains(&format!("\nmod {name};\n")),
                "tests/{name}.rs is not a module of tests/main.rs, so it never runs"
            );
        }
    }
}
