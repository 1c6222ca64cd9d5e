"""What is read outside the terminal: LaTeX and its layout, the appendix, reference docs, derive's block section, notebook tables."""
