//! Version B of the plugin the hot-swap test replaces over and over.

const VERSION: &str = "b";
include!("../../swap-a/src/swap.rs");
