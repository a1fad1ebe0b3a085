"""Storage backends behind narrow protocols, chosen by URL scheme."""
