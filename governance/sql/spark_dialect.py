"""Spark's sqlglot dialect, and the one way statements are tokenized with it.

A tokenizer made without its dialect reads with sqlglot's base dialect: `'a\\nb'` loses its
newline and `1a` splits in two, so the text checked is not the text Spark reads. Every
tokenizer here is Spark's."""

from __future__ import annotations

import threading

from sqlglot.dialects.spark import Spark
from sqlglot.tokens import Token

#: Spark's dialect settings (no state): `tree.sql(SPARK)` skips the lookup and the new
#: dialect object `tree.sql("spark")` costs.
SPARK = Spark()
_TOKENIZERS = threading.local()  # this thread's Spark tokenizer (see tokenize)


def tokenize(text: str) -> list[Token]:
    """The text's tokens as Spark's dialect reads it. One tokenizer per thread: making one
    (its settings copied into a new core) cost a measurable share of planning, and each
    call starts from a reset state and returns a new token list."""
    tokenizer = getattr(_TOKENIZERS, "spark", None)
    if tokenizer is None:
        tokenizer = _TOKENIZERS.spark = Spark.Tokenizer(dialect=SPARK)
    return tokenizer.tokenize(text)
