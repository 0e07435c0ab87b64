//! The example plugins written in other languages (with the Python, TypeScript and C SDKs,
//! and in Go and Zig), built into target/plugins/lang by plugins/build-examples.sh (which tests/run.sh
//! runs first), each checked through the official Python SDK client over HTTP and stdio by
//! tests/clients/py_plugin.py: the same checks for every language.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::clients::PYTHON;
use crate::support::{Client, Scratch, Server, StdioServer, plugins, root, run_script, scratch_dir};

/// A scratch folder holding the example as the only plugin, a granted directory with a file
/// in it, a file outside it, and the policy granting the directory (read-only).
struct Layout {
    dir: Scratch,
    policy: String,
    inside: String,
    outside: String,
}

fn layout(lang: &str) -> Layout {
    let built = plugins().join("lang").join(format!("{lang}.wasm"));
    assert!(built.is_file(), "{} is missing: run plugins/build-examples.sh (tests/run.sh does)", built.display());
    let dir = Scratch::new(&format!("lang-{lang}"));
    for sub in ["plugins", "granted", "elsewhere"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::copy(&built, dir.join("plugins").join(format!("{lang}.wasm"))).unwrap();
    let inside = dir.join("granted").join("inside.txt");
    std::fs::write(&inside, format!("read by the {lang} example")).unwrap();
    let outside = dir.join("elsewhere").join("outside.txt");
    std::fs::write(&outside, "not granted").unwrap();
    let policy = dir.join("capsule.toml");
    std::fs::write(&policy, format!("[plugins.{lang}]\ndirs = [{{ path = {:?} }}]\n", dir.join("granted").display()))
        .unwrap();
    let text = |p: PathBuf| p.display().to_string();
    Layout { policy: text(policy), inside: text(inside), outside: text(outside), dir }
}

fn check(output: &str, ok: bool) {
    eprintln!("{output}");
    assert!(ok && output.lines().any(|l| l.ends_with(" 0 failed")), "the example's checks failed:\n{output}");
    // Two modes, each with every check: a script that stopped early cannot pass.
    let passed = output.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(passed >= 40, "only {passed} checks ran:\n{output}");
}

/// The examples written with an SDK that asks by replay (Python, TypeScript, C) ask `shred`'s
/// second question: the replayed handler must still have the first answer.
fn questions(lang: &str) -> Option<&'static str> {
    ["python", "js", "c"].contains(&lang).then_some("--two-questions")
}

fn over_http(lang: &str) {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let l = layout(lang);
    let plugins = l.dir.join("plugins").display().to_string();
    let server = Server::http(&["--plugins", &plugins, "--config", &l.policy]);
    let mut args = vec!["py_plugin.py", "--inside", &l.inside, "--outside", &l.outside];
    args.extend(questions(lang));
    args.push(&server.url);
    let (ok, output) = run_script(&root().join("tests/clients/py.sh"), &args, &[]);
    check(&output, ok);
}

fn over_stdio(lang: &str) {
    let _lock = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let l = layout(lang);
    let plugins = l.dir.join("plugins").display().to_string();
    let capsule = env!("CARGO_BIN_EXE_capsule");
    let mut args = vec!["py_plugin.py", "--inside", &l.inside, "--outside", &l.outside];
    args.extend(questions(lang));
    args.extend(["--stdio", "--", capsule, "serve", "--stdio", "--plugins", &plugins, "--config", &l.policy]);
    let (ok, output) = run_script(&root().join("tests/clients/py.sh"), &args, &[]);
    check(&output, ok);
}

/// A call to an interpreter-carrying plugin runs long (Python's ~1 ms instantiation, then
/// its interpreter), so the prebuild thread builds the next call's instance while one runs:
/// most calls of a sequence take one, and `/metrics` counts them.
#[tokio::test(flavor = "multi_thread")]
async fn python_calls_take_instances_built_ahead() {
    let built = plugins().join("lang/python.wasm");
    assert!(built.is_file(), "{} is missing: run plugins/build-examples.sh (tests/run.sh does)", built.display());
    let server = Server::http(&["--plugin", built.to_str().unwrap(), "--metrics", "127.0.0.1:0"]);
    let metrics = crate::telemetry::address_in_log(&server, "metrics on ");
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let calls = 20;
    for id in 0..calls {
        let arguments = json!({"value": 1.609344 * f64::from(id + 1), "unit": "km"});
        let converted =
            client.request(i64::from(id), "tools/call", json!({"name": "convert", "arguments": arguments})).await;
        assert_eq!(converted["result"]["structuredContent"]["result"], f64::from(id + 1), "{converted}");
        // A client's think time; the build ahead does not depend on it, a busy test machine may.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let scraped = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
    let prebuilt = scraped
        .lines()
        .find_map(|line| line.strip_prefix(r#"capsule_sandbox_prebuilt_total{tenant="default",plugin="python"} "#))
        .map_or(0, |count| count.parse::<u32>().unwrap());
    assert!(prebuilt >= calls / 2, "only {prebuilt} of {calls} calls ran in an instance built ahead");
}

/// A template's variables reach an SDK handler as the host and the Rust SDK split and decode
/// them: the shortest value first, and text (bytes that are not UTF-8, and NUL, which would end
/// a C string early and name another note, become U+FFFD). The C example echoes the name it got.
#[tokio::test]
async fn c_template_variables_are_decoded_to_text() {
    let built = plugins().join("lang/c.wasm");
    assert!(built.is_file(), "{} is missing: run plugins/build-examples.sh (tests/run.sh does)", built.display());
    let server = Server::http(&["--plugin", built.to_str().unwrap()]);
    let mut client = Client::new(&server.url);
    client.initialize("2025-11-25", json!({})).await;
    let read = client.request(1, "resources/read", json!({"uri": "notes://we%FFl%00come%41"})).await;
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no note we\u{FFFD}l\u{FFFD}comeA"), "{read}");
    let read = client.request(2, "resources/read", json!({"uri": "notes://welcome"})).await;
    assert!(read["result"]["contents"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{read}");
}

#[test]
fn python_example_over_http() {
    over_http("python");
}

#[test]
fn python_example_over_stdio() {
    over_stdio("python");
}

#[test]
fn c_example_over_http() {
    over_http("c");
}

#[test]
fn c_example_over_stdio() {
    over_stdio("c");
}

#[test]
fn go_example_over_http() {
    over_http("go");
}

#[test]
fn go_example_over_stdio() {
    over_stdio("go");
}

#[test]
fn zig_example_over_http() {
    over_http("zig");
}

#[test]
fn zig_example_over_stdio() {
    over_stdio("zig");
}

#[test]
fn js_example_over_http() {
    over_http("js");
}

#[test]
fn js_example_over_stdio() {
    over_stdio("js");
}

/// The WIT package as it is published (`wkg wit build` and `wasm-tools component wit --wasm`
/// both encode it as a component): it keeps its name and version, every world, the WASI
/// packages it uses and the doc comments authors read.
#[test]
fn the_wit_package_encodes_for_publication() {
    let wasm_tools = root().join("target/tools/bin/wasm-tools");
    assert!(wasm_tools.is_file(), "{} is missing: plugins/build-examples.sh installs it", wasm_tools.display());
    let scratch = Scratch::new("wit-package");
    let encoded = scratch.join("capsule-plugin.wasm");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(&wasm_tools).args(args).output().unwrap();
        assert!(out.status.success(), "wasm-tools {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let wit = root().join("wit");
    run(&[
        "component".as_ref(),
        "wit".as_ref(),
        wit.as_os_str(),
        "--wasm".as_ref(),
        "-o".as_ref(),
        encoded.as_os_str(),
    ]);
    let decoded = run(&["component".as_ref(), "wit".as_ref(), encoded.as_os_str()]);
    assert!(decoded.starts_with("package capsule:plugin@0.1.0;"), "{}", &decoded[..decoded.len().min(200)]);
    let worlds = std::fs::read_to_string(wit.join("worlds.wit")).unwrap();
    let names: Vec<&str> =
        worlds.lines().filter_map(|l| l.strip_prefix("world ")).filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert!(decoded.contains(&format!("world {name} {{")), "world {name} is not in the encoded package");
    }
    for package in ["wasi:io@0.2.12", "wasi:filesystem@0.2.12"] {
        assert!(decoded.contains(&format!("package {package}")), "{package} is not in the encoded package");
    }
    assert!(decoded.contains("/// A plugin that provides tools only."), "doc comments were lost");
}

/// `capsule check PLUGIN`'s combined output.
fn check_plugin(plugin: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule")).arg("check").arg(plugin).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A component that cannot embed its needs declares them in `NAME.capsule.toml` beside it:
/// `check` and `serve` read it, a change to it alone is a reload, and a component that
/// declares its needs both ways is refused.
#[test]
fn a_sidecar_file_declares_needs() {
    let dir = scratch_dir("sidecar").canonicalize().unwrap();
    let plugin = dir.join("tools-only.wasm");
    std::fs::copy(plugins().join("testing/tools-only.wasm"), &plugin).unwrap();
    let sidecar = dir.join("tools-only.capsule.toml");
    std::fs::write(&sidecar, "dirs = \"read\"\n").unwrap();
    let report = check_plugin(&plugin);
    assert!(report.contains("a directory (read)") && report.contains("needs a directory; none is granted"), "{report}");

    let policy = dir.join("policy.toml");
    std::fs::write(&policy, "needs_beyond_grants = \"refuse\"\n").unwrap();
    let server = Server::starting(&dir, &["--plugins", dir.to_str().unwrap(), "--config", policy.to_str().unwrap()]);
    let log = server.wait_for_log("tools-only: refused, it declares needs beyond its grants");
    assert!(log.contains("tools-only: refused, it declares needs beyond its grants"), "{log}");
    assert!(!log.contains("loaded plugin tools-only"), "{log}");
    // Without the sidecar the same bytes declare nothing, and load.
    std::fs::remove_file(&sidecar).unwrap();
    let log = server.wait_for_log("loaded plugin tools-only");
    assert!(log.contains("loaded plugin tools-only"), "{log}");

    // `files` embeds its needs (the Rust SDK's needs!): a sidecar as well is one too many.
    let files = dir.join("files.wasm");
    std::fs::copy(plugins().join("files.wasm"), &files).unwrap();
    std::fs::write(dir.join("files.capsule.toml"), "dirs = \"read\"\n").unwrap();
    let report = check_plugin(&files);
    assert!(report.contains("declares its needs twice"), "{report}");
    let log = server.wait_for_log("declares its needs twice");
    assert!(log.contains("files.wasm: it declares its needs twice"), "{log}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `capsule plugin new NAME --lang LANG` in a scratch folder; that folder and the project's.
fn scaffold(lang: &str) -> (Scratch, PathBuf) {
    let parent = Scratch::new(&format!("new-{lang}"));
    let dir = parent.join(format!("demo-{lang}"));
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["plugin", "new", &format!("demo-{lang}"), "--lang", lang, "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(made.status.success(), "plugin new failed: {}", String::from_utf8_lossy(&made.stderr));
    assert!(made.stdout.is_empty(), "plugin new wrote to stdout");
    // Making it again into the same folder is refused, and changes nothing.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["plugin", "new", "other", "--lang", lang, "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("is not empty"));
    (parent, dir)
}

/// Run a build command in `dir`, without the settings this test's own build ran with.
fn run_in(dir: &std::path::Path, program: &str, args: &[&str], env: &[(&str, &std::path::Path)]) {
    let mut command = std::process::Command::new(program);
    command.current_dir(dir).args(args);
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        command.env_remove(var);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The built component passes `capsule check` and offers the template's tool.
fn passes_check(component: &std::path::Path) {
    let report = check_plugin(component);
    assert!(report.contains("verdict: loads") && report.contains("tools: stats"), "{report}");
}

#[test]
fn plugin_new_rust_builds_and_passes_check() {
    let (_scratch, dir) = scaffold("rust");
    // A target folder of its own (host/build.rs takes every component in the plugins' one),
    // kept between runs so the SDK's dependencies are compiled once.
    let target = root().join("target/scaffold");
    run_in(&dir, "cargo", &["build", "--release"], &[("CARGO_TARGET_DIR", &target)]);
    passes_check(&target.join("wasm32-wasip2/release/demo_rust.wasm"));
}

#[test]
fn plugin_new_python_builds_and_passes_check() {
    let (_scratch, dir) = scaffold("python");
    let capsule_py = root().join("target/sdk-venv/python/bin/capsule-py");
    assert!(capsule_py.is_file(), "run plugins/build-examples.sh first (tests/run.sh does)");
    run_in(&dir, capsule_py.to_str().unwrap(), &["build", "app.py", "-o", "demo-python.wasm"], &[]);
    passes_check(&dir.join("demo-python.wasm"));
}

#[test]
fn plugin_new_js_and_ts_build_and_pass_check() {
    for lang in ["js", "ts"] {
        let (_scratch, dir) = scaffold(lang);
        run_in(&dir, "npm", &["install", "--no-audit", "--no-fund", "--loglevel=error"], &[]);
        run_in(&dir, "npm", &["run", "build"], &[]);
        passes_check(&dir.join(format!("demo-{lang}.wasm")));
    }
}

#[test]
fn plugin_new_c_builds_and_passes_check() {
    let (_scratch, dir) = scaffold("c");
    let capsule_c = root().join("sdk/c/capsule-c");
    run_in(&dir, capsule_c.to_str().unwrap(), &["build", "plugin.c", "-o", "demo-c.wasm"], &[]);
    passes_check(&dir.join("demo-c.wasm"));
}

#[test]
fn plugin_new_go_and_zig_build_and_pass_check() {
    let venv = root().join("target/lang-venv/bin");
    assert!(venv.join("go").is_file(), "run plugins/build-examples.sh first (tests/run.sh does)");
    let path = format!("{}:{}", venv.display(), std::env::var("PATH").unwrap_or_default());
    let (_scratch, dir) = scaffold("go");
    let capsule_go = root().join("sdk/go/capsule-go");
    run_in(&dir, capsule_go.to_str().unwrap(), &["build", ".", "-o", "demo-go.wasm"], &[("PATH", path.as_ref())]);
    passes_check(&dir.join("demo-go.wasm"));
    let (_scratch, dir) = scaffold("zig");
    let capsule_zig = root().join("sdk/zig/capsule-zig");
    let zig = format!("{} -m ziglang", venv.join("python").display());
    let args = ["build", "plugin.zig", "-o", "demo-zig.wasm"];
    run_in(&dir, capsule_zig.to_str().unwrap(), &args, &[("ZIG", zig.as_ref())]);
    passes_check(&dir.join("demo-zig.wasm"));
}

/// C++ through the C SDK: libc++ strings in the handler, capsule.h's implementation compiled
/// as C beside it, and a call answered with the structured output the template promises.
#[test]
fn plugin_new_cpp_builds_passes_check_and_answers() {
    let (_scratch, dir) = scaffold("cpp");
    let capsule_c = root().join("sdk/c/capsule-c");
    run_in(&dir, capsule_c.to_str().unwrap(), &["build", "plugin.cpp", "-o", "demo-cpp.wasm"], &[]);
    passes_check(&dir.join("demo-cpp.wasm"));
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(dir.join("demo-cpp.wasm"), plugins.join("demo-cpp.wasm")).unwrap();
    let mut server = StdioServer::start_with(&["--no-watch", "--plugins", plugins.to_str().unwrap()]);
    server.initialize("2025-11-25");
    let mut call = |id: u64, arguments: Value| {
        server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "stats", "arguments": arguments}}));
        server.read()["result"].clone()
    };
    let result = call(2, json!({"text": "hello wonderful\nworld"}));
    assert_eq!(result["structuredContent"], json!({"words": 3, "lines": 2, "longest": "wonderful"}), "{result}");
    let refused = call(3, json!({"text": 3}));
    assert_eq!(refused["isError"], json!(true), "{refused}");
    server.finish();
}

/// Components an outside toolchain built against another release of the WIT package, or
/// with an export whose types are not the package's, are refused by `capsule check` (whose
/// words `serve` logs) with a message that says so: the version they were built against and
/// the one this host implements, or the export and function at fault. Dummy components
/// (`wasm-tools component embed --dummy`) from edited copies of `wit/`.
#[test]
fn components_built_against_another_wit_release_are_told_why() {
    let wasm_tools = root().join("target/tools/bin/wasm-tools");
    assert!(wasm_tools.is_file(), "{} is missing: plugins/build-examples.sh installs it", wasm_tools.display());
    let scratch = Scratch::new("wit-skew");
    // `wit/` copied with its package at `version` and `edit` applied to every file, plus a
    // world of `body`, built into a component whose exports trap.
    let build = |name: &str, version: &str, edit: &dyn Fn(String) -> String, body: &str| {
        let dir = scratch.join(name);
        for sub in ["", "deps"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
            for entry in std::fs::read_dir(root().join("wit").join(sub)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "wit") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let text = if sub.is_empty() { edit(text.replace("@0.1.0", &format!("@{version}"))) } else { text };
                    std::fs::write(dir.join(sub).join(path.file_name().unwrap()), text).unwrap();
                }
            }
        }
        std::fs::write(
            dir.join("zz-case.wit"),
            format!("package capsule:plugin@{version};\nworld case {{ {body} }}\n"),
        )
        .unwrap();
        let (core, component) = (scratch.join(format!("{name}.core.wasm")), scratch.join(format!("{name}.wasm")));
        for args in [
            vec!["component".as_ref(), "embed".as_ref(), "--dummy".as_ref(), dir.as_os_str(), "-w".as_ref()]
                .into_iter()
                .chain(["case".as_ref(), "-o".as_ref(), core.as_os_str()])
                .collect::<Vec<&std::ffi::OsStr>>(),
            vec!["component".as_ref(), "new".as_ref(), core.as_os_str(), "-o".as_ref(), component.as_os_str()],
        ] {
            let out = std::process::Command::new(&wasm_tools).args(&args).output().unwrap();
            assert!(out.status.success(), "wasm-tools {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        component
    };
    let verdict = |component: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["check", "--no-compile-cache"])
            .arg(component)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find(|l| l.starts_with("verdict:")).unwrap_or_else(|| panic!("no verdict:\n{text}")).to_owned()
    };
    let same = |text: String| text;
    let later = build("later-series", "0.2.0", &same, "import host; export tools;");
    let told = verdict(&later);
    assert!(
        told.contains("refused")
            && told.contains("built against capsule:plugin@0.2.0")
            && told.contains("implements capsule:plugin@0.1.0"),
        "{told}"
    );
    let exports_only = build("exports-only", "0.2.0", &same, "export tools;");
    let told = verdict(&exports_only);
    assert!(told.contains("exports none of") && told.contains("built against capsule:plugin@0.2.0"), "{told}");
    let patch = build("later-patch", "0.1.5", &same, "import host; export tools;");
    // A later 0.1 release that uses nothing newer links (its dummy list then traps).
    let told = verdict(&patch);
    assert!(told.contains("listing its tools failed: the plugin crashed") && !told.contains("built against"), "{told}");
    let two_params = |text: String| {
        text.replace(
            "call: func(name: string, arguments: json, context: request-context)",
            "call: func(name: string, arguments: json)",
        )
    };
    let wrong = build("wrong-call", "0.1.0", &two_params, "export tools;");
    let told = verdict(&wrong);
    assert!(
        told.contains("export capsule:plugin/tools@0.1.0 (its function `call`) does not match the Capsule WIT package"),
        "{told}"
    );
}
