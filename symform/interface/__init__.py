"""What users see: the command line and its reports, LaTeX, reference docs, plots and notebook display.

Interfaces import analyses and the engine; nothing below imports them.
"""
