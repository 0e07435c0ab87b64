// The official TypeScript SDK client signing in to a Capsule tenant behind OAuth 2.1: it meets
// the 401, discovers the protected-resource metadata and the authorization server, registers
// itself (RFC 7591), runs authorization code + PKCE with the resource indicator, and then uses
// the tools the token grants. The "browser" follows the authorization URL's redirects to the
// callback, where the test authorization server's scripted user has signed in and consented.
//   node ts_oauth.mjs USER URL
// Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
import { randomBytes } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

let passed = 0;
let failed = 0;
function check(name, ok, detail = "") {
  ok ? passed++ : failed++;
  console.log(`${ok ? "PASS" : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
}

const CALLBACK = "http://127.0.0.1:9/callback";

/** Follow `url` as a browser would, cookies kept, until it redirects to the callback. */
async function browse(url) {
  const cookies = new Map();
  for (let hops = 0; hops < 20; hops++) {
    if (url.startsWith(CALLBACK)) return new URL(url);
    const cookie = [...cookies].map(([k, v]) => `${k}=${v}`).join("; ");
    const response = await fetch(url, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const set of response.headers.getSetCookie()) {
      const [pair] = set.split(";");
      const at = pair.indexOf("=");
      cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1));
    }
    const location = response.headers.get("location");
    if (!location) throw new Error(`the sign-in stopped at ${url}: HTTP ${response.status} ${(await response.text()).slice(0, 300)}`);
    url = new URL(location, url).toString();
  }
  throw new Error("too many redirects");
}

/** An OAuthClientProvider keeping everything in memory for one run. */
class Session {
  constructor() {
    this.expectedState = randomBytes(16).toString("hex");
    this.signIns = 0;
  }
  get redirectUrl() {
    return CALLBACK;
  }
  get clientMetadata() {
    return {
      client_name: "capsule-test-typescript",
      redirect_uris: [CALLBACK],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return this.expectedState;
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(client) {
    this.client = client;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens) {
    this.saved = tokens;
  }
  async redirectToAuthorization(url) {
    this.signIns++;
    this.landed = await browse(url.toString());
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

const [user, url] = process.argv.slice(2);
try {
  const session = new Session();
  const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: session });
  let refused = false;
  try {
    await new Client({ name: "ts-oauth", version: "1.0.0" }).connect(first);
  } catch (e) {
    refused = e instanceof UnauthorizedError;
    if (!refused) throw e;
  }
  check("the first connection asks the user to sign in", refused && session.signIns === 1);
  const callback = session.landed;
  check("the callback carries our state", callback?.searchParams.get("state") === session.expectedState, String(callback));
  const code = callback?.searchParams.get("code");
  check("...and an authorization code", Boolean(code), String(callback));
  await first.finishAuth(code);
  const scopes = (session.saved?.scope ?? "").split(" ");
  check(
    "the token carries the scopes Capsule asked for",
    scopes.includes("plugins.calc") && scopes.includes("plugins.conformance"),
    session.saved?.scope,
  );

  const client = new Client({ name: "ts-oauth", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: session }));
  const tools = (await client.listTools()).tools.map((t) => t.name);
  check("tools/list with the token", tools.includes("add") && tools.includes("whoami"), tools.join(","));
  const sum = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
  check("tools/call with the token", sum.content?.[0]?.text === "5", JSON.stringify(sum));
  const who = (await client.callTool({ name: "whoami", arguments: {} })).structuredContent ?? {};
  check("the plugin sees the signed-in user", who.principal?.subject === user, JSON.stringify(who));
  check("...and the registered client", who.principal?.client === session.client?.client_id, JSON.stringify(who));
  check("signed in only once", session.signIns === 1, String(session.signIns));
  await client.close();
} catch (e) {
  check("run", false, e?.stack ?? String(e));
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
