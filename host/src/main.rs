//! The `capsule` command. Everything lives in the library; see `capsule::cli`.

fn main() -> std::process::ExitCode {
    capsule::cli::main()
}
