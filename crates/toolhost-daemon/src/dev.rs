//! `toolhost serve --dev DIR`: one plugin directory served for its
//! author, with no configuration file. The token is made for the run and
//! printed with a call line that works as printed; the plugin runs under
//! the default sandbox, with one allowance a development tree needs (the
//! Python a `.venv` in it is built on, see [`venv_base`]).

use crate::config::BindingConfig;
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};
use toolhost_base::errln;

/// `serve --dev`: the token made for this run and what it is bound to.
#[derive(Debug, Clone)]
pub struct DevSession {
    /// The plugin directory served.
    pub dir: PathBuf,
    /// The plugin's id, when its manifest reads.
    pub id: Option<String>,
    /// The bearer token made for this run.
    pub token: String,
    /// The surface it is bound to.
    pub surface: String,
    /// A tool the plugin declares on that surface, for the call line.
    pub example_tool: Option<String>,
    /// The Python installation a `.venv` in the plugin directory is built
    /// on, granted read for this run (see [`venv_base`]).
    pub venv_base: Option<PathBuf>,
}

/// The Python installation the virtual environment `dir/.venv` is built
/// on (the parent of `home` in its `pyvenv.cfg`), when there is one.
///
/// A venv's interpreter is a link to that installation, often outside the
/// system paths (pyenv, a Python built into the home directory), which the
/// sandbox does not let a plugin run. `serve --dev` and `check --start`
/// grant it read for their run, so the README's development loop works
/// with the default sandbox everywhere; an installed plugin gets no such
/// grant, and `toolhost pack` vendors its dependencies for the system
/// interpreter instead.
#[must_use]
pub fn venv_base(dir: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(dir.join(".venv/pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    let base = if home.ends_with("bin") {
        home.parent()?.to_path_buf()
    } else {
        home
    };
    // The file is the plugin's, and a plugin may be someone else's code:
    // only a directory that is a Python installation (an interpreter in
    // bin/, the standard library in lib/) is granted, never the root, a
    // home directory or anything else `home` could be pointed at.
    let is_installation = base.is_absolute()
        && base.parent().is_some()
        && std::fs::read_dir(base.join("bin")).is_ok_and(|entries| {
            entries
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with("python3"))
        })
        && std::fs::read_dir(base.join("lib")).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_name().to_string_lossy().starts_with("python3")
                    && e.path().join("os.py").is_file()
            })
        });
    is_installation.then_some(base)
}

impl DevSession {
    /// The token's binding: surface from the flag, else the plugin's first
    /// declared surface.
    pub fn new(dir: &Path, prefix: &str, surface_flag: Option<&str>) -> Result<Self> {
        let manifest = toolhost_manifest::Manifest::load(dir).ok();
        let declared = manifest.as_ref().and_then(|m| {
            m.tools
                .iter()
                .flat_map(|t| t.surfaces.first())
                .next()
                .cloned()
        });
        let surface = surface_flag
            .map(str::to_owned)
            .or(declared)
            .unwrap_or_else(|| "chat".to_owned());
        let example_tool = manifest.as_ref().and_then(|m| {
            m.tools
                .iter()
                .find(|t| t.surfaces.contains(&surface))
                .map(|t| toolhost_manifest::naming::exposed(prefix, &m.id, &t.name))
        });
        Ok(Self {
            dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
            id: manifest.as_ref().map(|m| m.id.clone()),
            venv_base: venv_base(dir),
            token: toolhost_base::ids::unguessable_id().context("no randomness for a token")?,
            surface,
            example_tool,
        })
    }

    /// What a developer needs to call the plugin `serve --dev` serves, on
    /// stderr (stdout stays free): the token, and a call line that works as
    /// printed.
    pub fn banner(&self, local: std::net::SocketAddr, admin: &std::path::Path) {
        let url = format!("http://{local}/mcp");
        let default_url = local.ip().is_loopback() && local.port() == 7010;
        errln!(
            "toolhost: serving {} for development; the token below is bound to surface {:?}",
            self.dir.display(),
            self.surface
        );
        if let Some(base) = &self.venv_base {
            errln!(
                "  (for this run the plugin may also read {}, the Python its .venv is built on; an installed plugin may not: `toolhost pack` vendors for the system Python)",
                base.display()
            );
        }
        errln!("  export TOOLHOST_TOKEN={}", self.token);
        if !default_url {
            errln!("  export TOOLHOST_URL={url}");
        }
        if let Some(tool) = &self.example_tool {
            errln!("  toolhost call {tool} '{{}}'");
        }
        errln!(
            "  MCP clients: {url} with `Authorization: Bearer <the token>`; the plugin's state: toolhost status --admin {}",
            admin.display()
        );
    }

    /// The binding of the token: one task and session for the whole run.
    pub fn binding(&self) -> BindingConfig {
        BindingConfig {
            surface: self.surface.clone(),
            task_id: "dev-task".to_owned(),
            session_id: "dev-session".to_owned(),
            workspace_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory removed when the test ends.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> std::io::Result<Self> {
            let id = toolhost_base::ids::unguessable_id()?;
            let dir = std::env::temp_dir().join(format!("toolhost-dev-test-{id}"));
            std::fs::create_dir_all(&dir)?;
            Ok(Self(dir))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn venv(home: &str) -> Scratch {
        let d = Scratch::new().unwrap();
        std::fs::create_dir_all(d.0.join(".venv")).unwrap();
        std::fs::write(
            d.0.join(".venv/pyvenv.cfg"),
            format!("home = {home}\nversion = 3.11.7\n"),
        )
        .unwrap();
        d
    }

    #[test]
    fn only_a_python_installation_is_granted() {
        // A Python installation, as pyenv lays one out.
        let install = Scratch::new().unwrap();
        std::fs::create_dir_all(install.0.join("bin")).unwrap();
        std::fs::write(install.0.join("bin/python3.11"), "").unwrap();
        std::fs::create_dir_all(install.0.join("lib/python3.11")).unwrap();
        std::fs::write(install.0.join("lib/python3.11/os.py"), "").unwrap();
        let plugin = venv(&install.0.join("bin").display().to_string());
        assert_eq!(venv_base(&plugin.0), Some(install.0.clone()));
        // Anything else `home` names is not: the root, a home directory
        // with a bin/ but no standard library, a relative path.
        let home_dir = Scratch::new().unwrap();
        std::fs::create_dir_all(home_dir.0.join("bin")).unwrap();
        std::fs::write(home_dir.0.join("bin/python3"), "").unwrap();
        for home in [
            "/bin",
            "/",
            "relative/bin",
            &home_dir.0.join("bin").display().to_string(),
        ] {
            assert_eq!(venv_base(&venv(home).0), None, "{home}");
        }
    }
}
