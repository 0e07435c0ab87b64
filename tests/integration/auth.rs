//! The OAuth 2.1 resource server, against a real authorization server (`oidc-provider` from
//! npm, in `tests/auth`) issuing JWT access tokens by client credentials and by authorization
//! code + PKCE: discovery and challenges, audience, issuer, expiry, algorithm, scopes,
//! sessions bound to their principal, API keys, tokens kept out of the logs
//! (server-requirements §2 and §5), and the official Python and TypeScript SDK clients
//! signing in end to end.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::clients::{PYTHON, TYPESCRIPT};
use crate::support::{Client, Server, plugins, root, run_script, scratch_dir};

/// `oidc-provider` on 127.0.0.1, killed on drop.
struct AuthServer {
    child: Child,
    issuer: String,
}

impl AuthServer {
    fn start() -> AuthServer {
        AuthServer::start_on(0, false)
    }

    /// On `port` (0: any), signing with a key of its own making if `fresh_keys`.
    fn start_on(port: u16, fresh_keys: bool) -> AuthServer {
        let dir = root().join("tests/auth");
        // Once per process: the auth tests run in parallel, and `npm ci` empties
        // `node_modules` first, so two at once break each other on a fresh clone.
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            if !dir.join("node_modules/oidc-provider").exists() {
                let installed = Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund"])
                    .current_dir(&dir)
                    .status()
                    .expect("npm (Node.js) is needed for the authorization-server tests");
                assert!(installed.success(), "npm ci in tests/auth failed");
            }
        });
        let mut child = Command::new("node")
            .args(["provider.mjs", &port.to_string()])
            .args(fresh_keys.then_some("fresh-keys"))
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start oidc-provider");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // Keep reading: the provider warns on stdout later, and a closed pipe would kill it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let issuer = line.trim().strip_prefix("listening ").expect("the provider's address").to_owned();
        AuthServer { child, issuer }
    }

    /// Revoke a token `client` was issued (RFC 7009).
    async fn revoke(&self, client: &str, token: &str) {
        let response = reqwest::Client::new()
            .post(format!("{}/token/revocation", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "revocation: {}", response.text().await.unwrap());
    }

    /// An access token for `client`, for `resource`, with `scope`.
    async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        let encode = |s: &str| s.replace(':', "%3A").replace('/', "%2F").replace(' ', "+");
        let body = format!("grant_type=client_credentials&resource={}&scope={}", encode(resource), encode(scope));
        let response = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let answer: Value = response.json().await.unwrap();
        answer["access_token"].as_str().unwrap_or_else(|| panic!("no token: {answer}")).to_owned()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now, for a server whose resource URI must name it before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text).iter().map(|b| format!("{b:02x}")).collect()
}

/// Two tenants serving `calc` (acme also `conformance`, whose tools ask for input), each its
/// own resource server trusting `issuer`.
fn layout(dir: &Path, port: u16, issuer: &str) -> std::path::PathBuf {
    let mut text = String::new();
    std::fs::create_dir_all(dir.join("acme")).unwrap();
    std::fs::copy(plugins().join("conformance.wasm"), dir.join("acme").join("conformance.wasm")).unwrap();
    for tenant in ["acme", "globex"] {
        std::fs::create_dir_all(dir.join(tenant)).unwrap();
        std::fs::copy(plugins().join("calc.wasm"), dir.join(tenant).join("calc.wasm")).unwrap();
        text.push_str(&format!(
            "[tenants.{tenant}]\nsources = [\"{tenant}\"]\n[tenants.{tenant}.auth]\n\
             resource = \"http://127.0.0.1:{port}/t/{tenant}/mcp\"\n\
             authorization_servers = [\"{issuer}\"]\nleeway_s = 0\n"
        ));
    }
    text.push_str(&format!(
        "api_keys = [{{ subject = \"ci\", sha256 = \"{}\", scopes = [\"plugins.calc.tools.add\"] }}]\n",
        sha256_hex("globex-ci-key-0123456789")
    ));
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, text).unwrap();
    policy
}

/// Capsule on `port` (which the policy's resource URIs name) under `policy`.
fn serve_on(port: u16, policy: &Path) -> Server {
    Server::http(&["--listen", &format!("127.0.0.1:{port}"), "--config", policy.to_str().unwrap()])
}

/// A client of `url` presenting `token`.
fn with_token(url: &str, token: &str) -> Client {
    let mut client = Client::new(url);
    client.bearer = Some(token.to_owned());
    client
}

fn tool_names(reply: &crate::support::Reply) -> Vec<String> {
    let tools = reply.response(1)["result"]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn tokens_from_a_real_authorization_server_are_held_to_audience_issuer_expiry_and_scope() {
    let provider = AuthServer::start();
    let stranger = AuthServer::start();
    let dir = scratch_dir("auth-resource-server");
    let port = free_port();
    let policy = layout(&dir, port, &provider.issuer);
    let server = serve_on(port, &policy);
    let (acme_url, globex_url) =
        (format!("http://127.0.0.1:{port}/t/acme/mcp"), format!("http://127.0.0.1:{port}/t/globex/mcp"));

    // Discovery: the metadata names the resource and its authorization server.
    let metadata: Value =
        reqwest::get(format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/t/acme/mcp"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(metadata["resource"], acme_url.as_str(), "{metadata}");
    assert_eq!(metadata["authorization_servers"], json!([provider.issuer]), "{metadata}");
    assert_eq!(metadata["scopes_supported"], json!(["plugins.calc", "plugins.conformance"]), "{metadata}");
    // A web page on an allowed origin may run the discovery (the metadata is public to any
    // page) and read the challenge.
    let discovery = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/t/acme/mcp");
    let page = "http://localhost:6274";
    let http = reqwest::Client::new();
    let read = http.get(&discovery).header("origin", page).send().await.unwrap();
    assert_eq!(read.headers().get("access-control-allow-origin").unwrap(), "*");
    // A page whose discovery sends MCP-Protocol-Version preflights it first.
    let asked = http.request(reqwest::Method::OPTIONS, &discovery).header("origin", page);
    let asked = asked.header("access-control-request-method", "GET");
    let preflight = asked.header("access-control-request-headers", "mcp-protocol-version").send().await.unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    assert_eq!(preflight.headers()["access-control-allow-headers"], "mcp-protocol-version");
    let other = http.request(reqwest::Method::PUT, &discovery).send().await.unwrap();
    assert_eq!(other.status(), 405, "no other method");
    // Any page may read it, but only under a Host the server answers to (DNS rebinding).
    let rebound = http.get(&discovery).header("host", "evil.example").send().await.unwrap();
    assert_eq!(rebound.status(), 403);
    let asked = http.request(reqwest::Method::OPTIONS, &acme_url).header("origin", page);
    let asked =
        asked.header("access-control-request-method", "POST").header("access-control-request-headers", "authorization");
    let preflight = asked.send().await.unwrap();
    assert_eq!(preflight.status(), 204, "a preflight needs no token");

    // No token: 401 pointing at the metadata; the body is never read.
    let anonymous = Client::new(&acme_url).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let from_page =
        Client::new(&acme_url).post_raw(r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#, &[("origin", page)]).await;
    assert_eq!(from_page.status, 401);
    let exposed = from_page.headers["access-control-expose-headers"].to_str().unwrap().to_owned();
    assert!(exposed.contains("WWW-Authenticate"), "{exposed}");
    let challenge = anonymous.headers["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/t/acme/mcp\""
        )) && challenge.contains("scope=\"plugins.calc plugins.conformance\"")
            && !challenge.contains("error="),
        "{challenge}"
    );

    // A good token: served, and its scopes decide what is listed and callable.
    let everything = provider.token("alice", &acme_url, "plugins.calc").await;
    let alice = with_token(&acme_url, &everything);
    let listed = alice.modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(tool_names(&listed).len() > 1, "{}", listed.body);
    // An audience written with a trailing slash names the same resource, as an
    // authorization server configured with the URI so issues it (and as introspection has it).
    let slashed = provider.token("alice", &format!("{acme_url}/"), "plugins.calc").await;
    let listed = with_token(&acme_url, &slashed).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let add_only = provider.token("bob", &acme_url, "plugins.calc.tools.add").await;
    let bob = with_token(&acme_url, &add_only);
    let narrow_list = bob.modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(tool_names(&narrow_list), ["add"]);
    // SEC-17: a list that depends on the token is not for shared caches.
    assert_eq!(narrow_list.response(1)["result"]["cacheScope"], "private", "{}", narrow_list.body);
    let sum = bob.modern(2, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}}), json!({})).await;
    assert_eq!(sum.response(2)["result"]["content"][0]["text"], "3", "{}", sum.body);
    let step_up =
        bob.modern(3, "tools/call", json!({"name": "evaluate", "arguments": {"expression": "1"}}), json!({})).await;
    assert_eq!(step_up.status, 403, "{}", step_up.body);
    let challenge = step_up.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"plugins.calc.tools.evaluate\""),
        "{challenge}"
    );
    assert_eq!(step_up.response(3)["error"]["code"], -31403, "{}", step_up.body);

    // SEC-01: another resource's token, another issuer's, an unsigned one, an expired one.
    let for_globex = provider.token("alice", &globex_url, "plugins.calc").await;
    let foreign = stranger.token("alice", &acme_url, "plugins.calc").await;
    let claims = format!(
        "{{\"iss\":\"{}\",\"sub\":\"alice\",\"aud\":\"{acme_url}\",\"exp\":4102444800,\"scope\":\"plugins\"}}",
        provider.issuer
    );
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let unsigned = format!("{}.{}.", b64("{\"alg\":\"none\",\"typ\":\"JWT\"}"), b64(&claims));
    let forged_hmac = format!("{}.{}.c2lnbmF0dXJl", b64("{\"alg\":\"HS256\",\"typ\":\"JWT\"}"), b64(&claims));
    // A token that was good stops being good at its exp, verified earlier or not.
    let short = provider.token("short-lived", &acme_url, "plugins.calc").await;
    let fresh = with_token(&acme_url, &short).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    for (token, why) in [
        (for_globex.as_str(), "not issued for this resource"),
        (foreign.as_str(), "issuer is not trusted"),
        (unsigned.as_str(), "not a signed JWT"),
        (forged_hmac.as_str(), "HS256 are not accepted"),
        (short.as_str(), "has expired"),
        ("not-a-token", "not a signed JWT"),
    ] {
        let refused = with_token(&acme_url, token).modern(1, "tools/list", json!({}), json!({})).await;
        assert_eq!(refused.status, 401, "{why}: {}", refused.body);
        let challenge = refused.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("error=\"invalid_token\"") && challenge.contains(why), "{why}: {challenge}");
    }

    // SEC-03/04: a session is its principal's; another token cannot use it, none at all is 401.
    let mut session = with_token(&acme_url, &everything);
    session.initialize("2025-11-25", json!({})).await;
    let mut hijack = with_token(&acme_url, &add_only);
    hijack.session = session.session.clone();
    let stolen = hijack.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})).await;
    assert_eq!(stolen.status, 404, "{}", stolen.body);
    let mut bare = Client::new(&acme_url);
    bare.session = session.session.clone();
    assert_eq!(bare.post(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"})).await.status, 401);
    assert_eq!(
        session.request(7, "tools/list", json!({})).await["result"]["tools"].as_array().map(Vec::len),
        Some(tool_names(&listed).len())
    );

    // Step-up in a legacy session too: 403 naming the scope.
    let mut narrow = with_token(&acme_url, &add_only);
    narrow.initialize("2025-11-25", json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "evaluate", "arguments": {"expression": "1"}}});
    let refused = narrow.post(&call).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.headers["www-authenticate"].to_str().unwrap().contains("plugins.calc.tools.evaluate"));
    assert_eq!(refused.response(9)["error"]["code"], -31403, "{}", refused.body);

    // Updates to a resource go only to those who may read it.
    let subscribed = session.request(8, "resources/subscribe", json!({"uri": "test://static-text"})).await;
    assert_eq!(subscribed["error"]["code"], -31403, "{subscribed}");
    assert_eq!(subscribed["error"]["data"]["scope"], "plugins.conformance.resources", "{subscribed}");

    // SEC-06: sealed requestState is its principal's; another principal cannot replay it.
    let caps = json!({"elicitation": {"form": {}}});
    let tool = "test_input_required_result_multi_round";
    let broad = provider.token("alice", &acme_url, "plugins").await;
    let alice = with_token(&acme_url, &broad);
    let bob = with_token(&acme_url, &provider.token("bob", &acme_url, "plugins").await);
    let first = alice.modern(1, "tools/call", json!({"name": tool, "arguments": {}}), caps.clone()).await;
    let state = first.response(1)["result"]["requestState"].as_str().expect("input_required state").to_owned();
    let retry = json!({"name": tool, "arguments": {}, "requestState": state,
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}});
    let replayed = bob.modern(2, "tools/call", retry.clone(), caps.clone()).await;
    assert_eq!(replayed.response(2)["error"]["code"], -32602, "{}", replayed.body);
    let resumed = alice.modern(3, "tools/call", retry, caps).await;
    assert!(resumed.response(3).get("result").is_some(), "{}", resumed.body);

    // Plugins learn who calls (tenant, subject, client, scopes), never the token.
    let who = alice.modern(4, "tools/call", json!({"name": "whoami", "arguments": {}}), json!({})).await;
    assert_eq!(
        who.response(4)["result"]["structuredContent"],
        json!({"tenant": "acme", "principal": {"subject": "alice", "client": "alice", "scopes": ["plugins"]}}),
        "{}",
        who.body
    );

    // An API key (stored hashed) works where it is configured, and only there.
    let key = "globex-ci-key-0123456789";
    let ci = with_token(&globex_url, key).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(tool_names(&ci), ["add"], "{}", ci.body);
    assert_eq!(with_token(&acme_url, key).modern(1, "tools/list", json!({}), json!({})).await.status, 401);

    // Authorization follows the policy file live: dropping globex's [auth] opens it, putting
    // it back closes it again, on the endpoint (and sessions) that were already there.
    let secured = std::fs::read_to_string(&policy).unwrap();
    let at = secured.find("[tenants.globex.auth]").unwrap();
    let globex_status =
        || async { Client::new(&globex_url).modern(1, "tools/list", json!({}), json!({})).await.status };
    for (text, expected) in [(&secured[..at], 200), (&secured[..], 401)] {
        std::fs::write(&policy, text).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while globex_status().await != expected {
            assert!(std::time::Instant::now() < deadline, "never {expected}; log:\n{}", server.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // SEC-18: no token reaches the log.
    let log = server.log();
    for token in [&everything, &add_only, &for_globex, &foreign, &short, &key.to_owned()] {
        assert!(!log.contains(token.as_str()), "a token is in the log");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The official SDK clients meet the 401, discover the metadata and the authorization server,
/// register, sign in by authorization code + PKCE for the tenant's resource, and call tools,
/// which see the user who signed in. Both follow the spec; neither knows Capsule.
#[test]
fn official_clients_sign_in_by_authorization_code_and_pkce() {
    let provider = AuthServer::start();
    let dir = scratch_dir("auth-sdk-clients");
    let port = free_port();
    let policy = layout(&dir, port, &provider.issuer);
    let server = serve_on(port, &policy);
    let url = format!("http://127.0.0.1:{port}/t/acme/mcp");
    let clients = root().join("tests/clients");
    let runs = [
        (&PYTHON, "py.sh", vec!["py_oauth.py", "--user", "carol", &url], "10 passed, 0 failed"),
        (&TYPESCRIPT, "ts.sh", vec!["ts_oauth.mjs", "carol", &url], "9 passed, 0 failed"),
    ];
    for (lock, script, args, summary) in runs {
        let _lock = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (ok, output) = run_script(&clients.join(script), &args, &[]);
        eprintln!("{output}");
        assert!(ok && output.lines().any(|l| l == summary), "{script} failed:\n{output}\nlog:\n{}", server.log());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A tenant taking opaque tokens: the authorization server vouches for each by introspection
/// (as the resource server's own client), and its answer is held to audience and activity; a
/// revoked token stops working once the short cache lapses.
#[tokio::test]
async fn opaque_tokens_are_introspected_and_revocation_takes_hold() {
    let provider = AuthServer::start();
    let dir = scratch_dir("auth-introspection");
    let port = free_port();
    std::fs::create_dir_all(dir.join("initech")).unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("initech").join("calc.wasm")).unwrap();
    std::fs::write(dir.join("introspection-secret"), "capsule-secret\n").unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        format!(
            "[tenants.initech]\nsources = [\"initech\"]\n[tenants.initech.auth]\n\
             resource = \"http://127.0.0.1:{port}/t/initech/mcp\"\nauthorization_servers = [\"{}\"]\n\
             [tenants.initech.auth.introspection]\nclient_id = \"capsule\"\n\
             client_secret = {{ file = \"introspection-secret\" }}\ncache_s = 1\n",
            provider.issuer
        ),
    )
    .unwrap();
    let server = serve_on(port, &policy);
    let url = format!("http://127.0.0.1:{port}/t/initech/mcp");

    let token = provider.token("alice", &url, "plugins.calc.tools.add").await;
    assert_ne!(token.split('.').count(), 3, "the provider should issue an opaque token here: {token}");
    let alice = with_token(&url, &token);
    let listed = alice.modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(tool_names(&listed), ["add"], "{}\nlog:\n{}", listed.body, server.log());
    let sum = alice.modern(2, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}}), json!({})).await;
    assert_eq!(sum.response(2)["result"]["content"][0]["text"], "3", "{}", sum.body);

    // Another resource's opaque token, and one the server never issued.
    let elsewhere = provider.token("alice", &format!("http://127.0.0.1:{port}/t/umbrella/mcp"), "plugins.calc").await;
    for (token, why) in [(elsewhere.as_str(), "not issued for this resource"), ("made-up-opaque-token", "not active")] {
        let refused = with_token(&url, token).modern(1, "tools/list", json!({}), json!({})).await;
        assert_eq!(refused.status, 401, "{why}: {}", refused.body);
        let challenge = refused.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("error=\"invalid_token\"") && challenge.contains(why), "{why}: {challenge}");
    }

    // Revoked: refused once the answer cached for a second has lapsed.
    provider.revoke("alice", &token).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let revoked = alice.modern(3, "tools/list", json!({}), json!({})).await;
    assert_eq!(revoked.status, 401, "{}", revoked.body);
    assert!(revoked.headers["www-authenticate"].to_str().unwrap().contains("not active"));
    let log = server.log();
    assert!(!log.contains(&token) && !log.contains("capsule-secret"), "a token or secret reached the log:\n{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A key the issuer withdraws (the provider started again on its port with a new key) is
/// refused once the key set is older than `keys_max_age_s`, and a token verified with it is
/// not remembered past that either; while the issuer cannot be reached, the keys at hand are
/// kept and its tokens still taken.
#[tokio::test]
async fn a_withdrawn_signing_key_is_refused_once_the_keys_are_fetched_again() {
    let issuer_port = free_port();
    let first = AuthServer::start_on(issuer_port, true);
    let dir = scratch_dir("auth-rotation");
    let port = free_port();
    std::fs::create_dir_all(dir.join("acme")).unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("acme").join("calc.wasm")).unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        format!(
            "[tenants.acme]\nsources = [\"acme\"]\n[tenants.acme.auth]\n\
             resource = \"http://127.0.0.1:{port}/t/acme/mcp\"\nauthorization_servers = [\"{}\"]\n\
             keys_max_age_s = 1\n",
            first.issuer
        ),
    )
    .unwrap();
    let server = serve_on(port, &policy);
    let url = format!("http://127.0.0.1:{port}/t/acme/mcp");
    let old = first.token("alice", &url, "plugins.calc.tools.add").await;
    let listed = with_token(&url, &old).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(tool_names(&listed), ["add"], "{}\nlog:\n{}", listed.body, server.log());

    drop(first);
    let second = AuthServer::start_on(issuer_port, true);
    // Past the keys' age, the first request finds them stale and has them fetched again, in
    // the background (it is answered with the keys at hand); the old token, neither in the new
    // set nor remembered past the old set's freshness, is then refused.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let reply = with_token(&url, &old).modern(1, "tools/list", json!({}), json!({})).await;
        if reply.status != 200 || std::time::Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(refused.status, 401, "{}\nlog:\n{}", refused.body, server.log());
    let challenge = refused.headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("invalid_token") && challenge.contains("signing key"), "{challenge}");
    let new = second.token("alice", &url, "plugins.calc.tools.add").await;
    let listed = with_token(&url, &new).modern(1, "tools/list", json!({}), json!({})).await;
    assert_eq!(tool_names(&listed), ["add"], "{}", listed.body);

    // The issuer gone: its keys, fetched a second ago, stay in use once the fetch fails.
    drop(second);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..2 {
        let kept = with_token(&url, &new).modern(1, "tools/list", json!({}), json!({})).await;
        assert_eq!(tool_names(&kept), ["add"], "{}\nlog:\n{}", kept.body, server.log());
        server.wait_for_log("the keys had before are kept");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An HTTP listener on 127.0.0.1 that answers every request with `status` and `body` (JSON),
/// or, with no `status`, never answers; and how many requests it has had.
async fn answering(status: Option<&'static str>, body: &'static str) -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                // The form is small: one read takes the head and the body.
                let _ = socket.read(&mut [0; 8192]).await;
                counter.fetch_add(1, Ordering::SeqCst);
                let Some(status) = status else {
                    return tokio::time::sleep(Duration::from_secs(60)).await;
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
            });
        }
    });
    (port, asked)
}

/// Introspection policy for `tenants`, each asking its own endpoint (a port on 127.0.0.1).
fn introspected(dir: &Path, port: u16, tenants: [(&str, u16); 2]) -> std::path::PathBuf {
    let policy = layout(dir, port, &format!("http://127.0.0.1:{}", tenants[0].1));
    let mut text = std::fs::read_to_string(&policy).unwrap();
    for (tenant, endpoint) in tenants {
        text.push_str(&format!(
            "[tenants.{tenant}.auth.introspection]\nendpoint = \"http://127.0.0.1:{endpoint}/introspect\"\n\
             client_id = \"capsule\"\nclient_secret = {{ env = \"CAPSULE_TEST_INTROSPECTION_SECRET\" }}\n"
        ));
    }
    std::fs::write(&policy, text).unwrap();
    policy
}

/// Capsule on `port` under `policy`, with the introspection secret [`introspected`] names.
fn serve_introspecting(port: u16, policy: &Path) -> Server {
    Server::http_with_env(
        &std::env::current_dir().unwrap(),
        &["--listen", &format!("127.0.0.1:{port}"), "--config", policy.to_str().unwrap()],
        &[("CAPSULE_TEST_INTROSPECTION_SECRET", "s3cret")],
    )
}

/// An introspection endpoint that refuses the question (400) or Capsule's own credentials
/// (401) refuses the token: 401 `invalid_token`, not the 503 of an outage, which anyone could
/// otherwise bring about with a token the endpoint dislikes; refused credentials are warned
/// of, for the operator to mend.
#[tokio::test]
async fn an_introspection_endpoint_that_refuses_the_question_refuses_the_token() {
    let dir = scratch_dir("auth-introspection-refused");
    let port = free_port();
    let (bad_request, _) = answering(Some("400 Bad Request"), "").await;
    let (unauthorized, _) = answering(Some("401 Unauthorized"), "").await;
    let policy = introspected(&dir, port, [("acme", bad_request), ("globex", unauthorized)]);
    let server = serve_introspecting(port, &policy);
    for tenant in ["acme", "globex"] {
        let url = format!("http://127.0.0.1:{port}/t/{tenant}/mcp");
        let reply = with_token(&url, "an-opaque-token-0123456789").modern(1, "tools/list", json!({}), json!({})).await;
        assert_eq!(reply.status, 401, "{tenant}: {}", reply.body);
        let challenge = reply.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("invalid_token") && challenge.contains("refused to introspect"), "{challenge}");
    }
    server.wait_for_log("refused to introspect a token (HTTP 400 Bad Request)");
    let log = server.wait_for_log("refused Capsule's introspection credentials (HTTP 401 Unauthorized)");
    assert!(!log.contains("s3cret") && !log.contains("an-opaque-token"), "a secret reached the log:\n{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A token found inactive is not asked about again while that answer stands; and an endpoint
/// that never answers holds a request at most a few seconds in the queue behind the 8 in
/// flight, which then gets the 503 of an outage rather than waiting on every slow one.
#[tokio::test]
async fn a_dead_token_is_asked_about_once_and_a_silent_endpoint_is_not_waited_on_forever() {
    let dir = scratch_dir("auth-introspection-queue");
    let port = free_port();
    let (inactive, asked) = answering(Some("200 OK"), r#"{"active": false}"#).await;
    let (silent, _) = answering(None, "").await;
    let policy = introspected(&dir, port, [("acme", inactive), ("globex", silent)]);
    let server = serve_introspecting(port, &policy);
    let acme = format!("http://127.0.0.1:{port}/t/acme/mcp");
    for _ in 0..3 {
        let reply = with_token(&acme, "a-dead-opaque-token-0123").modern(1, "tools/list", json!({}), json!({})).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(reply.headers["www-authenticate"].to_str().unwrap().contains("not active"));
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the dead token was asked about more than once");

    let globex = format!("http://127.0.0.1:{port}/t/globex/mcp");
    let started = std::time::Instant::now();
    let mut waiting = tokio::task::JoinSet::new();
    for n in 0..9 {
        let client = with_token(&globex, &format!("opaque-token-number-{n}"));
        waiting.spawn(async move {
            let reply = client.modern(1, "tools/list", json!({}), json!({})).await;
            (reply.status, started.elapsed())
        });
    }
    let (status, after) = waiting.join_next().await.unwrap().unwrap();
    assert_eq!(status, 503, "the first answer, after {after:?}");
    assert!(after < Duration::from_secs(9), "the queued request waited {after:?}, as long as the ones asking");
    while let Some(done) = waiting.join_next().await {
        assert_eq!(done.unwrap().0, 503);
    }
    server.wait_for_log("8 introspections were in flight for 5s");
}

/// An authorization server that cannot be asked (nothing listens where it should) is the
/// server's trouble, not the token's: 503 with `Retry-After`, no `invalid_token` that would
/// send a client to sign in again, and nothing of the issuer's addresses or answers, which
/// go to the operator's log instead; for a JWT and, by introspection, an opaque token alike.
#[tokio::test]
async fn an_authorization_server_that_cannot_be_asked_is_a_503_that_tells_nothing() {
    let dir = scratch_dir("auth-unavailable");
    let (port, gone) = (free_port(), free_port());
    let issuer = format!("http://127.0.0.1:{gone}");
    let policy = layout(&dir, port, &issuer);
    let mut text = std::fs::read_to_string(&policy).unwrap();
    text.push_str(&format!(
        "[tenants.globex.auth.introspection]\nendpoint = \"{issuer}/introspect\"\n\
         client_id = \"capsule\"\nclient_secret = {{ env = \"CAPSULE_TEST_INTROSPECTION_SECRET\" }}\n"
    ));
    std::fs::write(&policy, text).unwrap();
    let server = Server::http_with_env(
        &std::env::current_dir().unwrap(),
        &["--listen", &format!("127.0.0.1:{port}"), "--config", policy.to_str().unwrap()],
        &[("CAPSULE_TEST_INTROSPECTION_SECRET", "s3cret")],
    );
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let acme = format!("http://127.0.0.1:{port}/t/acme/mcp");
    let claims = format!(r#"{{"iss":"{issuer}","sub":"alice","aud":"{acme}","exp":4102444800}}"#);
    let jwt = format!("{}.{}.c2lnbmF0dXJl", b64(r#"{"alg":"RS256","kid":"k1"}"#), b64(&claims));
    let globex = format!("http://127.0.0.1:{port}/t/globex/mcp");
    for (url, token) in [(&acme, jwt.as_str()), (&globex, "an-opaque-token-0123456789")] {
        // The second asks within the refetch window, when the failed fetch still stands.
        for _ in 0..2 {
            let reply = with_token(url, token).modern(1, "tools/list", json!({}), json!({})).await;
            assert_eq!(reply.status, 503, "{url}: {}", reply.body);
            assert_eq!(reply.headers["retry-after"], "30");
            assert!(reply.headers.get("www-authenticate").is_none());
            assert!(reply.body.contains("temporarily_unavailable"), "{}", reply.body);
            assert!(!reply.body.contains(&gone.to_string()), "the issuer's address reached the client: {}", reply.body);
        }
    }
    let log = server.wait_for_log("token introspection failed");
    assert!(log.contains(&format!("{issuer}/introspect")), "{log}");
    assert!(log.contains("the keys had before are kept"), "{log}");
}
