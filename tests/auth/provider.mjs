// A real authorization server for Capsule's tests: oidc-provider on 127.0.0.1, issuing JWT
// access tokens (RFC 9068) for the resource a client names (RFC 8707), by client
// credentials and by authorization code + PKCE to clients that register themselves
// (RFC 7591). Resources under /t/initech/ and /t/umbrella/ get opaque tokens instead, which
// the client `capsule` (secret `capsule-secret`) may introspect (RFC 7662); clients may revoke
// their tokens (RFC 7009). Prints `listening <issuer>` once it accepts requests.
//
// The authorization code flow has a scripted user: every interaction signs in as `carol`
// and consents to exactly the scopes and resource the client asked for, so a test can follow
// the authorization URL's redirects to the code without a browser.
//
// With `fresh-keys`, it signs with an RSA key made at start rather than oidc-provider's fixed
// development key: a provider started again on the same port has withdrawn the key it
// signed with before (key rotation, as a real issuer does it).
//
// usage: node provider.mjs [port] [fresh-keys]
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] ?? 0);
const freshKeys = process.argv[3] === 'fresh-keys';
const scope = [
  'plugins',
  'plugins.calc',
  'plugins.calc.tools',
  'plugins.calc.tools.add',
  'plugins.calc.tools.evaluate',
  'plugins.conformance',
].join(' ');

const client = (client_id, extra = {}) => ({
  client_id,
  client_secret: `${client_id}-secret`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  ...extra,
});


let issuer;
const listener = (await import('node:http')).createServer();
await new Promise((resolve) => listener.listen(port, '127.0.0.1', resolve));
issuer = `http://127.0.0.1:${listener.address().port}`;

const signing = () => {
  const jwk = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  return { ...jwk, kid: randomUUID(), use: 'sig', alg: 'RS256' };
};

const provider = new Provider(issuer, {
  ...(freshKeys ? { jwks: { keys: [signing()] } } : {}),
  clients: [client('alice'), client('bob'), client('short-lived'), client('capsule')],
  // Advertised, so clients that register with the scopes Capsule challenged for are accepted.
  scopes: ['openid', 'offline_access', ...scope.split(' ')],
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    // Only the resource server's own client learns what a token grants.
    introspection: { enabled: true, allowedPolicy: (ctx, client) => client.clientId === 'capsule' },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => {
        if (!/^http:\/\/127\.0\.0\.1:\d+\//.test(resource)) {
          throw new errors.InvalidTarget();
        }
        return {
          scope,
          audience: resource,
          accessTokenFormat: /\/t\/(initech|umbrella)\//.test(resource) ? 'opaque' : 'jwt',
          accessTokenTTL: client.clientId === 'short-lived' ? 2 : 600,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

// carol signs in, then grants what was asked for (the resource's scopes, and any OpenID ones).
async function interact(req, res) {
  const { prompt, params, session } = await provider.interactionDetails(req, res);
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: 'carol' } };
  } else {
    const grant = new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    // Granted both as OpenID scopes (they are advertised) and for the resource; each kind of
    // token takes the ones that apply to it.
    const requested = params.scope ?? '';
    grant.addOIDCScope(requested);
    for (const resource of [params.resource ?? []].flat()) grant.addResourceScope(resource, requested);
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: prompt.name !== 'login' });
}

const callback = provider.callback();
listener.on('request', (req, res) => {
  if (req.method === 'GET' && req.url.startsWith('/interaction/')) {
    interact(req, res).catch((err) => {
      console.error('interaction', err);
      res.statusCode = 500;
      res.end(String(err));
    });
  } else {
    callback(req, res);
  }
});
console.log(`listening ${issuer}`);
