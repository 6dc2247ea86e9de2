"""Text processing: subword tokenizers from Hugging Face ``tokenizer.json`` files."""
from .tokenizer import Tokenizer

__all__ = ["Tokenizer"]
