// The body of both hot-swap versions; each crate sets `VERSION` and includes this file.

use capsule_sdk::prelude::*;

fn whoami(_: NoArgs) -> String {
    VERSION.to_owned()
}

capsule_sdk::plugin!(|p| {
    p.tool("whoami", "Which version of the swapped plugin answered", whoami).read_only();
    // A tool only this version has, so every swap changes the tool list.
    p.tool(&format!("only_{VERSION}"), "Present in one version only", whoami).read_only();
});
