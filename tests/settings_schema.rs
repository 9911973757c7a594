//! The JSON Schema of `.github/supervise.yml` (schema/supervise.schema.json)
//! says exactly what the reader accepts: every key it lists is read, every key
//! the reader knows is listed, and the commands of `permissions` are the real ones.

use std::collections::BTreeSet;
use supervise::settings;

fn schema() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/supervise.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_schema_and_the_settings_reader_name_the_same_keys() {
    let schema = schema();
    let listed: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    for key in &listed {
        settings::parse(&format!("{key}: null\n"), "supervise.yml")
            .unwrap_or_else(|e| panic!("the schema lists `{key}` but the reader refuses it: {e}"));
    }
    // The reader's own list of valid keys, from the message for a typo.
    let err = settings::parse("no_such_key: 1\n", "supervise.yml").unwrap_err();
    let known: BTreeSet<String> = err
        .split("valid keys: ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split(", ")
        .map(|k| k.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(listed, known, "schema properties vs the reader's keys");
}

#[test]
fn the_schema_permissions_name_the_real_commands() {
    let schema = schema();
    let in_schema: BTreeSet<String> = schema["properties"]["permissions"]["propertyNames"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut real: BTreeSet<String> = supervise::commands::COMMANDS
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    real.insert("default".into());
    assert_eq!(in_schema, real);
}
