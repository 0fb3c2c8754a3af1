// A real authorization server for the end-to-end tests: oidc-provider
// (OpenID Certified), issuing JWT access tokens for toolhost's resource
// (RFC 8707 resource indicators, RFC 9068 tokens), opaque ones for one
// client (for introspection, RFC 7662), dynamic client registration and
// the authorization code flow with PKCE for the official MCP SDKs' OAuth
// clients (the login and consent pages are oidc-provider's development
// interactions, which the tests drive over HTTP).
//
//   node server.mjs PORT
//
// Environment: RESOURCE (toolhost's resource URI), KEY_ALG (RS256 by
// default), KEY_ID (the signing key's kid; a restart with another one is
// a key rotation), KEY_FILE (where to write the private key, for
// forge.mjs), TOKEN_TTL (seconds). Prints "listening <issuer>" once it
// accepts requests.

import Provider from 'oidc-provider';
import { generateKeyPair, exportJWK } from 'jose';
import { writeFileSync } from 'node:fs';

const port = Number(process.argv[2]);
const resource = process.env.RESOURCE;
const alg = process.env.KEY_ALG || 'RS256';
const kid = process.env.KEY_ID || 'key-1';
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = await generateKeyPair(alg, { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid, alg, use: 'sig' };
// The tests forge tokens with the server's own key (expired ones, ones
// with other claims): a real signature, so only toolhost's claim checks
// stand between them and a call.
if (process.env.KEY_FILE) {
  writeFileSync(process.env.KEY_FILE, JSON.stringify(jwk), { mode: 0o600 });
}

const scope = 'tools tickets:write openid offline_access';
const confidential = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  scope,
});

const provider = new Provider(issuer, {
  clients: [
    confidential('alice'),
    confidential('bob'),
    confidential('narrow'),
    confidential('opaque'),
    // toolhost's own client, for introspection.
    confidential('toolhost'),
  ],
  jwks: { keys: [jwk] },
  scopes: ['openid', 'offline_access', 'tools', 'tickets:write'],
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator, client) => ({
        // The client `narrow` gets only `tools`, never `tickets:write`.
        scope: client.clientId === 'narrow' ? 'tools' : 'tools tickets:write',
        audience: indicator,
        accessTokenTTL: Number(process.env.TOKEN_TTL || 300),
        accessTokenFormat: client.clientId === 'opaque' ? 'opaque' : 'jwt',
        jwt: { sign: { alg } },
      }),
    },
  },
  // Every registered client may ask for the resource scopes at the
  // authorization endpoint (the SDKs register with no scope).
  loadExistingGrant: async (ctx) => {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    return undefined;
  },
  pkce: { required: () => true },
  ttl: { AccessToken: 300, ClientCredentials: Number(process.env.TOKEN_TTL || 300) },
});
provider.proxy = false;

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
