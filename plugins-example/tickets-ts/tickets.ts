// tickets: a small ticket tracker, on the TypeScript SDK, with tools from zod types.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Plugin, Question, ToolError, config } from "@toolhost/plugin";
import { z } from "zod";

const Label = z.object({ name: z.string().describe("A short tag, like bug or ui."), color: z.string().default("grey") });
const Ticket = z.object({
  id: z.number().int(), title: z.string(), priority: z.enum(["low", "normal", "high"]),
  labels: z.array(Label), open: z.boolean(),
});
type Ticket = z.infer<typeof Ticket>;
const file = () => join(Plugin.dataDir(), "tickets.json");
const load = (): Ticket[] => (existsSync(file()) ? JSON.parse(readFileSync(file(), "utf8")) : []);
const save = (tickets: Ticket[]) => writeFileSync(file(), JSON.stringify(tickets));

export const plugin = new Plugin()
  .tool("create_ticket", {
    description: "Opens a ticket.",
    input: z.object({
      title: z.string().describe("What is wrong or wanted, in one line."),
      labels: z.array(Label).default([]).describe("Tags to file it under."),
      priority: z.enum(["low", "normal", "high"]).default("normal"),
    }),
    output: Ticket,
  }, ({ title, labels, priority }) => {
    if (!config.secret("api_token")?.expose()) throw new ToolError("the tracker's api_token is empty; ask the operator to set it");
    const tickets = load();
    const ticket = { id: tickets.length + 1, title, priority, labels, open: true };
    save([...tickets, ticket]);
    return ticket;
  })
  .tool("list_tickets", {
    description: "Lists tickets, oldest first, a page at a time.",
    input: z.object({
      cursor: z.number().int().default(0).describe("Where the previous page ended (0 for the first page)."),
      limit: z.number().int().default(20).describe("The most tickets in one page."),
    }),
    output: z.object({ tickets: z.array(Ticket), next_cursor: z.number().int().nullable() }),
  }, ({ cursor, limit }, call) => {
    const tickets = load(), page = tickets.slice(cursor, cursor + limit);
    page.forEach((_, i) => call.progress(i + 1, page.length));
    return { tickets: page, next_cursor: cursor + limit < tickets.length ? cursor + limit : null };
  })
  .tool("close_ticket", {
    description: "Closes a ticket for good, after the user agrees.",
    input: z.object({ id: z.number().int().describe("The ticket's number.") }),
  }, async ({ id }, call) => {
    const tickets = load();
    if (!(id > 0 && id <= tickets.length)) throw new ToolError(`there is no ticket ${id}; list_tickets shows the open ones`);
    const answer = await call.ask(new Question(`Close ticket ${id}?`).boolean("confirm", "Close it").require("confirm"));
    if (!answer.flag("confirm")) return `ticket ${id} stays open`;
    tickets[id - 1].open = false;
    save(tickets);
    return `closed ticket ${id}`;
  });
