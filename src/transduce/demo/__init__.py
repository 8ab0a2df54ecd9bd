"""The built-in demo task."""
