//! `toolhost new ID --lang rust|python|typescript [DIR]`: a working plugin
//! to start from. It writes a manifest declaring one tool (`hello`), that
//! tool's schema, the code on the language's SDK, a launcher in `bin/`, and
//! a README whose every command works as written: build, `toolhost check`,
//! `toolhost serve --dev`, `toolhost call`, `toolhost pack` and
//! `toolhost plugins install`.
//!
//! The project depends on the SDK by its published name and version
//! (`toolhost-plugin-sdk` on crates.io, `toolhost-plugin` on PyPI,
//! `@toolhost/plugin` on npm). With `--sdk DIR` (or `TOOLHOST_SDK_DIR`) it
//! builds from local artifacts instead, as `scripts/package-sdks DIR` makes
//! them in a toolhost checkout: offline, or before a release. The project
//! still names the published packages; the local artifacts stand in for
//! them (`[patch.crates-io]`, a pip direct reference to the wheel, an npm
//! `file:` tarball), so dropping the flag later changes one place.
//!
//! The launcher in `bin/` runs the plugin both as a development tree and
//! as `toolhost pack` lays it out (a release binary in `dist/`, Python
//! dependencies in `vendor/`, production `node_modules/`).

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use toolhost_base::{errln, outln};

/// The SDK languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// On `toolhost-plugin-sdk`.
    Rust,
    /// On `toolhost-plugin` (PyPI).
    Python,
    /// On `@toolhost/plugin` (npm).
    Typescript,
}

/// The flags of `toolhost new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin id: ^[a-z0-9][a-z0-9._-]{0,63}$ (also its directory name).
    id: String,
    /// The language of the code.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to write it (default: ./ID). Must not exist, or be empty.
    dir: Option<PathBuf>,
    /// Build from local SDK artifacts in this directory (as
    /// `scripts/package-sdks DIR` makes them) instead of the registries.
    #[arg(long, value_name = "DIR", env = "TOOLHOST_SDK_DIR")]
    sdk: Option<PathBuf>,
}

/// The schema of `hello`'s arguments, as `toolhost schema sync` writes what
/// each template's code states (the three state the same).
const SCHEMA: &str = r#"{
  "additionalProperties": false,
  "properties": {
    "name": {
      "default": "world",
      "description": "Who to greet.",
      "type": "string"
    }
  },
  "type": "object"
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

/// The SDKs' version: they are released with toolhost, under its version.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the SDK comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sdk {
    /// The registries, by name and version.
    Published,
    /// Local artifacts, as `scripts/package-sdks` lays them out:
    /// `rust/<crate>-<version>/` (unpacked crates), the Python wheel and
    /// sdist, and the npm tarball, all in one (absolute) directory.
    Local(PathBuf),
}

impl Sdk {
    /// Checks that `dir` holds the artifact `lang` needs, and makes it
    /// absolute (the project may be built from anywhere).
    fn local(dir: &Path, lang: Lang) -> Result<Self> {
        let dir = std::path::absolute(dir)
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let want: Vec<PathBuf> = match lang {
            Lang::Rust => vec![
                dir.join(format!("rust/toolhost-plugin-sdk-{SDK_VERSION}/Cargo.toml")),
                dir.join(format!("rust/toolhost-proto-{SDK_VERSION}/Cargo.toml")),
            ],
            Lang::Python => {
                vec![dir.join(format!("toolhost_plugin-{SDK_VERSION}-py3-none-any.whl"))]
            }
            Lang::Typescript => vec![dir.join(format!("toolhost-plugin-{SDK_VERSION}.tgz"))],
        };
        if let Some(missing) = want.iter().find(|p| !p.is_file()) {
            bail!(
                "--sdk {}: no {} there. Make the artifacts with `scripts/package-sdks {}` in a toolhost checkout",
                dir.display(),
                missing.strip_prefix(&dir).unwrap_or(missing).display(),
                dir.display()
            );
        }
        Ok(Self::Local(dir))
    }
}

/// The files of a template, by path inside the plugin directory; the
/// boolean marks executables.
fn files(id: &str, lang: Lang, sdk: &Sdk) -> Vec<(String, String, bool)> {
    let bin = format!("bin/{id}-plugin");
    let crate_name = format!("{}-plugin", id.replace(['.', '_'], "-"));
    let mut out = vec![
        ("plugin.toml".to_owned(), manifest(id), false),
        ("schemas/hello.json".to_owned(), SCHEMA.to_owned(), false),
    ];
    match lang {
        Lang::Rust => {
            let patch = match sdk {
                Sdk::Published => String::new(),
                Sdk::Local(dir) => {
                    let at = |name: &str| {
                        format!(
                            "{name} = {{ path = {:?} }}\n",
                            dir.join(format!("rust/{name}-{SDK_VERSION}"))
                                .display()
                                .to_string()
                        )
                    };
                    format!(
                        "\n# Local SDK artifacts standing in for the crates.io release.\n[patch.crates-io]\n{}{}",
                        at("toolhost-plugin-sdk"),
                        at("toolhost-proto")
                    )
                }
            };
            out.push((
                "Cargo.toml".into(),
                format!(
                    "[package]\nname = \"{crate_name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
                     # A workspace of its own, wherever it is put.\n[workspace]\n\n[dependencies]\n\
                     schemars = \"1\"\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\
                     toolhost-plugin-sdk = \"{SDK_VERSION}\"\n\n\
                     [dev-dependencies]\nserde_json = \"1\"\n\
                     tokio = {{ version = \"1\", features = [\"macros\", \"rt-multi-thread\"] }}\n\
                     toolhost-plugin-sdk = {{ version = \"{SDK_VERSION}\", features = [\"testing\"] }}\n{patch}"
                ),
                false,
            ));
            out.push((
                "src/main.rs".into(),
                r#"use toolhost_plugin_sdk::prelude::*;

// The tool's arguments: `toolhost schema sync .` writes their JSON Schema
// into plugin.toml's schema file, and `toolhost check --start .` fails when
// the two drift apart.
/// Greets someone by name.
#[derive(Deserialize, JsonSchema)]
struct Hello {
    /// Who to greet.
    #[serde(default = "world")]
    name: String,
}

fn world() -> String {
    "world".into()
}

async fn hello(args: Hello, _call: ToolCall) -> Result<String, ToolError> {
    Ok(format!("Hello, {}!", args.name))
}

fn plugin() -> Plugin {
    Plugin::new().typed("hello", hello)
}

fn main() -> std::process::ExitCode {
    plugin().run()
}

/// The tool through toolhost's own rules, with no daemon (toolhost on PATH).
#[cfg(test)]
mod tests {
    use toolhost_plugin_sdk::testing::Harness;

    #[tokio::test]
    async fn hello() {
        let mut h = Harness::start(&super::plugin(), env!("CARGO_MANIFEST_DIR"), &[]).await.unwrap();
        let ada = h.call("hello", serde_json::json!({"name": "Ada"})).await.unwrap();
        assert_eq!(ada.text(), "Hello, Ada!");
        let wrong = h.call("hello", serde_json::json!({"nme": "Ada"})).await.unwrap();
        assert_eq!(wrong.error_code(), Some("invalid_arguments"), "{}", wrong.text());
        h.close().await;
    }
}
"#
                .into(),
                false,
            ));
            out.push((
                bin.clone(),
                format!(
                    "#!/bin/sh\n# Runs the packed binary (dist/), else the release build, else the debug one.\n\
                     here=$(cd \"$(dirname \"$0\")/..\" && pwd)\n\
                     target=${{CARGO_TARGET_DIR:-$here/target}}\nexe=$here/dist/{crate_name}\n\
                     [ -x \"$exe\" ] || exe=$target/release/{crate_name}\n\
                     [ -x \"$exe\" ] || exe=$target/debug/{crate_name}\n\
                     [ -x \"$exe\" ] || {{ echo \"not built: cargo build --release in $here\" >&2; exit 127; }}\nexec \"$exe\" \"$@\"\n"
                ),
                true,
            ));
            out.push((
                "README.md".into(),
                readme(id, "cargo build --release", Some("cargo test --release")),
                false,
            ));
            out.push((
                ".gitignore".into(),
                "/target\n/dist\n*.tar.gz\n".into(),
                false,
            ));
        }
        Lang::Python => {
            out.push((
                "plugin.py".into(),
                r#"from typing import Annotated

from toolhost_plugin import Plugin

plugin = Plugin()


# The parameters are the tool's arguments: `toolhost schema sync .` writes
# their JSON Schema into plugin.toml's schema file, and `toolhost check
# --start .` fails when the two drift apart.
@plugin.tool
def hello(name: Annotated[str, "Who to greet."] = "world") -> str:
    """Greets someone by name."""
    return f"Hello, {name}!"


if __name__ == "__main__":
    plugin.run()
"#
                .into(),
                false,
            ));
            // Local artifacts by direct reference: an index could offer
            // another package of the same name and a higher version.
            let requirement = match sdk {
                Sdk::Published => format!("toolhost-plugin~={SDK_VERSION}\n"),
                Sdk::Local(dir) => format!(
                    "# A local SDK artifact standing in for the PyPI release.\ntoolhost-plugin @ file://{}\n",
                    dir.join(format!("toolhost_plugin-{SDK_VERSION}-py3-none-any.whl"))
                        .display()
                ),
            };
            out.push(("requirements.txt".into(), requirement, false));
            out.push((
                "test_plugin.py".into(),
                r#"# The tool through toolhost's own rules, with no daemon (toolhost on PATH).
from plugin import plugin
from toolhost_plugin.testing import Harness


def test_hello():
    with Harness(plugin) as h:
        assert h.call("hello", {"name": "Ada"}).text == "Hello, Ada!"
        wrong = h.call("hello", {"nme": "Ada"})
        assert wrong.error_code == "invalid_arguments", wrong.text
"#
                .into(),
                false,
            ));
            out.push((
                bin.clone(),
                "#!/bin/sh\n# Packed (toolhost pack): the system Python, with the dependencies in vendor/.\n\
                 # In development: $TOOLHOST_PYTHON, else ./.venv, else python3.\n\
                 here=$(cd \"$(dirname \"$0\")/..\" && pwd)\n\
                 if [ -d \"$here/vendor\" ]; then\n  \
                 for py in /usr/bin/python3 /usr/local/bin/python3 python3; do command -v \"$py\" >/dev/null && break; done\n  \
                 PYTHONPATH=\"$here/vendor\" PYTHONDONTWRITEBYTECODE=1 exec \"$py\" \"$here/plugin.py\" \"$@\"\nfi\n\
                 py=${TOOLHOST_PYTHON:-}\n\
                 [ -n \"$py\" ] || { [ -x \"$here/.venv/bin/python\" ] && py=\"$here/.venv/bin/python\"; }\n\
                 exec \"${py:-python3}\" \"$here/plugin.py\" \"$@\"\n"
                    .into(),
                true,
            ));
            out.push((
                "README.md".into(),
                readme(
                    id,
                    "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt",
                    Some(".venv/bin/pip install pytest && .venv/bin/python -m pytest -q"),
                ),
                false,
            ));
            out.push((
                ".gitignore".into(),
                "/.venv\n/vendor\n__pycache__/\n*.tar.gz\n".into(),
                false,
            ));
        }
        Lang::Typescript => {
            let sdk = match sdk {
                Sdk::Published => format!("^{SDK_VERSION}"),
                Sdk::Local(dir) => format!(
                    "file:{}",
                    dir.join(format!("toolhost-plugin-{SDK_VERSION}.tgz"))
                        .display()
                ),
            };
            out.push((
                "plugin.ts".into(),
                r#"import { Plugin } from "@toolhost/plugin";
import { z } from "zod";

// The zod type is the tool's arguments: `toolhost schema sync .` writes its
// JSON Schema into plugin.toml's schema file, and `toolhost check --start .`
// fails when the two drift apart.
export const plugin = new Plugin().tool(
  "hello",
  { description: "Greets someone by name.", input: z.object({ name: z.string().default("world").describe("Who to greet.") }) },
  ({ name }) => `Hello, ${name}!`,
);

if (process.env.KANDEV_PLUGIN) plugin.run();
"#
                .into(),
                false,
            ));
            out.push((
                "package.json".into(),
                format!(
                    "{{\n  \"name\": \"{crate_name}\",\n  \"version\": \"0.1.0\",\n  \"private\": true,\n  \"type\": \"module\",\n  \
                     \"scripts\": {{ \"build\": \"tsc -p tsconfig.json\", \"test\": \"node --test dist/\" }},\n  \
                     \"dependencies\": {{ \"@toolhost/plugin\": {sdk:?}, \"zod\": \"^4.1.0\" }},\n  \
                     \"devDependencies\": {{ \"@types/node\": \"^20.19.0\", \"typescript\": \"~5.9.3\" }}\n}}\n"
                ),
                false,
            ));
            out.push((
                "plugin.test.ts".into(),
                r#"// The tool through toolhost's own rules, with no daemon (toolhost on PATH).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Harness } from "@toolhost/plugin/testing";
import { plugin } from "./plugin.js";

test("hello", async () => {
  const h = await Harness.start(plugin, new URL("..", import.meta.url).pathname);
  try {
    assert.equal((await h.call("hello", { name: "Ada" })).text, "Hello, Ada!");
    const wrong = await h.call("hello", { nme: "Ada" });
    assert.equal(wrong.errorCode, "invalid_arguments", wrong.text);
  } finally {
    await h.close();
  }
});
"#
                .into(),
                false,
            ));
            out.push((
                "tsconfig.json".into(),
                "{\n  \"compilerOptions\": {\n    \"target\": \"ES2022\",\n    \"module\": \"NodeNext\",\n    \"moduleResolution\": \"NodeNext\",\n    \
                 \"outDir\": \"dist\",\n    \"strict\": true,\n    \"skipLibCheck\": true\n  },\n  \"files\": [\"plugin.ts\", \"plugin.test.ts\"]\n}\n"
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
                readme(id, "npm install && npm run build", Some("npm test")),
                false,
            ));
            out.push((
                ".gitignore".into(),
                "node_modules/\ndist/\n*.tar.gz\n".into(),
                false,
            ));
        }
    }
    out
}

/// Every command in it works as written, in this order, from the plugin's
/// directory (the e2e tests run them).
fn readme(id: &str, build: &str, test: Option<&str>) -> String {
    let tool = toolhost_manifest::naming::exposed("kandev", id, "hello");
    let mut steps = vec![
        format!("Build: `{build}`"),
        "Check the manifest, its schemas, and the code against them: `toolhost check --start .`\n   \
         (after changing a tool's types, `toolhost schema sync .` writes them into the manifest)"
            .to_owned(),
    ];
    if let Some(test) = test {
        steps.push(format!(
            "Test: `{test}`\n   (each call goes through toolhost's own checks and error texts, with no daemon)"
        ));
    }
    steps.push(
        "Serve it for development: `toolhost serve --dev .`\n   \
         (it prints a token to export, the same on every run here; a change to the code or\n   \
         plugin.toml reloads the plugin; stop it with Ctrl-C)"
            .to_owned(),
    );
    steps.push(format!(
        "Call it from another terminal, with that token exported:\n   \
         `toolhost call {tool} '{{\"name\": \"Ada\"}}'`"
    ));
    steps.push(format!(
        "Pack it: `toolhost pack .` writes `{id}-0.1.0.tar.gz`, which a daemon installs with\n   \
         `toolhost plugins install {id}-0.1.0.tar.gz`."
    ));
    let numbered: String = steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}. {s}\n", i + 1))
        .collect();
    format!(
        "# {id}\n\n\
         A toolhost plugin: `plugin.toml` declares its tools; the code implements them,\n\
         stating each tool's arguments in its own types.\n\n\
         {numbered}\n\
         The tool's name for agents is `{tool}`. Add a tool by implementing it in the code\n\
         and running `toolhost schema sync .`, which adds its declaration to `plugin.toml`.\n"
    )
}

/// Writes the plugin.
pub fn run(args: &NewArgs) -> Result<ExitCode> {
    if !toolhost_manifest::manifest::is_valid_plugin_id(&args.id) {
        errln!(
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
    let sdk = match &args.sdk {
        Some(d) => Sdk::local(d, args.lang)?,
        None => Sdk::Published,
    };
    for (path, text, executable) in files(&args.id, args.lang, &sdk) {
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
    if sdk == Sdk::Published {
        // The names the project depends on are the registries'; until the
        // SDKs are published there, a build needs them made locally.
        outln!(
            "it depends on the SDK by its published name ({}); if your registry does not have it yet, make the SDK artifacts in a toolhost checkout with `scripts/package-sdks DIR` and write the plugin again with `--sdk DIR` (or TOOLHOST_SDK_DIR=DIR)",
            match args.lang {
                Lang::Rust => "toolhost-plugin-sdk on crates.io",
                Lang::Python => "toolhost-plugin on PyPI",
                Lang::Typescript => "@toolhost/plugin on npm",
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_has_a_manifest_schema_code_launcher_and_readme() {
        for lang in [Lang::Rust, Lang::Python, Lang::Typescript] {
            let f = files("demo", lang, &Sdk::Published);
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
            for step in [
                "toolhost check --start .",
                "toolhost schema sync .",
                "toolhost serve --dev .",
                "toolhost pack .",
            ] {
                assert!(readme.contains(step), "{lang:?}: {readme}");
            }
            // Python and TypeScript test their tool through the harness.
            if lang != Lang::Rust {
                assert!(readme.contains("Test: `"), "{lang:?}: {readme}");
                assert!(
                    f.iter()
                        .any(|(p, t, _)| p.contains("test") && t.contains("Harness")),
                    "{lang:?}: {names:?}"
                );
            }
        }
        // The published names by default; local artifacts stand in for them.
        let published = format!("toolhost-plugin-sdk = \"{SDK_VERSION}\"");
        let rust = files("demo", Lang::Rust, &Sdk::Published);
        assert!(
            rust.iter().any(|(p, t, _)| p == "Cargo.toml"
                && t.contains(&published)
                && !t.contains("[patch"))
        );
        let local = Sdk::Local(PathBuf::from("/sdk"));
        let rust = files("demo", Lang::Rust, &local);
        assert!(rust.iter().any(|(p, t, _)| p == "Cargo.toml"
            && t.contains(&published)
            && t.contains(&format!(
                "path = \"/sdk/rust/toolhost-proto-{SDK_VERSION}\""
            ))));
        let py = files("demo", Lang::Python, &local);
        assert!(py.iter().any(|(p, t, _)| p == "requirements.txt"
            && t.ends_with(&format!(
                "toolhost-plugin @ file:///sdk/toolhost_plugin-{SDK_VERSION}-py3-none-any.whl\n"
            ))));
        let py = files("demo", Lang::Python, &Sdk::Published);
        assert!(py.iter().any(|(p, t, _)| p == "requirements.txt"
            && t == &format!("toolhost-plugin~={SDK_VERSION}\n")));
        let ts = files("demo", Lang::Typescript, &local);
        assert!(ts.iter().any(|(p, t, _)| p == "package.json"
            && t.contains(&format!("\"file:/sdk/toolhost-plugin-{SDK_VERSION}.tgz\""))));
    }

    #[test]
    fn local_artifacts_that_are_not_there_are_named() {
        let err = Sdk::local(Path::new("/nonexistent-sdk"), Lang::Typescript)
            .unwrap_err()
            .to_string();
        assert!(err.contains("toolhost-plugin-0.1.0.tgz"), "{err}");
        assert!(err.contains("scripts/package-sdks"), "{err}");
    }
}
