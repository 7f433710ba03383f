//! JSON byte-identical to Python's `json.dumps(..., sort_keys=True)`, built
//! on serde_json with a custom `Formatter`.
