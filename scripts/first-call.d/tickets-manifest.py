"""What the tickets plugin's author types into the plugin.toml that
`toolhost new` wrote, before and after `toolhost schema sync .`:

  before: drops the template's hello tool, declares the api_token secret;
  after:  marks close_ticket destructive and list_tickets read-only.

Usage: tickets-manifest.py before|after DIR. Prints how many lines it typed.
"""

import re
import sys
from pathlib import Path

when, manifest = sys.argv[1], Path(sys.argv[2]) / "plugin.toml"
text = manifest.read_text()
if when == "before":
    typed = '''
[[config]]
name = "api_token"
description = "The tracker's API token."
type = "string"
secret = true
required = true
'''
    text = re.sub(r'\n\[\[tools\]\]\nname = "hello"\n(?:.+\n)*', "\n", text) + typed
    (Path(sys.argv[2]) / "schemas" / "hello.json").unlink(missing_ok=True)
    typed_lines = len([l for l in typed.splitlines() if l.strip()])
else:
    marks = {"close_ticket": "annotations = { destructive = true }", "list_tickets": "annotations = { read_only = true }"}
    for tool, mark in marks.items():
        text = text.replace(f'name = "{tool}"\n', f'name = "{tool}"\n{mark}\n', 1)
    typed_lines = len(marks)
manifest.write_text(text)
print(typed_lines)
