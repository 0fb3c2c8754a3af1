//! `toolhost check`, through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::process::Command;
use toolhost_e2e::{bin, workspace_root};

fn check(args: &[&str]) -> (i32, String, String) {
    let out = match Command::new(bin("toolhost"))
        .arg("check")
        .args(args)
        .current_dir(workspace_root())
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run toolhost: {e}"),
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_plugins_are_valid_and_named() {
    let (code, out, err) = check(&["plugins-example/notes"]);
    assert_eq!(code, 0, "{out}{err}");
    for name in [
        "kandev_notes_add_note",
        "kandev_notes_search_notes",
        "kandev_notes_configure",
        "kandev_notes_ping",
    ] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
}

#[test]
fn a_directory_of_plugins_is_one_set() {
    let (code, out, err) = check(&["plugins-example"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("kandev_notes_ping"));
}

#[test]
fn json_output_is_machine_readable() {
    let (code, out, _) = check(&["--format", "json", "plugins-example/notes"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(v["valid"], true);
    assert_eq!(v["plugins"][0]["tools"][3]["exposed"], "kandev_notes_ping");
    assert_eq!(v["plugins"][0]["protocol"], 2);
    assert_eq!(
        v["plugins"][0]["tools"][6]["reset_timeout_on_progress"],
        true
    );
    assert_eq!(
        v["plugins"][0]["tools"][1]["annotations"]["read_only"],
        true
    );
}

#[test]
fn broken_plugins_exit_1_with_every_problem() {
    let (code, out, err) = check(&[
        "--format",
        "json",
        "crates/toolhost-manifest/tests/broken/many-problems",
        "crates/toolhost-manifest/tests/broken-sets/collision",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let rules: Vec<&str> = v["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["rule"].as_str())
        .collect();
    for want in [
        "plugin-id",
        "version",
        "tool-name",
        "surfaces",
        "schema-root-object",
        "exposed-name-collision",
    ] {
        assert!(rules.contains(&want), "{want} not in {rules:?}");
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(check(&["--no-such-flag"]).0, 2);
    assert_eq!(check(&["--prefix", "Bad_Prefix", "plugins-example"]).0, 2);
}

#[test]
fn a_plugin_with_several_kinds_of_problem_gets_them_all_at_once() {
    // A schema that needs fetching, an alias to an undeclared property on
    // the same tool, and a bad surface on another: one run names all three.
    let (code, out, err) =
        check(&["crates/toolhost-manifest/tests/broken/schema-and-alias-and-surface"]);
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    for rule in ["[schema-remote-ref]", "[aliases]", "[surfaces]"] {
        assert!(all.contains(rule), "{rule} missing from:\n{all}");
    }
}

/// A reader that has gone (`toolhost check … | head -0`) ends the command
/// quietly, as it would any Unix tool: no panic, no message.
#[test]
fn a_closed_pipe_on_stdout_is_no_panic() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(bin("toolhost"))
        .args(["check", "plugins-example"])
        .current_dir(workspace_root())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run toolhost");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// A schema broken three ways is reported three times, each with its
/// place inside the schema.
#[test]
fn every_schema_error_is_reported_with_its_place() {
    let root = toolhost_e2e::Scratch::new("check-schema");
    std::fs::write(
        root.path().join("plugin.toml"),
        r#"id = "bad"
version = "1.0.0"
name = "Bad"

[runtime]
command = "/bin/true"

[[tools]]
name = "t"
description = "A tool."
surfaces = ["chat"]
input_schema = { type = "object", properties = { a = { type = "strin" }, b = { type = "string", pattern = "(" }, c = { type = "integer", minimum = "five" } } }
"#,
    )
    .unwrap();
    let (code, out, err) = check(&[&root.path().display().to_string()]);
    assert_eq!(code, 1, "{out}{err}");
    for at in [
        "at /properties/a/type:",
        "at /properties/b/pattern:",
        "at /properties/c/minimum:",
    ] {
        assert!(err.contains(at), "{at} missing:\n{err}");
    }
    assert!(!err.contains("five"), "a value shown:\n{err}");
}

/// `toolhost` with `args` in the workspace: exit code, stdout, stderr.
fn toolhost(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("toolhost"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A configuration in `root` that grants the checkout's virtualenv and SDK
/// and a pyenv Python, as the example's does (the secret the plugin needs
/// to start comes on the command line).
fn tickets_config(root: &std::path::Path) -> std::path::PathBuf {
    let config = root.join("toolhost.toml");
    let ws = workspace_root();
    std::fs::write(
        &config,
        format!(
            "[sandbox]\nread = [{:?}, {:?}, \"~/.pyenv\"]\n",
            ws.join(".venv").display().to_string(),
            ws.join("sdk").display().to_string()
        ),
    )
    .unwrap();
    config
}

/// The Python tickets example, copied without its tools' declarations or
/// schema files (a plugin whose author has written only code), launched
/// on the checkout's virtualenv.
fn tickets_without_declarations(root: &std::path::Path) -> std::path::PathBuf {
    let example = workspace_root().join("plugins-example/tickets-py");
    let dir = root.join("tickets");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy(example.join("plugin.py"), dir.join("plugin.py")).unwrap();
    let manifest = std::fs::read_to_string(example.join("plugin.toml")).unwrap();
    let head = manifest.split("\n[[tools]]").next().unwrap();
    std::fs::write(dir.join("plugin.toml"), head).unwrap();
    toolhost_e2e::venv_launcher(&dir.join("bin/tickets-plugin"), "../plugin.py");
    dir
}

/// The code states each tool's shape in its types; `schema sync` writes
/// the manifest's schema files and entries from it, keeping what the
/// author wrote; `check --start` then fails on any drift, naming the tool
/// and the place, until the next sync.
#[test]
fn schema_sync_writes_the_codes_shapes_and_check_start_catches_drift() {
    let root = toolhost_e2e::Scratch::new("schema-sync");
    let dir = tickets_without_declarations(root.path());
    let d = dir.to_str().unwrap();
    let config = tickets_config(root.path());
    let start = [
        "--set",
        "api_token=test",
        "--config",
        config.to_str().unwrap(),
    ];

    let (code, out, err) = toolhost(&[&["schema", "sync", d][..], &start].concat());
    assert_eq!(code, 0, "{out}{err}");
    for file in [
        "schemas/create_ticket.json",
        "schemas/create_ticket.out.json",
        "schemas/list_tickets.json",
        "schemas/close_ticket.json",
    ] {
        assert!(dir.join(file).is_file(), "{file} not written: {out}");
    }
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("schemas/create_ticket.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(schema["required"], serde_json::json!(["title"]));
    assert_eq!(
        schema["properties"]["labels"]["items"]["required"],
        serde_json::json!(["name"]),
        "a nested dataclass's required fields"
    );
    let list: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("schemas/list_tickets.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            &list["properties"]["limit"]["minimum"],
            &list["properties"]["limit"]["maximum"]
        ),
        (&serde_json::json!(1), &serde_json::json!(100)),
        "`Annotated[int, Range(ge=1, le=100)]` states its bounds: {list}"
    );

    // The author's words in the manifest survive every sync.
    let manifest = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    let authored = manifest.replace(
        "description = \"Closes a ticket for good, after the user agrees.\"",
        "description = \"Closes a ticket (the author's words).\"\nannotations = { destructive = true }",
    );
    std::fs::write(dir.join("plugin.toml"), &authored).unwrap();
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 0, "in step after a sync: {out}{err}");

    // The code drifts: a new parameter, and one made required.
    let code_text = std::fs::read_to_string(dir.join("plugin.py")).unwrap();
    std::fs::write(
        dir.join("plugin.py"),
        code_text.replace(
            "def create_ticket(title: str, labels",
            "def create_ticket(title: str, due: str, labels",
        ),
    )
    .unwrap();
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("tool create_ticket: plugin.toml and the code disagree")
            && err.contains("/properties/due (only in the code)")
            && err.contains("/required (plugin.toml: [\"title\"], code: [\"title\",\"due\"])"),
        "{err}"
    );
    assert!(
        !err.contains("tool list_tickets"),
        "only the drifted tool: {err}"
    );

    let (code, out, err) = toolhost(&[&["schema", "sync", d][..], &start].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("wrote schemas/create_ticket.json"), "{out}");
    assert!(
        !out.contains("list_tickets.json"),
        "unchanged files are left alone: {out}"
    );
    let synced = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    assert!(
        synced.contains(
            "Closes a ticket (the author's words).\"\nannotations = { destructive = true }"
        ),
        "{synced}"
    );
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 0, "{out}{err}");

    // pydantic's Field and annotated_types state the same bounds: no drift.
    let code_text = std::fs::read_to_string(dir.join("plugin.py")).unwrap();
    for (import, bound) in [
        ("from pydantic import Field\n", "Field(ge=1, le=100)"),
        ("from annotated_types import Ge, Le\n", "Ge(1), Le(100)"),
    ] {
        let text = format!(
            "{import}{}",
            code_text.replace("Range(ge=1, le=100)", bound)
        );
        std::fs::write(dir.join("plugin.py"), text).unwrap();
        let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
        assert_eq!(code, 0, "{bound}: {out}{err}");
    }
    // A bound the code drops from its own type is drift, named.
    std::fs::write(
        dir.join("plugin.py"),
        code_text.replace("Range(ge=1, le=100)", "Range(ge=1, le=50)"),
    )
    .unwrap();
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("tool list_tickets") && err.contains("/properties/limit/maximum"),
        "{err}"
    );
}

/// The same in TypeScript: the code states its shapes in zod types, and
/// `check --start` names the tool whose zod type drifted from the manifest.
#[test]
fn check_start_catches_a_drifted_zod_type() {
    let example = workspace_root().join("plugins-example/tickets-ts");
    let root = toolhost_e2e::Scratch::new("schema-drift-ts");
    let dir = root.path().join("tickets");
    copy_example(
        &example,
        &dir,
        &[
            "plugin.toml",
            "bin/tickets-plugin",
            "dist/tickets.js",
            "dist/plugin.js",
        ],
    );
    std::os::unix::fs::symlink(example.join("node_modules"), dir.join("node_modules")).unwrap();
    let config = sandbox_config(root.path(), &[example.join("node_modules")]);
    let d = dir.to_str().unwrap();
    let start = [
        "--set",
        "api_token=test",
        "--config",
        config.to_str().unwrap(),
    ];

    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 0, "the example agrees with its code: {out}{err}");

    let code_text = std::fs::read_to_string(dir.join("dist/tickets.js")).unwrap();
    let drifted = code_text.replace(
        "title: z.string().describe(\"What is wrong or wanted, in one line.\"),",
        "title: z.string().max(80).describe(\"What is wrong or wanted, in one line.\"),",
    );
    assert_ne!(drifted, code_text);
    std::fs::write(dir.join("dist/tickets.js"), drifted).unwrap();
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("tool create_ticket: plugin.toml and the code disagree")
            && err.contains("/properties/title/maxLength (only in the code)"),
        "{err}"
    );
}

/// The same in Rust: the code states its shapes in schemars types, and
/// `check --start` names the tool whose manifest schema no longer says
/// what the code's type does (here the schema file was edited by hand).
#[test]
fn check_start_catches_a_schema_file_that_left_its_rust_type() {
    use std::os::unix::fs::PermissionsExt as _;
    let example = workspace_root().join("plugins-example/tickets-rs");
    let root = toolhost_e2e::Scratch::new("schema-drift-rs");
    let dir = root.path().join("tickets");
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy(example.join("plugin.toml"), dir.join("plugin.toml")).unwrap();
    copy_schemas(&example, &dir);
    let launcher = dir.join("bin/tickets-plugin");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nexec {} \"$@\"\n",
            toolhost_e2e::bin("tickets-plugin").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = sandbox_config(root.path(), &[]);
    let d = dir.to_str().unwrap();
    let start = [
        "--set",
        "api_token=test",
        "--config",
        config.to_str().unwrap(),
    ];

    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 0, "the example agrees with its code: {out}{err}");

    let file = dir.join("schemas/close_ticket.json");
    let mut schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    schema["properties"]["id"]["maximum"] = serde_json::json!(1000);
    std::fs::write(&file, schema.to_string()).unwrap();
    let (code, out, err) = toolhost(&[&["check", "--start", d][..], &start].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("tool close_ticket: plugin.toml and the code disagree")
            && err.contains("/properties/id/maximum (only in plugin.toml)"),
        "{err}"
    );
}

/// `files` of `example` (paths inside it) and its schema files, copied
/// into `dir`.
fn copy_example(example: &std::path::Path, dir: &std::path::Path, files: &[&str]) {
    for f in files {
        if let Some(parent) = dir.join(f).parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::copy(example.join(f), dir.join(f)).unwrap();
    }
    copy_schemas(example, dir);
}

/// `example`'s schema files, copied into `dir/schemas`.
fn copy_schemas(example: &std::path::Path, dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    for e in std::fs::read_dir(example.join("schemas")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("schemas").join(e.file_name())).unwrap();
    }
}

/// `root/toolhost.toml`: `[sandbox] read` of what the examples run on, and
/// `more`.
fn sandbox_config(root: &std::path::Path, more: &[std::path::PathBuf]) -> std::path::PathBuf {
    let config = root.join("toolhost.toml");
    let read: Vec<String> = toolhost_e2e::sandbox_read_paths()
        .iter()
        .chain(more)
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    std::fs::write(
        &config,
        format!("[sandbox]\nread = [{}]\n", read.join(", ")),
    )
    .unwrap();
    config
}

/// `toolhost pack` starts what it packed once and refuses a package whose
/// code and manifest disagree: install runs no code, so this is where a
/// package meets its own code.
#[test]
fn pack_refuses_a_package_whose_code_drifted_from_its_manifest() {
    let example = workspace_root().join("plugins-example/tickets-py");
    let root = toolhost_e2e::Scratch::new("pack-drift");
    let dir = root.path().join("tickets");
    copy_example(
        &example,
        &dir,
        &[
            "plugin.toml",
            "plugin.py",
            "requirements.txt",
            "bin/tickets-plugin",
        ],
    );
    // Its requirements name the SDK relative to the example.
    std::fs::write(
        dir.join("requirements.txt"),
        format!("{}\n", workspace_root().join("sdk/python").display()),
    )
    .unwrap();
    let code = std::fs::read_to_string(dir.join("plugin.py")).unwrap();
    std::fs::write(
        dir.join("plugin.py"),
        code.replace("cursor: int = 0, limit", "cursor: int = 1, limit"),
    )
    .unwrap();
    let archive = root.path().join("tickets.tar.gz");
    let (code, out, err) = toolhost(&[
        "pack",
        dir.to_str().unwrap(),
        "-o",
        archive.to_str().unwrap(),
        "--set",
        "api_token=test",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("tool list_tickets: plugin.toml and the code disagree")
            && err.contains("/properties/cursor/default (plugin.toml: 0, code: 1)")
            && !archive.exists(),
        "{err}"
    );
    // The fix it names is for the author's own folder, not pack's copy.
    assert!(
        err.contains(&format!("run `toolhost schema sync {}`", dir.display())),
        "{err}"
    );
}

/// `schema sync` on a plugin folder someone else made: a `schemas` folder
/// that is a link out of the plugin, or a schema file that is a link to a
/// file of the author's, is never written through. Before, sync answered
/// 0 and wrote into the folder the link named.
#[test]
fn schema_sync_never_writes_through_a_link_out_of_the_plugin() {
    let root = toolhost_e2e::Scratch::new("schema-sync-links");
    let dir = tickets_without_declarations(root.path());
    let d = dir.to_str().unwrap();
    let config = tickets_config(root.path());
    let start = [
        "--set",
        "api_token=test",
        "--config",
        config.to_str().unwrap(),
    ];
    let outside = root.path().join("authors-folder");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("schemas")).unwrap();
    let manifest_before = std::fs::read(dir.join("plugin.toml")).unwrap();
    let (code, out, err) = toolhost(&[&["schema", "sync", d][..], &start].concat());
    assert_ne!(code, 0, "a linked schemas folder was written: {out}{err}");
    assert!(err.contains("schemas"), "{err}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside the plugin: {out}{err}"
    );
    // Nothing was written anywhere, not even the manifest.
    assert_eq!(
        std::fs::read(dir.join("plugin.toml")).unwrap(),
        manifest_before
    );

    // A real folder, with one schema file linked to a file of the author's:
    // the link is replaced, the author's file untouched.
    std::fs::remove_file(dir.join("schemas")).unwrap();
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    let precious = outside.join("precious.json");
    std::fs::write(&precious, "{\"keep\": true}").unwrap();
    std::os::unix::fs::symlink(&precious, dir.join("schemas/create_ticket.json")).unwrap();
    let (code, out, err) = toolhost(&[&["schema", "sync", d][..], &start].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "{\"keep\": true}"
    );
    let written = std::fs::symlink_metadata(dir.join("schemas/create_ticket.json")).unwrap();
    assert!(
        written.is_file(),
        "the schema is a file of the plugin's own now"
    );
}

/// A cloned plugin whose `.venv/pyvenv.cfg` names `home = /tmp/../bin`
/// (the text is not `/`, its parent resolves to it): `check --start` runs
/// the plugin without read access to the author's files. The plugin tries
/// to print a canary from the author's home on its stderr, which `check`
/// shows.
#[test]
fn a_cloned_plugins_venv_cannot_open_the_authors_files() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = toolhost_e2e::Scratch::new("venv-home");
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let canary = home.join("secret.txt");
    std::fs::write(&canary, "CANARY-5f1d\n").unwrap();
    let dir = root.path().join("cloned");
    std::fs::create_dir_all(dir.join(".venv")).unwrap();
    for cfg_home in ["/tmp/../bin", "/tmp/../../", "/.."] {
        std::fs::write(
            dir.join(".venv/pyvenv.cfg"),
            format!("home = {cfg_home}\nversion = 3.11.2\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join("run.sh"),
            format!(
                "#!/bin/sh\ncat {} >&2 || echo 'could not read it' >&2\nexit 3\n",
                canary.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(
            dir.join("plugin.toml"),
            "id = \"cloned\"\nversion = \"1.0.0\"\nname = \"Cloned\"\n\n[runtime]\ncommand = \"run.sh\"\n\n[[tools]]\nname = \"ping\"\ndescription = \"Ping.\"\nsurfaces = [\"chat\"]\ninput_schema = { type = \"object\" }\n",
        )
        .unwrap();
        let out = Command::new(bin("toolhost"))
            .args(["check", "--start"])
            .arg(&dir)
            .env("HOME", &home)
            .current_dir(root.path())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{cfg_home}: {text}");
        assert!(text.contains("could not read it"), "{cfg_home}: {text}");
        assert!(
            !text.contains("CANARY-5f1d"),
            "{cfg_home}: the author's file was read: {text}"
        );
    }
}

/// Copies an example plugin's files (not its build or dependency trees;
/// `node_modules` is linked) to `to`.
fn copy_whole_example(name: &str, to: &std::path::Path) {
    let from = workspace_root().join("plugins-example").join(name);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        let file = entry.file_name();
        let target = to.join(&file);
        let path = entry.path();
        match file.to_str().unwrap_or_default() {
            "node_modules" => std::os::unix::fs::symlink(&path, &target).unwrap(),
            "dist" | "__pycache__" | ".pytest_cache" => {}
            _ if path.is_dir() => {
                std::fs::create_dir_all(&target).unwrap();
                for inner in std::fs::read_dir(&path).unwrap() {
                    let inner = inner.unwrap();
                    std::fs::copy(inner.path(), target.join(inner.file_name())).unwrap();
                }
            }
            _ => {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
}

/// Runs an example's own tests in `dir`, as its author does: (passed,
/// output).
fn example_tests(lang: &str, dir: &std::path::Path) -> (bool, String) {
    let bin = toolhost_e2e::bin("toolhost");
    let out = match lang {
        "python" => std::process::Command::new(workspace_root().join(".venv/bin/python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .env("TOOLHOST_BIN", &bin)
            .current_dir(dir)
            .output()
            .unwrap(),
        _ => {
            let built = std::process::Command::new("npx")
                .args(["tsc", "-p", "tsconfig.json"])
                .current_dir(dir)
                .output()
                .unwrap();
            assert!(
                built.status.success(),
                "{}",
                String::from_utf8_lossy(&built.stdout)
            );
            std::process::Command::new("node")
                .args(["--test", "dist/"])
                .env("TOOLHOST_BIN", &bin)
                .current_dir(dir)
                .output()
                .unwrap()
        }
    };
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The harness is the daemon's check: a drifted type, a forgotten `schema
/// sync` and a hand-edited schema each fail the author's own tests, naming
/// the tool, the place and the command to run, in Python and TypeScript.
#[test]
fn the_harness_fails_a_test_run_whose_code_and_manifest_drifted() {
    let root = toolhost_e2e::Scratch::new("harness-drift");
    let cases: [(&str, &str, &str, &str, &str, &str); 6] = [
        // (language, file, from, to, tool, place)
        (
            "python",
            "plugin.py",
            "cursor: int = 0,",
            "cursor: str = \"0\",",
            "list_tickets",
            "/properties/cursor",
        ),
        (
            "python",
            "plugin.py",
            "def create_ticket(title: str,",
            "def create_ticket(title: str, assignee: str = \"\",",
            "create_ticket",
            "/properties/assignee (only in the code)",
        ),
        (
            "python",
            "schemas/create_ticket.json",
            "\"high\"",
            "\"high\", \"urgent\"",
            "create_ticket",
            "/properties/priority/enum",
        ),
        (
            "typescript",
            "tickets.ts",
            "limit: z.number().int().default(20)",
            "limit: z.number().int().max(50).default(20)",
            "list_tickets",
            "/properties/limit",
        ),
        (
            "typescript",
            "tickets.ts",
            "title: z.string().describe(",
            "assignee: z.string().default(\"\"), title: z.string().describe(",
            "create_ticket",
            "/properties/assignee (only in the code)",
        ),
        (
            "typescript",
            "schemas/create_ticket.json",
            "\"high\"",
            "\"high\", \"urgent\"",
            "create_ticket",
            "/properties/priority/enum",
        ),
    ];
    for lang in ["python", "typescript"] {
        let example = if lang == "python" {
            "tickets-py"
        } else {
            "tickets-ts"
        };
        let dir = root.path().join(format!("{example}-clean"));
        copy_whole_example(example, &dir);
        let (ok, out) = example_tests(lang, &dir);
        assert!(
            ok,
            "{lang}: the example's own tests pass as shipped:\n{out}"
        );
    }
    for (n, (lang, file, from, to, tool, place)) in cases.into_iter().enumerate() {
        let example = if lang == "python" {
            "tickets-py"
        } else {
            "tickets-ts"
        };
        let dir = root.path().join(format!("{example}-{n}"));
        copy_whole_example(example, &dir);
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            text.contains(from),
            "{lang} case {n}: {from:?} is not in {file}"
        );
        std::fs::write(dir.join(file), text.replacen(from, to, 1)).unwrap();
        let (ok, out) = example_tests(lang, &dir);
        assert!(!ok, "{lang} case {n}: the drift passed the harness:\n{out}");
        assert_drift_named(&out, tool, place, &format!("{lang} case {n}"));
    }
}

/// A drift said as `check --start` says it: the tool, the place and the
/// command that mends it.
fn assert_drift_named(said: &str, tool: &str, place: &str, case: &str) {
    assert!(
        said.contains(&format!("tool {tool}: plugin.toml and the code disagree"))
            && said.contains(place)
            && said.contains("toolhost schema sync"),
        "{case}:\n{said}"
    );
}

/// The same three drifts fail the Rust SDK's harness: a changed type, a
/// parameter added without `schema sync`, and a hand-edited schema file,
/// each naming the tool, the place and the command. The code's shapes are
/// stated as `Plugin::typed` states them (`Plugin::shape`), from the
/// example's own schema files, then drifted.
#[test]
fn the_rust_harness_fails_on_each_kind_of_drift() {
    use toolhost_plugin_sdk::testing::{Harness, HarnessError};
    use toolhost_plugin_sdk::{Plugin, ToolCall, ToolOutput};
    let root = toolhost_e2e::Scratch::new("harness-drift-rs");
    let example = workspace_root().join("plugins-example/tickets-rs");
    let schema = |dir: &std::path::Path, name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("schemas").join(name)).unwrap())
            .unwrap()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // (what drifts, the tool, the place)
    let cases = [
        ("none", "", ""),
        ("type", "list_tickets", "/properties/limit"),
        (
            "added",
            "create_ticket",
            "/properties/assignee (only in the code)",
        ),
        ("enum", "create_ticket", "/properties/priority/enum"),
    ];
    for (kind, tool, place) in cases {
        let dir = root.path().join(kind);
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::copy(example.join("plugin.toml"), dir.join("plugin.toml")).unwrap();
        std::fs::copy(
            example.join("bin/tickets-plugin"),
            dir.join("bin/tickets-plugin"),
        )
        .unwrap();
        for e in std::fs::read_dir(example.join("schemas")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join("schemas").join(e.file_name())).unwrap();
        }
        let mut list = schema(&dir, "list_tickets.json");
        let mut create = schema(&dir, "create_ticket.json");
        match kind {
            "type" => list["properties"]["limit"]["type"] = "string".into(),
            "none" => {}
            "added" => {
                create["properties"]["assignee"] = serde_json::json!({"type": "string"});
            }
            _ => {
                let mut edited = create.clone();
                edited["properties"]["priority"]["enum"] =
                    serde_json::json!(["low", "normal", "high", "urgent"]);
                std::fs::write(
                    dir.join("schemas/create_ticket.json"),
                    serde_json::to_string_pretty(&edited).unwrap(),
                )
                .unwrap();
            }
        }
        let answer = |_: ToolCall| async move { Ok(ToolOutput::text("unused")) };
        let plugin = Plugin::new()
            .tool("create_ticket", answer)
            .tool("list_tickets", answer)
            .tool("close_ticket", answer)
            .shape(
                "create_ticket",
                "Opens a ticket.",
                &create,
                Some(&schema(&dir, "create_ticket.out.json")),
            )
            .shape(
                "list_tickets",
                "Lists tickets.",
                &list,
                Some(&schema(&dir, "list_tickets.out.json")),
            );
        let started = runtime.block_on(Harness::start_using(
            &bin("toolhost"),
            &plugin,
            &dir,
            &[("api_token", "test")],
        ));
        if kind == "none" {
            // The shapes as the schema files state them: no drift.
            assert!(
                started.is_ok(),
                "the example's own shapes drifted: {:?}",
                started.err()
            );
            continue;
        }
        let Err(HarnessError::Drift(problems)) = started else {
            panic!("{kind}: the drift passed the Rust harness");
        };
        assert_drift_named(&problems.join("\n"), tool, place, kind);
    }
}

/// The harness holds a handler to the sandbox's rule for writes: one that
/// writes beside its code (a relative path, the plugin's folder) fails the
/// test, naming the path, as it would fail under the daemon; in Python and
/// TypeScript.
#[test]
fn the_harness_refuses_a_write_outside_the_data_directory_naming_it() {
    let root = toolhost_e2e::Scratch::new("harness-write");
    for (lang, example, file, from, to) in [
        (
            "python",
            "tickets-py",
            "plugin.py",
            "return Path(plugin.data_dir() or \".\") / \"tickets.json\"",
            "return Path(\"tickets.json\")",
        ),
        (
            "typescript",
            "tickets-ts",
            "tickets.ts",
            "const file = () => join(Plugin.dataDir(), \"tickets.json\");",
            "const file = () => \"tickets.json\";",
        ),
    ] {
        let dir = root.path().join(example);
        copy_whole_example(example, &dir);
        let code = std::fs::read_to_string(dir.join(file)).unwrap();
        let careless = code.replace(from, to);
        assert_ne!(careless, code);
        std::fs::write(dir.join(file), careless).unwrap();
        let (ok, out) = example_tests(lang, &dir);
        assert!(
            !ok,
            "{lang}: a write beside the code passed the harness:\n{out}"
        );
        assert!(
            out.contains("writes only in its data directory") && out.contains("tickets.json"),
            "{lang}: {out}"
        );
        assert!(
            !dir.join("tickets.json").exists(),
            "{lang}: nothing was written beside the code"
        );
    }
}

/// The Rust harness holds a handler to the same rule, where the kernel has
/// Landlock: a write beside the code (here, this test's own folder) fails
/// as it would under the daemon's sandbox, and one into the data directory
/// works. The test's own code, on its own thread, is not restricted.
#[test]
fn the_rust_harness_holds_a_handler_to_the_data_directory() {
    use toolhost_plugin_sdk::testing::Harness;
    use toolhost_plugin_sdk::{Plugin, ToolCall, ToolError, ToolOutput};
    let beside = workspace_root().join("tests/harness-write-probe.json");
    let target = beside.clone();
    let plugin = Plugin::new()
        .tool("create_ticket", move |_: ToolCall| {
            let target = target.clone();
            async move {
                std::fs::write(&target, "[]").map_err(|e| {
                    ToolError::new(format!("cannot write {}: {e}", target.display()))
                })?;
                Ok(ToolOutput::text("written beside the code"))
            }
        })
        .tool("close_ticket", |_: ToolCall| async move {
            let dir = ToolCall::data_dir().ok_or_else(|| ToolError::new("no data directory"))?;
            std::fs::write(dir.join("tickets.json"), "[]")
                .map_err(|e| ToolError::new(format!("cannot write in the data directory: {e}")))?;
            Ok(ToolOutput::text("written in the data directory"))
        })
        .tool("list_tickets", |_: ToolCall| async move {
            Ok(ToolOutput::text("none"))
        });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (refused, allowed) = runtime.block_on(async {
        let mut h = Harness::start_using(
            &bin("toolhost"),
            &plugin,
            workspace_root().join("plugins-example/tickets-rs"),
            &[("api_token", "test")],
        )
        .await
        .unwrap();
        let refused = h
            .call("create_ticket", serde_json::json!({"title": "x"}))
            .await
            .unwrap();
        let allowed = h
            .call("close_ticket", serde_json::json!({"id": 1}))
            .await
            .unwrap();
        h.close().await;
        (refused, allowed)
    });
    let written = beside.exists();
    let _ = std::fs::remove_file(&beside);
    assert!(
        !written && refused.is_error() && refused.text().contains("Permission denied"),
        "a write beside the code passed the Rust harness: {}",
        refused.text()
    );
    assert!(!allowed.is_error(), "{}", allowed.text());
    // This thread, the test's own, still writes where it likes.
    std::fs::write(&beside, "[]").unwrap();
    std::fs::remove_file(&beside).unwrap();
}
