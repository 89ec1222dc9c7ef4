"""The inference lab: a paged KV cache (paged_kv) and the serving engine built on it (serving)."""
