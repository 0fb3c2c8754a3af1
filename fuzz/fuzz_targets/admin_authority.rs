//! The admin socket's HTTP/2 relay, which rewrites a client's `:authority`
//! before tonic sees it: any bytes a local process sends end the relay
//! (an error or a clean close), never a panic or a hang, and what reaches
//! the server is bounded: what was sent, plus at most one header list
//! (re-encoded as literals, so up to the list limit) per header block.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let input = data.to_vec();
    runtime().block_on(async move {
        let (mut agent, relay_client) = tokio::io::duplex(1 << 16);
        let (relay_server, mut server) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(toolhost_admin::relay_authority(relay_client, relay_server));
        let sent = input.len();
        let writer = tokio::spawn(async move {
            let _ = agent.write_all(&input).await;
            let _ = agent.shutdown().await;
            // Keep our end open until the relay is done with it.
            let mut sink = Vec::new();
            let _ = agent.read_to_end(&mut sink).await;
        });
        let mut seen = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), server.read_to_end(&mut seen));
        let _ = read.await;
        drop(server);
        let finished = tokio::time::timeout(Duration::from_secs(5), relay).await;
        assert!(finished.is_ok(), "the relay must end once both sides have");
        writer.abort();
        // Every block starts with a 9-byte frame head, and none decodes to
        // more than the header list limit; literals cost less than the 32
        // bytes per header the limit counts.
        let blocks = sent / 9 + 1;
        let bound = sent + blocks * (toolhost_admin::MAX_HEADER_LIST + 1024);
        assert!(seen.len() <= bound, "{} bytes out of {sent}", seen.len());
    });
});
