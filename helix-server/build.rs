//! Generates the peer transport's gRPC code from proto/peer.proto with
//! protox (pure Rust): no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/peer.proto");
    let descriptors = protox::compile(["proto/peer.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Payloads stay `Bytes` end to end: slices, not copies.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
