"""Node role: applies desired state (partitions check, IPoIB children, access grants)."""
