// A real authorization server for Capsule's tests: oidc-provider on 127.0.0.1, issuing JWT
// access tokens (RFC 9068) for the resource a client names (RFC 8707), by client
// credentials. Prints `listening <issuer>` once it accepts requests.
//
// usage: node provider.mjs [port]
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] ?? 0);
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

const provider = new Provider(issuer, {
  clients: [client('alice'), client('bob'), client('short-lived')],
  features: {
    devInteractions: { enabled: false },
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
          accessTokenFormat: 'jwt',
          accessTokenTTL: client.clientId === 'short-lived' ? 2 : 600,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));
listener.on('request', provider.callback());
console.log(`listening ${issuer}`);
