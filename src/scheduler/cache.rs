//! Triton's response cache: a model whose config says `response_cache { enable: true }` answers a request
//! it has answered before from memory, without running it. One cache serves every model, bounded by the
//! bytes of the responses it holds (`--cache-config local,size=N`); the least recently used responses go
//! first when it is full.
//!
//! A request is identified by everything that decides its answer: the model and version, each input
//! (name, data type, shape, bytes), the outputs asked for and their class counts, and its parameters except
//! the ones that only steer scheduling (`priority`, `timeout`). The identity is a SHA-256 digest, so two
//! requests share an answer only if they are the same. Only successes are kept; decoupled and sequence
//! models cannot enable the cache (their configs are refused at load, as Triton refuses them).

use std::sync::Mutex;

use lru::LruCache;
use sha2::{Digest, Sha256};

use crate::inference::{InferenceRequest, InferenceResponse, Parameter};

/// Parameters that change when or how a request runs, never what it answers.
const SCHEDULING_PARAMETERS: [&str; 2] = ["priority", "timeout"];

/// What identifies a request's answer.
pub type CacheKey = [u8; 32];

/// Bytes a response is counted as beyond its tensors' data: names, shapes and bookkeeping.
const ENTRY_OVERHEAD: usize = 128;

pub struct ResponseCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

struct Entries {
    lru: LruCache<CacheKey, InferenceResponse>,
    bytes: usize,
}

impl ResponseCache {
    /// A cache holding at most `capacity` bytes of responses.
    pub fn new(capacity: usize) -> Self {
        ResponseCache { capacity, entries: Mutex::new(Entries { lru: LruCache::unbounded(), bytes: 0 }) }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The answer stored for `key`, now the most recently used. Tensor data is shared, not copied.
    pub fn get(&self, key: &CacheKey) -> Option<InferenceResponse> {
        self.entries().lru.get(key).cloned()
    }

    /// Keeps `response` for `key`, dropping the least recently used answers until it fits; a response
    /// larger than the whole cache is not kept.
    pub fn insert(&self, key: CacheKey, response: &InferenceResponse) {
        let size = size_of(response);
        if size > self.capacity {
            return;
        }
        let mut entries = self.entries();
        if let Some(previous) = entries.lru.put(key, response.clone()) {
            entries.bytes -= size_of(&previous);
        }
        entries.bytes += size;
        while entries.bytes > self.capacity {
            let Some((_, dropped)) = entries.lru.pop_lru() else { break };
            entries.bytes -= size_of(&dropped);
        }
    }

    /// How many answers are kept, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.entries();
        (entries.lru.len(), entries.bytes)
    }
}

fn size_of(response: &InferenceResponse) -> usize {
    ENTRY_OVERHEAD + response.outputs.iter().map(|t| t.data.len() + t.name.len() + 8 * t.shape.len()).sum::<usize>()
}

/// The identity of `request`'s answer from version `version` of `model`.
pub fn key(model: &str, version: i64, request: &InferenceRequest) -> CacheKey {
    // Every field is written with its length first, so that no two different requests write the same bytes.
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(model.as_bytes());
    field(&version.to_le_bytes());
    for input in &request.inputs {
        field(input.name.as_bytes());
        field(input.datatype.kserve_name().as_bytes());
        field(format!("{:?}", input.shape).as_bytes());
        field(&input.data);
    }
    let mut text = |text: &str| field(text.as_bytes());
    text(&format!("{:?}", request.requested_outputs));
    text(&format!("{:?}", request.class_counts));
    for (name, value) in &request.parameters {
        if SCHEDULING_PARAMETERS.contains(&name.as_str()) {
            continue;
        }
        text(name);
        text(&match value {
            Parameter::Bool(b) => format!("b{b}"),
            Parameter::Int(i) => format!("i{i}"),
            Parameter::Double(d) => format!("d{}", d.to_bits()),
            Parameter::String(s) => format!("s{s}"),
        });
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DataType, Tensor};
    use bytes::Bytes;

    fn response(bytes: usize) -> InferenceResponse {
        let data = Bytes::from(vec![1u8; bytes]);
        let outputs = vec![Tensor { name: "OUT".into(), datatype: DataType::Uint8, shape: vec![bytes as i64], data }];
        InferenceResponse { model: "m".into(), version: 1, id: String::new(), outputs }
    }

    fn request(value: u8, priority: i64) -> InferenceRequest {
        let data = Bytes::from(vec![value; 4]);
        InferenceRequest {
            inputs: vec![Tensor { name: "IN".into(), datatype: DataType::Uint8, shape: vec![4], data }],
            parameters: vec![("priority".into(), Parameter::Int(priority))],
            ..Default::default()
        }
    }

    #[test]
    fn the_key_is_the_answer_not_the_scheduling() {
        assert_eq!(key("m", 1, &request(7, 1)), key("m", 1, &request(7, 2)));
        assert_ne!(key("m", 1, &request(7, 1)), key("m", 1, &request(8, 1)));
        assert_ne!(key("m", 1, &request(7, 1)), key("m", 2, &request(7, 1)));
        assert_ne!(key("m", 1, &request(7, 1)), key("n", 1, &request(7, 1)));
        let mut custom = request(7, 1);
        custom.parameters.push(("temperature".into(), Parameter::Double(0.5)));
        assert_ne!(key("m", 1, &request(7, 1)), key("m", 1, &custom));
    }

    #[test]
    fn the_least_recently_used_answers_go_first() {
        let cache = ResponseCache::new(3 * (ENTRY_OVERHEAD + 1000 + 3 + 8));
        for k in 0..3u8 {
            cache.insert([k; 32], &response(1000));
        }
        assert!(cache.get(&[0; 32]).is_some(), "0 is now the most recently used");
        cache.insert([3; 32], &response(1000));
        assert!(cache.get(&[1; 32]).is_none() && cache.get(&[0; 32]).is_some() && cache.get(&[3; 32]).is_some());
        assert_eq!(cache.usage().0, 3);
        cache.insert([4; 32], &response(1 << 20));
        assert!(cache.get(&[4; 32]).is_none(), "an answer larger than the cache is not kept");
    }
}
