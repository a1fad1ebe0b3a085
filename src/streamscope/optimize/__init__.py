"""The write path: optimize(), map() and walk()."""
