//! Compiles `proto/` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `proto` links to the workspace's proto/ (the one source of the
    // contracts); a packaged crate holds a copy of it.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let files = [
        root.join("kandev/plugin/v1/plugin.proto"),
        root.join("toolhost/plugin/v2/plugin.proto"),
        root.join("toolhost/admin/v1/admin.proto"),
    ];
    let fds = protox::compile(&files, [&root])?;
    // The message shapes (no comments), for `strict.rs`: which fields a
    // message has, so a reader can refuse the ones it does not know.
    let mut shapes = fds.clone();
    for f in &mut shapes.file {
        f.source_code_info = None;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptors.bin"),
        prost::Message::encode_to_vec(&shapes),
    )?;
    tonic_prost_build::configure()
        // prost's codec with small first buffers (src/codec.rs).
        .codec_path("crate::codec::Codec")
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    Ok(())
}
