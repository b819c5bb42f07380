//! Sentence embeddings from token embeddings, as sentence-transformers makes them for all-MiniLM-L6-v2: the
//! mean of each sentence's token embeddings over its attention mask (padding excluded), then L2-normalised.
//! Inputs `last_hidden_state` (FP32 `[batch, tokens, width]`) and `attention_mask` (INT64 `[batch, tokens]`);
//! output `EMBEDDING` (FP32 `[batch, width]`). The last step of the `embed` ensemble.

use tessera_plugin::{Args, Model, Request, Response, Tensor};

/// sentence-transformers' floors: a sentence with no token divides by this, a zero vector is left as is.
const MIN_TOKENS: f32 = 1e-9;
const MIN_NORM: f32 = 1e-12;

struct Pool;

impl Model for Pool {
    fn initialize(_args: &Args) -> Result<Self, String> {
        Ok(Pool)
    }

    fn execute(&mut self, request: Request) -> Result<Response, String> {
        let hidden = request.input("last_hidden_state")?;
        let mask = request.input("attention_mask")?;
        let [batch, tokens, width] = hidden.shape[..] else {
            return Err(format!("last_hidden_state must be [batch, tokens, width], got {:?}", hidden.shape));
        };
        if mask.shape != [batch, tokens] {
            return Err(format!("attention_mask is {:?} but last_hidden_state is {:?}", mask.shape, hidden.shape));
        }
        let (tokens, width) = (tokens as usize, width as usize);
        let states = hidden.values::<f32>()?;
        let mask = mask.values::<i64>()?;
        let mut embeddings = Vec::with_capacity(batch as usize * width);
        // Chunks of at least one element (`chunks_exact(0)` panics); a batch without tokens gets zero vectors
        // from the resize below.
        for (sentence, mask) in states.chunks_exact(tokens * width.max(1)).zip(mask.chunks_exact(tokens.max(1))) {
            embeddings.extend(mean_normalised(sentence, mask, width));
        }
        embeddings.resize(batch as usize * width, 0.0);
        Ok(Response::new(vec![Tensor::new("EMBEDDING", vec![batch, width as i64], &embeddings)]))
    }
}

/// One sentence's embedding: its masked token embeddings averaged, then scaled to unit length.
fn mean_normalised(tokens: &[f32], mask: &[i64], width: usize) -> Vec<f32> {
    let mut sum = vec![0f32; width];
    let mut counted = 0f32;
    for (token, &keep) in tokens.chunks_exact(width).zip(mask) {
        if keep != 0 {
            let weight = keep as f32;
            sum.iter_mut().zip(token).for_each(|(s, t)| *s += t * weight);
            counted += weight;
        }
    }
    let mean: Vec<f32> = sum.iter().map(|s| s / counted.max(MIN_TOKENS)).collect();
    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(MIN_NORM);
    mean.into_iter().map(|x| x / norm).collect()
}

tessera_plugin::export!(Pool);
