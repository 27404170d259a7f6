//! The control plane's client, compiled from the control plane's own proto with protox (no
//! protoc needed). The proxy does not depend on the control crate; they share this file only.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../control/proto/control.proto");
    let fds = protox::compile(["control.proto"], ["../control/proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
