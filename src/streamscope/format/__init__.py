"""LitData's on-disk chunk format, byte for byte: pure bytes <-> samples, no I/O beyond file objects."""
