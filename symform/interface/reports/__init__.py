"""One module per analysis verb: its options, its text and JSON, and the charts they draw."""
