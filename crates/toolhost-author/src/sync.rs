//! `toolhost schema sync DIR`: the shapes a plugin's code states in its own
//! types, written into its manifest.
//!
//! The code states each tool's shape once (type hints, zod or TypeBox,
//! schemars); the manifest must still carry it, because install runs no
//! code and the manifest is what toolhost checks and serves. This command
//! starts the plugin as `check --start` does, asks it for its shapes, and
//! writes them: each tool's schema files (`schemas/NAME.json`,
//! `schemas/NAME.out.json`, or the files the entry already names), and a
//! `[[tools]]` entry for a tool the manifest lacks. What the author wrote in
//! the manifest (descriptions, titles, annotations, timeouts, surfaces,
//! comments) is kept as written: only schema keys are added or moved to
//! files. It never deletes a declaration.

use anyhow::{Context, Result, bail};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use toml_edit::{DocumentMut, Item, Table, value};
use toolhost_base::beneath::Beneath;
use toolhost_base::{errln, outln};
use toolhost_daemon::config::Config;
use toolhost_manifest::manifest::{MAX_MANIFEST_BYTES, MAX_SCHEMA_FILE_BYTES};
use toolhost_manifest::{check_set, naming};
use toolhost_runtime::ToolShape;

/// The flags of `toolhost schema sync`.
#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The plugin's directory (holding plugin.toml).
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// The operator's configuration file, for the values and grants the
    /// plugin needs to start (`[plugin.ID]`), as `check --config` reads it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A configuration value the plugin needs to start: `NAME=VALUE`, or
    /// `NAME=@FILE` to read it from a file (for secrets). Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

/// The manifest's file name in a plugin's directory.
const MANIFEST_FILE: &str = "plugin.toml";

/// What the schema the code states goes into, for a tool's entry.
struct Target<'a> {
    /// `input_schema` or `output_schema`.
    key: &'a str,
    /// The file a new entry (or an inline schema) gets.
    default_file: String,
}

/// Writes the code's shapes into the manifest and its schema files.
pub fn run(args: &SyncArgs) -> Result<ExitCode> {
    let dir = &args.dir;
    // Everything read and written here is beneath the plugin's folder, as
    // the kernel resolves it: a folder just cloned may hold links.
    let folder = Beneath::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = read_manifest(&folder)?;
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", manifest_path.display()))?;
    // A schema file an entry names but that does not exist yet (a tool
    // declared before its code) would keep the plugin from starting; it
    // gets a placeholder that this run replaces or removes. Every file the
    // manifest names is checked before any is written.
    let placeholders = write_placeholders(&folder, &doc)?;
    let outcome = sync(args, &folder, &mut doc);
    if outcome.is_err() {
        for p in &placeholders {
            let _ = folder.remove(p);
        }
    }
    let changed = outcome?;
    let new_text = doc.to_string();
    if new_text != text {
        folder
            .write(Path::new(MANIFEST_FILE), new_text.as_bytes())
            .with_context(|| format!("cannot write {}", manifest_path.display()))?;
        outln!("updated {}", manifest_path.display());
    }
    let set = check_set(naming::DEFAULT_PREFIX, std::slice::from_ref(dir));
    let problems = set.all_problems();
    for p in &problems {
        errln!("error: {p}");
    }
    if !problems.is_empty() {
        errln!(
            "{} problem(s) found in the manifest after syncing",
            problems.len()
        );
        return Ok(ExitCode::from(1));
    }
    outln!(
        "ok: {} schema file(s) written, the manifest agrees with the code",
        changed
    );
    Ok(ExitCode::SUCCESS)
}

/// Starts the plugin, takes its shapes, and writes them; returns how many
/// schema files changed.
fn sync(args: &SyncArgs, folder: &Beneath, doc: &mut DocumentMut) -> Result<usize> {
    let dir = &args.dir;
    let set = check_set(naming::DEFAULT_PREFIX, std::slice::from_ref(dir));
    let problems = set.all_problems();
    if !problems.is_empty() {
        for p in &problems {
            errln!("error: {p}");
        }
        bail!(
            "the manifest has {} problem(s) that keep the plugin from starting; fix them first",
            problems.len()
        );
    }
    let config = match &args.config {
        Some(f) => Some(Config::load(f)?),
        None => None,
    };
    let values = crate::code::parse_sets(&args.set)?;
    let mut answer = None;
    crate::code::start_each(
        &set.plugins,
        config.as_ref(),
        &values,
        true,
        |_, started| {
            answer = Some(started);
        },
    )?;
    let started = match answer {
        Some(Ok(s)) => s,
        Some(Err(problem)) => bail!("{problem}"),
        None => bail!("no plugin found in {}", dir.display()),
    };
    let Some(described) = started.described else {
        bail!(
            "the plugin does not say what its code implements (no Describe): its SDK is older than `schema sync`, or it speaks plugin protocol 1"
        );
    };
    if described.shapes.is_empty() {
        bail!(
            "the plugin's code states no tool shapes: declare its tools with their types (see the SDK's README), or keep writing the schema files by hand"
        );
    }
    let mut written = 0;
    for shape in described.shapes.iter() {
        written += apply(folder, doc, shape)?;
    }
    for name in &started.unimplemented {
        errln!(
            "warning: tool {name} is declared in plugin.toml but its code has no handler; its declaration is kept"
        );
    }
    Ok(written)
}

/// Writes one tool's shape: its schema files, and its entry when the
/// manifest has none. Returns how many files changed.
fn apply(folder: &Beneath, doc: &mut DocumentMut, shape: &ToolShape) -> Result<usize> {
    let targets = [
        (
            Target {
                key: "input_schema",
                default_file: format!("schemas/{}.json", shape.name),
            },
            Some(&shape.input),
        ),
        (
            Target {
                key: "output_schema",
                default_file: format!("schemas/{}.out.json", shape.name),
            },
            shape.output.as_ref(),
        ),
    ];
    let entry = match find_entry(doc, &shape.name) {
        Some(e) => e,
        None => add_entry(doc, shape)?,
    };
    let mut written = 0;
    for (target, schema) in targets {
        let Some(schema) = schema else {
            if entry.contains_key(&format!("{}_file", target.key)) || entry.contains_key(target.key)
            {
                errln!(
                    "warning: tool {}: plugin.toml declares an output schema its code does not state; kept",
                    shape.name
                );
            }
            continue;
        };
        let file_key = format!("{}_file", target.key);
        let file = match entry.get(&file_key).and_then(Item::as_str) {
            Some(f) => f.to_owned(),
            None => {
                // An inline schema moves to a file: one place for the code's
                // shape, diffable by the author's tools.
                entry.remove(target.key);
                entry.insert(&file_key, value(target.default_file.clone()));
                target.default_file
            }
        };
        if write_schema(folder, &file, schema)? {
            outln!("wrote {file} ({})", shape.name);
            written += 1;
        }
    }
    Ok(written)
}

/// The `[[tools]]` entry named `name`.
fn find_entry<'d>(doc: &'d mut DocumentMut, name: &str) -> Option<&'d mut Table> {
    doc.get_mut("tools")?
        .as_array_of_tables_mut()?
        .iter_mut()
        .find(|t| t.get("name").and_then(Item::as_str) == Some(name))
}

/// A new `[[tools]]` entry for a tool the code implements and the manifest
/// lacks: its name, the code's description, and the surfaces the
/// manifest's first tool is offered on (`chat` when it has none), which
/// the author should review.
fn add_entry<'d>(doc: &'d mut DocumentMut, shape: &ToolShape) -> Result<&'d mut Table> {
    if shape.description.trim().is_empty() {
        bail!(
            "tool {}: its code gives no description and plugin.toml has no entry for it; add a docstring (or description) to the tool, or declare it in plugin.toml",
            shape.name
        );
    }
    let surfaces = doc
        .get("tools")
        .and_then(Item::as_array_of_tables)
        .and_then(|tools| tools.iter().next())
        .and_then(|first| first.get("surfaces").cloned())
        .unwrap_or_else(|| {
            let mut chat = toml_edit::Array::new();
            chat.push("chat");
            value(chat)
        });
    let shown = surfaces
        .as_value()
        .map(|v| v.to_string())
        .unwrap_or_default();
    let mut entry = Table::new();
    entry.insert("name", value(shape.name.clone()));
    entry.insert("description", value(shape.description.trim().to_owned()));
    entry.insert("surfaces", surfaces);
    if doc.get("tools").is_none() {
        doc.insert(
            "tools",
            Item::ArrayOfTables(toml_edit::ArrayOfTables::new()),
        );
    }
    let Some(tools) = doc.get_mut("tools").and_then(Item::as_array_of_tables_mut) else {
        bail!("plugin.toml's `tools` is not an array of tables ([[tools]])");
    };
    tools.push(entry);
    outln!(
        "added tool {} to plugin.toml, on surfaces {}: review its surfaces and annotations",
        shape.name,
        shown.trim()
    );
    let last = tools.len() - 1;
    tools.get_mut(last).context("the entry just added is gone")
}

/// Writes `schema` to `file` (relative to `dir`) when it differs from what
/// is there; `true` when it wrote.
fn write_schema(folder: &Beneath, file: &str, schema: &serde_json::Value) -> Result<bool> {
    let rel = inside(file)?;
    let path = folder.path().join(&rel);
    let mut text = serde_json::to_string_pretty(schema)?;
    text.push('\n');
    if folder
        .read(&rel, MAX_SCHEMA_FILE_BYTES)
        .is_ok_and(|old| old == text.as_bytes())
    {
        return Ok(false);
    }
    folder
        .write(&rel, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

/// `file` as a path relative to the plugin's folder, when it is a plain
/// one (no `..`, not absolute); the folder's `Beneath` keeps every open of
/// it inside, links and all.
fn inside(file: &str) -> Result<PathBuf> {
    let rel = Path::new(file);
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        bail!("{file:?} is not a path inside the plugin's directory; schema files must be");
    }
    Ok(rel.to_path_buf())
}

/// Placeholders (`{"type": "object"}`) for the schema files entries name
/// that do not exist yet; returns the files created.
fn write_placeholders(folder: &Beneath, doc: &DocumentMut) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let Some(tools) = doc.get("tools").and_then(Item::as_array_of_tables) else {
        return Ok(missing);
    };
    for t in tools.iter() {
        for key in ["input_schema_file", "output_schema_file"] {
            let Some(file) = t.get(key).and_then(Item::as_str) else {
                continue;
            };
            let rel = inside(file).with_context(|| format!("{key} in {MANIFEST_FILE}"))?;
            if !folder.exists(&rel) {
                missing.push(rel);
            }
        }
    }
    let mut created: Vec<PathBuf> = Vec::new();
    for rel in missing {
        if let Err(e) = folder.write(&rel, b"{\"type\": \"object\"}\n") {
            for p in &created {
                let _ = folder.remove(p);
            }
            return Err(e)
                .with_context(|| format!("cannot write {}", folder.path().join(&rel).display()));
        }
        created.push(rel);
    }
    Ok(created)
}

fn read_manifest(folder: &Beneath) -> Result<String> {
    let path = folder.path().join(MANIFEST_FILE);
    let bytes = folder
        .read(Path::new(MANIFEST_FILE), MAX_MANIFEST_BYTES)
        .with_context(|| format!("cannot read {}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(name: &str, output: bool) -> ToolShape {
        ToolShape {
            name: name.into(),
            input: serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            output: output.then(|| serde_json::json!({"type": "object"})),
            description: "Finds things.".into(),
        }
    }

    #[test]
    fn a_tool_the_manifest_lacks_gets_an_entry_and_the_authors_words_stay() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let text = "# the author's comment\nid = \"t\"\n\n[[tools]]\nname = \"find\"\ndescription = \"The author's words.\" # kept\nsurfaces = [\"kanban-task\"]\ninput_schema = { type = \"object\" }\n";
        let mut doc: DocumentMut = text.parse()?;
        let folder = Beneath::open(dir.path())?;
        assert_eq!(apply(&folder, &mut doc, &shape("find", true))?, 2);
        assert_eq!(apply(&folder, &mut doc, &shape("add", false))?, 1);
        let out = doc.to_string();
        assert!(out.contains("# the author's comment"), "{out}");
        assert!(
            out.contains("description = \"The author's words.\" # kept"),
            "{out}"
        );
        assert!(
            !out.contains("input_schema = {"),
            "the inline schema moved to a file: {out}"
        );
        assert!(
            out.contains("input_schema_file = \"schemas/find.json\""),
            "{out}"
        );
        assert!(
            out.contains("output_schema_file = \"schemas/find.out.json\""),
            "{out}"
        );
        assert!(
            out.contains(
                "name = \"add\"\ndescription = \"Finds things.\"\nsurfaces = [\"kanban-task\"]"
            ),
            "{out}"
        );
        let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            dir.path().join("schemas/find.json"),
        )?)?;
        assert_eq!(written, shape("find", true).input);
        assert_eq!(
            apply(&folder, &mut doc, &shape("find", true))?,
            0,
            "nothing changed"
        );
        Ok(())
    }

    #[test]
    fn schema_files_stay_inside_the_plugin() {
        assert!(inside("../x.json").is_err());
        assert!(inside("/etc/x.json").is_err());
        assert!(inside("schemas/./x.json").is_ok_and(|p| p == Path::new("schemas/x.json")));
        assert!(inside("").is_err());
    }

    #[test]
    fn a_new_tool_without_a_description_is_refused() -> Result<()> {
        let mut doc: DocumentMut = "id = \"t\"\n".parse()?;
        let mut s = shape("find", false);
        s.description = " ".into();
        let err = add_entry(&mut doc, &s)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("tool find") && err.contains("docstring"),
            "{err}"
        );
        Ok(())
    }
}
