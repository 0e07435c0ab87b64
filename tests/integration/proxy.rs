//! Capsule behind a real reverse proxy (Debian's nginx), set up as the README's "Behind a
//! reverse proxy, and as several replicas" says: two replicas sharing a state key, the
//! client's `Host` forwarded, HTTP/1.1 to the upstream, sessions kept to one replica by
//! address.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Client, Scratch, Server, first_text, plugins};

/// An nginx of the test's own (no daemon, everything under `dir`) in front of `replicas`:
/// `sticky` as the README has it (`ip_hash`, `keepalive`, the headers at server level),
/// `spread` taking turns between them, `bare` taking turns with nginx's default `Host` (the
/// upstream block's name), and `prefixed` publishing `authed` under `/capsule/` with the
/// README's two locations.
struct Nginx {
    child: Child,
    sticky: u16,
    spread: u16,
    bare: u16,
    prefixed: u16,
    access_log: std::path::PathBuf,
}

impl Nginx {
    fn start(dir: &Path, replicas: [&str; 2], authed: &str) -> Nginx {
        let port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (sticky, spread, bare, prefixed) = (port(), port(), port(), port());
        let dir = dir.display();
        let servers: String = replicas.iter().map(|r| format!("server {r}; ")).collect();
        let headers = "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_read_timeout 5m;";
        let forwarded = format!("proxy_set_header Host $host; {headers}");
        let config = format!(
            "worker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n\
               log_format upstream '$upstream_addr $request_method $status';\n\
               access_log {dir}/access.log upstream;\n\
               client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fastcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
               upstream sticky {{ ip_hash; {servers}keepalive 32; }}\n\
               upstream spread {{ {servers}}}\n\
               upstream authed {{ server {authed}; }}\n\
               server {{ listen 127.0.0.1:{sticky}; client_max_body_size 8m; {forwarded}\n\
                 location / {{ proxy_pass http://sticky; }} }}\n\
               server {{ listen 127.0.0.1:{spread}; {forwarded} location / {{ proxy_pass http://spread; }} }}\n\
               server {{ listen 127.0.0.1:{bare}; {headers} location / {{ proxy_pass http://spread; }} }}\n\
               server {{ listen 127.0.0.1:{prefixed}; {forwarded}\n\
                 location /capsule/ {{ proxy_pass http://authed/; }}\n\
                 location /.well-known/oauth-protected-resource/capsule/ {{\n\
                   proxy_pass http://authed/.well-known/oauth-protected-resource/; }} }}\n\
             }}\n",
        );
        let file = format!("{dir}/nginx.conf");
        std::fs::write(&file, config).unwrap();
        let binary = ["/usr/sbin/nginx", "nginx"].into_iter().find(|b| Path::new(b).exists()).unwrap_or("nginx");
        let child = Command::new(binary)
            .args(["-p", &dir.to_string(), "-c", &file, "-e", &format!("{dir}/error.log")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's nginx (apt-get install nginx), which .ci/run installs");
        let nginx = Nginx { child, sticky, spread, bare, prefixed, access_log: format!("{dir}/access.log").into() };
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in [sticky, spread, bare, prefixed] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                let log = std::fs::read_to_string(format!("{dir}/error.log")).unwrap_or_default();
                assert!(Instant::now() < deadline, "nginx did not start listening on {port}:\n{log}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        nginx
    }

    /// The upstream each request went to, in order.
    fn upstreams(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.access_log).unwrap_or_default();
        log.lines().filter_map(|line| line.split_whitespace().next().map(str::to_owned)).collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next message of `stream`, which must come within 20 s.
async fn next(stream: &mut crate::support::SseStream) -> serde_json::Value {
    tokio::time::timeout(Duration::from_secs(20), stream.next_message())
        .await
        .expect("the stream goes on through the proxy")
        .expect("a message before the end")
}

/// A tenant published at `https://mcp.example.com/capsule/t/acme/mcp`, secured by an API
/// key (`key`): its policy file.
fn published_under_a_path(dir: &Path, key: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("acme")).unwrap();
    std::fs::copy(plugins().join("calc.wasm"), dir.join("acme").join("calc.wasm")).unwrap();
    let digest: String =
        <sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        format!(
            "[tenants.acme]\nsources = [\"acme\"]\n[tenants.acme.auth]\n\
             resource = \"https://mcp.example.com/capsule/t/acme/mcp\"\n\
             api_keys = [{{ subject = \"ci\", sha256 = \"{digest}\", scopes = [\"plugins\"] }}]\n"
        ),
    )
    .unwrap();
    policy
}

#[tokio::test]
async fn two_replicas_behind_nginx_as_the_readme_sets_them_up() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("proxy");
    let key = dir.join("state.key");
    std::fs::write(&key, [9u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let conformance = plugins().join("conformance.wasm");
    let args = [
        "--plugin",
        conformance.to_str().unwrap(),
        "--state-key-file",
        key.to_str().unwrap(),
        "--allow-host",
        "mcp.example.com",
        "--sessions-per-address",
        "10000",
    ];
    let (a, b) = (Server::http(&args), Server::http(&args));
    let api_key = "capsule-proxy-test-key";
    let policy = published_under_a_path(&dir, api_key);
    let authed = Server::http_in(&dir, &["--config", policy.to_str().unwrap(), "--allow-host", "mcp.example.com"]);
    let nginx = Nginx::start(&dir, [&a.authority(), &b.authority()], &authed.authority());
    // The public name reaches the proxy, as DNS would have it.
    let http = reqwest::Client::builder().resolve("mcp.example.com", ([127, 0, 0, 1], 0).into()).build().unwrap();
    let at = |port: u16| Client::with_http(&format!("http://mcp.example.com:{port}/mcp"), http.clone());

    // A 2026-07-28 client is stateless: its rounds go to either replica and go on there.
    let spread = at(nginx.spread);
    let caps = json!({"elicitation": {"form": {}}});
    let tool = "test_input_required_result_multi_round";
    let first = spread.modern(1, "tools/call", json!({"name": tool, "arguments": {}}), caps.clone()).await;
    let state = first.response(1)["result"]["requestState"].as_str().expect("input_required").to_owned();
    let answer = json!({"name": tool, "arguments": {}, "requestState": state,
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}});
    let second = spread.modern(2, "tools/call", answer, caps.clone()).await;
    let state = second.response(2)["result"]["requestState"].as_str().expect("a second round").to_owned();
    let answer = json!({"name": tool, "arguments": {}, "requestState": state,
        "inputResponses": {"favorite_color": {"action": "accept", "content": {"color": "blue"}}}});
    let third = spread.modern(3, "tools/call", answer, caps).await;
    assert_eq!(first_text(&third.response(3)["result"]), "Alice likes blue", "{}", third.body);
    let upstreams = nginx.upstreams();
    for replica in [a.authority(), b.authority()] {
        assert!(upstreams.contains(&replica), "{replica} served none of {upstreams:?}");
    }

    // A page served from the public name may call it (its origin is the endpoint's own).
    let meta = json!({"io.modelcontextprotocol/protocolVersion": crate::support::META_2026,
        "io.modelcontextprotocol/clientCapabilities": {}});
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta}}).to_string();
    let modern = |origin| {
        [("mcp-protocol-version", crate::support::META_2026), ("mcp-method", "tools/list"), ("origin", origin)]
    };
    let page = spread.post_raw(list.clone(), &modern("https://mcp.example.com")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let foreign = spread.post_raw(list.clone(), &modern("https://evil.example")).await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    // Without `Host $host`, Capsule sees the upstream block's name and refuses it.
    let bare = at(nginx.bare).post_raw(list, &modern("https://mcp.example.com")[..2]).await;
    assert_eq!(bare.status, 403, "{}", bare.body);
    assert!(bare.body.contains("Host"), "{}", bare.body);

    // A legacy session stays with the replica that opened it; its event streams pass
    // through the proxy as they come: the server's question reaches the client while the
    // call waits for the answer (a proxy holding the stream back would hold both forever).
    let mut sticky = at(nginx.sticky);
    sticky.initialize("2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}});
    let mut stream = sticky.stream(&call).await;
    let question = next(&mut stream).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    assert_eq!(sticky.post(&answer).await.status, 202);
    let done = next(&mut stream).await;
    assert!(done["id"] == 5 && done.get("result").is_some(), "{done}");
    let listed = sticky.request(6, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{listed}");
    assert_eq!(sticky.end_session().await, 204);

    // Published under a path: the 401 names the public metadata URL, which the README's
    // second location routes to the tenant's document.
    let public = format!("http://mcp.example.com:{}/capsule/t/acme/mcp", nginx.prefixed);
    let mut published = Client::with_http(&public, http.clone());
    let refused = published.modern(7, "tools/list", json!({}), json!({})).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    let challenge = refused.headers["www-authenticate"].to_str().unwrap().to_owned();
    let announced = "https://mcp.example.com/.well-known/oauth-protected-resource/capsule/t/acme/mcp";
    assert!(challenge.contains(announced), "{challenge}");
    let metadata = announced.replace("https://mcp.example.com", &format!("http://mcp.example.com:{}", nginx.prefixed));
    let document: serde_json::Value = http.get(&metadata).send().await.unwrap().json().await.unwrap();
    assert_eq!(document["resource"], "https://mcp.example.com/capsule/t/acme/mcp", "{document}");
    published.bearer = Some(api_key.into());
    let listed = published.modern(8, "tools/list", json!({}), json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
}
