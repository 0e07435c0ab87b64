//! What operators see: `/metrics` on its own listener and on the admin one, read over real
//! sockets after a known sequence of calls.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Client, Server, StdioServer, address, first_text, plugins, root, scratch_dir, status_mib};

/// The value of the series whose name and labels start as `series` says (e.g.
/// `capsule_plugin_calls_total{tenant="default",plugin="calc"`), summed over the rest.
fn value(text: &str, series: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(series)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

fn calls(text: &str, plugin: &str, tool: &str, outcome: &str) -> f64 {
    value(
        text,
        &format!(
            r#"capsule_plugin_calls_total{{tenant="default",plugin="{plugin}",tool="{tool}",outcome="{outcome}"}}"#
        ),
    )
}

async fn scrape(url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("scrape");
    let status = response.status().as_u16();
    let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    (status, kind, response.text().await.unwrap_or_default())
}

/// A real Prometheus server (Debian's `prometheus`) on 127.0.0.1, scraping `target`
/// (`host:port`) every second, with its storage in a scratch folder.
struct Prometheus {
    child: Child,
    api: String,
}

impl Prometheus {
    fn start(dir: &std::path::Path, target: &str) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{ scrape_interval: 1s, scrape_timeout: 900ms }}\n\
                 scrape_configs:\n  - job_name: capsule\n    static_configs: [{{ targets: [\"{target}\"] }}]\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package `prometheus`; .ci/run installs it)");
        Prometheus { child, api: format!("http://127.0.0.1:{port}/api/v1/query") }
    }

    /// The value of an instant query returning one sample, once there is one.
    async fn query(&self, query: &str) -> Option<f64> {
        let response = reqwest::Client::new().get(&self.api).query(&[("query", query)]).send().await.ok()?;
        let body: Value = response.json().await.ok()?;
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// How many series `query` returns, or why Prometheus refused it.
    async fn series(&self, query: &str) -> Result<usize, String> {
        let response = reqwest::Client::new().get(&self.api).query(&[("query", query)]).send().await;
        let body: Value = response.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
        match body["status"].as_str() {
            Some("success") => Ok(body["data"]["result"].as_array().map_or(0, Vec::len)),
            _ => Err(body.to_string()),
        }
    }

    /// Wait until `query` has the value `wanted` (scrapes come every second).
    async fn expect(&self, query: &str, wanted: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.query(query).await;
            if got == Some(wanted) {
                return;
            }
            assert!(Instant::now() < deadline, "prometheus: {query} is {got:?}, not {wanted}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn address_in_log(server: &Server, before: &str) -> String {
    let log = server.wait_for_log(before);
    log.split(before).nth(1).map(address).expect("address in the log").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_calls_by_outcome_with_bounded_labels() {
    let dir = scratch_dir("metrics").canonicalize().unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, "[plugins.hostile]\nlimits = { cpu_ms = 1000, timeout_ms = 20000, memory_mib = 32 }\n")
        .unwrap();
    let (hostile, calc) = (plugins().join("testing/hostile.wasm"), plugins().join("calc.wasm"));
    // A file whose name is no plugin name: refused, and its name kept out of the labels.
    let misnamed = dir.join("we\"ird\nx.wasm");
    std::fs::copy(&calc, &misnamed).unwrap();
    let token_file = dir.join("admin-token");
    let server = Server::http_in(
        &dir,
        &[
            "--plugin",
            misnamed.to_str().unwrap(),
            "--config",
            policy.to_str().unwrap(),
            "--plugin",
            hostile.to_str().unwrap(),
            "--plugin",
            calc.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let metrics = address_in_log(&server, "metrics on ");
    let (status, kind, before) = scrape(&metrics, None).await;
    assert_eq!(status, 200, "{before}");
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(before.contains("# TYPE capsule_instances_capacity gauge"), "{before}");
    // No token, but a name a web page rebound to this address (DNS rebinding) is refused,
    // and so is a web page's Origin.
    for (name, value) in [("host", "evil.example"), ("origin", "https://evil.example")] {
        let refused = reqwest::Client::new().get(&metrics).header(name, value).send().await.unwrap();
        assert_eq!(refused.status(), 403, "{name}: {value}");
    }

    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let call = |id: i64, name: &str, arguments: Value| {
        let session = session.clone();
        let name = name.to_owned();
        async move { session.request(id, "tools/call", json!({"name": name, "arguments": arguments})).await }
    };
    for id in 0..3 {
        let sum = call(10 + id, "add", json!({"a": 2, "b": 2})).await;
        assert_eq!(first_text(&sum["result"]), "4", "{sum}");
    }
    let refused = call(20, "add", json!({"a": "two"})).await;
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let spun = call(21, "spin", json!({})).await;
    assert!(first_text(&spun["result"]).contains("CPU deadline"), "{spun}");
    let hogged = call(22, "hog", json!({})).await;
    assert!(first_text(&hogged["result"]).contains("memory limit"), "{hogged}");
    let crashed = call(23, "crash", json!({})).await;
    assert_eq!(crashed["result"]["isError"], json!(true), "{crashed}");
    // A spin the client cancels while it runs (well inside its CPU deadline).
    let spinning = session.spawn_call(24, "spin", json!({}));
    let deadline = Instant::now() + Duration::from_secs(15);
    while value(&scrape(&metrics, None).await.2, r#"capsule_calls_in_flight{tenant="default"}"#) < 1.0 {
        assert!(Instant::now() < deadline, "the spin never started:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    session.post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 24}})).await;
    tokio::time::timeout(Duration::from_secs(10), spinning).await.expect("the cancelled call ended").unwrap();
    // A 2026-07-28 spin whose client hangs up while it runs ends cancelled too, and is
    // counted (its task used to be aborted before its accounting).
    let in_flight = r#"capsule_calls_in_flight{tenant="default"}"#;
    let stateless = Client::new(&server.url);
    let hung_up = tokio::spawn(async move {
        stateless.modern(27, "tools/call", json!({"name": "spin", "arguments": {}}), json!({})).await
    });
    while value(&scrape(&metrics, None).await.2, in_flight) < 1.0 {
        assert!(Instant::now() < deadline, "the second spin never started:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hung_up.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&scrape(&metrics, None).await.2, in_flight) > 0.0 {
        assert!(Instant::now() < deadline, "the spin whose client hung up runs on");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Names no catalog holds and revisions Capsule does not speak stay out of the labels.
    let unknown = call(25, "no-such-tool-xyzzy", json!({})).await;
    assert!(unknown.get("error").is_some(), "{unknown}");
    session.post(&json!({"jsonrpc": "2.0", "id": 26, "method": "evil/method-xyzzy", "params": {}})).await;

    let open = r#"capsule_sessions_open{tenant="default"}"#;
    assert_eq!(value(&scrape(&metrics, None).await.2, open), 1.0);
    assert_eq!(session.end_session().await, 204);

    let (_, _, text) = scrape(&metrics, None).await;
    assert_eq!(value(&text, open), 0.0, "{text}");
    let lasted =
        r#"mcp_server_session_duration_seconds_count{network_transport="tcp",mcp_protocol_version="2025-11-25"}"#;
    assert_eq!(value(&text, lasted), 1.0, "{text}");
    assert_eq!(calls(&text, "calc", "add", "ok"), 3.0, "{text}");
    assert_eq!(calls(&text, "calc", "add", "tool_error"), 1.0, "{text}");
    assert_eq!(calls(&text, "hostile", "spin", "deadline"), 1.0, "{text}");
    assert_eq!(calls(&text, "hostile", "hog", "memory"), 1.0, "{text}");
    assert_eq!(calls(&text, "hostile", "crash", "trap"), 1.0, "{text}");
    assert_eq!(calls(&text, "hostile", "spin", "cancelled"), 2.0, "{text}");
    assert_eq!(value(&text, r#"capsule_calls_in_flight{tenant="default"}"#), 0.0, "{text}");
    assert!(!text.contains("xyzzy"), "a client-chosen string became a label value:\n{text}");
    let ok_adds = r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="add",error_type="",network_transport="tcp",mcp_protocol_version="2025-11-25"}"#;
    assert_eq!(value(&text, ok_adds), 3.0, "{text}");
    assert!(text.contains(r#"mcp_method_name="other""#), "{text}");
    assert!(text.contains(r#"error_type="tool_error""#) && text.contains(r#"error_type="-32602""#), "{text}");
    // Each call that ran had a sandbox: instantiation and guest time, and a memory
    // high-water mark no larger than the cap. The three adds, not the refused one, and not
    // the list reads of the load (which once made these per-call series count loads too).
    let instantiated = r#"capsule_sandbox_instantiate_duration_seconds_count{tenant="default",plugin="calc"}"#;
    assert_eq!(value(&text, instantiated), 3.0, "{text}");
    let high_water = value(&text, r#"capsule_plugin_memory_high_water_bytes{tenant="default",plugin="hostile"}"#);
    assert!(high_water > 0.0 && high_water <= (32 << 20) as f64, "{text}");
    assert_eq!(value(&text, "capsule_instances_live "), 0.0, "{text}");
    assert!(value(&text, "capsule_instances_capacity ") >= 1.0, "{text}");
    assert!(value(&text, "capsule_compile_cache_lookups_total{") >= 2.0, "{text}");
    // Each tool call's time, by plugin and tool; the bytes each way; what the first load did.
    let add_times = r#"capsule_plugin_call_duration_seconds_count{tenant="default",plugin="calc",tool="add"}"#;
    assert_eq!(value(&text, add_times), 4.0, "{text}");
    for direction in ["receive", "transmit"] {
        let bytes = format!(
            r#"capsule_network_io_bytes_total{{tenant="default",network_transport="tcp",network_io_direction="{direction}"}}"#
        );
        assert!(value(&text, &bytes) > 500.0, "{direction}: {text}");
    }
    for plugin in ["calc", "hostile"] {
        let loaded = format!(r#"capsule_plugin_loads_total{{tenant="default",plugin="{plugin}",result="loaded"}}"#);
        assert_eq!(value(&text, &loaded), 1.0, "{text}");
    }
    assert!(value(&text, r#"capsule_reload_duration_seconds_count{tenant="default"}"#) >= 1.0, "{text}");
    let initialized = r#"mcp_server_operation_duration_seconds_count{mcp_method_name="initialize",gen_ai_tool_name="",error_type="",network_transport="tcp",mcp_protocol_version="2025-11-25"}"#;
    assert_eq!(value(&text, initialized), 1.0, "the revision agreed: {text}");
    let refused = r#"capsule_plugin_loads_total{tenant="default",plugin="_invalid_name",result="failed"}"#;
    assert!(value(&text, refused) >= 1.0, "{text}");
    assert!(!text.contains("ird"), "{text}");

    // The admin listener serves the same, behind the server's token.
    let admin = address_in_log(&server, "admin endpoint on ");
    let admin_metrics = format!("{}/metrics", admin.trim_end_matches("/admin"));
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert_eq!(scrape(&admin_metrics, None).await.0, 401);
    let (status, _, text) = scrape(&admin_metrics, Some(&token)).await;
    assert_eq!(status, 200);
    assert_eq!(calls(&text, "calc", "add", "ok"), 3.0, "{text}");

    // A real Prometheus scrapes the same series from the metrics listener.
    let prometheus = Prometheus::start(&dir, metrics.trim_start_matches("http://").trim_end_matches("/metrics"));
    prometheus.expect(r#"up{job="capsule"}"#, 1.0).await;
    for (plugin, tool, outcome, wanted) in [
        ("calc", "add", "ok", 3.0),
        ("calc", "add", "tool_error", 1.0),
        ("hostile", "spin", "deadline", 1.0),
        ("hostile", "hog", "memory", 1.0),
        ("hostile", "spin", "cancelled", 2.0),
    ] {
        let series = format!(r#"capsule_plugin_calls_total{{plugin="{plugin}",tool="{tool}",outcome="{outcome}"}}"#);
        prometheus.expect(&series, wanted).await;
    }
    let adds = r#"sum(mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="add",error_type=""})"#;
    prometheus.expect(adds, 3.0).await;
    prometheus.expect(r#"count(capsule_plugin_memory_high_water_bytes{plugin="hostile"} > 0)"#, 1.0).await;
    dashboard_queries_return_series(&prometheus).await;
    drop(prometheus);

    // `capsule top` shows what happened over its interval: calls made while it watches.
    let top = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["top", &metrics, "--once", "--interval", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("capsule top");
    let mut watched = Client::new(&server.url);
    watched.initialize("2025-11-25", json!({})).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in 30..34 {
        watched.request(id, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 1}})).await;
    }
    watched.request(34, "tools/call", json!({"name": "crash", "arguments": {}})).await;
    let shown = top.wait_with_output().unwrap();
    let table = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{table}{}", String::from_utf8_lossy(&shown.stderr));
    let row = |plugin: &str| {
        let row = table.lines().find(|l| l.split_whitespace().nth(1) == Some(plugin));
        row.unwrap_or_else(|| panic!("no row for {plugin}:\n{table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let calc_row = row("calc");
    assert!(calc_row[2].parse::<f64>().unwrap() >= 1.0, "4 adds in 3 s:\n{table}");
    assert_eq!(calc_row[5], "8", "calls since the start:\n{table}");
    assert!(row("hostile").join(" ").ends_with("trap 1"), "{table}");

    let _ = std::fs::remove_dir_all(dir);
}

/// Every query of the Grafana dashboard in `host/dashboards/capsule.json` (its variables set to
/// "all"; its `label_values` as the PromQL Grafana runs for them) is PromQL a real Prometheus
/// accepts, and returns series once it has scraped the server a few times.
async fn dashboard_queries_return_series(prometheus: &Prometheus) {
    let text = std::fs::read_to_string(root().join("host/dashboards/capsule.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        queries
            .extend(panel["targets"].as_array().into_iter().flatten().map(|t| t["expr"].as_str().unwrap().to_owned()));
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            let (metric, label) = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .and_then(|q| q.rsplit_once(", "))
                .unwrap_or_else(|| panic!("a variable query that is not label_values: {query}"));
            queries.push(format!("count by ({label}) ({metric})"));
        }
    }
    assert!(queries.len() >= 20, "{queries:?}");
    prometheus.expect(r#"clamp_max(count_over_time(up{job="capsule"}[1m]), 3)"#, 3.0).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    for query in queries {
        let query = query
            .replace("$__rate_interval", "1m")
            .replace(r#"=~"$tenant""#, r#"=~".*""#)
            .replace(r#"=~"$plugin""#, r#"=~".*""#);
        assert!(!query.contains('$'), "an unknown variable in {query}");
        loop {
            match prometheus.series(&query).await {
                Ok(0) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(250)).await,
                Ok(n) => {
                    assert!(n > 0, "the dashboard's query returns nothing: {query}");
                    break;
                }
                Err(refused) => panic!("prometheus refused the dashboard's query {query}: {refused}"),
            }
        }
    }
}

/// `--log-format json`: every record is one JSON object on its own line, and neither the
/// admin token nor a bearer token a client sent appears in any of them.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_and_carry_no_secrets() {
    let dir = scratch_dir("json-logs").canonicalize().unwrap();
    let token_file = dir.join("admin-token");
    let calc = plugins().join("calc.wasm");
    let server = Server::http_in(
        &dir,
        &[
            "--log-format",
            "json",
            "--plugin",
            calc.to_str().unwrap(),
            "--admin",
            "127.0.0.1:0",
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    let admin = address_in_log(&server, "admin endpoint on ");
    let http = reqwest::Client::new();
    let status = http.get(format!("{admin}/plugins")).bearer_auth(&token).send().await.unwrap().status();
    assert_eq!(status.as_u16(), 200);
    let wrong = "not-the-token-4c1d9e";
    let refused = http.get(format!("{admin}/plugins")).bearer_auth(wrong).send().await.unwrap().status();
    assert_eq!(refused.as_u16(), 401);
    let mut client = Client::new(&server.url);
    client.bearer = Some("client-bearer-secret-77aa".into());
    client.initialize("2025-11-25", json!({})).await;
    let sum = client.request(2, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(first_text(&sum["result"]), "3", "{sum}");
    let log = server.wait_for_log("\"level\":\"INFO\"");
    assert!(log.lines().count() >= 3, "{log}");
    for line in log.lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(record["timestamp"].is_string() && record["level"].is_string(), "{line}");
    }
    for secret in [token.as_str(), wrong, "client-bearer-secret-77aa"] {
        assert!(!log.contains(secret), "a secret reached the log:\n{log}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The OTLP receiver of tests/clients/otlp.sh, collecting the spans it prints.
struct Receiver {
    child: Child,
    endpoint: String,
    spans: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        Receiver::start_with(&[])
    }

    /// A receiver over HTTPS with this certificate chain and key (PEM files).
    fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Receiver {
        let mut receiver = Receiver::start_with(&["--tls".as_ref(), cert.as_os_str(), key.as_os_str()]);
        receiver.endpoint = receiver.endpoint.replace("http://", "https://");
        receiver
    }

    fn start_with(args: &[&std::ffi::OsStr]) -> Receiver {
        use std::io::BufRead;
        let mut child = Command::new(root().join("tests/clients/otlp.sh"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the OTLP receiver");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the receiver's port").unwrap();
        let port = first.strip_prefix("port ").expect("`port N` first").to_owned();
        let spans = std::sync::Arc::<std::sync::Mutex<Vec<Value>>>::default();
        let sink = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(serde_json::from_str(&line).expect("a span as JSON"));
            }
        });
        Receiver { child, endpoint: format!("http://127.0.0.1:{port}"), spans }
    }

    /// The environment that makes a server export its spans here, in batches sent every 100 ms.
    fn env(&self) -> [(&str, &str); 2] {
        [("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "100")]
    }

    /// The span named `name` in trace `trace`, once it has arrived.
    fn span(&self, trace: &str, name: &str) -> Value {
        self.find(name, |s| s["trace_id"] == trace)
    }

    /// The first span named `name` that `wanted` accepts, once it has arrived.
    fn find(&self, name: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if let Some(span) = spans.iter().find(|s| s["name"] == name && wanted(s)) {
                return span.clone();
            }
            assert!(Instant::now() < deadline, "no span {name} as wanted; received: {spans:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client's `traceparent` in `params._meta` (stdio, where there are no headers) is the
/// parent of the server's span, which is the parent of the plugin call's, whose children are
/// the sandbox build and the guest call; all in the client's trace, exported over OTLP.
#[test]
fn a_client_trace_continues_through_the_server_into_the_plugin_call() {
    let receiver = Receiver::start();
    let calc = plugins().join("calc.wasm");
    let env = receiver.env();
    let mut server = StdioServer::start_with_env(&["--no-watch", "--plugin", calc.to_str().unwrap()], &env);
    server.initialize("2025-11-25");
    let (trace, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "add", "arguments": {"a": 1, "b": 2},
        "_meta": {"traceparent": format!("00-{trace}-{client_span}-01"), "tracestate": "vendor=1"}}}));
    assert_eq!(first_text(&server.read()["result"]), "3");
    server.finish();

    let request = receiver.span(trace, "tools/call add");
    assert_eq!(request["parent_span_id"], client_span, "{request}");
    // The W3C flags say sampled, and that the parent is a remote one.
    assert_eq!(request["flags"], 0x301, "{request}");
    assert_eq!(request["trace_state"], "vendor=1", "{request}");
    assert_eq!(request["kind"], 2, "a server span: {request}");
    assert_eq!(request["service"], "capsule", "{request}");
    assert_eq!(request["status"]["code"], 0, "unset: {request}");
    let attributes = &request["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call", "{request}");
    assert_eq!(attributes["gen_ai.tool.name"], "add", "{request}");
    assert_eq!(attributes["network.transport"], "pipe", "{request}");
    assert_eq!(attributes["mcp.protocol.version"], "2025-11-25", "{request}");
    let [sandbox, guest] = ["capsule.sandbox.build", "capsule.guest.call"].map(|child| receiver.span(trace, child));
    for span in [&sandbox, &guest] {
        assert_eq!(span["parent_span_id"], request["span_id"], "{span}");
        assert_eq!(span["flags"], 0x101, "a local parent: {span}");
        assert_eq!(span["trace_state"], "vendor=1", "the trace's state: {span}");
        assert_eq!(span["attributes"]["capsule.plugin"], "calc", "{span}");
        assert_eq!(span["attributes"]["capsule.tenant"], "default", "{span}");
    }
    // Each span lies within its parent's time, and the sandbox is built before the guest runs.
    let time = |span: &Value, at: &str| span[at].as_u64().unwrap_or_else(|| panic!("{at} of {span}"));
    let within = |inner: &Value, outer: &Value| {
        time(outer, "start") <= time(inner, "start") && time(inner, "end") <= time(outer, "end")
    };
    assert!(time(&request, "start") < time(&request, "end"), "{request}");
    assert!(within(&sandbox, &request) && within(&guest, &request), "{sandbox}\n{guest}\n{request}");
    assert!(time(&sandbox, "end") <= time(&guest, "start"), "{sandbox}\n{guest}");
    assert!(guest["attributes"].get("capsule.sandbox.prebuilt").is_none(), "{guest}");
}

/// A call that runs in an instance an idle worker built ahead has no sandbox build span: its
/// guest span, under the request's, says `capsule.sandbox.prebuilt`.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_in_a_prebuilt_instance_says_so_and_has_no_build_span() {
    let receiver = Receiver::start();
    let calc = plugins().join("calc.wasm");
    let dir = scratch_dir("trace-prebuilt");
    let args = ["--no-watch", "--plugin", calc.to_str().unwrap(), "--workers", "1"];
    let server = Server::http_with_env(&dir, &args, &receiver.env());
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let traces: Vec<String> = (0..5).map(|n| format!("4bf92f3577b34da6a3ce929d0e0e47{n:02}")).collect();
    for (id, trace) in traces.iter().enumerate() {
        let meta = json!({"traceparent": format!("00-{trace}-00f067aa0ba902b7-01")});
        let answer = client
            .request(id as i64 + 2, "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": meta}))
            .await;
        assert_eq!(first_text(&answer["result"]), "3", "{answer}");
        // Time for the worker to go idle and build the next instance.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let prebuilt = receiver.find("capsule.guest.call", |s| {
        s["attributes"]["capsule.plugin"] == "calc" && s["attributes"]["capsule.sandbox.prebuilt"] == true
    });
    let trace = prebuilt["trace_id"].as_str().unwrap().to_owned();
    let request = receiver.span(&trace, "tools/call add");
    assert_eq!(prebuilt["parent_span_id"], request["span_id"], "{prebuilt}");
    let spans = receiver.spans.lock().unwrap().clone();
    let built = spans.iter().find(|s| s["trace_id"] == trace.as_str() && s["name"] == "capsule.sandbox.build");
    assert!(built.is_none(), "a build span for a prebuilt instance: {built:?}");
    // The first call of all had no instance waiting: it was built in the request.
    receiver.span(&traces[0], "capsule.sandbox.build");
    let _ = std::fs::remove_dir_all(dir);
}

/// A call that comes while the plugins are still compiling waits for them, and its span is
/// named after its tool all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_waits_for_the_first_load_is_named_after_its_tool() {
    let receiver = Receiver::start();
    let dir = scratch_dir("trace-first-load");
    let calc = plugins().join("calc.wasm");
    let args = ["--no-watch", "--no-compile-cache", "--plugin", calc.to_str().unwrap()];
    let server = Server::starting_with_env(&dir, &args, &receiver.env());
    let trace = "7d1e0e3a9b8d4f2a8c7b6a5f4e3d2c1b";
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "add", "arguments": {"a": 1, "b": 2}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "traceparent": format!("00-{trace}-00f067aa0ba902b7-01")}}});
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "add")];
    let reply = Client::new(&server.url).post_raw(call.to_string(), &headers).await;
    assert_eq!(first_text(&reply.response(1)["result"]), "3", "{}", reply.body);
    let request = receiver.span(trace, "tools/call add");
    assert_eq!(request["attributes"]["gen_ai.tool.name"], "add", "{request}");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Over HTTP the client's trace context comes in the `traceparent` header, and its sampled
/// flag is followed.
#[tokio::test(flavor = "multi_thread")]
async fn a_traceparent_header_is_the_parent_of_the_server_span() {
    let receiver = Receiver::start();
    let dir = scratch_dir("trace-http").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let env = receiver.env();
    let server = Server::http_with_env(&dir, &["--plugin", calc.to_str().unwrap()], &env);
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let (trace, client_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    // A client that did not sample its trace: the server follows it (the default sampler is
    // parent-based) and exports nothing of that request.
    let unsampled = "5c1e0e3a9b8d4f2a8c7b6a5f4e3d2c1b";
    let traceparent = format!("00-{unsampled}-{client_span}-00");
    let reply = session.post_raw(call.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5");
    let traceparent = format!("00-{trace}-{client_span}-01");
    let reply = session.post_raw(call.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5");
    let request = receiver.span(trace, "tools/call add");
    let spans = receiver.spans.lock().unwrap().clone();
    assert!(!spans.iter().any(|s| s["trace_id"] == unsampled), "{spans:#?}");
    assert_eq!(request["parent_span_id"], client_span, "{request}");
    assert_eq!(request["attributes"]["network.transport"], "tcp", "{request}");
    assert!(request["attributes"]["mcp.session.id"].as_str().is_some_and(|s| !s.is_empty()), "{request}");
    let guest = receiver.span(trace, "capsule.guest.call");
    assert_eq!(guest["parent_span_id"], request["span_id"], "{guest}");
    // A method of the client's own naming is `other` in the span as in the metrics: a
    // megabyte of name would otherwise be held in the export queue and sent on.
    let invented = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let traceparent = format!("00-{invented}-{client_span}-01");
    let method = format!("evil/{}", "\n\u{1b}[2J".repeat(100_000));
    let odd = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {}});
    let reply = session.post_raw(odd.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(reply.response(3)["error"]["code"], -32601, "{}", &reply.body[..200.min(reply.body.len())]);
    let other = receiver.span(invented, "other");
    assert_eq!(other["attributes"]["mcp.method.name"], "other", "{other}");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A collector that refuses the first exports for a moment (503 with `Retry-After`) still
/// gets the spans: the exporter tries each batch again, and no failure is logged.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_the_collector_refuses_for_a_moment_is_sent_again() {
    let receiver = Receiver::start_with(&["--refuse".as_ref(), "2".as_ref()]);
    let dir = scratch_dir("trace-retry").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let server = Server::http_with_env(&dir, &["--plugin", calc.to_str().unwrap()], &receiver.env());
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let trace = "6e0c63257de34c92bf9efcd03927272e";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let reply = session.post_raw(call.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5");
    receiver.find("initialize", |_| true);
    receiver.span(trace, "tools/call add");
    assert!(!server.log().contains("exporting spans over OTLP failed"), "{}", server.log());
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A collector may move its endpoint: a `308` within its origin is followed, the spans and the
/// configured headers arriving at the new path. A `307` to another origin is not followed: the
/// spans and the headers (an API key, say) go only where the endpoint says, and the log says why
/// without the key.
#[tokio::test(flavor = "multi_thread")]
async fn an_export_follows_redirects_only_within_the_collector_s_origin() {
    let elsewhere = Receiver::start();
    let moved = Receiver::start_with(&["--redirect".as_ref(), "308".as_ref(), "/v1/moved".as_ref()]);
    let away_to = format!("{}/v1/traces", elsewhere.endpoint);
    let away = Receiver::start_with(&["--redirect".as_ref(), "307".as_ref(), away_to.as_ref()]);
    let dir = scratch_dir("trace-redirect").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let key = ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret-key");
    let serve = |receiver: &Receiver| {
        let env = [receiver.env().as_slice(), &[key]].concat();
        Server::http_with_env(&dir, &["--plugin", calc.to_str().unwrap()], &env)
    };

    let server = serve(&moved);
    Client::new(&server.url).initialize("2025-11-25", json!({})).await;
    let span = moved.find("initialize", |_| true);
    assert_eq!(span["request_headers"]["x-api-key"], "s3cret-key", "{span:#}");
    assert!(!server.log().contains("exporting spans over OTLP failed"), "{}", server.log());
    drop(server);

    let server = serve(&away);
    Client::new(&server.url).initialize("2025-11-25", json!({})).await;
    let log = server.wait_for_log("another origin");
    let origin = elsewhere.endpoint.as_str();
    assert!(log.contains(&format!("the collector redirected the export to {origin}, another origin")), "{log}");
    assert!(!log.contains("s3cret-key"), "{log}");
    assert!(elsewhere.spans.lock().unwrap().is_empty(), "{:#?}", elsewhere.spans.lock().unwrap());
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A collector behind HTTPS with a private CA: spans reach it when the operator trusts that CA
/// through `OTEL_EXPORTER_OTLP_CERTIFICATE`, and are refused (the server serving on) when not.
#[tokio::test]
async fn spans_reach_an_https_collector_only_when_its_certificate_is_trusted() {
    let dir = scratch_dir("trace-https").canonicalize().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.join("collector.pem"), dir.join("collector-key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let receiver = Receiver::start_tls(&cert, &key);
    let calc = plugins().join("calc.wasm");
    let call = async |server: &Server, trace: &str| {
        let mut session = Client::new(&server.url);
        session.initialize("2025-11-25", json!({})).await;
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
        let reply =
            session.post_raw(call.to_string(), &[("traceparent", &format!("00-{trace}-b7ad6b7169203331-01"))]).await;
        assert_eq!(first_text(&reply.response(2)["result"]), "5");
    };

    let untrusted = "1af7651916cd43dd8448eb211c80319c";
    let server = Server::http_with_env(&dir, &["--plugin", calc.to_str().unwrap()], &receiver.env());
    call(&server, untrusted).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !server.log().contains("certificate") {
        assert!(Instant::now() < deadline, "the refused certificate was not logged:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call(&server, untrusted).await;
    drop(server);

    let trusted = "2af7651916cd43dd8448eb211c80319c";
    let ca = cert.to_str().unwrap();
    let env = [receiver.env().as_slice(), &[("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)]].concat();
    let server = Server::http_with_env(&dir, &["--plugin", calc.to_str().unwrap()], &env);
    call(&server, trusted).await;
    let request = receiver.span(trusted, "tools/call add");
    receiver.span(trusted, "capsule.guest.call");
    assert_eq!(request["parent_span_id"], "b7ad6b7169203331", "{request}");
    let spans = receiver.spans.lock().unwrap().clone();
    assert!(spans.iter().all(|s| s["trace_id"] != untrusted), "spans went to an untrusted collector: {spans:#?}");
    drop(server);

    // A bundle that holds no certificate is refused at start, naming the variable.
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["serve", "--plugin", calc.to_str().unwrap()])
        .envs([("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str())])
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &empty)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The JSON log records in `log` whose message starts with `message`.
fn records_starting(log: &str, message: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["message"].as_str().is_some_and(|m| m.starts_with(message)))
        .collect()
}

/// The `trace_id` a JSON log record carries from the span it was written in (the request's).
fn trace_of(record: &Value) -> Option<String> {
    let spans = record["spans"].as_array()?;
    spans.iter().find_map(|s| s["trace_id"].as_str()).map(str::to_owned)
}

/// A request's log records carry its trace id: the exported span's when the client sent no
/// trace context, the client's when it did.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_s_log_records_carry_its_trace_id() {
    let receiver = Receiver::start();
    let dir = scratch_dir("trace-logs").canonicalize().unwrap();
    let hostile = plugins().join("testing/hostile.wasm");
    let env = receiver.env();
    let server = Server::http_with_env(&dir, &["--log-format", "json", "--plugin", hostile.to_str().unwrap()], &env);
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let crash =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "crash", "arguments": {}}});
    let reply = session.post_raw(crash.to_string(), &[]).await;
    assert_eq!(reply.response(2)["result"]["isError"], json!(true));
    let traced = "5b8efff798038103d269b633813fc60c";
    let crash =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "crash", "arguments": {}}});
    let reply =
        session.post_raw(crash.to_string(), &[("traceparent", &format!("00-{traced}-eee19b7ec3c1b174-01"))]).await;
    assert_eq!(reply.response(3)["result"]["isError"], json!(true));

    let deadline = Instant::now() + Duration::from_secs(15);
    let failures = loop {
        let failures = records_starting(&server.log(), "plugin call failed");
        if failures.len() == 2 {
            break failures;
        }
        assert!(Instant::now() < deadline, "two failed calls logged:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let first = trace_of(&failures[0]).unwrap_or_else(|| panic!("no trace id: {}", failures[0]));
    assert!(first.len() == 32 && first.chars().all(|c| c.is_ascii_hexdigit()) && first != traced, "{first}");
    let exported = receiver.span(&first, "tools/call crash");
    assert_eq!(exported["parent_span_id"], "", "a new trace: {exported}");
    // A failed call is an error span, and what the server logged inside it is one of its events.
    assert_eq!(exported["status"]["code"], 2, "{exported}");
    assert_eq!(exported["attributes"]["error.type"], "tool_error", "{exported}");
    let events = exported["events"].as_array().unwrap();
    let logged = events.iter().find(|e| e["name"].as_str().is_some_and(|n| n.starts_with("plugin call failed")));
    let logged = logged.unwrap_or_else(|| panic!("the failure is an event: {exported}"));
    assert_eq!(logged["attributes"]["level"], "WARN", "{logged}");
    assert_eq!(trace_of(&failures[1]).as_deref(), Some(traced), "{}", failures[1]);
    receiver.span(traced, "tools/call crash");
    // The first load is a trace of its own, and what it logged carries that trace's id.
    let loaded = records_starting(&server.log(), "loaded plugin hostile").into_iter().next();
    let loaded = loaded.unwrap_or_else(|| panic!("the load was logged:\n{}", server.log()));
    let reload_trace = trace_of(&loaded).unwrap_or_else(|| panic!("no trace id: {loaded}"));
    let reload = receiver.span(&reload_trace, "capsule.reload");
    assert_eq!(reload["parent_span_id"], "", "{reload}");
    assert_eq!(reload["attributes"]["tenant"], "default", "{reload}");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A legacy session's input round is a span under the plugin's request, holding a client
/// span for the elicitation request the server sent and the client answered; the request
/// carries that span's `traceparent` in its `_meta`.
#[test]
fn an_input_round_and_its_client_request_are_spans() {
    let receiver = Receiver::start();
    let conformance = plugins().join("conformance.wasm");
    let env = receiver.env();
    let mut server = StdioServer::start_with_env(&["--no-watch", "--plugin", conformance.to_str().unwrap()], &env);
    server.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "t", "version": "1"}}}));
    assert_eq!(server.read()["result"]["protocolVersion"], "2025-11-25");
    let trace = "9c3a0ad4f5e14c56a1cb8f2a77d0e5b1";
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "who are you?"},
        "_meta": {"traceparent": format!("00-{trace}-1111111111111111-01")}}}));
    let asked = server.read();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    server.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
        "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}));
    let answered = std::iter::repeat_with(|| server.read()).find(|m| m["id"] == 2).unwrap();
    assert!(answered["result"].is_object(), "{answered}");
    server.finish();

    let request = receiver.span(trace, "tools/call test_elicitation");
    let round = receiver.span(trace, "capsule.input.round");
    assert_eq!(round["parent_span_id"], request["span_id"], "{round}");
    assert_eq!(round["attributes"]["capsule.input.round"], 1, "{round}");
    let client = receiver.span(trace, "elicitation/create");
    assert_eq!(client["parent_span_id"], round["span_id"], "{client}");
    assert_eq!(client["kind"], 3, "a client span: {client}");
    assert_eq!(client["attributes"]["mcp.method.name"], "elicitation/create", "{client}");
    // The request the client was sent names that span, so that its work continues the trace.
    let sent = format!("00-{trace}-{}-01", client["span_id"].as_str().unwrap());
    assert_eq!(asked["params"]["_meta"]["traceparent"], sent, "{asked}");
}

/// `capsule top` follows no redirect: a `/metrics` URL that answers `307` to another port on
/// the same host makes it stop with the target named, and the admin token reaches only the
/// URL it was given.
#[tokio::test(flavor = "multi_thread")]
async fn capsule_top_sends_its_token_only_to_the_url_given() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    let dir = scratch_dir("top-redirect");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "top-secret-admin-token\n").unwrap();
    let (elsewhere, moved) =
        (TcpListener::bind("127.0.0.1:0").await.unwrap(), TcpListener::bind("127.0.0.1:0").await.unwrap());
    let target = format!("http://{}/metrics", elsewhere.local_addr().unwrap());
    let url = format!("http://{}/metrics", moved.local_addr().unwrap());
    let reached = tokio::spawn(async move { elsewhere.accept().await.is_ok() });
    let redirect = format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\n\r\n");
    let asked = tokio::spawn(async move {
        let (mut stream, _) = moved.accept().await.unwrap();
        let mut request = vec![0; 4096];
        let read = stream.read(&mut request).await.unwrap();
        stream.write_all(redirect.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&request[..read]).into_owned()
    });
    let top = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["top", &url, "--once", "--interval", "1", "--token-file", token_file.to_str().unwrap()])
        .output()
        .expect("capsule top");
    let said = String::from_utf8_lossy(&top.stderr);
    assert!(!top.status.success(), "{said}");
    assert!(said.contains(&format!("a redirect to {target}: not followed")), "{said}");
    assert!(!said.contains("top-secret-admin-token"), "{said}");
    let request = asked.await.unwrap();
    assert!(request.to_ascii_lowercase().contains("authorization: bearer top-secret-admin-token"), "{request}");
    // The redirect's target never saw a connection, let alone the token.
    assert!(!reached.is_finished(), "capsule top followed the redirect");
    reached.abort();

    // An endpoint whose answer never ends is read only so far.
    let endless = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", endless.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut stream, _) = endless.accept().await.unwrap();
        let _ = stream.read(&mut [0; 4096]).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n";
        let mut written = stream.write_all(head.as_bytes()).await;
        let line = "# HELP x y\n".repeat(4096);
        while written.is_ok() {
            written = stream.write_all(line.as_bytes()).await;
        }
    });
    let top = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["top", &url, "--once", "--interval", "1"])
        .output()
        .await
        .expect("capsule top");
    let said = String::from_utf8_lossy(&top.stderr);
    assert!(!top.status.success() && said.contains("the answer is longer than 64 MiB"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A stdio server stopped by a signal exits without ending its runtime (a terminal read may
/// hold a thread): the spans still queued are sent first. And a collector that takes an
/// export and never answers holds the exit off for at most five seconds (it held it for as
/// long as every queued batch's timeout added up, and a second signal went unheard).
#[test]
fn a_signal_sends_the_spans_still_queued_and_a_hanging_collector_does_not_hold_the_exit() {
    let calc = plugins().join("calc.wasm");
    let args = ["--no-watch", "--plugin", calc.to_str().unwrap()];
    let stop = |receiver: &Receiver, trace: &str| {
        // Exported only at the end: no batch fills, and the schedule is a minute.
        let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "60000")];
        let mut server = StdioServer::start_with_env(&args, &env);
        server.initialize("2025-11-25");
        server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "add", "arguments": {"a": 1, "b": 2},
            "_meta": {"traceparent": format!("00-{trace}-00f067aa0ba902b7-01")}}}));
        assert_eq!(first_text(&server.read()["result"]), "3");
        let signalled = Instant::now();
        let sent = Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
        assert!(sent.success());
        let status = server.wait_exit(Duration::from_secs(30)).expect("the server exits");
        assert_eq!(status.code(), Some(0));
        signalled.elapsed()
    };
    let receiver = Receiver::start();
    let trace = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c";
    stop(&receiver, trace);
    receiver.span(trace, "tools/call add");
    let hanging = Receiver::start_with(&["--hang".as_ref()]);
    let took = stop(&hanging, "4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d");
    assert!(took < Duration::from_secs(9), "the exit took {took:?}");
}

/// A collector's answer is read up to 64 KiB: one that answered with 256 MiB grew the server
/// by as much, for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_s_huge_answer_is_not_held() {
    let receiver = Receiver::start_with(&["--huge".as_ref(), "256".as_ref()]);
    let dir = scratch_dir("trace-huge-answer").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let server = Server::http_with_env(&dir, &["--no-watch", "--plugin", calc.to_str().unwrap()], &receiver.env());
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let trace = "5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let reply = session.post_raw(call.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5");
    receiver.span(trace, "tools/call add");
    // A few more exports, each answered at length (the answers take a while to stream).
    for id in 3..6 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
        session.post_raw(call.to_string(), &[]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let peak = status_mib(server.pid(), "VmHWM");
    assert!(peak < 150, "the server's peak RSS is {peak} MiB");
    assert!(!server.log().contains("exporting spans over OTLP failed"), "{}", server.log());
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A log filter with span directives (`tracing-subscriber`'s registry and its per-layer
/// filters) exports the same spans, in the client's trace: asking the subscriber whether the
/// request's span was wanted, just before making it, disabled it there, and the plugin
/// call's spans went out as roots of traces of their own.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_filter_with_span_directives_exports_the_same_trace() {
    let receiver = Receiver::start();
    let dir = scratch_dir("trace-scoped-filter").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let [endpoint, delay] = receiver.env();
    let env = [endpoint, delay, ("CAPSULE_LOG", "info,[request]=debug")];
    let server = Server::http_with_env(&dir, &["--no-watch", "--plugin", calc.to_str().unwrap()], &env);
    let mut session = Client::new(&server.url);
    session.initialize("2025-11-25", json!({})).await;
    let (trace, client_span) = ("7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b", "b7ad6b7169203331");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let traceparent = format!("00-{trace}-{client_span}-01");
    let reply = session.post_raw(call.to_string(), &[("traceparent", &traceparent)]).await;
    assert_eq!(first_text(&reply.response(2)["result"]), "5");
    let request = receiver.span(trace, "tools/call add");
    assert_eq!(request["parent_span_id"], client_span, "{request}");
    let guest = receiver.span(trace, "capsule.guest.call");
    assert_eq!(guest["parent_span_id"], request["span_id"], "{guest}");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Trace-level logs to the end: a plugin instance a worker kept was dropped with the
/// thread's locals, and wasmtime's trace records then reached a subscriber whose own locals
/// were gone, which aborted the process (134) at the end of its input.
#[test]
fn a_server_logging_at_trace_level_exits_cleanly() {
    let calc = plugins().join("calc.wasm");
    for filter in ["trace", "info,capsule[request]=trace"] {
        let mut server = StdioServer::start_with_env(
            &["--no-watch", "--plugin", calc.to_str().unwrap()],
            &[("CAPSULE_LOG", filter)],
        );
        server.initialize("2025-11-25");
        server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}));
        assert_eq!(first_text(&server.read()["result"]), "3");
        server.finish();
    }
}

/// The server spans carry what the MCP semantic conventions ask of them: the JSON-RPC id, a
/// tool call's operation name, a prompt's name (in the span's name too, being the catalog's),
/// a resource request's URI (never in the name: a client chooses it), and an error's JSON-RPC
/// code and message.
#[test]
fn server_spans_carry_the_conventions_attributes() {
    let receiver = Receiver::start();
    let conformance = plugins().join("conformance.wasm");
    let mut server =
        StdioServer::start_with_env(&["--no-watch", "--plugin", conformance.to_str().unwrap()], &receiver.env());
    server.initialize("2025-11-25");
    let traced = |n: u8| json!({"traceparent": format!("00-{}-00f067aa0ba902b7-01", format!("{n:02x}").repeat(16))});
    let trace = |n: u8| format!("{n:02x}").repeat(16);
    let requests = [
        json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call",
            "params": {"name": "test_simple_text", "arguments": {}, "_meta": traced(1)}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "prompts/get",
            "params": {"name": "test_simple_prompt", "_meta": traced(2)}}),
        json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read",
            "params": {"uri": "test://static-text", "_meta": traced(3)}}),
        json!({"jsonrpc": "2.0", "id": 10, "method": "prompts/get",
            "params": {"name": "no_such_prompt", "_meta": traced(4)}}),
    ];
    for request in &requests {
        server.send(request);
        assert_eq!(server.read()["id"], request["id"]);
    }
    server.finish();
    let call = receiver.span(&trace(1), "tools/call test_simple_text");
    assert_eq!(call["attributes"]["jsonrpc.request.id"], "call-7", "{call}");
    assert_eq!(call["attributes"]["gen_ai.operation.name"], "execute_tool", "{call}");
    let prompt = receiver.span(&trace(2), "prompts/get test_simple_prompt");
    assert_eq!(prompt["attributes"]["gen_ai.prompt.name"], "test_simple_prompt", "{prompt}");
    assert_eq!(prompt["attributes"]["jsonrpc.request.id"], "8", "{prompt}");
    let read = receiver.span(&trace(3), "resources/read");
    assert_eq!(read["attributes"]["mcp.resource.uri"], "test://static-text", "{read}");
    let unknown = receiver.span(&trace(4), "prompts/get");
    assert!(unknown["attributes"].get("gen_ai.prompt.name").is_none(), "{unknown}");
    assert_eq!(unknown["attributes"]["rpc.response.status_code"], "-32602", "{unknown}");
    assert_eq!(unknown["attributes"]["error.type"], "-32602", "{unknown}");
    assert_eq!(unknown["status"]["code"], 2, "{unknown}");
    assert!(unknown["status"]["message"].as_str().is_some_and(|m| m.contains("no_such_prompt")), "{unknown}");
}

/// While an HTTP server waits at exit for a collector that never answers, a second signal
/// exits at once with its code: the runtime that heard signals was gone by then, so the
/// second one was caught and ignored for the whole wait, and the exit said 0.
#[test]
fn a_second_signal_cuts_the_wait_for_a_hanging_collector_short() {
    let hanging = Receiver::start_with(&["--hang".as_ref()]);
    let dir = scratch_dir("trace-second-signal").canonicalize().unwrap();
    let calc = plugins().join("calc.wasm");
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", hanging.endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "60000")];
    let mut server = Server::http_with_env(&dir, &["--no-watch", "--plugin", calc.to_str().unwrap()], &env);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut session = Client::new(&server.url);
        session.initialize("2025-11-25", json!({})).await;
    });
    let term = || Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(term().success());
    server.wait_for_log("shutting down");
    std::thread::sleep(Duration::from_millis(500));
    let signalled = Instant::now();
    assert!(term().success());
    let status = server.wait_exit(Duration::from_secs(30)).expect("the server exits");
    assert_eq!(status.code(), Some(143));
    assert!(signalled.elapsed() < Duration::from_secs(2), "{:?} after the second signal", signalled.elapsed());
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin's log messages reach the host's log at their own level, under the target
/// `capsule::plugin` and naming the plugin, whether or not the client asked for them (the
/// WIT's promise); an operator can set them apart by that target.
#[tokio::test]
async fn a_plugin_s_log_messages_reach_the_host_log_at_their_level() {
    let conformance = plugins().join("conformance.wasm");
    let server = Server::http(&["--no-watch", "--plugin", conformance.to_str().unwrap()]);
    let client = crate::support::Client::new(&server.url);
    let call = json!({"name": "test_tool_with_logging", "arguments": {}});
    let reply = client.modern(1, "tools/call", call, json!({})).await;
    assert_eq!(reply.response(1)["result"]["content"][0]["text"], "Logging test completed", "{}", reply.body);
    let log = server.wait_for_log("Tool execution completed");
    let line = log.lines().find(|l| l.contains("Tool execution completed")).expect("the plugin's message");
    assert!(line.contains("INFO") && line.contains("capsule::plugin") && line.contains("conformance"), "{line}");
    // Filtered out by their target, as an operator may.
    let quiet = Server::http_with_env(
        &std::env::current_dir().unwrap(),
        &["--no-watch", "--plugin", conformance.to_str().unwrap()],
        &[("CAPSULE_LOG", "info,capsule::plugin=warn")],
    );
    let call = json!({"name": "test_tool_with_logging", "arguments": {}});
    let reply = crate::support::Client::new(&quiet.url).modern(1, "tools/call", call, json!({})).await;
    assert_eq!(reply.response(1)["result"]["content"][0]["text"], "Logging test completed", "{}", reply.body);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!quiet.log().contains("Tool execution"), "{}", quiet.log());
}
