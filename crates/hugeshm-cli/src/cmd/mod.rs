//! One module per subcommand.

pub mod bench;
pub mod segments;
pub mod status;
