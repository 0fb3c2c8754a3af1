"""textkit: a toolhost plugin in Python, on the Python SDK (sdk/python).

The manifest (plugin.toml) declares the tools and their schemas; this file
implements them. The SDK does the rest: the handshake, the magic cookie,
the health service, a clean stdout, graceful stop and cancellation.
"""

from toolhost_plugin import Content, Plugin, ToolResult

plugin = Plugin()


@plugin.tool("word_count")
def word_count(call):
    text = call.arguments["text"]
    counts = {"words": len(text.split()), "lines": len(text.splitlines()), "characters": len(text)}
    summary = f"{counts['words']} words, {counts['lines']} lines, {counts['characters']} characters"
    return ToolResult([Content.text(summary)], structured=counts)


@plugin.tool("title_case")
async def title_case(call):
    return " ".join(w[:1].upper() + w[1:] for w in call.arguments["text"].split(" "))


if __name__ == "__main__":
    plugin.run()
