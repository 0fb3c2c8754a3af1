"""textkit: a toolhost plugin in Python, on the Python SDK (sdk/python).

The manifest (plugin.toml) declares the tools and their schemas; this file
implements them. The SDK does the rest: the handshake, the magic cookie,
the health service, a clean stdout, graceful stop and cancellation.
"""

from toolhost_plugin import Content, Plugin, ToolResult, config

plugin = Plugin()


@plugin.tool("word_count")
def word_count(call):
    text = call.arguments["text"]
    counts = {"words": len(text.split()), "lines": len(text.splitlines()), "characters": len(text)}
    summary = f"{counts['words']} words, {counts['lines']} lines, {counts['characters']} characters"
    return ToolResult([Content.text(summary)], structured=counts)


@plugin.tool("title_case")
async def title_case(call):
    # The operator's list ([[config]] small_words), or the manifest's default.
    small = {w.strip().lower() for w in str(config.get("small_words", "")).split(",") if w.strip()}
    words = call.arguments["text"].split(" ")
    return " ".join(
        w if i > 0 and w.lower() in small else w[:1].upper() + w[1:] for i, w in enumerate(words)
    )


if __name__ == "__main__":
    plugin.run()
