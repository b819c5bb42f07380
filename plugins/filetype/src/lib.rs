//! `filetype`: what kind of file is this? Raw file bytes in (`FILE`, BYTES, one file per batch row), the
//! content type's label (`LABEL`, BYTES) and the model's score (`SCORE`, FP32) out, decided the way
//! Google's Magika does it: the plugin turns each file into Magika's features (the first and last 1 KiB
//! after stripping whitespace, padded), asks the Magika ONNX model for its scores by BLS (one call per
//! request, so the ONNX model's dynamic batcher can merge calls), and applies Magika's per-label confidence
//! thresholds. Files too short to be worth a model call are labelled `txt` or `unknown` directly.
//!
//! Magika's own settings and label set are read at `initialize` from `config.min.json` and
//! `content_types_kb.min.json` in the version directory (`/model`), as shipped in the `magika` PyPI
//! package; the ONNX model's name is the config parameter `magika_model` (default `magika`).

mod magika;

use magika::{Magika, Verdict};
use tessera_plugin::{infer, Args, Model, Request, Response, Tensor};

struct Filetype {
    magika: Magika,
    /// The ONNX model called for scores.
    model: String,
}

impl Model for Filetype {
    fn initialize(args: &Args) -> Result<Self, String> {
        let config: serde_json::Value = serde_json::from_str(args.config_json()).map_err(|e| e.to_string())?;
        let model = config["parameters"]["magika_model"]["string_value"].as_str().unwrap_or("magika").to_string();
        Ok(Filetype { magika: Magika::load("/model")?, model })
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let files = request.input("FILE")?.strings()?;
        let mut verdicts: Vec<Verdict> = files.iter().map(|file| self.magika.inspect(file)).collect();
        let features: Vec<i32> = verdicts.iter().filter_map(Verdict::features).flatten().copied().collect();
        if !features.is_empty() {
            let rows = features.len() / self.magika.feature_size();
            let batch = Tensor::new("bytes", [rows as i64, self.magika.feature_size() as i64], &features);
            let answer = infer(&self.model, Request::new(vec![batch]))?;
            let scores = answer.output("target_label")?.values::<f32>()?;
            let mut rows = scores.chunks_exact(scores.len() / rows);
            for verdict in verdicts.iter_mut().filter(|v| v.features().is_some()) {
                let row = rows.next().ok_or("the model answered fewer rows than it was sent")?;
                *verdict = self.magika.decide(row)?;
            }
        }
        let shape = [files.len() as i64, 1];
        let labels: Vec<&str> = verdicts.iter().map(Verdict::label).collect();
        let scores: Vec<f32> = verdicts.iter().map(Verdict::score).collect();
        Ok(Response::new(vec![Tensor::from_strings("LABEL", shape, &labels), Tensor::new("SCORE", shape, &scores)]))
    }
}

tessera_plugin::export!(Filetype);
