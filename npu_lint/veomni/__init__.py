"""The one model of a VeOmni tree, read statically from the tree (never imported)."""
