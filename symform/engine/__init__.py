"""The engine: symbols, safe expressions, declarations, the component graph, models, evaluation and derivation.

It imports nothing else of symform's and names no architecture: families and components are data in formulas/.
"""
