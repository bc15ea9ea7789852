"""The logic behind every field, one module (or folder, once it grows) per domain."""
