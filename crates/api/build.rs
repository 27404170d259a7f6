//! Compiles `proto/control.proto` with protox (a pure-Rust protobuf compiler), so building
//! hopwise needs no `protoc` on the machine. Compiled once, here: the proxy (client) and the
//! control plane (server, and the command line's client) both use these types.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/control.proto");
    let fds = protox::compile(["proto/control.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // Labels as the model holds them (`Labels`, key order): equal sets compare equal.
        .btree_map(".")
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
