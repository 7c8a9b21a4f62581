"""Fabric role: keeps the subnet manager's partitions equal to the portal's partition map."""
