//! Sets the shared library's SONAME when packaging asks for one (scripts/package sets
//! `RATEKEEPER_SONAME`, e.g. `libratekeeper.so.0.1`). In-tree builds have none, so tests link
//! against `target/<profile>/libratekeeper.so` and load it under that name.
fn main() {
    println!("cargo:rerun-if-env-changed=RATEKEEPER_SONAME");
    if let Ok(soname) = std::env::var("RATEKEEPER_SONAME") {
        if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") && !soname.is_empty() {
            println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
        }
    }
}
