//! Builds the moving-clock shim (`movingclock.c`) for `clock::moving_clock_env`; where no C compiler
//! runs, `MOVINGCLOCK_LIB` is empty and the tests that need it say they skipped.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=movingclock.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libmovingclock.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = Command::new(cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg("movingclock.c")
        .status()
        .is_ok_and(|status| status.success());
    let lib = if built {
        out.display().to_string()
    } else {
        println!("cargo:warning=no C compiler built movingclock.c: the moving-clock tests skip");
        String::new()
    };
    println!("cargo:rustc-env=MOVINGCLOCK_LIB={lib}");
}
