"""Models: adapters, loading, tiny built-in presets, training."""
