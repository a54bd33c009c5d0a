"""Layer 0: standard-library helpers every layer may use (atomic writes, reading JSON, hashes and cache keys,
seeds).

Nothing here knows about WebShop, models or training; it imports nothing else of the package.
"""
