// The tickets tools through toolhost's own rules, with no daemon:
// `npm test` here (toolhost on PATH, or TOOLHOST_BIN).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Harness } from "@toolhost/plugin/testing";
import { plugin } from "./tickets.js";

const here = new URL("..", import.meta.url).pathname;

test("a ticket is opened, listed and closed once the user agrees; a wrong argument reads as an agent reads it", async () => {
  const h = await Harness.start(plugin, here, { config: { api_token: "test" } });
  try {
    const opened = await h.call("create_ticket", { title: "Login fails", labels: [{ name: "bug" }] });
    assert.deepEqual(opened.structured, {
      id: 1, title: "Login fails", priority: "normal", labels: [{ name: "bug", color: "grey" }], open: true,
    });
    const page = await h.call("list_tickets", { limit: 5 });
    assert.deepEqual((page.structured as { tickets: { title: string }[] }).tickets.map((t) => t.title), ["Login fails"]);
    assert.equal(page.progress.at(-1)?.progress, 1);
    assert.equal((await h.call("close_ticket", { id: 1 }, { answers: ["decline"] })).text, "ticket 1 stays open");
    const closed = await h.call("close_ticket", { id: 1 }, { answers: [{ confirm: true }] });
    assert.equal(closed.text, "closed ticket 1");
    const bad = await h.call("create_ticket", { title: "x", labels: [{ colour: "red" }] });
    assert.equal(bad.errorCode, "invalid_arguments");
    assert.equal(
      bad.text,
      "Error (invalid_arguments): Invalid arguments: `/labels/0` has unexpected properties: `colour`; " +
        "`/labels/0` is missing required properties: `name`.",
    );
  } finally {
    await h.close();
  }
});
