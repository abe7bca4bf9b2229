"""The pure scheduling core: stdlib only, no I/O, no clock reads, no threads."""
