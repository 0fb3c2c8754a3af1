// Hostile access tokens for the end-to-end tests, one per attack, printed
// as one JSON object: { name: token }.
//
//   node forge.mjs KEY_FILE ISSUER RESOURCE
//
// KEY_FILE is the real server's private key (server.mjs KEY_FILE): the
// tokens made with it carry a real signature, so toolhost must refuse
// them for their claims. The others are the classic forgeries.

import { readFileSync } from 'node:fs';
import {
  SignJWT, UnsecuredJWT, importJWK, exportSPKI, generateKeyPair,
} from 'jose';

const [keyFile, issuer, resource] = process.argv.slice(2);
const jwk = JSON.parse(readFileSync(keyFile, 'utf8'));
const key = await importJWK(jwk, jwk.alg);
const publicJwk = { kty: jwk.kty, n: jwk.n, e: jwk.e };
const publicPem = await exportSPKI(await importJWK(publicJwk, jwk.alg));
const now = Math.floor(Date.now() / 1000);
const claims = (over = {}) => ({
  iss: issuer, aud: resource, sub: 'mallory', client_id: 'alice',
  scope: 'tools tickets:write', iat: now, exp: now + 300, ...over,
});
const sign = (c, header = {}, k = key) => new SignJWT(c)
  .setProtectedHeader({ alg: jwk.alg, kid: jwk.kid, typ: 'at+jwt', ...header })
  .sign(k);
const stranger = (await generateKeyPair('RS256', { extractable: true })).privateKey;

const out = {
  // Signed by the real key, with claims that must not pass.
  expired: await sign(claims({ iat: now - 7200, exp: now - 3600 })),
  not_yet_valid: await sign(claims({ nbf: now + 3600 })),
  other_audience: await sign(claims({ aud: 'http://127.0.0.1:1/mcp' })),
  no_audience: await sign(claims({ aud: undefined })),
  untrusted_issuer_claim: await sign(claims({ iss: 'http://127.0.0.1:1' })),
  id_token_type: await sign(claims(), { typ: 'JWT+id' }),
  // The classic forgeries.
  alg_none: new UnsecuredJWT(claims()).encode(),
  hs256_with_public_key: await new SignJWT(claims())
    .setProtectedHeader({ alg: 'HS256', kid: jwk.kid, typ: 'at+jwt' })
    .sign(new TextEncoder().encode(publicPem)),
  unknown_kid: await sign(claims(), { kid: 'not-in-the-jwks' }),
  same_kid_other_key: await sign(claims(), {}, stranger),
  one_megabyte: `${await sign(claims())}${'A'.repeat(1024 * 1024)}`,
};
console.log(JSON.stringify(out));
