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
import {
  generateKeyPair, exportJWK, jwtVerify, SignJWT, createLocalJWKSet,
} from 'jose';
import { randomUUID } from 'node:crypto';
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
const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
// The services a caller's token may be exchanged for (any other audience
// is refused with invalid_target).
const EXCHANGEABLE = (process.env.EXCHANGEABLE || 'https://tickets-api.test').split(',');
let exchanges = 0;
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
    // toolhost's own client, for introspection and token exchange.
    {
      ...confidential('toolhost'),
      grant_types: ['client_credentials', EXCHANGE],
    },
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

// OAuth 2.0 Token Exchange (RFC 8693), which oidc-provider leaves to the
// integrator: only toolhost's client may exchange; the subject token must
// be one of ours for toolhost's resource; the new token is for the asked
// audience only, names toolhost as the actor, and lasts two minutes.
const publicKeys = createLocalJWKSet({
  keys: [{ kty: jwk.kty, n: jwk.n, e: jwk.e, crv: jwk.crv, x: jwk.x, y: jwk.y, kid, alg }],
});
provider.registerGrantType(EXCHANGE, async (ctx) => {
  const p = ctx.oidc.params;
  const fail = (error) => { ctx.status = 400; ctx.body = { error }; };
  if (ctx.oidc.client.clientId !== 'toolhost') return fail('unauthorized_client');
  if (p.subject_token_type !== ACCESS_TOKEN) return fail('invalid_request');
  if (!EXCHANGEABLE.includes(p.audience)) return fail('invalid_target');
  let claims;
  try {
    ({ payload: claims } = await jwtVerify(p.subject_token, publicKeys, { issuer, audience: resource }));
  } catch {
    return fail('invalid_grant');
  }
  exchanges += 1;
  const token = await new SignJWT({ scope: claims.scope, client_id: claims.client_id, act: { sub: 'toolhost' } })
    .setProtectedHeader({ alg, kid, typ: 'at+jwt' })
    .setIssuer(issuer)
    .setSubject(claims.sub)
    .setAudience(p.audience)
    .setIssuedAt()
    .setExpirationTime('2m')
    .setJti(randomUUID())
    .sign(privateKey);
  ctx.body = {
    access_token: token, issued_token_type: ACCESS_TOKEN, token_type: 'Bearer', expires_in: 120,
  };
}, ['subject_token', 'subject_token_type', 'audience', 'requested_token_type', 'resource', 'scope']);

// How many exchanges were made, for the tests' check of toolhost's cache.
provider.use(async (ctx, next) => {
  if (ctx.path === '/test/exchanges') {
    ctx.body = { exchanges };
    return;
  }
  await next();
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
