//! `toolhost new ID --lang rust|python|typescript [DIR]`: a working plugin
//! to start from. It writes a manifest declaring one tool (`hello`), that
//! tool's schema, the code on the language's SDK, a launcher in `bin/`, and
//! a README of five lines. `toolhost check DIR` accepts it as written, and
//! `toolhost serve --plugins DIR` serves it once built.
//!
//! Inside a toolhost checkout (DIR under a directory holding
//! `crates/toolhost-plugin-sdk`), the Rust and TypeScript templates depend
//! on the SDKs by path, so they build against the code beside them;
//! anywhere else they name the published packages by version
//! (`toolhost-plugin-sdk = "0.1"` on crates.io, `@toolhost/plugin@^0.1.0`
//! on npm). The Python template imports `toolhost_plugin` from whichever
//! Python its launcher finds (see the launcher).

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The SDK languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Typescript,
}

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin id: ^[a-z0-9][a-z0-9._-]{0,63}$ (also its directory name).
    id: String,
    /// The language of the code.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to write it (default: ./ID). Must not exist, or be empty.
    dir: Option<PathBuf>,
}

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": { "type": "string", "maxLength": 100, "description": "Who to greet." }
  }
}
"#;

fn manifest(id: &str) -> String {
    format!(
        r#"id = "{id}"
version = "0.1.0"
name = "{id}"
description = "A toolhost plugin."

[runtime]
command = "bin/{id}-plugin"
startup_timeout_ms = 15000
protocol = 2

[[tools]]
name = "hello"
title = "Say hello"
description = "Greets someone by name."
surfaces = ["chat", "kanban-task"]
timeout_ms = 5000
input_schema_file = "schemas/hello.json"
annotations = {{ read_only = true, idempotent = true, open_world = false }}
"#
    )
}

/// The toolhost checkout `dir` is in, if any: the directory holding
/// `crates/toolhost-plugin-sdk`.
fn checkout_of(dir: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(dir).ok()?;
    abs.ancestors()
        .find(|a| a.join("crates/toolhost-plugin-sdk/Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// `to` relative to `from` (both absolute), for path dependencies.
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out.display().to_string()
}

/// The files of a template, by path inside the plugin directory; the
/// boolean marks executables.
fn files(id: &str, lang: Lang, dir: &Path) -> Vec<(String, String, bool)> {
    let bin = format!("bin/{id}-plugin");
    let crate_name = format!("{}-plugin", id.replace(['.', '_'], "-"));
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let checkout = checkout_of(dir);
    let mut out = vec![
        ("plugin.toml".to_owned(), manifest(id), false),
        ("schemas/hello.json".to_owned(), SCHEMA.to_owned(), false),
    ];
    match lang {
        Lang::Rust => {
            let sdk = match &checkout {
                Some(root) => format!(
                    "{{ path = {:?} }}",
                    relative(&abs, &root.join("crates/toolhost-plugin-sdk"))
                ),
                None => "\"0.1\"".to_owned(),
            };
            out.push((
                "Cargo.toml".into(),
                format!(
                    "[package]\nname = \"{crate_name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
                     # A workspace of its own, wherever it is put.\n[workspace]\n\n[dependencies]\n\
                     # A path inside a toolhost checkout; elsewhere the crates.io release, \"0.1\".\n\
                     toolhost-plugin-sdk = {sdk}\n"
                ),
                false,
            ));
            out.push((
                "src/main.rs".into(),
                r#"use toolhost_plugin_sdk::{Plugin, ToolCall, ToolError, ToolOutput};

async fn hello(call: ToolCall) -> Result<ToolOutput, ToolError> {
    let name = call.arguments.get("name").and_then(|v| v.as_str()).unwrap_or("world");
    Ok(ToolOutput::text(format!("Hello, {name}!")))
}

fn main() -> std::process::ExitCode {
    Plugin::new().tool("hello", hello).run()
}
"#
                .into(),
                false,
            ));
            out.push((
                bin.clone(),
                format!(
                    "#!/bin/sh\n# Runs the build: release if there is one, else debug.\nhere=$(cd \"$(dirname \"$0\")/..\" && pwd)\n\
                     target=${{CARGO_TARGET_DIR:-$here/target}}\nexe=$target/release/{crate_name}\n\
                     [ -x \"$exe\" ] || exe=$target/debug/{crate_name}\n\
                     [ -x \"$exe\" ] || {{ echo \"not built: cargo build --release in $here\" >&2; exit 127; }}\nexec \"$exe\" \"$@\"\n"
                ),
                true,
            ));
            out.push((
                "README.md".into(),
                readme(id, "cargo build --release"),
                false,
            ));
            out.push((".gitignore".into(), "/target\n".into(), false));
        }
        Lang::Python => {
            out.push((
                "plugin.py".into(),
                r#"from toolhost_plugin import Plugin

plugin = Plugin()


@plugin.tool("hello")
async def hello(call):
    return f"Hello, {call.arguments.get('name', 'world')}!"


plugin.run()
"#
                .into(),
                false,
            ));
            out.push((
                bin.clone(),
                "#!/bin/sh\n# Runs plugin.py with $TOOLHOST_PYTHON, else ./.venv, else python3; that\n\
                 # Python needs the SDK: pip install toolhost-plugin.\n\
                 here=$(cd \"$(dirname \"$0\")/..\" && pwd)\npy=${TOOLHOST_PYTHON:-}\n\
                 [ -n \"$py\" ] || { [ -x \"$here/.venv/bin/python\" ] && py=\"$here/.venv/bin/python\"; }\n\
                 exec \"${py:-python3}\" \"$here/plugin.py\" \"$@\"\n"
                    .into(),
                true,
            ));
            out.push((
                "README.md".into(),
                readme(
                    id,
                    "python3 -m venv .venv && .venv/bin/pip install toolhost-plugin",
                ),
                false,
            ));
        }
        Lang::Typescript => {
            let sdk = match &checkout {
                Some(root) => format!("file:{}", relative(&abs, &root.join("sdk/typescript"))),
                None => "^0.1.0".to_owned(),
            };
            out.push((
                "plugin.ts".into(),
                r#"import { Plugin } from "@toolhost/plugin";

new Plugin()
  .tool("hello", (call) => `Hello, ${call.arguments.name ?? "world"}!`)
  .run();
"#
                .into(),
                false,
            ));
            out.push((
                "package.json".into(),
                format!(
                    "{{\n  \"name\": \"{crate_name}\",\n  \"version\": \"0.1.0\",\n  \"private\": true,\n  \"type\": \"module\",\n  \
                     \"scripts\": {{ \"build\": \"tsc -p tsconfig.json\" }},\n  \
                     \"dependencies\": {{ \"@toolhost/plugin\": \"{sdk}\" }},\n  \
                     \"devDependencies\": {{ \"@types/node\": \"^20.19.0\", \"typescript\": \"~5.9.3\" }}\n}}\n"
                ),
                false,
            ));
            out.push((
                "tsconfig.json".into(),
                "{\n  \"compilerOptions\": {\n    \"target\": \"ES2022\",\n    \"module\": \"NodeNext\",\n    \"moduleResolution\": \"NodeNext\",\n    \
                 \"outDir\": \"dist\",\n    \"strict\": true,\n    \"skipLibCheck\": true\n  },\n  \"files\": [\"plugin.ts\"]\n}\n"
                    .into(),
                false,
            ));
            out.push((
                bin.clone(),
                "#!/bin/sh\n# Runs the build (npm install && npm run build).\nhere=$(cd \"$(dirname \"$0\")/..\" && pwd)\n\
                 [ -f \"$here/dist/plugin.js\" ] || { echo \"not built: npm install && npm run build in $here\" >&2; exit 127; }\n\
                 exec node \"$here/dist/plugin.js\" \"$@\"\n"
                    .into(),
                true,
            ));
            out.push((
                "README.md".into(),
                readme(id, "npm install && npm run build"),
                false,
            ));
            out.push((".gitignore".into(), "node_modules/\ndist/\n".into(), false));
        }
    }
    out
}

fn readme(id: &str, build: &str) -> String {
    format!(
        "# {id}\n\nA toolhost plugin: `plugin.toml` declares its tools, the code implements them.\n\
         Build: `{build}`. Check: `toolhost check .`.\n\
         Serve: `toolhost serve --plugins .`; call: `toolhost call {} '{{\"name\": \"Ada\"}}'`.\n",
        toolhost_manifest::naming::exposed("kandev", id, "hello")
    )
}

pub fn run(args: &NewArgs) -> Result<ExitCode> {
    if !toolhost_manifest::manifest::is_valid_plugin_id(&args.id) {
        eprintln!(
            "toolhost new: {:?} is not a plugin id: 1 to 64 of a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit",
            args.id
        );
        return Ok(ExitCode::from(2));
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.id));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} exists and is not empty; pick a new directory",
            dir.display()
        );
    }
    for (path, text, executable) in files(&args.id, args.lang, &dir) {
        let file = dir.join(&path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
        if executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("cannot make {} executable", file.display()))?;
        }
    }
    outln!(
        "wrote {} ({:?}); see its README.md",
        dir.display(),
        args.lang
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_then_descend() {
        assert_eq!(
            relative(Path::new("/a/b/c"), Path::new("/a/x/y")),
            "../../x/y"
        );
        assert_eq!(relative(Path::new("/a"), Path::new("/a/b")), "b");
    }

    #[test]
    fn every_template_has_a_manifest_schema_code_launcher_and_readme() {
        for lang in [Lang::Rust, Lang::Python, Lang::Typescript] {
            let f = files("demo", lang, Path::new("/nowhere/demo"));
            let names: Vec<&str> = f.iter().map(|(p, _, _)| p.as_str()).collect();
            for want in [
                "plugin.toml",
                "schemas/hello.json",
                "bin/demo-plugin",
                "README.md",
            ] {
                assert!(names.contains(&want), "{lang:?}: {names:?}");
            }
            let readme = &f.iter().find(|(p, _, _)| p == "README.md").unwrap().1;
            assert_eq!(readme.lines().count(), 5, "{lang:?}: {readme}");
        }
        // Outside a checkout, the SDKs by version.
        let rust = files("demo", Lang::Rust, Path::new("/nowhere/demo"));
        assert!(
            rust.iter()
                .any(|(p, t, _)| p == "Cargo.toml" && t.contains("toolhost-plugin-sdk = \"0.1\""))
        );
    }
}
