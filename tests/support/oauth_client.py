"""An agent on the official MCP Python SDK (`mcp`) that is given only the
MCP URL, for tests/oauth.rs.

Usage: oauth_client.py URL LOGIN

The SDK's OAuth client does everything a desktop client does: it meets the
401, reads the resource's metadata from the challenge, discovers the
authorization server, registers itself (dynamic client registration), and
runs the authorization code flow with PKCE and the `resource` parameter.
Where a person would log in and consent in a browser, this script does it
over HTTP on oidc-provider's development pages, as LOGIN. It then lists the
tools, calls `kandev_tp_echo`, and prints one JSON line: what it listed,
the call's text, and the token's audience and subject as the server issued
them.
"""

import asyncio
import base64
import json
import re
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

REDIRECT = "http://127.0.0.1:1/callback"


class Memory:
    """Tokens and the registration, kept for this run only."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


class Browser:
    """The person at the browser: logs in as `login` and consents."""

    def __init__(self, login):
        self.login = login
        self.result = None

    async def visit(self, authorization_url):
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as web:
            url = authorization_url
            for _ in range(20):
                r = await web.get(url)
                if r.status_code in (302, 303):
                    location = urljoin(url, r.headers["location"])
                    if location.startswith(REDIRECT):
                        query = parse_qs(urlparse(location).query)
                        if "error" in query:
                            raise RuntimeError(f"authorization refused: {query}")
                        self.result = AuthorizationCodeResult(
                            code=query["code"][0],
                            state=query.get("state", [None])[0],
                            iss=query.get("iss", [None])[0],
                        )
                        return
                    url = location
                    continue
                page = r.text
                action = re.search(r'<form[^>]*action="([^"]+)"', page)
                if not action:
                    raise RuntimeError(f"no form at {url}: {r.status_code} {page[:300]}")
                target = urljoin(url, action.group(1))
                fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page))
                if 'name="login"' in page:
                    fields.update({"login": self.login, "password": "any"})
                r = await web.post(target, data=fields)
                if r.status_code not in (302, 303):
                    raise RuntimeError(f"{target} answered {r.status_code}: {r.text[:300]}")
                url = urljoin(target, r.headers["location"])
            raise RuntimeError("too many steps")

    async def callback(self):
        return self.result


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def main():
    url, login = sys.argv[1], sys.argv[2]
    storage = Memory()
    browser = Browser(login)
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="toolhost oauth test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.visit,
        callback_handler=browser.callback,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=60)
    client = Client(streamable_http_client(url, http_client=http), mode="legacy")
    async with client:
        listed = await client.list_tools()
        names = sorted(t.name for t in listed.tools)
        r = await client.call_tool("kandev_tp_echo", {"msg": "from python", "n": 1})
        text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
    issued = claims(storage.tokens.access_token)
    print(json.dumps({
        "listed_echo": "kandev_tp_echo" in names,
        "text": text,
        "is_error": bool(r.is_error),
        "aud": issued.get("aud"),
        "sub": issued.get("sub"),
    }))


asyncio.run(main())
