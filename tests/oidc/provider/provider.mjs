// A real OpenID provider (npm oidc-provider) on loopback for Airlock's sign-in tests; tests/oidc/provider.py starts it.
//
// Environment: OIDC_PORT, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URIS and OIDC_POST_LOGOUT_REDIRECT_URIS
// (comma-separated), OIDC_ACCOUNTS_FILE ({"<login>": {"sub": ..., "email": ..., "groups": [...], ...}}, re-read at
// every lookup so a test can change claims between two sign-ins).
//
// Pages: the login form at /interaction/<uid> (input[name=login], input[name=password] (any), button[type=submit]);
// no consent page (loadExistingGrant grants the requested scopes); the logout confirmation at /session/end
// (button[name=logout]).
// Test switches: POST /__test/mode {"mode": ...} makes the token endpoint's ID tokens bad in one way (204);
// GET /__test/logouts answers the number of completed end-session confirmations.

import { readFileSync } from 'node:fs';

import { SignJWT, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const list = (name) => env(name).split(',').map((item) => item.trim()).filter(Boolean);

const port = Number(env('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;
const accountsFile = env('OIDC_ACCOUNTS_FILE');
const clientId = env('OIDC_CLIENT_ID');

const KID = 'airlock-test-rs256';
const signing = await generateKeyPair('RS256', { extractable: true });
const other = await generateKeyPair('RS256'); // the wrong-key mode signs with it under the real kid

const MODES = new Set(['normal', 'wrong-nonce', 'expired', 'wrong-key', 'wrong-audience', 'wrong-issuer', 'garbled']);
let mode = 'normal';
let logouts = 0;

const readAccounts = () => JSON.parse(readFileSync(accountsFile, 'utf8'));

const escape = (value) => String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const page = (title, body) => `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${escape(title)}</title></head>
<body><h1>${escape(title)}</h1>${body}</body></html>`;

const loginPage = (uid, error) => page(
  'Sign in to the test provider',
  `${error ? `<p role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login" autocomplete="off">
<label>Login <input name="login" autofocus></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button>
</form>`,
);

async function findAccount(_ctx, sub) {
  const bySub = () => Object.values(readAccounts()).find((account) => account.sub === sub);
  if (!bySub()) return undefined;
  return { accountId: sub, claims: async () => bySub() ?? { sub } };
}

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: env('OIDC_CLIENT_SECRET'),
    redirect_uris: list('OIDC_REDIRECT_URIS'),
    post_logout_redirect_uris: list('OIDC_POST_LOGOUT_REDIRECT_URIS'),
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  jwks: { keys: [{ ...(await exportJWK(signing.privateKey)), kid: KID, alg: 'RS256', use: 'sig' }] },
  findAccount,
  scopes: ['openid', 'email', 'profile'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'groups'],
  },
  // The scopes' claims (groups among them) go in the ID token too, not only at userinfo.
  conformIdTokenClaims: false,
  // No consent page: every authorization is granted the scopes it asks for.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      accountId: ctx.oidc.account.accountId,
      clientId: ctx.oidc.client.clientId,
    });
    grant.addOIDCScope(ctx.oidc.params.scope);
    await grant.save();
    return grant;
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['airlock-oidc-test-cookies'] },
  ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 3600, Session: 86400, Grant: 86400 },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      async logoutSource(ctx, form) {
        ctx.body = page('Sign out of the test provider?', `${form}
<button type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>`);
      },
      async postLogoutSuccessSource(ctx) {
        ctx.body = page('Signed out of the test provider', '');
      },
    },
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    const lines = Object.entries(out).map(([key, value]) => `<p>${escape(key)}: ${escape(value)}</p>`);
    ctx.body = page('Test provider error', lines.join(''));
  },
});

provider.on('end_session.success', () => { logouts += 1; });

async function readForm(ctx) {
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  const body = Buffer.concat(chunks).toString();
  return ctx.is('json') ? JSON.parse(body || '{}') : Object.fromEntries(new URLSearchParams(body));
}

// The login page and the test switches, before oidc-provider's own routes.
provider.use(async (ctx, next) => {
  const interaction = ctx.path.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (interaction) {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    ctx.set('Cache-Control', 'no-store');
    ctx.type = 'html';
    if (details.prompt.name !== 'login') {
      ctx.status = 501;
      ctx.body = page('Test provider error', `<p>unexpected prompt ${escape(details.prompt.name)}</p>`);
    } else if (ctx.method === 'POST' && interaction[2]) {
      const { login } = await readForm(ctx);
      const account = readAccounts()[login];
      if (!account) {
        ctx.status = 401;
        ctx.body = loginPage(details.uid, `No account "${login}"`);
        return;
      }
      const returnTo = await provider.interactionResult(ctx.req, ctx.res, {
        login: { accountId: account.sub },
      }, { mergeWithLastSubmission: false });
      ctx.status = 303;
      ctx.redirect(returnTo);
    } else {
      ctx.body = loginPage(details.uid);
    }
    return;
  }
  if (ctx.path === '/__test/mode' && ctx.method === 'POST') {
    const wanted = (await readForm(ctx)).mode;
    if (!MODES.has(wanted)) ctx.throw(400, `unknown mode ${wanted}`);
    mode = wanted;
    ctx.status = 204;
    return;
  }
  if (ctx.path === '/__test/logouts' && ctx.method === 'GET') {
    ctx.body = { logouts };
    return;
  }
  await next();
  if (ctx.path === '/token' && ctx.method === 'POST' && ctx.status === 200 && ctx.body?.id_token && mode !== 'normal') {
    ctx.body = { ...ctx.body, id_token: await spoil(ctx.body.id_token) };
  }
});

// The ID token made bad the way the mode says, signed again (with the real key but for wrong-key).
async function spoil(idToken) {
  if (mode === 'garbled') return 'not-a-jwt'; // an answer no relying party can read
  const header = decodeProtectedHeader(idToken);
  const claims = decodeJwt(idToken);
  const now = Math.floor(Date.now() / 1000);
  let key = signing.privateKey;
  if (mode === 'wrong-nonce') claims.nonce = `not-${claims.nonce ?? 'sent'}`;
  if (mode === 'expired') Object.assign(claims, { iat: now - 7200, exp: now - 3600 });
  if (mode === 'wrong-audience') claims.aud = 'another-client';
  if (mode === 'wrong-issuer') claims.iss = 'http://127.0.0.1:9/another-issuer';
  if (mode === 'wrong-key') key = other.privateKey;
  return new SignJWT(claims).setProtectedHeader(header).sign(key);
}

provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
