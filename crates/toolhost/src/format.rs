//! How the reporting commands print.

/// Output formats shared by the reporting commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// For machines: one JSON document on stdout.
    Json,
}
