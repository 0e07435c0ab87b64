//! The `capsule` command. Everything lives in the library; see `capsule::cli`.

/// mimalloc rather than glibc's malloc: see the workspace manifest for why. Only the binary
/// chooses; the library leaves the allocator to whoever links it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    capsule::cli::main()
}
