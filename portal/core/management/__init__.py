"""What the apps' management commands share (no commands of its own)."""
