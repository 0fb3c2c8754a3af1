//! The notes example plugin: keeps notes per task in its data directory.
//!
//! State is one JSON file, `notes.json`, rewritten atomically on every
//! change (write a temporary file, fsync it, rename it over the old one,
//! fsync the directory): a crash mid-write leaves the previous version, so
//! nothing that was acknowledged is lost. A mutex serializes writers; the
//! file is small and the plugin is the only writer.
//!
//! It speaks plugin protocol 2 (`protocol = 2` in its manifest), so it can
//! answer more than text: `export_notes` returns a Markdown resource,
//! `tidy_tags` reports progress, and `delete_notes` asks the user before it
//! deletes anything.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::Mutex;
use toolhost_plugin_sdk::{Content, LogLevel, Plugin, Question, ToolCall, ToolError, ToolOutput};

#[derive(Debug, Default, Serialize, Deserialize)]
struct Store {
    /// task id -> its notes, oldest first.
    tasks: BTreeMap<String, TaskNotes>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TaskNotes {
    next_id: u64,
    notes: Vec<Note>,
    settings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Note {
    id: u64,
    text: String,
    tags: Vec<String>,
    session_id: String,
}

struct Notes {
    file: PathBuf,
    lock: Mutex<()>,
}

impl Notes {
    fn load(&self) -> Result<Store, ToolError> {
        match std::fs::read(&self.file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ToolError::new(format!(
                    "the notes file is damaged ({e}); it was left untouched"
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Store::default()),
            Err(e) => Err(e.into()),
        }
    }

    fn save(&self, store: &Store) -> Result<(), ToolError> {
        let bytes = serde_json::to_vec_pretty(store).map_err(|e| ToolError::new(e.to_string()))?;
        write_atomically(&self.file, &bytes)?;
        Ok(())
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

fn task_of(call: &ToolCall) -> Result<String, ToolError> {
    if call.context.task_id.is_empty() {
        return Err(ToolError::new(
            "this session is not bound to a task; notes belong to a task",
        ));
    }
    Ok(call.context.task_id.clone())
}

/// The tags of one note's arguments (the schema has checked them).
fn tags_of(v: &Value) -> Vec<String> {
    v.get("tags")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The operator's limit ([[config]] max_notes; the manifest's default
/// otherwise).
fn max_notes() -> usize {
    toolhost_plugin_sdk::config()
        .get_i64("max_notes")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1000)
}

/// Several notes at once: all of them, or none when they would pass the
/// limit.
async fn add_notes(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let items: Vec<Value> = call
        .arguments
        .get("notes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let _guard = notes.lock.lock().await;
    let mut store = notes.load()?;
    let entry = store.tasks.entry(task).or_default();
    let max = max_notes();
    if entry.notes.len() + items.len() > max {
        return Err(ToolError::new(format!(
            "this task has {} notes and may keep {max}: {} more do not fit; add fewer, or delete some with delete_notes first",
            entry.notes.len(),
            items.len()
        )));
    }
    let mut ids = Vec::with_capacity(items.len());
    for item in &items {
        entry.next_id += 1;
        ids.push(entry.next_id);
        entry.notes.push(Note {
            id: entry.next_id,
            text: item
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            tags: tags_of(item),
            session_id: call.context.session_id.clone(),
        });
    }
    let count = entry.notes.len();
    notes.save(&store)?;
    let mut out = Map::new();
    out.insert("ids".into(), json!(ids));
    out.insert("count".into(), json!(count));
    Ok(ToolOutput::structured(out).with_text(format!(
        "Added {} note(s); the task has {count} note(s).",
        ids.len()
    )))
}

async fn add_note(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let text = call
        .arguments
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let tags = tags_of(&Value::Object(call.arguments.clone()));
    let _guard = notes.lock.lock().await;
    let mut store = notes.load()?;
    let entry = store.tasks.entry(task).or_default();
    let max = max_notes();
    if entry.notes.len() >= max {
        return Err(ToolError::new(format!(
            "this task already has {max} notes, the most it may keep; delete some with delete_notes first"
        )));
    }
    entry.next_id += 1;
    let id = entry.next_id;
    entry.notes.push(Note {
        id,
        text,
        tags,
        session_id: call.context.session_id.clone(),
    });
    let count = entry.notes.len();
    notes.save(&store)?;
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("count".into(), json!(count));
    // Present only when the operator granted the `env` capability.
    let by = std::env::var("NOTES_AUTHOR")
        .map(|a| format!(" by {a}"))
        .unwrap_or_default();
    Ok(ToolOutput::structured(out).with_text(format!(
        "Added note {id}{by}; the task has {count} note(s)."
    )))
}

async fn search_notes(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let query = call
        .arguments
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase();
    let tag = call.arguments.get("tag").and_then(Value::as_str);
    let max = call
        .arguments
        .get("max_results")
        .and_then(Value::as_u64)
        .unwrap_or(10);
    let store = notes.load()?;
    let found: Vec<&Note> = store
        .tasks
        .get(&task)
        .map(|t| {
            t.notes
                .iter()
                .rev()
                .filter(|n| n.text.to_lowercase().contains(&query))
                .filter(|n| tag.is_none_or(|t| n.tags.iter().any(|x| x == t)))
                .take(usize::try_from(max).unwrap_or(usize::MAX))
                .collect()
        })
        .unwrap_or_default();
    let text = if found.is_empty() {
        "No notes match.".to_owned()
    } else {
        found
            .iter()
            .map(|n| format!("#{}: {}", n.id, n.text))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = Map::new();
    out.insert(
        "notes".into(),
        Value::Array(
            found
                .iter()
                .map(|n| json!({ "id": n.id, "text": n.text, "tags": n.tags }))
                .collect(),
        ),
    );
    Ok(ToolOutput::structured(out).with_text(text))
}

async fn configure(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let settings: BTreeMap<String, String> = call
        .arguments
        .get("settings")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let n = settings.len();
    let _guard = notes.lock.lock().await;
    let mut store = notes.load()?;
    store
        .tasks
        .entry(task)
        .or_default()
        .settings
        .extend(settings);
    notes.save(&store)?;
    Ok(ToolOutput::text(format!("Stored {n} setting(s).")))
}

async fn export_notes(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let tag = call.arguments.get("tag").and_then(Value::as_str);
    let store = notes.load()?;
    let mut md = format!("# Notes of task {task}\n\n");
    let mut n = 0;
    for note in store
        .tasks
        .get(&task)
        .map(|t| t.notes.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|n| tag.is_none_or(|t| n.tags.iter().any(|x| x == t)))
    {
        n += 1;
        let tags = if note.tags.is_empty() {
            String::new()
        } else {
            format!(" ({})", note.tags.join(", "))
        };
        md.push_str(&format!("- **#{}**{tags}: {}\n", note.id, note.text));
    }
    // The task id goes into a URI: keep it to characters a URI path takes.
    let slug: String = task
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(
        ToolOutput::text(format!("Exported {n} note(s) as Markdown.")).with(
            Content::resource_text(format!("notes://{slug}/export.md"), "text/markdown", md),
        ),
    )
}

async fn delete_notes(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let query = call
        .arguments
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase();
    let matching = |n: &Note| n.text.to_lowercase().contains(&query);
    let count = notes
        .load()?
        .tasks
        .get(&task)
        .map_or(0, |t| t.notes.iter().filter(|n| matching(n)).count());
    if count == 0 {
        return Ok(ToolOutput::text("No notes match; nothing was deleted."));
    }
    if !call.can_ask() {
        return Err(ToolError::new(
            "deleting notes needs the user's confirmation, and this client cannot ask the user; nothing was deleted",
        ));
    }
    let answer = call
        .ask(
            Question::new(format!("Delete {count} note(s) of this task for good?"))
                .boolean("confirm", "Yes, delete them")
                .required("confirm"),
        )
        .await?;
    if !answer.flag("confirm") {
        call.log(LogLevel::Info, "the user kept the notes");
        return Ok(ToolOutput::text(
            "The user did not confirm; nothing was deleted.",
        ));
    }
    let _guard = notes.lock.lock().await;
    let mut store = notes.load()?;
    let entry = store.tasks.entry(task).or_default();
    let before = entry.notes.len();
    entry.notes.retain(|n| !matching(n));
    let deleted = before - entry.notes.len();
    notes.save(&store)?;
    Ok(ToolOutput::text(format!("Deleted {deleted} note(s).")))
}

async fn tidy_tags(notes: Arc<Notes>, call: ToolCall) -> Result<ToolOutput, ToolError> {
    let task = task_of(&call)?;
    let _guard = notes.lock.lock().await;
    let mut store = notes.load()?;
    let entry = store.tasks.entry(task).or_default();
    let total = entry.notes.len();
    let mut changed = 0;
    for (i, note) in entry.notes.iter_mut().enumerate() {
        if call.is_cancelled() {
            return Err(ToolError::new("cancelled; nothing was changed"));
        }
        let mut tags: Vec<String> = note.tags.iter().map(|t| t.trim().to_lowercase()).collect();
        tags.sort();
        tags.dedup();
        tags.retain(|t| !t.is_empty());
        if tags != note.tags {
            note.tags = tags;
            changed += 1;
        }
        #[allow(clippy::cast_precision_loss)] // counts of notes are small
        call.progress(
            (i + 1) as f64,
            Some(total as f64),
            format!("note {} of {total}", i + 1),
        );
    }
    notes.save(&store)?;
    Ok(ToolOutput::text(format!(
        "Tidied the tags of {changed} of {total} note(s)."
    )))
}

fn main() -> ExitCode {
    plugin(ToolCall::data_dir().unwrap_or_else(|| PathBuf::from("."))).run()
}

/// The plugin, keeping its notes in `dir`.
fn plugin(dir: PathBuf) -> Plugin {
    let notes = Arc::new(Notes {
        file: dir.join("notes.json"),
        lock: Mutex::new(()),
    });
    let (a, s, c) = (Arc::clone(&notes), Arc::clone(&notes), Arc::clone(&notes));
    let many = Arc::clone(&notes);
    let (e, d, t) = (Arc::clone(&notes), Arc::clone(&notes), notes);
    Plugin::new()
        .tool("add_note", move |call| add_note(Arc::clone(&a), call))
        .tool("add_notes", move |call| add_notes(Arc::clone(&many), call))
        .tool("search_notes", move |call| {
            search_notes(Arc::clone(&s), call)
        })
        .tool("configure", move |call| configure(Arc::clone(&c), call))
        .tool("ping", |_call| async { Ok(ToolOutput::text("pong")) })
        .tool("export_notes", move |call| {
            export_notes(Arc::clone(&e), call)
        })
        .tool("delete_notes", move |call| {
            delete_notes(Arc::clone(&d), call)
        })
        .tool("tidy_tags", move |call| tidy_tags(Arc::clone(&t), call))
}

#[cfg(test)]
mod harness {
    //! The tools through toolhost's own rules, with no daemon: the SDK's
    //! harness runs each call through `toolhost harness` (built beside this
    //! test by `cargo build --workspace --bins`, or named by TOOLHOST_BIN).

    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use toolhost_plugin_sdk::testing::Harness;

    fn toolhost() -> PathBuf {
        std::env::var_os("TOOLHOST_BIN").map_or_else(
            || {
                // target/debug/deps/<this test> -> target/debug/toolhost
                let exe = std::env::current_exe().unwrap();
                exe.parent()
                    .and_then(Path::parent)
                    .unwrap()
                    .join("toolhost")
            },
            PathBuf::from,
        )
    }

    use super::*;
    use std::path::Path;

    #[tokio::test]
    async fn a_note_is_added_and_found_and_a_wrong_argument_reads_as_an_agent_reads_it() {
        // The harness's data directory: the one place its handlers write.
        let data = toolhost_plugin_sdk::testing::data_dir();
        let plugin = plugin(data.clone());
        let mut h = Harness::start_using(&toolhost(), &plugin, env!("CARGO_MANIFEST_DIR"), &[])
            .await
            .unwrap();
        assert_eq!(
            h.call("ping", serde_json::json!({})).await.unwrap().text(),
            "pong"
        );
        let added = h
            .call("add_note", serde_json::json!({"text": "buy milk"}))
            .await
            .unwrap();
        assert!(!added.is_error(), "{:?}", added.result);
        let found = h
            .call("search_notes", serde_json::json!({"query": "milk"}))
            .await
            .unwrap();
        assert!(found.text().contains("buy milk"), "{}", found.text());
        let wrong = h
            .call("add_note", serde_json::json!({"txt": "buy milk"}))
            .await
            .unwrap();
        assert_eq!(wrong.error_code(), Some("invalid_arguments"));
        assert!(
            wrong.text().starts_with("Error (invalid_arguments): "),
            "{}",
            wrong.text()
        );
        h.close().await;
        let _ = std::fs::remove_dir_all(data);
    }
}
