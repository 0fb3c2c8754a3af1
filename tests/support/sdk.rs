//! Plugins on the Python and TypeScript SDKs, written into a test's
//! scratch directory: the fixtures `tests/sdks.rs` and `tests/telemetry.rs`
//! share. Each records what it saw in `events.log` in its data directory.

use crate::workspace_root;
use std::path::{Path, PathBuf};

const MANIFEST_TOOLS: &str = r#"
[[tools]]
name = "hello"
description = "Greets."
surfaces = ["chat"]
input_schema = { type = "object", properties = { name = { type = "string" } } }
annotations = { read_only = true }

[[tools]]
name = "fail"
description = "Fails the way a tool fails."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "slow"
description = "Waits until cancelled."
surfaces = ["chat"]
timeout_ms = 60000
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "rich"
description = "Progress, a log message, a question, an image."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "stuck"
description = "Blocks where it cannot be interrupted (a sleep in C; a busy event loop)."
surfaces = ["chat"]
timeout_ms = 1000
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "late"
description = "Asks a second question composed before the first answer came."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true }
"#;

const PYTHON: &str = r#"import asyncio
import os

from toolhost_plugin import Content, LogLevel, Plugin, Question, ToolError

plugin = Plugin()


def event(line):
    with open(os.path.join(Plugin.data_dir(), "events.log"), "a") as f:
        f.write(line + "\n")


@plugin.tool("hello")
async def hello(call):
    return f"hello, {call.arguments.get('name', 'world')}"


@plugin.tool("fail")
def fail(call):
    raise ToolError("the thing is missing; create it first")


@plugin.tool("slow")
async def slow(call):
    event(f"started {call.invocation_id}")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        event(f"cancelled {call.invocation_id}")
        raise
    return "woke"


@plugin.tool("rich")
async def rich(call):
    for i in range(1, 4):
        call.progress(i, 3, f"step {i}")
    call.log(LogLevel.WARNING, "careful")
    answer = await call.ask(Question("Proceed?").boolean("ok", "OK").require("ok"))
    return ["done" if answer.flag("ok") else "stopped", Content.image(b"\x89PNG", "image/png")]


@plugin.tool("stuck")
def stuck(call):
    import time

    event(f"stuck {call.invocation_id}")
    time.sleep(3600)
    return "woke"


@plugin.tool("late")
async def late(call):
    await call.ask(Question("First?").boolean("ok", "OK"))
    # A second question composed while the first was open, whose bytes
    # reach toolhost only after the first answer: as the SDK would send it
    # had it been queued before the answer arrived.
    call._link.answers_seen -= 1
    await call.ask(Question("Second?").boolean("ok", "OK"))
    return "asked twice"


plugin.run()
"#;

const TYPESCRIPT: &str = r#"import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { Content, LogLevel, Plugin, Question, ToolError } from "SDK";

const event = (line) => appendFileSync(join(Plugin.dataDir(), "events.log"), line + "\n");

new Plugin()
  .tool("hello", (call) => `hello, ${call.arguments.name ?? "world"}`)
  .tool("fail", () => {
    throw new ToolError("the thing is missing; create it first");
  })
  .tool("slow", (call) => {
    event(`started ${call.invocationId}`);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve("woke"), 30000);
      call.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        event(`cancelled ${call.invocationId}`);
        reject(new Error("cancelled"));
      });
    });
  })
  .tool("rich", async (call) => {
    for (let i = 1; i <= 3; i++) call.progress(i, 3, `step ${i}`);
    call.log(LogLevel.Warning, "careful");
    const answer = await call.ask(new Question("Proceed?").boolean("ok", "OK").require("ok"));
    return [answer.action === "accept" && answer.values.ok === true ? "done" : "stopped", Content.image(new Uint8Array([0x89, 0x50]), "image/png")];
  })
  .tool("stuck", (call) => {
    event(`stuck ${call.invocationId}`);
    const until = Date.now() + 3600 * 1000;
    while (Date.now() < until) {}
    return "woke";
  })
  .tool("late", async (call) => {
    await call.ask(new Question("First?").boolean("ok", "OK"));
    // A second question composed while the first was open, whose bytes
    // reach toolhost only after the first answer.
    call.link.answersSeen -= 1;
    await call.ask(new Question("Second?").boolean("ok", "OK"));
    return "asked twice";
  })
  .run();
"#;

fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A plugin `id` on the Python or TypeScript SDK, speaking plugin
/// protocol `protocol`: tools `hello`, `fail`, `slow` (until cancelled)
/// `rich` (progress, a log message, a question, an image; protocol 2) and
/// `late` (a second question that says it saw no answer, sent after the
/// first was answered), `stuck` (blocks for an hour where nothing can
/// interrupt it: a sleep in C, a busy event loop; its deadline is 1 s).
#[must_use]
pub fn sdk_plugin(root: &Path, id: &str, lang: &str, protocol: u32) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let launcher = match lang {
        "python" => {
            std::fs::write(dir.join("plugin.py"), PYTHON).unwrap();
            format!(
                "#!/bin/sh\nexec {} \"$(dirname \"$0\")/../plugin.py\"\n",
                workspace_root().join(".venv/bin/python").display()
            )
        }
        _ => {
            let sdk = workspace_root().join("sdk/typescript/dist/index.js");
            let code = TYPESCRIPT.replace(
                "\"SDK\"",
                &format!("{:?}", format!("file://{}", sdk.display())),
            );
            std::fs::write(dir.join("plugin.mjs"), code).unwrap();
            "#!/bin/sh\nexec node \"$(dirname \"$0\")/../plugin.mjs\"\n".to_owned()
        }
    };
    write_exe(&dir.join("bin/plugin"), &launcher);
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"{id}\"\n\n[runtime]\ncommand = \"bin/plugin\"\nstartup_timeout_ms = 20000\nprotocol = {protocol}\n\n[capabilities]\nnetwork = {{ connect = [443] }}\n{MANIFEST_TOOLS}"
        ),
    )
    .unwrap();
    dir
}
