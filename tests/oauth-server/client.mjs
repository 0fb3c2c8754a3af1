// An agent on the official TypeScript MCP SDK, given only the MCP URL, for
// tests/oauth.rs.
//
//   node client.mjs URL LOGIN
//
// The SDK's OAuth client meets the 401, reads the resource's metadata,
// discovers the authorization server, registers itself, and sends the
// person to the authorization URL (authorization code with PKCE and the
// `resource` parameter). Where a person would log in and consent in a
// browser, this script does it over HTTP on oidc-provider's development
// pages, as LOGIN; then it finishes the flow, connects, lists the tools,
// calls `kandev_tp_echo`, and prints one JSON line.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const [url, login] = process.argv.slice(2);
const REDIRECT = 'http://127.0.0.1:1/callback';

class Memory {
  constructor() { this.saved = {}; this.authorizationUrl = undefined; }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return {
      client_name: 'toolhost oauth test (TypeScript)',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) { this.saved.tokens = tokens; }
  redirectToAuthorization(authorizationUrl) { this.authorizationUrl = authorizationUrl; }
  saveCodeVerifier(v) { this.saved.verifier = v; }
  codeVerifier() { return this.saved.verifier; }
}

// Cookies by name, for the login and consent pages.
const jar = new Map();
function remember(response) {
  for (const c of response.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const [name, ...rest] = pair.split('=');
    jar.set(name.trim(), rest.join('='));
  }
}
const cookie = () => [...jar].map(([k, v]) => `${k}=${v}`).join('; ');

/** The person at the browser: logs in as LOGIN, consents; the code. */
async function visit(start) {
  let next = start.toString();
  for (let i = 0; i < 20; i += 1) {
    let r = await fetch(next, { redirect: 'manual', headers: { cookie: cookie() } });
    remember(r);
    if (r.status === 302 || r.status === 303) {
      const location = new URL(r.headers.get('location'), next).toString();
      if (location.startsWith(REDIRECT)) {
        const q = new URL(location).searchParams;
        if (q.get('error')) throw new Error(`authorization refused: ${q.get('error')}`);
        return q.get('code');
      }
      next = location;
      continue;
    }
    const page = await r.text();
    const action = /<form[^>]*action="([^"]+)"/.exec(page);
    if (!action) throw new Error(`no form at ${next}: ${r.status}`);
    const target = new URL(action[1], next).toString();
    const fields = new URLSearchParams();
    for (const m of page.matchAll(/<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"/g)) {
      fields.set(m[1], m[2]);
    }
    if (page.includes('name="login"')) {
      fields.set('login', login);
      fields.set('password', 'any');
    }
    r = await fetch(target, {
      method: 'POST',
      redirect: 'manual',
      body: fields,
      headers: { cookie: cookie(), 'content-type': 'application/x-www-form-urlencoded' },
    });
    remember(r);
    if (r.status !== 302 && r.status !== 303) throw new Error(`${target} answered ${r.status}`);
    next = new URL(r.headers.get('location'), target).toString();
  }
  throw new Error('too many steps');
}

const provider = new Memory();
const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = new Client({ name: 'oauth-test-ts', version: '1.0.0' });
  await client.connect(transport);
  return client;
};

let client;
try {
  client = await connect();
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !provider.authorizationUrl) throw e;
  const code = await visit(provider.authorizationUrl);
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  await transport.finishAuth(code);
  client = await connect();
}
const listed = await client.listTools();
const result = await client.callTool({ name: 'kandev_tp_echo', arguments: { msg: 'from ts', n: 2 } });
const payload = provider.saved.tokens.access_token.split('.')[1];
const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
console.log(JSON.stringify({
  listed_echo: listed.tools.some((t) => t.name === 'kandev_tp_echo'),
  text: result.content.filter((c) => c.type === 'text').map((c) => c.text).join(''),
  is_error: Boolean(result.isError),
  aud: claims.aud,
  sub: claims.sub,
}));
await client.close();
