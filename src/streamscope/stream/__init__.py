"""The read path: StreamingDataset, StreamingDataLoader and friends."""
