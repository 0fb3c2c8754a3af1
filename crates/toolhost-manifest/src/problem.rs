//! Install problems: which file, which tool, which rule, and what to do.

use std::fmt;
use std::path::PathBuf;
use toolhost_validate::SchemaRule;

/// A rule of docs/PROTOCOL.md §1. The code is stable and appears in messages, so
/// an author can search the docs for it and tests can match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The file is not readable TOML.
    TomlSyntax,
    /// A key the manifest format does not have (usually a typo).
    UnknownField,
    /// A required key is absent.
    MissingField,
    /// A key has the wrong TOML type.
    WrongType,
    /// `id` does not match `^[a-z0-9][a-z0-9._-]{0,63}$`.
    PluginId,
    /// `version` is not semver.
    Version,
    /// `name` is blank or too long.
    DisplayName,
    /// The plugin `description` is too long.
    PluginDescription,
    /// `runtime.command` is missing, not a file, or not executable.
    Command,
    /// `runtime.env` sets a variable toolhost owns.
    ReservedEnv,
    /// `runtime.startup_timeout_ms` out of range.
    StartupTimeout,
    /// `runtime.protocol` is not 1 or 2, or a tool needs protocol 2.
    Protocol,
    /// A `[[config]]` item is malformed.
    Config,
    /// `[capabilities]` is malformed.
    Capabilities,
    /// `[credentials]` is malformed.
    Credentials,
    /// More than 32 tools.
    TooManyTools,
    /// A tool name does not match `^[a-z0-9][a-z0-9_]{0,31}$`.
    ToolName,
    /// Two tools share a local name.
    DuplicateTool,
    /// A title is blank or too long.
    Title,
    /// A tool description is not 1..=1024 bytes or is blank.
    ToolDescription,
    /// Surfaces empty, duplicated, or malformed.
    Surfaces,
    /// `timeout_ms` out of 1..=300000.
    Timeout,
    /// Not exactly one of `input_schema_file` / `input_schema` (or both
    /// output forms given).
    SchemaSource,
    /// A schema file is missing, outside the plugin directory, or not JSON.
    SchemaFile,
    /// A schema breaks a schema rule.
    Schema(SchemaRule),
    /// `read_only` and `destructive` both true.
    Annotations,
    /// An alias is malformed, shadows a declared property, or targets an
    /// undeclared one.
    Aliases,
    /// `unknown_arguments` is not `reject`/`report`, or `report` on a tool
    /// that is not read-only.
    UnknownArguments,
    /// `task` is not `never`, `optional` or `required`.
    Task,
    /// Two plugins in the set share an id.
    DuplicatePlugin,
    /// Two tools in the set would be exposed under the same name.
    ExposedNameCollision,
    /// A path given to `check` is not a plugin directory.
    NotAPlugin,
    /// Text a person reads (a name, a title, a description, a path) holds
    /// a control character or a bidirectional control.
    ControlCharacter,
}

impl Rule {
    /// The rule's stable code.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::TomlSyntax => "toml-syntax",
            Self::UnknownField => "unknown-field",
            Self::MissingField => "missing-field",
            Self::WrongType => "wrong-type",
            Self::PluginId => "plugin-id",
            Self::Version => "version",
            Self::DisplayName => "display-name",
            Self::PluginDescription => "plugin-description",
            Self::Command => "runtime-command",
            Self::ReservedEnv => "runtime-env",
            Self::StartupTimeout => "startup-timeout",
            Self::Protocol => "protocol",
            Self::Config => "config",
            Self::Capabilities => "capabilities",
            Self::Credentials => "credentials",
            Self::TooManyTools => "too-many-tools",
            Self::ToolName => "tool-name",
            Self::DuplicateTool => "duplicate-tool",
            Self::Title => "tool-title",
            Self::ToolDescription => "tool-description",
            Self::Surfaces => "surfaces",
            Self::Timeout => "tool-timeout",
            Self::SchemaSource => "schema-source",
            Self::SchemaFile => "schema-file",
            Self::Schema(r) => r.code(),
            Self::Annotations => "annotations",
            Self::Aliases => "aliases",
            Self::UnknownArguments => "unknown-arguments",
            Self::Task => "task",
            Self::DuplicatePlugin => "duplicate-plugin",
            Self::ExposedNameCollision => "exposed-name-collision",
            Self::NotAPlugin => "not-a-plugin",
            Self::ControlCharacter => "control-character",
        }
    }
}

/// One problem found while validating a plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Problem {
    /// The file at fault (the manifest, or a schema file).
    pub file: PathBuf,
    /// The tool's local name, where the problem belongs to one tool.
    pub tool: Option<String>,
    /// The broken rule.
    pub rule: Rule,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Shown with every character that could steer a terminal escaped: the
/// file, the tool and the message may all carry text from the manifest.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use toolhost_base::text::escaped_whole;
        write!(f, "{}: ", escaped_whole(&self.file.display().to_string()))?;
        if let Some(t) = &self.tool {
            write!(f, "tool `{}`: ", escaped_whole(t))?;
        }
        write!(f, "{} [{}]", escaped_whole(&self.message), self.rule.code())
    }
}
