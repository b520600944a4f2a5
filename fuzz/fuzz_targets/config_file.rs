//! Config layers: `config::parse_layer` on arbitrary text never panics, its errors name the
//! file, and a layer it accepts always deserialises into a `Config`.

#![no_main]

use std::path::Path;

use dcp::config::{self, Config};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "/fuzz/dcp.jsonc";

fuzz_target!(|text: &str| {
    let mut warnings = Vec::new();
    match config::parse_layer(text, Path::new(FILE), &mut warnings) {
        Ok(layer) => {
            if let Err(e) = serde_json::from_value::<Config>(layer.clone()) {
                panic!("a layer that passed the schema does not deserialise: {e}\n{layer}");
            }
        }
        Err(e) => assert!(e.to_string().contains(FILE), "the error does not name the file: {e}"),
    }
    for w in &warnings {
        assert!(w.contains(FILE), "the warning does not name the file: {w}");
    }
});
