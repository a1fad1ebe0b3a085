"""StreamingRawDataset: stream existing files with no optimize step."""
