"""Interop with Hugging Face Marian models and CTranslate2 (optional extras, imported lazily)."""
