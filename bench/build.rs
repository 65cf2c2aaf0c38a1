//! Compiles the echo service the bench needs (the floor of a unary gRPC
//! call). etcd's v3 API comes from the etcd backend's crate.
//! protoc comes from `protoc-bin-vendored`: no system package needed.

use std::env;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let echo = "proto/echo.proto";
    println!("cargo:rerun-if-changed={echo}");
    if env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    tonic_prost_build::configure()
        .build_server(true)
        .compile_protos(&[echo], &["proto"])?;
    Ok(())
}
