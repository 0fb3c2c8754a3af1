//! MCP messages into the server: arbitrary bytes on the stdio transport of
//! a real `Handler` over an empty catalog. No panic; the server answers or
//! closes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rmcp::ServiceExt as _;
use std::sync::Arc;
use tokio::io::AsyncWriteExt as _;
use toolhost_catalog::Store;
use toolhost_mcp::{Handler, Hub, Identity};
use toolhost_pipeline::{Binding, Limits, Pipeline};
use toolhost_runtime::Plugins;

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    rt.block_on(async {
        let hub = Hub::new(Arc::new(Pipeline::new(Arc::new(Store::new("kandev")), Arc::new(Plugins::new()), Limits::default())));
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let handler = Handler::new(hub, Identity::Fixed(Binding::new("chat", "t", "s", None)));
        let serving = tokio::spawn(async move {
            if let Ok(running) = handler.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        let _ = client.write_all(data).await;
        let _ = client.write_all(b"\n").await;
        drop(client);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), serving).await;
    });
});
