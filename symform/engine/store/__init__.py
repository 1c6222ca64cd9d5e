"""Where symform reads and keeps things: the bundled data files, the disk cache, the in-process derivation memo, the Hugging Face hub."""
