//! Compiles the two small protos the bench needs: an echo service (the
//! floor of a unary gRPC call) and the part of etcd's v3 API it uses.
//! protoc comes from `protoc-bin-vendored`: no system package needed.

use std::env;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for p in ["proto/echo.proto", "proto/etcd.proto"] {
        println!("cargo:rerun-if-changed={p}");
    }
    if env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    tonic_prost_build::configure()
        .build_server(true)
        .compile_protos(&["proto/echo.proto", "proto/etcd.proto"], &["proto"])?;
    Ok(())
}
