//! A [`Node`] against `serde_json::Value`: the same text, the same reads, the same equality.

use serde_json::{json, Value};

use super::*;

/// Checks that `text` parses to a node that reads and prints as the `Value` it parses to.
fn same_as_value(text: &str) {
    let value: Result<Value, _> = serde_json::from_str(text);
    let node: Result<Node, _> = serde_json::from_str(text);
    match (value, node) {
        (Ok(value), Ok(node)) => {
            assert_eq!(serde_json::to_string(&node).unwrap(), serde_json::to_string(&value).unwrap(), "{text}");
            assert_eq!(serde_json::to_string_pretty(&node).unwrap(), serde_json::to_string_pretty(&value).unwrap());
            assert_eq!(node.to_string(), value.to_string());
            assert_eq!(node, value, "{text}");
            assert_eq!(value, node, "{text}");
            assert_eq!(node.to_value(), value);
            assert_eq!(Node::from(value.clone()), node);
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
        (a, b) => panic!("{text}: {a:?} against {b:?}"),
    }
}

#[test]
fn a_node_is_24_bytes_and_a_field_40() {
    assert_eq!(std::mem::size_of::<Node>(), 24);
    assert_eq!(std::mem::size_of::<Key>(), 16);
    assert_eq!(std::mem::size_of::<(Key, Node)>(), 40);
}

#[test]
fn nodes_print_as_values_print() {
    for text in [
        "null",
        "true",
        "0",
        "-0",
        "-0.0",
        "1e400",
        "-1e-400",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "0.1",
        "1.7976931348623157e308",
        "123456789012345678901234567890",
        r#""""#,
        r#""exactly twenty-two b.""#,
        r#""exactly twenty-three b.""#,
        r#""é\u0000\n\t\"\\ \ud83d\ude00 and a few more bytes""#,
        r#"{"a":1,"b":{"c":[1,2,{"d":null}]},"a":2}"#,
        r#"{"z":1,"y":2,"x":3,"z":4,"w":{}}"#,
        r#"[[],{},[[]],"x"]"#,
        r#"{"a key longer than twenty-two bytes":"and a value longer than twenty-two bytes"}"#,
        r#"{"fourteen bytes":1,"fifteen bytes!!":2,"thirteen byte":3,"":4,"caf\u00e9 \u00e9t\u00e9 \u00e9":5}"#,
        r#"{"a\"b":"\u00e9"}"#,
        "[1,2",
        r#"{"a":}"#,
        "tru",
        "[1,]",
    ] {
        same_as_value(text);
    }
}

#[test]
fn a_repeated_key_keeps_its_first_place_and_its_last_value_in_a_large_object_too() {
    let mut fields: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    fields.push("\"k3\":\"again\"".into());
    fields.push("\"k39\":[1]".into());
    same_as_value(&format!("{{{}}}", fields.join(",")));
}

#[test]
fn reads_find_what_value_finds() {
    let value = json!({"id": "prt_1", "n": -3, "u": 7, "f": 1.5, "b": true, "list": [1, "two"], "o": {"k": null}});
    let node = Node::from(value.clone());
    assert_eq!(node.get("id").and_then(Node::as_str), value.get("id").and_then(Value::as_str));
    assert_eq!(node["n"].as_i64(), Some(-3));
    assert_eq!((node["u"].as_u64(), node["u"].is_u64(), node["n"].is_i64()), (Some(7), true, true));
    assert_eq!(node["f"].as_f64(), Some(1.5));
    assert_eq!(node["b"], true);
    assert_eq!(node["list"][1], "two");
    assert!(node["list"][2].is_null() && node["missing"]["deeper"].is_null());
    assert!(node["o"]["k"].is_null() && node["o"].get("k").is_some());
    assert_eq!(node.pointer("/list/1"), Some(&Node::string("two")));
    assert_eq!(node.pointer("/list/01"), None);
    assert_eq!(node.pointer(""), Some(&node));
    let keys: Vec<&str> = node.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "n", "u", "f", "b", "list", "o"]);
}

#[test]
fn objects_compare_in_any_order_and_change_in_place() {
    let a = Node::from(json!({"x": 1, "y": [1, 2]}));
    let b = Node::from(json!({"y": [1, 2], "x": 1}));
    assert_eq!(a, b);
    assert_ne!(a, Node::from(json!({"x": 1, "y": [2, 1]})));
    assert_ne!(a, Node::from(json!({"x": 1})));
    let mut c = a.clone();
    let map = c.as_object_mut().unwrap();
    map.insert("x", Node::from("one"));
    map.insert("z", Node::from(3i64));
    assert_eq!(map.remove("y"), Some(Node::from(json!([1, 2]))));
    assert_eq!(map.remove("y"), None);
    assert_eq!(c.to_string(), r#"{"x":"one","z":3}"#);
    c.as_object_mut().unwrap().retain(|k, _| k == "z");
    assert_eq!(c.to_string(), r#"{"z":3}"#);
}
