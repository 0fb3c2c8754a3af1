//! What the unit tests build their calls from.

/// A sealed descriptor of `notes`' `add` on the `chat` surface, with an
/// open object schema.
pub(crate) fn descriptor() -> toolhost_catalog::Descriptor {
    let mut d = toolhost_catalog::Descriptor {
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
        timeout_ms: 1000,
        aliases: Default::default(),
        unknown_arguments: Default::default(),
        reset_timeout_on_progress: false,
        task: toolhost_catalog::TaskSupport::Optional,
        task_timeout_ms: None,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    };
    d.seal();
    d
}
