//! One module per subcommand.

pub mod advise;
pub mod apply;
pub mod bench;
pub mod segments;
pub mod status;
