"""Data: loading and validating user texts, the embedded corpus, instruction pairs."""

from lmaudit.data.loaders import Record, TextSet, check_overlap, load_texts

__all__ = ["Record", "TextSet", "check_overlap", "load_texts"]
