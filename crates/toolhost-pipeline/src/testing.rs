//! What the unit tests of several modules build their calls from.

/// An unsealed descriptor of `notes`' `add` on the `chat` surface, with
/// an open object schema and these timeouts.
pub(crate) fn descriptor(
    timeout_ms: u32,
    task_timeout_ms: Option<u32>,
) -> toolhost_catalog::Descriptor {
    toolhost_catalog::Descriptor {
        plugin_id: "notes".into(),
        plugin_version: "1.0.0".into(),
        local_name: "add".into(),
        exposed_name: "kandev_notes_add".into(),
        title: None,
        description: "Adds a note.".into(),
        instructions: None,
        surfaces: vec!["chat".into()],
        input_schema: serde_json::json!({ "type": "object" }).into(),
        output_schema: None,
        annotations: Default::default(),
        timeout_ms,
        aliases: Default::default(),
        unknown_arguments: toolhost_validate::UnknownArguments::Reject,
        reset_timeout_on_progress: false,
        task: toolhost_catalog::TaskSupport::Optional,
        task_timeout_ms,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    }
}
