"""fsdp2-harness: reproduce and verify FSDP2 patches to verl's fused log-prob path."""
