//! Generates the client for the part of etcd's v3 API that the etcd backend
//! speaks (`src/etcd.proto`): a client only, and no descriptor set
//! (reflection serves leasehold's own API alone). protoc is vendored.

use std::env;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let etcd = "src/etcd.proto";
    println!("cargo:rerun-if-changed={etcd}");
    if env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing reads the
        // environment concurrently.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&[etcd], &["src"])?;
    Ok(())
}
