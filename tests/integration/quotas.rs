//! Tenants' quotas: concurrent calls, CPU time per window, calls per minute per caller per
//! tool, and sessions. A tenant over a quota gets an error naming it and when it frees up;
//! its neighbours notice nothing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Admin, Client, first_text, plugins, scratch_dir};

/// One folder per tenant with one plugin each, and a policy file with `tables` after the
/// tenants' own tables.
fn layout(dir: &Path, tenants: &[(&str, &str)], tables: &str) -> std::path::PathBuf {
    let mut text = String::new();
    for (tenant, plugin) in tenants {
        let folder = dir.join(tenant);
        std::fs::create_dir_all(&folder).unwrap();
        let file = Path::new(plugin).file_name().unwrap();
        std::fs::copy(plugins().join(format!("{plugin}.wasm")), folder.join(file).with_extension("wasm")).unwrap();
        text.push_str(&format!("[tenants.{tenant}]\nsources = [\"{tenant}\"]\n"));
    }
    text.push_str(tables);
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, text).unwrap();
    policy
}

/// A stateless `tools/call`: the result, or the JSON-RPC error.
async fn call(client: &Client, tool: &str, arguments: Value) -> Value {
    let reply = client.modern(1, "tools/call", json!({"name": tool, "arguments": arguments}), json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let response = reply.response(1);
    response.get("result").unwrap_or(response).clone()
}

#[tokio::test]
async fn a_flooding_tenant_meets_its_quotas_and_its_neighbour_sees_no_error() {
    let dir = scratch_dir("quotas-flood");
    let policy = layout(
        &dir,
        &[("noisy", "testing/hostile"), ("quiet", "calc")],
        "[tenants.noisy.quotas]\nconcurrent_calls = 2\ncpu_ms = 1500\ncpu_window_s = 3600\n\
         [tenants.noisy.plugins.hostile]\nlimits = { cpu_ms = 150, memory_mib = 16 }\n",
    );
    let (server, admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    let (noisy, quiet) = (Client::new(&format!("{base}/t/noisy/mcp")), Client::new(&format!("{base}/t/quiet/mcp")));

    // Six clients loop CPU-bound and memory-hungry calls at the noisy tenant.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for n in 0..6 {
        let (client, stop) = (noisy.clone(), stop.clone());
        flood.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            let tool = if n % 2 == 0 { "spin" } else { "hog" };
            while !stop.load(Ordering::Relaxed) {
                let result = call(&client, tool, json!({})).await;
                assert_eq!(result["isError"], true, "{result}");
                errors.push(first_text(&result));
            }
            errors
        }));
    }
    // The quiet tenant's calls all succeed meanwhile, until the noisy one has used its CPU.
    let started = Instant::now();
    let mut served = 0;
    loop {
        let result = call(&quiet, "add", json!({"a": served, "b": 1})).await;
        assert_eq!(result["isError"], false, "the quiet tenant saw an error: {result}");
        assert_eq!(first_text(&result), (served + 1).to_string(), "{result}");
        served += 1;
        let (_, status) = admin.call(reqwest::Method::GET, "/t/noisy/plugins", None).await;
        if status["usage"]["cpu_ms_in_window"].as_u64().unwrap_or_default() >= 1500 && served >= 20 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the CPU quota was never used up: {status}");
    }
    stop.store(true, Ordering::Relaxed);
    let mut errors = Vec::new();
    for task in flood {
        errors.extend(task.await.unwrap());
    }
    let said = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(said("tenant noisy is already running its quota of 2 concurrent calls"), "{errors:#?}");
    assert!(said("exceeded its CPU deadline") && said("exceeded its memory limit"), "{errors:#?}");

    // Once the window's CPU is spent, every call of the tenant is refused, and says when
    // the quota resets.
    let refused = first_text(&call(&noisy, "echo", json!({"text": "hi"})).await);
    assert!(refused.contains("tenant noisy has used its CPU quota of 1.5s per 3600s; it resets in"), "{refused}");
    let (_, status) = admin.call(reqwest::Method::GET, "/t/noisy/plugins", None).await;
    assert_eq!(status["quotas"], json!({"concurrent_calls": 2, "cpu_ms": 1500, "cpu_window_s": 3600}), "{status}");
    assert_eq!(
        (status["usage"]["calls_running"].as_u64(), status["usage"]["instances_live"].as_u64()),
        (Some(0), Some(0))
    );
    let result = call(&quiet, "add", json!({"a": 1, "b": 1})).await;
    assert_eq!(result["isError"], false, "{result}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn calls_per_minute_and_sessions_are_counted_per_tenant_and_follow_reloads() {
    let dir = scratch_dir("quotas-rate");
    let quotas = "[tenants.acme.quotas]\ncalls_per_minute = 2\nsessions = 1\n";
    let policy = layout(&dir, &[("acme", "calc"), ("globex", "calc")], quotas);
    let (server, admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    let (acme, globex) = (Client::new(&format!("{base}/t/acme/mcp")), Client::new(&format!("{base}/t/globex/mcp")));

    // Two calls to `add` fill the bucket; the third is refused, other tools are not.
    for n in 0..2 {
        assert_eq!(call(&acme, "add", json!({"a": n, "b": 1})).await["isError"], false);
    }
    let refused = call(&acme, "add", json!({"a": 1, "b": 1})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let text = first_text(&refused);
    assert!(
        text.contains("quota of 2 calls per minute to tool add per caller is used up; the next call is allowed in"),
        "{text}"
    );
    assert_eq!(call(&acme, "evaluate", json!({"expression": "2*3"})).await["isError"], false);
    assert_eq!(call(&globex, "add", json!({"a": 1, "b": 1})).await["isError"], false, "another tenant's bucket");

    // One session for acme; a second is refused until the first ends. Globex is unaffected.
    let mut first = acme.clone();
    first.initialize("2025-11-25", json!({})).await;
    let second = acme.try_initialize("2025-11-25", json!({})).await;
    assert_eq!(second.status, 503, "{}", second.body);
    assert!(second.body.contains("tenant acme has reached its quota of 1 live sessions"), "{}", second.body);
    let mut other = globex.clone();
    other.initialize("2025-11-25", json!({})).await;
    assert_eq!(first.end_session().await, 204);
    assert_eq!(acme.try_initialize("2025-11-25", json!({})).await.status, 200);

    // A reload puts new quotas in force in place: the rate limit is gone.
    let text = std::fs::read_to_string(&policy).unwrap().replace("calls_per_minute = 2\n", "");
    std::fs::write(&policy, text).unwrap();
    let (status, body) = admin.call(reqwest::Method::POST, "/tenants/reload", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(call(&acme, "add", json!({"a": 1, "b": 1})).await["isError"], false);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_call_waits_for_a_used_up_quota_and_is_refused_only_when_the_wait_ends() {
    let dir = scratch_dir("quotas-wait");
    let policy = layout(
        &dir,
        &[("patient", "testing/hostile"), ("hasty", "testing/hostile")],
        "[tenants.patient.quotas]\nconcurrent_calls = 1\ncalls_per_minute = 60\nburst = 3\nwait_ms = 4000\n\
         [tenants.hasty.quotas]\nconcurrent_calls = 1\nwait_ms = 0\n\
         [tenants.patient.plugins.hostile]\nlimits = { cpu_ms = 150 }\n\
         [tenants.hasty.plugins.hostile]\nlimits = { cpu_ms = 150 }\n",
    );
    let (server, admin) = Admin::serve(&dir, &["--config", policy.to_str().unwrap()]);
    let base = format!("http://{}", server.authority());
    let (patient, hasty) = (Client::new(&format!("{base}/t/patient/mcp")), Client::new(&format!("{base}/t/hasty/mcp")));

    // Two spins at once against one slot: the second waits for the first and then runs,
    // where a tenant that does not wait refuses it. The wait is generous: the first spin's
    // 150 ms of CPU can take seconds of wall time while the rest of the suite builds plugins.
    for (client, second_refused) in [(&patient, false), (&hasty, true)] {
        let both = tokio::join!(call(client, "spin", json!({})), async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            call(client, "spin", json!({})).await
        });
        assert!(first_text(&both.0).contains("exceeded its CPU deadline"), "{}", both.0);
        let refused = first_text(&both.1).contains("already running its quota of 1 concurrent calls");
        assert_eq!(refused, second_refused, "{}", both.1);
    }

    // The third token of the burst is the last for a second: the fourth call waits for the
    // next one (within the wait), and a refusal for a token further off comes no sooner
    // than the wait's end.
    for n in 0..3 {
        assert_eq!(call(&patient, "echo", json!({"text": n.to_string()})).await["isError"], false);
    }
    let started = Instant::now();
    assert_eq!(call(&patient, "echo", json!({"text": "4"})).await["isError"], false);
    assert!(started.elapsed() >= Duration::from_millis(500), "{:?}", started.elapsed());
    let text = std::fs::read_to_string(&policy).unwrap().replace("calls_per_minute = 60", "calls_per_minute = 1");
    std::fs::write(&policy, text).unwrap();
    let (status, body) = admin.call(reqwest::Method::POST, "/tenants/reload", None).await;
    assert_eq!(status, 200, "{body}");
    let started = Instant::now();
    let refused = call(&patient, "echo", json!({"text": "5"})).await;
    assert!(first_text(&refused).contains("1 calls per minute to tool echo"), "{refused}");
    assert!(started.elapsed() >= Duration::from_millis(4000), "{:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}
