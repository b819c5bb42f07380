//! Protobuf text format → `ModelConfig`, through prost-reflect.
//!
//! prost-reflect does not accept the list form of a repeated message field without a colon
//! (`input [ { … } ]`), which Triton configs use everywhere; with a colon (`input: [ … ]`) it parses. So a
//! small token-aware pass first inserts that colon between a field name and `[`, leaving strings and comments
//! alone. Everything else is prost-reflect's own parser.

use miette::Diagnostic;
use prost::Message;
use prost_reflect::DynamicMessage;

use super::ModelConfig;
use crate::error::LoadResult;
use crate::proto::model_config_descriptor;

/// Parses config text; `origin` (usually the file path) prefixes every error, with the line and column.
pub fn parse_text(text: &str, origin: &str) -> LoadResult<ModelConfig> {
    let (normalised, inserted) = insert_list_colons(text);
    let dynamic = DynamicMessage::parse_text_format(model_config_descriptor(), &normalised)
        .map_err(|e| format!("{origin}:{}: {e}", error_position(&e, text, &inserted)))?;
    Ok(ModelConfig::decode(dynamic.encode_to_vec().as_slice())
        .map_err(|e| format!("{origin}: cannot convert parsed config: {e}"))?)
}

/// "line:column" in the user's text of a parse error, whose offset is in the normalised text: every colon
/// inserted before that offset shifts it by one.
fn error_position(error: &prost_reflect::text_format::ParseError, original: &str, inserted: &[usize]) -> String {
    let Some(offset) = error.labels().and_then(|mut labels| labels.next()).map(|l| l.offset()) else {
        return "?".to_string();
    };
    let offset = (offset - inserted.iter().filter(|&&at| at < offset).count()).min(original.len());
    let before = &original[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{column}")
}

/// Inserts `:` between an identifier and a following `[` when the identifier is a field name (that is, not
/// itself preceded by `:`). Strings (single or double quoted, with escapes) and `#` comments are copied
/// untouched. Returns the new text and the offsets (in it) of the inserted colons.
fn insert_list_colons(text: &str) -> (String, Vec<usize>) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut inserted = Vec::new();
    let mut last_significant = b'{';
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c == b'#' {
            i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if c == b'"' || c == b'\'' {
            i = end_of_string(bytes, i);
            last_significant = c;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                i += 1;
            }
            out.push_str(&text[start..i]);
            if last_significant != b':' && next_significant(bytes, i) == Some(b'[') {
                inserted.push(out.len());
                out.push(':');
            }
            last_significant = b'a';
            continue;
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
            if !c.is_ascii_whitespace() {
                last_significant = c;
            }
        }
        out.push_str(&text[start..i]);
    }
    (out, inserted)
}

/// The index just past the string literal that starts at `start` (or the end of the text if unterminated;
/// the parser then reports it).
fn end_of_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The next byte that is neither whitespace nor inside a comment.
fn next_significant(bytes: &[u8], mut i: usize) -> Option<u8> {
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            c => return Some(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Triton's quick-start `simple` config, verbatim in shape (list form without colons, comments, enums).
    const SIMPLE: &str = r#"
name: "simple"
platform: "tensorflow_graphdef"
max_batch_size: 8   # the batch dimension is implicit
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
"#;

    #[test]
    fn parses_the_simple_config() {
        let config = parse_text(SIMPLE, "simple/config.pbtxt").unwrap();
        assert_eq!(config.name, "simple");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input.len(), 2);
        assert_eq!(config.output[1].name, "OUTPUT1");
        assert_eq!(config.input[0].dims, vec![16]);
    }

    #[test]
    fn parses_every_form_triton_documents() {
        let text = r##"
            name: 'm' backend: "wasm"
            max_batch_size: 0
            input { name: "A" data_type: TYPE_FP32 dims: -1 dims: 3 reshape { shape: [ ] } }
            input: [ { name: "B", data_type: TYPE_STRING, dims: [ 1 ], optional: true } ]
            output [{ name: "C" data_type: TYPE_BF16 dims: [2,2] }]
            instance_group [ { count: 2, kind: KIND_CPU } ]
            version_policy: { specific: { versions: [1, 3] } }
            dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
            parameters { key: "memory" value: { string_value: "64MiB" } }
            parameters [ { key: "x [y]" value { string_value: "# not a comment" } } ]
        "##;
        let config = parse_text(text, "m").unwrap();
        assert_eq!(config.input[0].dims, vec![-1, 3]);
        assert!(config.input[1].optional);
        assert_eq!(config.instance_group[0].count, 2);
        assert_eq!(config.parameters["x [y]"].string_value, "# not a comment");
        use crate::proto::inference::model_config::SchedulingChoice;
        let Some(SchedulingChoice::DynamicBatching(batching)) = config.scheduling_choice else {
            panic!("dynamic_batching was not parsed");
        };
        assert_eq!(batching.preferred_batch_size, vec![4, 8]);
    }

    #[test]
    fn strings_and_comments_are_left_alone() {
        let text = "name: \"a [b\" # input [\nbackend: \"wasm\"\n";
        assert_eq!(insert_list_colons(text).0, text);
        assert_eq!(insert_list_colons("input [ ]").0, "input: [ ]");
        assert_eq!(insert_list_colons("dims: [ 1 ]").0, "dims: [ 1 ]");
        assert_eq!(insert_list_colons("output # c\n [ ]").0, "output: # c\n [ ]");
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let err = parse_text("name: \"m\"\ninput [\n  { name: \"A\" data_type: TYPE_NOPE }\n]\n", "m/config.pbtxt")
            .unwrap_err();
        assert!(err.starts_with("m/config.pbtxt:3:"), "{err}");
        assert!(err.contains("TYPE_NOPE"), "{err}");
        let err = parse_text("name: \"m\"\nmax_batch_sizes: 4\n", "c").unwrap_err();
        assert!(err.starts_with("c:2:1:"), "{err}");
        assert!(err.contains("max_batch_sizes"), "{err}");
    }
}
