//! Version A of the plugin the hot-swap test replaces over and over.

const VERSION: &str = "a";
include!("swap.rs");
