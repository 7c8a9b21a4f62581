"""sysfs readers (InfiniBand) with an injectable root, like node_exporter's --path.sysfs."""
