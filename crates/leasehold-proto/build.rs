//! Generates the gRPC code and the file descriptor set (served by reflection)
//! from `proto/leasehold/v1/leasehold.proto` and `admin.proto`.
//!
//! protoc comes from the `protoc-bin-vendored` crate, so a fresh machine
//! needs no system package to build the server.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos = [
        root.join("leasehold/v1/leasehold.proto"),
        root.join("leasehold/v1/admin.proto"),
        root.join("leasehold/v1/chaos.proto"),
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    if env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing reads the
        // environment concurrently.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let out = PathBuf::from(env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("leasehold_descriptor.bin"))
        .compile_protos(&protos, &[root])?;
    Ok(())
}
