"""Text for the models: tokenizers, vocabularies and padded batches, and the toy grammar
(English -> French) with its exact language model.

The translation application (`models/translate/`) and the lessons (`examples/`) both
import it; it imports nothing from either.
"""
