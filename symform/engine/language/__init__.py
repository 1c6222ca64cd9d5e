"""The declaration language: names, symbols and their LaTeX, safe expressions, components, families and users' architecture files."""
