//! The capability sandbox: the operator's policy, the filesystem narrowed to the client's
//! roots, and `capsule check`.

use std::path::{Path, PathBuf};

use crate::support::{Server, root, run_script, scratch_dir};

/// A base directory holding the client's root and a sibling the client did not offer, both
/// inside the operator's grant, with symlinks planted in the root that lead out of it.
struct RootsFixture {
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    policy: PathBuf,
}

impl RootsFixture {
    fn new(name: &str, write: bool) -> RootsFixture {
        let base = scratch_dir(name).canonicalize().unwrap();
        let (root, outside) = (base.join("root"), base.join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("inside.txt"), "hello from inside").unwrap();
        std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link-file")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link-dir")).unwrap();
        let policy = base.join("capsule.toml");
        std::fs::write(
            &policy,
            format!("[plugins.files]\nroots = true\ndirs = [{{ path = {:?}, write = {write} }}]\n", base.display()),
        )
        .unwrap();
        RootsFixture { base, root, outside, policy }
    }

    fn run_client(&self, server: &Server, mode: &str, read_only: bool) {
        let script = root().join("tests/clients/py-roots.sh");
        let (root_dir, outside) = (self.root.display().to_string(), self.outside.display().to_string());
        let mut args = vec!["--mode", mode, "--root", &root_dir, "--outside", &outside];
        if read_only {
            args.push("--read-only");
        }
        args.push(&server.url);
        let (ok, output) = run_script(&script, &args, &[]);
        eprintln!("{output}");
        assert!(ok && output.lines().any(|l| l.ends_with(" 0 failed")), "roots run failed:\n{output}");
    }
}

impl Drop for RootsFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn serve_with_policy(policy: &Path) -> Server {
    Server::http(&["--config", policy.to_str().unwrap()])
}

#[test]
fn python_client_roots_scope_the_files_plugin() {
    let _lock = crate::clients::PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = RootsFixture::new("roots-rw", true);
    let server = serve_with_policy(&fixture.policy);
    // Legacy sessions get a real roots/list request; 2026-07-28 requests get the roots
    // request inside input_required, answered by the SDK's input-required driver.
    fixture.run_client(&server, "legacy", false);
    fixture.run_client(&server, "auto", false);
}

#[test]
fn read_only_grants_refuse_writes() {
    let _lock = crate::clients::PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = RootsFixture::new("roots-ro", false);
    let server = serve_with_policy(&fixture.policy);
    fixture.run_client(&server, "legacy", true);
    fixture.run_client(&server, "auto", true);
}
