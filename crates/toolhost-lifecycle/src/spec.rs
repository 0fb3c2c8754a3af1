//! From a manifest to what the runtime runs: the one place that knows both.

use std::path::Path;
use std::time::Duration;
use toolhost_manifest::Manifest;
use toolhost_runtime::PluginSpec;

/// The spec of an installed plugin, with its data under `data_root/<id>`.
/// Paths are made absolute: the process runs in the plugin directory, so a
/// relative command would otherwise be resolved twice.
#[must_use]
pub fn plugin_spec(m: &Manifest, data_root: &Path) -> PluginSpec {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    PluginSpec {
        id: m.id.clone(),
        version: m.version.to_string(),
        dir: absolute(&m.dir),
        command: absolute(&m.runtime.command),
        args: m.runtime.args.clone(),
        env: m.runtime.env.clone(),
        pass_env: Vec::new(),
        startup_timeout: Duration::from_millis(m.runtime.startup_timeout_ms),
        data_dir: absolute(&data_root.join(&m.id)),
        data_writable: true,
        disk_image: None,
        protocol: m.runtime.protocol,
        config: None,
        sandbox: toolhost_sandbox::SandboxPolicy::default(),
        tools: m.tools.iter().map(|t| t.name.clone()).collect(),
        audiences: Vec::new(),
    }
}
