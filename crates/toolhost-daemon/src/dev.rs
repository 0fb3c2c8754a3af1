//! `toolhost serve --dev DIR`: one plugin directory served for its
//! author, with no configuration file. The token is the directory's own
//! (made once, kept in the state directory, so a restarted `serve --dev`
//! keeps the client's token working) and printed with a call line that
//! works as printed; the plugin runs under the default sandbox, with one
//! allowance a development tree needs (the Python a `.venv` in it is built
//! on, see [`venv_base`]). Values the plugin needs come on the command
//! line (`--set NAME=VALUE`, `NAME=@FILE`), for the run only.
//!
//! While it serves, [`watch`] keeps up with the author: a change to the
//! code reloads the plugin, a change to the manifest or a schema reloads
//! its declarations, and a change that does not load (a manifest with a
//! problem, code that does not start) is said, with the plugin's own
//! stderr, while the last good version keeps serving.

use crate::config::BindingConfig;
use anyhow::{Context as _, Result, bail};
use std::collections::BTreeMap;
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
    /// Configuration values from the command line (`--set`), by item.
    pub values: BTreeMap<String, String>,
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
///
/// The file is the plugin's, and a plugin folder may be someone else's
/// code, just cloned: `home` is resolved first (symbolic links and `..`:
/// `/tmp/../bin` is `/bin`, whose parent is `/`), and only a Python
/// installation at a place of its own is granted: never `/`, the user's
/// home directory or any directory holding it, the plugin's directory or
/// any directory holding it.
#[must_use]
pub fn venv_base(dir: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(dir.join(".venv/pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    if !home.is_absolute() {
        return None;
    }
    let home = std::fs::canonicalize(&home).ok()?;
    let base = if home.ends_with("bin") {
        home.parent()?.to_path_buf()
    } else {
        home
    };
    let is_installation = std::fs::read_dir(base.join("bin")).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("python3"))
    }) && std::fs::read_dir(base.join("lib")).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            e.file_name().to_string_lossy().starts_with("python3")
                && e.path().join("os.py").is_file()
        })
    });
    (is_installation && may_grant(&base, dir)).then_some(base)
}

/// Whether `base` (resolved) may be granted read for the plugin in `dir`:
/// not the root, and holding neither the user's home directory nor the
/// plugin's (a grant of a parent is a grant of everything in it).
fn may_grant(base: &Path, dir: &Path) -> bool {
    if base.parent().is_none() {
        return false;
    }
    let resolved = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let home = std::env::var_os("HOME").map(|h| resolved(Path::new(&h)));
    let plugin = resolved(dir);
    let holds = |inner: &Path| inner.starts_with(base);
    !plugin.as_path().ancestors().any(|a| a == base)
        && !holds(&plugin)
        && !home.as_deref().is_some_and(holds)
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
            // A call that works as printed: a read-only tool with nothing
            // required first, and arguments for what is required.
            let on_surface = m.tools.iter().filter(|t| t.surfaces.contains(&surface));
            let t = on_surface.min_by_key(|t| {
                (
                    t.annotations.destructive,
                    !t.annotations.read_only,
                    required_count(&t.input_schema),
                )
            })?;
            Some(format!(
                "{} '{}'",
                toolhost_manifest::naming::exposed(prefix, &m.id, &t.name),
                sample_arguments(&t.input_schema)
            ))
        });
        Ok(Self {
            dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
            id: manifest.as_ref().map(|m| m.id.clone()),
            venv_base: venv_base(dir),
            // Made for the run here; `settings` puts the directory's own
            // in its place once the state directory is known.
            token: toolhost_base::ids::unguessable_id().context("no randomness for a token")?,
            surface,
            example_tool,
            values: BTreeMap::new(),
        })
    }

    /// The values `--set` gives, each an item the manifest declares.
    pub fn with_values(mut self, values: BTreeMap<String, String>) -> Result<Self> {
        if !values.is_empty() {
            let declared: Vec<String> = toolhost_manifest::Manifest::load(&self.dir)
                .map(|m| m.config.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            for name in values.keys() {
                if !declared.contains(name) {
                    bail!(
                        "--set {name}: plugin.toml declares no [[config]] item {name:?}{}",
                        if declared.is_empty() {
                            String::new()
                        } else {
                            format!(" (it declares {})", declared.join(", "))
                        }
                    );
                }
            }
        }
        self.values = values;
        Ok(self)
    }

    /// What a developer needs to call the plugin `serve --dev` serves, on
    /// stderr (stdout stays free): the token, and a call line that works as
    /// printed.
    pub fn banner(&self, local: std::net::SocketAddr, admin: &std::path::Path, state_dir: &Path) {
        use std::fmt::Write as _;
        let url = format!("http://{local}/mcp");
        let default_url = local.ip().is_loopback() && local.port() == 7010;
        // One write for the whole banner: a log line from the plugin or
        // from tracing never lands in the middle of it, and whoever reads
        // stderr sees all of it or none.
        let mut text = format!(
            "toolhost: serving {} for development; the token below is bound to surface {:?}\n",
            self.dir.display(),
            self.surface
        );
        if let Some(base) = &self.venv_base {
            let _ = writeln!(
                text,
                "  (for this run the plugin may also read {}, the Python its .venv is built on; an installed plugin may not: `toolhost pack` vendors for the system Python)",
                base.display()
            );
        }
        let _ = writeln!(text, "  export TOOLHOST_TOKEN={}", self.token);
        if !default_url {
            let _ = writeln!(text, "  export TOOLHOST_URL={url}");
        }
        if let Some(tool) = &self.example_tool {
            let _ = writeln!(text, "  toolhost call {tool}");
        }
        let _ = writeln!(
            text,
            "  MCP clients: {url} with `Authorization: Bearer <the token>`; the plugin's state: toolhost status --admin {}",
            admin.display()
        );
        if let Some(id) = &self.id {
            let _ = writeln!(
                text,
                "  the plugin's data directory: {}",
                state_dir.join("data").join(id).display()
            );
        }
        text.push_str(
            "  a change to its code or plugin.toml reloads it; the token stays the same across runs in this directory",
        );
        errln!("{text}");
    }

    /// The directory's own token: read from `state_dir`, or made and kept
    /// there (private) on the first run.
    pub fn keep_token(&mut self, state_dir: &Path) -> Result<()> {
        use sha2::Digest as _;
        let key = sha2::Sha256::digest(self.dir.as_os_str().as_encoded_bytes());
        let hex: String = key[..12].iter().map(|b| format!("{b:02x}")).collect();
        let tokens = state_dir.join("dev-tokens");
        let file = tokens.join(hex);
        if let Ok(token) = std::fs::read_to_string(&file)
            && token.trim().len() == 32
            && token.trim().bytes().all(|b| b.is_ascii_hexdigit())
        {
            self.token = token.trim().to_owned();
            return Ok(());
        }
        toolhost_base::files::private_dir(state_dir)
            .and_then(|()| toolhost_base::files::private_dir(&tokens))
            .and_then(|()| toolhost_base::files::write_private(&file, self.token.as_bytes()))
            .with_context(|| format!("cannot keep the development token in {}", file.display()))
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

/// One `--set NAME=VALUE` (or `NAME=@FILE`, the value read from a file, its
/// one trailing newline dropped): a configuration value given on the
/// command line.
pub fn parse_set(arg: &str) -> Result<(String, String)> {
    let Some((name, value)) = arg.split_once('=') else {
        bail!("--set takes NAME=VALUE or NAME=@FILE, not {arg:?}");
    };
    if name.is_empty() {
        bail!("--set {arg:?}: the item's name is empty");
    }
    let value = match value.strip_prefix('@') {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--set {name}=@{file}: cannot read {file}"))?;
            text.strip_suffix('\n').unwrap_or(&text).to_owned()
        }
        None => value.to_owned(),
    };
    Ok((name.to_owned(), value))
}

/// Every `--set`, by name; a name given twice is refused.
pub fn parse_sets(args: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for a in args {
        let (name, value) = parse_set(a)?;
        if out.insert(name.clone(), value).is_some() {
            bail!("--set gives {name} twice");
        }
    }
    Ok(out)
}

/// How many properties a schema requires.
fn required_count(schema: &serde_json::Value) -> usize {
    schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len)
}

/// Arguments that satisfy `schema`'s required properties, for the dev
/// banner's sample call: each property's first enum value, default or
/// minimum, else a value of its type.
fn sample_arguments(schema: &serde_json::Value) -> String {
    let mut args = serde_json::Map::new();
    let required = schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    for name in required.iter().filter_map(serde_json::Value::as_str) {
        let p = schema
            .pointer(&format!("/properties/{name}"))
            .cloned()
            .unwrap_or_default();
        let value = p
            .get("enum")
            .and_then(|e| e.get(0).cloned())
            .or_else(|| p.get("default").cloned())
            .or_else(|| p.get("minimum").cloned())
            .unwrap_or_else(|| match p.get("type").and_then(serde_json::Value::as_str) {
                Some("integer" | "number") => serde_json::json!(1),
                Some("boolean") => serde_json::json!(false),
                Some("array") => serde_json::json!([]),
                Some("object") => serde_json::json!({}),
                _ => serde_json::json!("example"),
            });
        args.insert(name.to_owned(), value);
    }
    // Shown in single quotes on a shell line: a quote inside is escaped.
    serde_json::Value::Object(args)
        .to_string()
        .replace('\'', "'\\''")
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_banners_sample_call_fills_what_is_required() {
        let schema = serde_json::json!({
            "type": "object",
            "required": ["id", "confirm", "kind", "it's"],
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "confirm": {"type": "boolean"},
                "kind": {"enum": ["bug", "idea"]},
                "it's": {"type": "string"},
                "note": {"type": "string"}
            }
        });
        assert_eq!(required_count(&schema), 4);
        assert_eq!(
            sample_arguments(&schema),
            r#"{"confirm":false,"id":1,"it'\''s":"example","kind":"bug"}"#
        );
        assert_eq!(
            sample_arguments(&serde_json::json!({"type": "object"})),
            "{}"
        );
    }

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
            "/",
            "relative/bin",
            &home_dir.0.join("bin").display().to_string(),
        ] {
            assert_eq!(venv_base(&venv(home).0), None, "{home}");
        }
    }

    /// What a grant may never be: the root, or a directory holding the
    /// user's home directory.
    fn harmless(got: Option<&Path>) -> bool {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        got.is_none_or(|p| {
            p.parent().is_some()
                && !home
                    .as_deref()
                    .and_then(|h| std::fs::canonicalize(h).ok())
                    .is_some_and(|h| h.starts_with(p))
        })
    }

    /// A hostile plugin folder's `pyvenv.cfg` points `home` at a path
    /// whose text is not `/` but which resolves to it, or through a link:
    /// resolved first, it is refused.
    #[test]
    fn a_home_that_resolves_to_the_root_or_a_parent_of_home_is_not_granted() {
        // Resolved, these are the system's Python (already readable by
        // every plugin) or nothing: never the root `/tmp/..` spells.
        for home in [
            "/tmp/../bin",
            "/usr/../bin",
            "/tmp/../usr/../bin",
            "//bin",
            "/bin",
        ] {
            let got = venv_base(&venv(home).0);
            assert!(harmless(got.as_deref()), "{home}: {got:?}");
            assert_ne!(got.as_deref(), Some(Path::new("/")), "{home}");
        }
        // A link to the root, inside the plugin.
        let plugin = venv("/placeholder");
        std::os::unix::fs::symlink("/", plugin.0.join("root")).unwrap();
        std::fs::write(
            plugin.0.join(".venv/pyvenv.cfg"),
            format!("home = {}/root/bin\n", plugin.0.display()),
        )
        .unwrap();
        let got = venv_base(&plugin.0);
        assert!(
            harmless(got.as_deref()) && got.as_deref() != Some(Path::new("/")),
            "{got:?}"
        );
        // A Python installation that holds the plugin's folder: never.
        let install = Scratch::new().unwrap();
        std::fs::create_dir_all(install.0.join("bin")).unwrap();
        std::fs::write(install.0.join("bin/python3"), "").unwrap();
        std::fs::create_dir_all(install.0.join("lib/python3.11")).unwrap();
        std::fs::write(install.0.join("lib/python3.11/os.py"), "").unwrap();
        let inner = install.0.join("work/plugin");
        std::fs::create_dir_all(inner.join(".venv")).unwrap();
        std::fs::write(
            inner.join(".venv/pyvenv.cfg"),
            format!("home = {}/bin\n", install.0.display()),
        )
        .unwrap();
        assert_eq!(venv_base(&inner), None);
    }
}
