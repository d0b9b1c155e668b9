"""High availability: leader election."""
