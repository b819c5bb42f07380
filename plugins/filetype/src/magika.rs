//! Magika's decision procedure (as in the `magika` Python package, 1.0), in the plugin: which files need
//! the model, their features, and how the model's scores become a label.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

/// The fields of Magika's `config.min.json` that the procedure uses.
#[derive(Deserialize)]
struct Config {
    beg_size: usize,
    end_size: usize,
    block_size: usize,
    padding_token: i32,
    min_file_size_for_dl: usize,
    medium_confidence_threshold: f32,
    target_labels_space: Vec<String>,
    thresholds: HashMap<String, f32>,
    overwrite_map: HashMap<String, String>,
}

/// One entry of `content_types_kb.min.json`.
#[derive(Deserialize)]
struct ContentType {
    is_text: bool,
}

pub struct Magika {
    config: Config,
    /// Labels of text formats, for the fallback when the model is not confident.
    text_labels: HashSet<String>,
}

/// What is known about one file.
pub enum Verdict {
    Decided {
        label: String,
        score: f32,
    },
    /// The file needs the model; these are its features.
    NeedsModel(Vec<i32>),
}

impl Verdict {
    pub fn features(&self) -> Option<&Vec<i32>> {
        match self {
            Verdict::NeedsModel(features) => Some(features),
            Verdict::Decided { .. } => None,
        }
    }

    pub fn label(&self) -> &str {
        match self {
            Verdict::Decided { label, .. } => label,
            Verdict::NeedsModel(_) => "undecided",
        }
    }

    pub fn score(&self) -> f32 {
        match self {
            Verdict::Decided { score, .. } => *score,
            Verdict::NeedsModel(_) => 0.0,
        }
    }
}

impl Magika {
    /// Reads Magika's settings and content-type knowledge base from `dir`.
    pub fn load(dir: &str) -> Result<Self, String> {
        let read = |name: &str| {
            std::fs::read_to_string(format!("{dir}/{name}")).map_err(|e| format!("cannot read {dir}/{name}: {e}"))
        };
        let config: Config =
            serde_json::from_str(&read("config.min.json")?).map_err(|e| format!("config.min.json: {e}"))?;
        let kb: HashMap<String, ContentType> = serde_json::from_str(&read("content_types_kb.min.json")?)
            .map_err(|e| format!("content_types_kb.min.json: {e}"))?;
        if config.min_file_size_for_dl == 0 || config.min_file_size_for_dl > config.beg_size {
            return Err("config.min.json: min_file_size_for_dl must be within beg_size".into());
        }
        let text_labels = kb.into_iter().filter(|(_, t)| t.is_text).map(|(label, _)| label).collect();
        Ok(Magika { config, text_labels })
    }

    /// How many features one file has (one row of the model's input).
    pub fn feature_size(&self) -> usize {
        self.config.beg_size + self.config.end_size
    }

    /// Decides a file without the model where Magika does (empty, or too few bytes after stripping), else
    /// returns its features.
    pub fn inspect(&self, content: &[u8]) -> Verdict {
        let config = &self.config;
        if content.is_empty() {
            return decided("empty", 1.0);
        }
        if content.len() < config.min_file_size_for_dl {
            return few_bytes(content);
        }
        let features = self.features(content);
        if features[config.min_file_size_for_dl - 1] == config.padding_token {
            return few_bytes(&content[..content.len().min(config.block_size)]);
        }
        Verdict::NeedsModel(features)
    }

    /// The first `beg_size` bytes of the first block without leading whitespace, then the last `end_size`
    /// bytes of the last block without trailing whitespace, each padded to size with the padding token.
    fn features(&self, content: &[u8]) -> Vec<i32> {
        let config = &self.config;
        let block = content.len().min(config.block_size);
        let beg = strip_start(&content[..block]);
        let end = strip_end(&content[content.len() - block..]);
        let mut features = Vec::with_capacity(self.feature_size());
        features.extend(beg.iter().take(config.beg_size).map(|&b| i32::from(b)));
        features.resize(config.beg_size, config.padding_token);
        let tail = &end[end.len().saturating_sub(config.end_size)..];
        features.resize(config.beg_size + config.end_size - tail.len(), config.padding_token);
        features.extend(tail.iter().map(|&b| i32::from(b)));
        features
    }

    /// The label for one row of the model's scores: the best-scoring label, renamed by the overwrite map,
    /// kept if its score reaches its threshold (Magika's high-confidence mode), else `txt` or `unknown`.
    pub fn decide(&self, scores: &[f32]) -> Result<Verdict, String> {
        let config = &self.config;
        let (best, &score) =
            scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).ok_or("the model answered an empty row")?;
        let model_label = config.target_labels_space.get(best).ok_or("the model answered more labels than it has")?;
        let label = config.overwrite_map.get(model_label).unwrap_or(model_label);
        let threshold = config.thresholds.get(model_label).copied().unwrap_or(config.medium_confidence_threshold);
        if score >= threshold {
            return Ok(decided(label, score));
        }
        Ok(decided(if self.text_labels.contains(label) { "txt" } else { "unknown" }, score))
    }
}

/// Python's `bytes.isspace` set, which Magika strips with; Rust's `is_ascii_whitespace` lacks the vertical tab.
fn is_python_space(byte: &u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn strip_start(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| !is_python_space(b)).unwrap_or(bytes.len());
    &bytes[start..]
}

fn strip_end(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|b| !is_python_space(b)).map_or(0, |at| at + 1);
    &bytes[..end]
}

fn decided(label: &str, score: f32) -> Verdict {
    Verdict::Decided { label: label.to_string(), score }
}

/// A file too short for the model: text if it is UTF-8, else unknown.
fn few_bytes(content: &[u8]) -> Verdict {
    decided(if std::str::from_utf8(content).is_ok() { "txt" } else { "unknown" }, 1.0)
}
