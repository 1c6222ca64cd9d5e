"""What users give and where outputs go: argument types, fine-tuning options, media, output files."""
