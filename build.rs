//! Generates include/mxrt.h with cbindgen and sets the shared library's SONAME.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("major");
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").expect("minor");
    let patch = std::env::var("CARGO_PKG_VERSION_PATCH").expect("patch");

    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=build.rs");
    // The ABI version is the major version (0 while the crate is 0.x).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmxrt.so.{major}");
    println!(
        "cargo:rustc-env=MXRT_INCLUDE_DIR={}",
        dir.join("include").display()
    );

    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = config.after_includes.map(|s| {
        s.replace("@MAJOR@", &major)
            .replace("@MINOR@", &minor)
            .replace("@PATCH@", &patch)
            .replace("@VERSION@", &version)
    });
    let bindings = match cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
    {
        Ok(b) => b,
        Err(e) => {
            // A parse error in src/ is reported by rustc with a better message; don't mask it.
            println!("cargo:warning=cbindgen could not generate include/mxrt.h: {e}");
            return;
        }
    };
    let mut out = Vec::new();
    bindings.write(&mut out);
    let header = dir.join("include/mxrt.h");
    // Only write when the content changes, so the header's mtime (and make) stay quiet.
    if std::fs::read(&header).ok().as_deref() != Some(&out[..]) {
        std::fs::create_dir_all(header.parent().expect("parent")).expect("mkdir include");
        std::fs::write(&header, &out).expect("write include/mxrt.h");
    }
}
