//! The LangGraph store's semantic search: an embedding model behind an OpenAI-compatible
//! `POST {base_url}/embeddings` (OpenAI, Ollama, vLLM, LiteLLM, ...), as LangGraph's
//! `store.index` (`{embed, dims, fields}`) configures it. `stepwise serve --store-embed-model
//! MODEL` turns it on (`--store-embed-url`, else `STEPWISE_LLM_BASE_URL`; the key from
//! `STEPWISE_STORE_EMBED_API_KEY`, else `STEPWISE_LLM_API_KEY`).
//!
//! An item put while it is on has the fields named (`--store-index-fields`, or the put's own
//! `index` list; `$` is the whole value) embedded, and the vectors kept with the item; a
//! search with a `query` ranks the items under its prefix (that pass its filter) by their
//! best cosine similarity to the query's vector, and answers it as each item's `score`.

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

/// The most texts sent in one request to the embedding model.
const BATCH: usize = 64;
/// How long one request to the embedding model may take.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The longest text embedded, in characters (the rest is cut).
const MAX_TEXT_CHARS: usize = 32_000;

/// An embedding model and the fields it embeds.
#[derive(Clone)]
pub struct StoreIndex {
    base_url: String,
    model: String,
    api_key: Option<String>,
    fields: Vec<String>,
    dims: Option<usize>,
    http: reqwest::Client,
}

impl fmt::Debug for StoreIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("StoreIndex")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("fields", &self.fields)
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

impl StoreIndex {
    /// `fields` empty: the whole value (`$`). `dims`: the vectors' length, checked.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        fields: Vec<String>,
        dims: Option<usize>,
    ) -> Result<Self, String> {
        let base_url = base_url.trim().trim_end_matches('/').to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(format!(
                "the embedding model's URL must be http:// or https://, not '{base_url}' (--store-embed-url, else STEPWISE_LLM_BASE_URL)"
            ));
        }
        if model.trim().is_empty() {
            return Err("the embedding model's name is empty (--store-embed-model)".into());
        }
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("no HTTP client for the embedding model: {e}"))?;
        let fields = if fields.is_empty() {
            vec!["$".to_string()]
        } else {
            fields
        };
        Ok(StoreIndex {
            base_url,
            model: model.trim().to_string(),
            api_key: api_key.filter(|k| !k.trim().is_empty()),
            fields,
            dims,
            http,
        })
    }

    /// The fields embedded when a put names none.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// The texts of `value` at `fields`: `$` is the whole value as JSON, `a.b` a field (a
    /// string as it is, anything else as JSON); fields the value lacks give nothing.
    pub fn texts(value: &Value, fields: &[String]) -> Vec<String> {
        let mut texts = Vec::new();
        for field in fields {
            let found = if field == "$" {
                Some(value)
            } else {
                field.split('.').try_fold(value, |at, part| match at {
                    Value::Object(map) => map.get(part),
                    Value::Array(list) => part.parse::<usize>().ok().and_then(|i| list.get(i)),
                    _ => None,
                })
            };
            let text = match found {
                None | Some(Value::Null) => continue,
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
            };
            if !text.trim().is_empty() {
                texts.push(text.chars().take(MAX_TEXT_CHARS).collect());
            }
        }
        texts
    }

    /// The vectors of `texts`, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            vectors.extend(self.embed_batch(batch).await?);
        }
        Ok(vectors)
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let url = format!("{}/embeddings", self.base_url);
        let mut request = self
            .http
            .post(&url)
            .json(&json!({"model": self.model, "input": texts}));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("the embedding model at {url} could not be reached: {e}"))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| {
            format!("the embedding model at {url} answered no JSON ({status}): {e}")
        })?;
        if !status.is_success() {
            let message = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(format!(
                "the embedding model at {url} answered {status}: {message}"
            ));
        }
        let mut data: Vec<(usize, Vec<f32>)> = body
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("the embedding model at {url} answered no `data`"))?
            .iter()
            .enumerate()
            .map(|(at, item)| {
                let index = item
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(at, |i| i as usize);
                let vector = item
                    .get("embedding")
                    .and_then(Value::as_array)
                    .map(|v| {
                        v.iter()
                            .filter_map(Value::as_f64)
                            .map(|x| x as f32)
                            .collect()
                    })
                    .unwrap_or_default();
                (index, vector)
            })
            .collect();
        data.sort_by_key(|(index, _)| *index);
        if data.len() != texts.len() || data.iter().any(|(_, v)| v.is_empty()) {
            return Err(format!(
                "the embedding model at {url} answered {} vectors for {} texts",
                data.len(),
                texts.len()
            ));
        }
        if let Some(dims) = self.dims
            && let Some((_, wrong)) = data.iter().find(|(_, v)| v.len() != dims)
        {
            return Err(format!(
                "the embedding model at {url} answered vectors of {} dimensions, not the {dims} configured (--store-embed-dims)",
                wrong.len()
            ));
        }
        Ok(data.into_iter().map(|(_, v)| v).collect())
    }
}

/// The cosine similarity of two vectors (0 when either is all zeros or they differ in length).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_the_fields_named() {
        let value = json!({"text": "hello", "meta": {"tags": ["a", "b"]}, "n": 3, "empty": null});
        let fields = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(StoreIndex::texts(&value, &fields(&["text"])), ["hello"]);
        assert_eq!(
            StoreIndex::texts(&value, &fields(&["meta.tags.1", "n"])),
            ["b", "3"]
        );
        assert!(StoreIndex::texts(&value, &fields(&["missing", "empty"])).is_empty());
        assert_eq!(
            StoreIndex::texts(&value, &fields(&["$"])),
            [value.to_string()]
        );
    }

    #[test]
    fn cosine_ranks_the_same_direction_first() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 1.0]).abs() < 1e-9);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn the_key_is_never_shown() {
        let index = StoreIndex::new("http://x/v1", "m", Some("sk-secret".into()), vec![], None)
            .expect("a valid index");
        assert!(!format!("{index:?}").contains("sk-secret"));
        assert_eq!(index.fields(), ["$"]);
        assert!(StoreIndex::new("ftp://x", "m", None, vec![], None).is_err());
    }
}
